"""``ampkit.keras.MixedPrecision``: the same modes for Keras on TensorFlow (public as ``ampkit.keras``).

* fp32 — policy ``float32``, TF32 execution off inside the scope.
* tf32 — policy ``float32``, TF32 execution on (GPUs with compute capability >= 8.0).
* fp16 — policy ``mixed_float16`` (float16 compute, float32 variables) and the optimizer wrapped
  in the Keras's LossScaleOptimizer (dynamic loss scaling).
* bf16 — policy ``mixed_bfloat16``, no loss scaling.

The previous global dtype policy and TF32 setting are restored when the scope ends.

Keras 3 and Keras 2 (``tf_keras``) both work (see :mod:`.flavor` for what differs). ``keras=``
chooses the one whose policy the scope sets and whose callback :meth:`MixedPrecision.callback`
returns; by default the one ``tf.keras`` resolves to (tf_keras under ``TF_USE_LEGACY_KERAS=1``).
The scope also sets the policy in the other Keras when that one is imported already, and
``optimizer``, ``train_step``, ``float32_output`` and ``loss_scale_of`` follow the Keras of the
object they are given.
"""

from __future__ import annotations

import contextlib
import warnings

from ...capability import gpu_shortfall, resolve_mode
from ...cpu import auto_for_gpu, cpu_capability_choice, cpu_mode_support
from ...precision import AUTO, TRAINING_MODES, Precision, get_precision
from .flavor import Flavor, flavor_of, get_flavor, keras3, loaded_flavors


def _tf():
    import tensorflow as tf

    return tf


def gpu_capabilities() -> list[tuple[int, int]]:
    tf = _tf()
    caps = []
    for gpu in tf.config.list_physical_devices("GPU"):
        cc = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        if cc:
            caps.append(tuple(cc))
    return caps


def mode_support_tf(mode: str) -> tuple[bool, str]:
    """Whether TensorFlow here can run ``mode`` (first GPU if any, else the CPU)."""
    caps = gpu_capabilities()
    if not caps:
        if mode == "fp8":
            return False, "fp8 is not offered through Keras policies; and TensorFlow sees no GPU"
        answer = cpu_mode_support(mode, f"Keras {get_precision(mode).keras_policy} policy on the CPU:")
        return answer if answer is not None else (False, f"unknown mode {mode!r}")
    major, minor = caps[0]
    if mode not in TRAINING_MODES:
        return False, "fp8 is not offered through Keras policies"
    short = gpu_shortfall(mode, (major, minor), "this GPU")
    if short is not None:
        return False, short
    has = f" has {mode}" if mode in ("tf32", "bf16") else ""
    return True, f"GPU with compute capability {major}.{minor}{has}"


def _first_gpu() -> tuple[tuple[int, int], str] | None:
    """(compute capability, name) of the first GPU TensorFlow sees, None without one."""
    tf = _tf()
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        if details.get("compute_capability"):
            return tuple(details["compute_capability"]), details.get("device_name") or "the first GPU"
    return None


def auto_fingerprint_tf(cpu: bool = False) -> dict:
    """The environment a measured ``auto`` verdict holds for (:mod:`ampkit.auto_cache`): TensorFlow and
    its version, the device it runs on (the first GPU by name and capability, else the CPU), the CPU
    and its features. ``cpu``: the CPU even where a GPU is visible (``--device cpu``)."""
    from ... import auto_cache

    tf = _tf()
    gpu = None if cpu else _first_gpu()
    if gpu is None:
        return auto_cache.fingerprint("tensorflow", tf.__version__, "cpu")
    (major, minor), name = gpu
    return auto_cache.fingerprint("tensorflow", tf.__version__, f"{name} (compute capability {major}.{minor})",
                                  cuda=dict(tf.sysconfig.get_build_info()).get("cuda_version"))


