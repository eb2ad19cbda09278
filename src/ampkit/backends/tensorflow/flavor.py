"""Which Keras: Keras 3 (``keras``) or Keras 2 (``tf_keras``), and the mixed-precision API of each."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass

from ...errors import UsageError

KERAS3 = "keras"
TF_KERAS = "tf_keras"

_ALIASES = {"keras": KERAS3, "keras3": KERAS3, "3": KERAS3, "tf_keras": TF_KERAS, "tf-keras": TF_KERAS,
            "keras2": TF_KERAS, "2": TF_KERAS}

INSTALL_HINT = "pip install 'ampkit[tf-keras]'"


@dataclass(frozen=True)
class Flavor:
    """One Keras and its mixed-precision API. ``name`` is ``"keras"`` (Keras 3) or ``"tf_keras"`` (Keras 2)."""

    name: str

    @property
    def module(self):
        """The Keras package itself (imported on first use)."""
        return importlib.import_module(self.name)

    @property
    def legacy(self) -> bool:
        """True for Keras 2 (tf_keras)."""
        return self.name == TF_KERAS

    @property
    def version(self) -> str:
        return self.module.__version__

    @property
    def label(self) -> str:
        """``Keras 3.15.1`` or ``tf_keras 2.21.0``: what reports print as the Keras that ran; Keras 3 on
        another backend than TensorFlow says which (``Keras 3.15.1 (jax)``)."""
        if self.legacy:
            return f"tf_keras {self.version}"
        backend = self.module.backend.backend()
        return f"Keras {self.version}" + (f" ({backend})" if backend != "tensorflow" else "")

    # --- the dtype policy -------------------------------------------------------------------------
    def global_policy(self):
        k = self.module
        return k.mixed_precision.global_policy() if self.legacy else k.config.dtype_policy()

    def set_global_policy(self, policy) -> None:
        k = self.module
        if self.legacy:
            # tf_keras logs a "mixed precision compatibility check" warning (this machine's GPUs for
            # mixed_float16) the first time: ampkit measures and reports that itself, and the
            # extra lines would break its one-line errors and clean logs
            from .tfimport import import_tensorflow

            logger = import_tensorflow().get_logger()
            level = logger.level
            logger.setLevel("ERROR")
            try:
                k.mixed_precision.set_global_policy(policy)
            finally:
                logger.setLevel(level)
        else:
            k.config.set_dtype_policy(policy)

    # --- models and layers ------------------------------------------------------------------------
    def is_model(self, obj) -> bool:
        return isinstance(obj, self.module.Model)

    def sparse_ce_logits(self):
        return self.module.losses.SparseCategoricalCrossentropy(from_logits=True)

    def fp32_layer_code(self, name: str, model: str = "model") -> str:
        """Python code (one statement, no backticks) that makes the layer ``name`` of the model held by
        the variable ``model`` compute in float32 under a mixed policy, from its next call on (before
        ``compile``/``fit`` trace it; its variables are float32 already).

        Keras 3: the layer's ``dtype_policy`` has a setter (a policy or its name). Keras 2 (tf_keras)
        has no public setter once a layer exists; ``Layer._set_dtype_policy`` is what its own
        ``dtype=`` argument calls (its variables, AutoCastVariables, then read as float32).
        """
        layer = f"{model}.get_layer({name!r})"
        if self.legacy:
            return f"{layer}._set_dtype_policy('float32')"
        return f"{layer}.dtype_policy = 'float32'"

    # --- the loss-scale optimizer -----------------------------------------------------------------
    @property
    def loss_scale_optimizer(self) -> type:
        k = self.module
        return k.mixed_precision.LossScaleOptimizer if self.legacy else k.optimizers.LossScaleOptimizer

    def is_loss_scale_optimizer(self, opt) -> bool:
        return isinstance(opt, self.loss_scale_optimizer)

    def wrap(self, inner, initial_scale: float, dynamic_growth_steps: int):
        """``inner`` in this Keras's dynamic LossScaleOptimizer (Keras 2 and 3 take the same two arguments).

        Keras 3: ampkit's subclass, whose skip decision is combined across ``tf.distribute`` replicas
        (:mod:`.engine.scaling`); tf_keras checks the gradients after they are all-reduced already."""
        cls = self.loss_scale_optimizer
        if not self.legacy:
            from .engine.scaling import loss_scale_optimizer_class

            cls = loss_scale_optimizer_class()
        return cls(inner, initial_scale=initial_scale, dynamic_growth_steps=dynamic_growth_steps)

    def loss_scale(self, opt) -> float | None:
        """The current loss scale of ``opt`` (None when it does not scale). Reads a variable: a host-device sync."""
        if not self.is_loss_scale_optimizer(opt):
            return None
        if self.legacy:
            return float(opt.loss_scale)
        if not opt.built:  # Keras 3 creates its scale variable on the first step
            return float(opt.initial_scale)
        return float(opt.dynamic_scale.numpy())

    def skipped(self, opt, before: float | None, after: float) -> bool:
        """Whether the step that took the scale from ``before`` to ``after`` was skipped for inf/NaN
        gradients: the scale went down — or stayed while the growth counter went back to 0 (tf_keras
        keeps its scale at 1 or above: at that floor a skip no longer lowers it). Reads a variable."""
        if before is None:
            return False
        if after != before:
            return after < before
        counter = getattr(opt, "dynamic_counter" if self.legacy else "step_counter", None)
        if counter is None:
            return False
        return int(counter.numpy() if hasattr(counter, "numpy") else counter) == 0

    def scale_loss(self, opt, loss):
        """The loss to differentiate: scaled by a loss-scale optimizer, as is otherwise."""
        if self.legacy:
            return opt.get_scaled_loss(loss) if self.is_loss_scale_optimizer(opt) else loss
        return opt.scale_loss(loss) if hasattr(opt, "scale_loss") else loss

    def apply(self, opt, grads, variables) -> None:
        """Apply gradients of the scaled loss: unscale, skip the step and lower the scale when any is
        non-finite, else update and maybe raise the scale (Keras 2 unscales explicitly, Keras 3 inside ``apply``)."""
        if self.legacy:
            if self.is_loss_scale_optimizer(opt):
                grads = opt.get_unscaled_gradients(grads)
            opt.apply_gradients(zip(grads, variables))
        else:
            opt.apply(grads, variables)

    # --- callbacks --------------------------------------------------------------------------------
    @property
    def callback_base(self) -> type:
        return self.module.callbacks.Callback


def keras3() -> Flavor:
    return Flavor(KERAS3)


def tf_keras_installed() -> bool:
    return importlib.util.find_spec(TF_KERAS) is not None


def tf_keras_version() -> str | None:
    """The installed tf_keras's version, None without it (read from the package metadata: nothing imported)."""
    for dist in ("tf-keras", "tf_keras"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def tf_keras() -> Flavor:
    """Keras 2; a usage error naming the extra when tf_keras is not installed."""
    if not tf_keras_installed():
        raise UsageError(f"Keras 2 (tf_keras) was asked for but is not installed; {INSTALL_HINT} "
                         "(the tf_keras release matching your TensorFlow)")
    return Flavor(TF_KERAS)


def tf_keras_target() -> str:
    """The package ``tf.keras`` resolves to here: ``"keras"`` (Keras 3) or ``"tf_keras"`` (Keras 2, under
    ``TF_USE_LEGACY_KERAS=1``; this then imports tf_keras, as ``tf.keras`` would).

    Read from the class ``tf.keras.Model`` is: ``tf.keras.__name__`` can say ``tensorflow.keras`` for either.
    """
    from .tfimport import import_tensorflow

    try:
        return import_tensorflow().keras.Model.__module__.split(".")[0]
    except (ImportError, AttributeError):  # TF_USE_LEGACY_KERAS=1 without tf_keras installed
        return "tf_keras (not installed)"


def resolved_flavor() -> Flavor:
    """The Keras ``tf.keras`` resolves to: Keras 2 under ``TF_USE_LEGACY_KERAS=1``, else Keras 3."""
    target = tf_keras_target()
    if target.startswith(TF_KERAS):
        return tf_keras()
    return keras3()


def get_flavor(keras=None) -> Flavor:
    """A user's choice of Keras: ``None`` (what ``tf.keras`` resolves to), a name (``"keras"``,
    ``"keras3"``, ``"tf_keras"``, ``"keras2"``), a Keras module (``keras``, ``tf_keras``, ``tf.keras``), or a Flavor."""
    if keras is None:
        return resolved_flavor()
    if isinstance(keras, Flavor):
        return keras
    if isinstance(keras, (str, int)):
        key = _ALIASES.get(str(keras).strip().lower())
    else:  # a Keras module: keras, tf_keras, tf.keras (either), tf_keras.api._v2.keras — told apart by its Model
        top = (getattr(getattr(keras, "Model", None), "__module__", None) or "").split(".")[0]
        key = top if top in (KERAS3, TF_KERAS) else None
    if key is None:
        raise UsageError(f"keras= must be 'keras' (Keras 3), 'tf_keras' (Keras 2), one of those modules, or None "
                         f"(what tf.keras resolves to); received {keras!r}")
    return tf_keras() if key == TF_KERAS else keras3()


def flavor_of(obj) -> Flavor | None:
    """Which Keras defined ``obj``'s class (a model, layer, optimizer, symbolic tensor); None for neither."""
    for cls in type(obj).__mro__:
        top = (cls.__module__ or "").split(".")[0]
        if top == TF_KERAS:
            return Flavor(TF_KERAS)
        if top == KERAS3:
            return keras3()
    return None


def loaded_flavors() -> list[Flavor]:
    """The Kerases this process has imported already (a policy scope sets the policy in each)."""
    return [Flavor(name) for name in (KERAS3, TF_KERAS) if name in sys.modules]


def load_every_keras() -> list[Flavor]:
    """Import every installed Keras, so that a policy scope entered next sets the policy in each:
    for code that builds a user's model without knowing which Keras it uses (a factory)."""
    importlib.import_module(KERAS3)
    if tf_keras_installed():
        importlib.import_module(TF_KERAS)
    return loaded_flavors()