def resolve_auto_tf(cpu: bool = False) -> tuple[str, str]:
    """``auto`` for Keras here, from a measurement wherever one exists (:mod:`ampkit.doctor.auto`): the
    TensorFlow doctor's cached verdict for this environment; else, on the CPU, a quick fp32-vs-bf16
    matmul check (cached for next time); else (a GPU nobody measured) the capability rule, labelled
    as a guess. ``cpu``: resolve for the CPU even where TensorFlow sees a GPU."""
    from ...doctor.auto import resolve

    gpu = None if cpu else _first_gpu()
    fp = auto_fingerprint_tf(cpu=cpu)
    if gpu is not None:
        (major, minor), name = gpu
        return resolve(fp, name, lambda: auto_for_gpu(major, minor, name))

    def measure():
        from .doctor_ops import quick_auto

        return quick_auto(on_cpu=True)
    return resolve(fp, "this CPU", cpu_capability_choice, measure)


class MixedPrecision:
    """Mixed precision for Keras: a policy scope, the loss-scale optimizer, float32 outputs.

    Args:
        mode: ``fp32``, ``tf32``, ``fp16``, ``bf16``, an alias (``mixed_float16``...) or ``auto``.
        initial_scale, dynamic_growth_steps: LossScaleOptimizer's arguments (fp16 only).
        keras: which Keras — ``"keras"`` (Keras 3), ``"tf_keras"`` (Keras 2), either module, or None
            (default: the one ``tf.keras`` resolves to). ``mp.flavor`` says which was chosen.

    Example::

        mp = ampkit.keras.MixedPrecision("fp16")
        with mp.scope():
            model = build_model()                 # layers pick up the mixed policy
            model.compile(optimizer=mp.optimizer(keras.optimizers.Adam()), loss="sparse_categorical_crossentropy")
            model.fit(x, y, callbacks=[mp.callback()])

        mp = ampkit.keras.MixedPrecision("fp16", keras=tf_keras)   # Keras 2: the same calls
    """

    def __init__(self, mode: str = AUTO, *, initial_scale: float = 2.0**15, dynamic_growth_steps: int = 2000,
                 keras=None):
        self.flavor: Flavor = get_flavor(keras)
        resolved, self.reason = resolve_mode(mode, mode_support_tf, resolve_auto_tf, "in TensorFlow here",
                                             "fp8 is reported by doctor only; use bf16 or fp16")
        self.precision: Precision = get_precision(resolved)
        self.initial_scale = float(initial_scale)
        self.dynamic_growth_steps = int(dynamic_growth_steps)

    @property
    def mode(self) -> str:
        return self.precision.mode

    @property
    def policy(self) -> str:
        return self.precision.keras_policy

    @contextlib.contextmanager
    def scope(self):
        """Within: the mode's dtype policy (and TF32 on/off); both restored afterwards.

        The policy is set in the chosen Keras and in the other one when it is imported already, so a
        model built from either picks it up.
        """
        tf = _tf()
        flavors = [self.flavor] + [f for f in loaded_flavors() if f != self.flavor]
        prev_policies = [(f, f.global_policy()) for f in flavors]
        prev_tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
        for f in flavors:
            f.set_global_policy(self.policy)
        if self.precision.tf32 is not None:
            tf.config.experimental.enable_tensor_float_32_execution(self.precision.tf32)
        try:
            yield self
        finally:
            for f, prev in prev_policies:
                f.set_global_policy(prev)
            tf.config.experimental.enable_tensor_float_32_execution(prev_tf32)

    def optimizer(self, inner):
        """The optimizer to train with: wrapped in its Keras's LossScaleOptimizer for fp16, as is otherwise."""
        flavor = flavor_of(inner) or self.flavor
        if not self.precision.loss_scaling or flavor.is_loss_scale_optimizer(inner):
            return inner
        return flavor.wrap(inner, self.initial_scale, self.dynamic_growth_steps)

    def callback(self, model=None) -> LossScaleHistory:
        """A :class:`LossScaleHistory` for ``model.fit`` — of ``model``'s Keras when given, else of ``mp.flavor``."""
        flavor = (flavor_of(model) if model is not None else None) or self.flavor
        return history_class(flavor)()

    def check_model(self, model) -> list[str]:
        """Warn (and return the warnings) when the model's last layer computes in float16/bfloat16.

        A softmax or the logits in float16 lose precision and can overflow; keep the last layer in
        float32 (``dtype="float32"``, or :func:`float32_output`).
        """
        problems = []
        last = model.layers[-1] if model.layers else None
        if last is not None and getattr(last, "compute_dtype", "float32") in ("float16", "bfloat16"):
            problems.append(f"the last layer {last.name!r} computes in {last.compute_dtype}; give it dtype='float32' "
                            "(or end the model with ampkit.keras.float32_output) so logits/softmax stay in float32")
        for msg in problems:
            warnings.warn(f"ampkit: {msg}", stacklevel=2)
        return problems

    def train_step(self, model, optimizer, x, y, loss_fn):
        """One custom-loop step with GradientTape: scale the loss (fp16), unscale the gradients, apply
        (which skips non-finite gradients and updates the scale). Returns the unscaled loss.

        Keras 3: ``scale_loss`` and ``apply``; Keras 2 (tf_keras): ``get_scaled_loss``,
        ``get_unscaled_gradients`` and ``apply_gradients`` — chosen by the optimizer's Keras.
        """
        tf = _tf()
        flavor = flavor_of(optimizer) or flavor_of(model) or self.flavor
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            loss = loss_fn(y, pred)
            scaled = flavor.scale_loss(optimizer, loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        flavor.apply(optimizer, grads, model.trainable_variables)
        return loss


def float32_output(x, name: str | None = None):
    """Pass a tensor through a float32 linear activation (of ``x``'s Keras): the model's output stays float32."""
    flavor = flavor_of(x) or keras3()
    return flavor.module.layers.Activation("linear", dtype="float32", name=name)(x)


def loss_scale_of(optimizer) -> float | None:
    """The current dynamic loss scale of a (possibly wrapped) optimizer of either Keras, None without
    scaling. Reads a variable: a host-device sync."""
    flavor = flavor_of(optimizer)
    return flavor.loss_scale(optimizer) if flavor is not None else None


class _History:
    """Records the loss scale after every training batch and counts skipped steps.

    Keras's LossScaleOptimizer halves the scale exactly when a step had non-finite gradients
    and was skipped, so a step is counted as skipped when the scale went down. Reading the scale
    is a host-device sync, once per batch.
    """

    def __init__(self):
        super().__init__()
        self.scales: list[float] = []
        self.skipped: list[bool] = []

    def on_train_begin(self, logs=None):
        self._last = loss_scale_of(self.model.optimizer)

    def on_train_batch_end(self, batch, logs=None):
        scale = loss_scale_of(self.model.optimizer)
        if scale is None:
            return
        self.skipped.append(self._last is not None and scale < self._last)
        self.scales.append(scale)
        self._last = scale

    @property
    def skipped_steps(self) -> int:
        return sum(self.skipped)


_HISTORY: dict[str, type] = {}


def history_class(flavor: Flavor) -> type:
    """The loss-scale history callback for one Keras: each Keras's ``fit`` takes only its own callbacks."""
    if flavor.name not in _HISTORY:
        _HISTORY[flavor.name] = type("LossScaleHistory", (_History, flavor.callback_base),
                                     {"__doc__": _History.__doc__, "__module__": __name__})
    return _HISTORY[flavor.name]


try:  # Keras 3's callback at import time, for ``ampkit.keras.LossScaleHistory``
    LossScaleHistory = history_class(keras3())
except Exception:  # pragma: no cover - keras absent: the engine module still imports
    LossScaleHistory = _History
