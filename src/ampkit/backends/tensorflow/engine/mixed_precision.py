"""``ampkit.keras.MixedPrecision``: the same modes for Keras (public as ``ampkit.keras``)."""

from __future__ import annotations

import contextlib
import warnings

from ....engine_front import PrecisionFront
from ....errors import UsageError
from ....precision import AUTO, Precision, get_precision
from ..devices import auto_fingerprint, engine_mode, gpu_capabilities, mode_support, resolve_auto
from ..flavor import Flavor, flavor_of, get_flavor, keras3, loaded_flavors
from .callback import LossScaleHistory, history_class, keras_health, loss_scale_of

__all__ = ["MixedPrecision", "LossScaleHistory", "float32_output", "loss_scale_of", "mode_support",
           "resolve_auto", "auto_fingerprint", "gpu_capabilities", "history_class"]


def _flavor_and_backend(keras) -> tuple[Flavor, str]:
    """The Keras chosen and the backend it runs on; off TensorFlow nothing imports TensorFlow."""
    from .keras_backends import configured_backend

    backend = configured_backend()
    if keras is None and backend != "tensorflow":
        return keras3(), backend
    flavor = get_flavor(keras)
    return flavor, ("tensorflow" if flavor.legacy else backend)


class MixedPrecision(PrecisionFront):
    """Mixed precision for Keras: a policy scope, the loss-scale optimizer, float32 outputs, checks.

    Args:
        mode: ``fp32``, ``tf32``, ``fp16``, ``bf16``, an alias (``mixed_float16``...) or ``auto``
            (a global policy the user set first is adopted).
        initial_scale, dynamic_growth_steps: the LossScaleOptimizer's arguments (fp16 only).
        keras: which Keras — ``"keras"`` (Keras 3), ``"tf_keras"`` (Keras 2), either module, or None
            (default: the one ``tf.keras`` resolves to; Keras 3 on its torch/JAX backends).
        min_scale_warning, consecutive_skip_warning: the loss-scale alarm (:mod:`ampkit.health`).
        keep_fp32: layers kept in float32 (names, paths, globs or class names), applied by
            ``model = mp.prepare(model)`` through per-layer dtype policies (:mod:`.islands`);
            :meth:`from_plan` reads them from a plan file; :attr:`plan` is the plan in force.

    Example::

        mp = ampkit.keras.MixedPrecision("fp16")
        with mp.scope():
            model = build_model()                 # layers pick up the mixed policy
            model.compile(optimizer=mp.optimizer(keras.optimizers.Adam()), loss="sparse_categorical_crossentropy")
            model.fit(x, y, callbacks=[mp.callback()])
        mp.verify(model), mp.health()
    """

    def __init__(self, mode: str = AUTO, *, initial_scale: float = 2.0**15, dynamic_growth_steps: int = 2000,
                 keras=None, min_scale_warning: float = 1.0, consecutive_skip_warning: int = 10,
                 fp8_skip_first_last: bool = True, fp8_filter=None, keep_fp32=None):
        from . import policy as keras_policy
        from .fp8 import fp8_engine

        self.flavor, self.backend = _flavor_and_backend(keras)
        found = keras_policy.found_policy(self.flavor)
        wanted, self.policy_note = keras_policy.adopt(mode, found)
        self.global_policy_found: str | None = found[1] if found else None
        self._fp8 = fp8_engine(wanted, self.flavor, self.backend, fp8_skip_first_last, fp8_filter)  # None unless fp8
        resolved, self.reason = ("fp8", self._fp8.reason) if self._fp8 else engine_mode(wanted, self.backend)
        if self.policy_note and self.global_policy_found and wanted != mode:
            self.reason = f"{self.reason} (adopted from the global policy {self.global_policy_found!r})"
        self.precision: Precision = self._fp8.precision if self._fp8 else get_precision(resolved)
        self.initial_scale, self.dynamic_growth_steps = _scale_args(initial_scale, dynamic_growth_steps)
        self._health = keras_health(min_scale_warning, consecutive_skip_warning)
        self._added_scaling: dict[int, tuple] = {}  # id(user optimizer) -> (it, the loss-scale optimizer around it)
        self._wrapped_for_half = False  # mp.optimizer wrapped for float16 compute the mode itself does not scale
        self._checked: dict[tuple[int, int], bool] = {}
        self._last_scale: dict[int, float] = {}
        keras_policy.report(self.policy_note)
        from .islands import KerasIslands, keras_plan

        plan = keras_plan(self.precision.mode, keep_fp32)
        if plan is not None and plan.default != self.precision.mode:
            raise UsageError(f"plan default {plan.default!r} but the engine runs {self.precision.mode!r}")
        self._islands = KerasIslands(plan) if plan is not None else None
        self._user_fp8_filter = fp8_filter

    @classmethod
    def from_plan(cls, plan, **kwargs):
        """The engine a precision plan asks for (a path, the dict or an ``ampkit.plan.Plan``); then
        ``model = mp.prepare(model)`` on the built model applies its layers' policies."""
        from ....plan_format import load_plan

        if "keep_fp32" in kwargs:
            raise UsageError("from_plan() takes the layers from the plan; keep_fp32= is for MixedPrecision(mode, ...)")
        loaded = load_plan(plan, "tensorflow")
        return cls(loaded.default, keep_fp32=loaded, **kwargs)

    @property
    def plan(self):
        """The :class:`ampkit.plan.Plan` in force (no modules when none were asked for)."""
        from ....plan_format import Plan

        return self._islands.plan if self._islands is not None else Plan(self.mode, {}, "tensorflow")

    @property
    def policy(self) -> str:
        return self.precision.keras_policy

    def prepare(self, model):
        """The model to train: fp8 quantizes its eligible layers to Keras float8 (:mod:`.fp8`; a
        built model, before ``compile``); other modes return it as it is."""
        if self._islands is not None:  # the plan's layers: float32 policies, out of fp8 (.islands)
            self._islands.apply(model)
            if self._fp8:
                self._fp8.layer_filter = self._islands.fp8_filter(self._user_fp8_filter)
        return self._fp8.convert(model) if self._fp8 else model

    @contextlib.contextmanager
    def scope(self):
        """Within: the mode's dtype policy (and TF32 on/off on TensorFlow); both restored afterwards.

        The policy is set in the chosen Keras and in the other one when it is imported already, so a
        model built from either picks it up.
        """
        flavors = [self.flavor] + [f for f in loaded_flavors() if f != self.flavor]
        prev_policies = [(f, f.global_policy()) for f in flavors]
        tf = None
        if self.backend == "tensorflow":
            from ..tfimport import import_tensorflow

            tf = import_tensorflow()
            prev_tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
        for f in flavors:
            f.set_global_policy(self.policy)
        if tf is not None and self.precision.tf32 is not None:
            tf.config.experimental.enable_tensor_float_32_execution(self.precision.tf32)
        try:
            yield self
        finally:
            for f, prev in prev_policies:
                f.set_global_policy(prev)
            if tf is not None:
                tf.config.experimental.enable_tensor_float_32_execution(prev_tf32)

    def optimizer(self, inner, model=None):
        """The optimizer to train with: wrapped in its Keras's dynamic loss-scale optimizer for fp16 — and
        in any mode when float16 compute is about (a global ``mixed_float16`` policy found at start, or
        ``model`` given with float16 layers) — as is otherwise. A Keras 3 LossScaleOptimizer given
        here gains ampkit's cross-replica skip."""
        from .policy import POLICY_MODE, float16_layers

        _need_optimizer(inner, "optimizer(inner)")
        flavor = flavor_of(inner) or self.flavor
        if flavor.is_loss_scale_optimizer(inner):
            return self._upgraded(inner, flavor)
        half = POLICY_MODE.get(self.global_policy_found or "") == "fp16" or (model is not None and float16_layers(model))
        if not (self.precision.loss_scaling or half):
            return inner
        self._wrapped_for_half = self._wrapped_for_half or bool(half)
        return flavor.wrap(inner, self.initial_scale, self.dynamic_growth_steps)

    @staticmethod
    def _upgraded(opt, flavor: Flavor):
        if flavor.legacy:
            return opt
        from .scaling import upgrade

        return upgrade(opt)

    def callback(self, model=None, *, json_path=None, k: int = 8, seed: int | None = None) -> LossScaleHistory:
        """A :class:`LossScaleHistory` for ``model.fit`` — of ``model``'s Keras when given, else of
        ``mp.flavor`` — that feeds this engine's loss-scale alarm (:meth:`health`) and keeps the last
        ``k`` batches' layer statistics: on the first inf/NaN an ``audit`` document names the layer
        and phase (written to ``json_path``; without it kept in ``history.watch.record``); :mod:`..integrations.watch`.
        The document also carries the run (``"run"``: loss per batch, the ``val_`` metrics fit logs,
        step times, the mode and ``seed``) for ``ampkit parity --runs``."""
        from ..integrations.watch import watch_fit

        if model is not None:
            _need_model(model, "callback(model)")
        flavor = (flavor_of(model) if model is not None else None) or self.flavor
        return watch_fit(history_class(flavor)(health=self._health), json_path=json_path, k=k, mode=self.mode,
                         flavor=flavor, seed=seed)

    def check_model(self, model, optimizer=None) -> list[str]:
        """Warn (and return the warnings) when the model's last layer computes in float16/bfloat16, or
        when it computes in float16 and ``optimizer`` (or the compiled one) does not scale the loss.

        A softmax or the logits in float16 lose precision and can overflow; keep the last layer in
        float32 (``dtype="float32"``, or :func:`float32_output`).
        """
        from .contract import loss_scaling_finding

        problems = []
        last = model.layers[-1] if model.layers else None
        if last is not None and getattr(last, "compute_dtype", "float32") in ("float16", "bfloat16"):
            problems.append(f"the last layer {last.name!r} computes in {last.compute_dtype}; give it dtype='float32' "
                            "(or end the model with ampkit.keras.float32_output) so logits/softmax stay in float32")
        scaling = loss_scaling_finding(model, optimizer)
        if scaling:
            problems.append(f"{scaling['actual']}: {scaling['advice']}")
        for msg in problems:
            warnings.warn(f"ampkit: {msg}", stacklevel=2)
        return problems

    def verify(self, model, optimizer=None) -> list[dict]:
        """The precision contract, checked on the model as it is: per layer, variables float32, the
        compute dtype the policy's, the output layer float32; a float16-computing model's optimizer
        scales the loss. A list of ``{"where", "expected", "actual", "advice"}`` ([] when it holds)."""
        from .contract import verify

        _need_model(model, "verify(model)")
        if optimizer is not None:
            _need_optimizer(optimizer, "verify(model, optimizer)")
        found = verify(model, self.precision.compute_dtype if self.precision.autocast else "float32", self.mode,
                       optimizer)
        return found + (self._islands.findings(model) if self._islands is not None else [])

    def health(self) -> dict:
        """``{"status": "ok"|"warning"|"collapsed", "messages": [...], "steps", "skipped", "scale", ...}``: the
        loss-scale alarm, fed by :meth:`callback` in ``fit`` and by :meth:`train_step` run eagerly."""
        out = self._health.report()
        out["loss_scaling"] = bool(self.precision.loss_scaling or self._added_scaling or self._wrapped_for_half)
        return out

    @property
    def stats(self) -> dict:
        """``{"scale", "steps", "skipped", "consecutive_skipped"}`` as the alarm last saw them."""
        rep = self._health.report()
        return {k: rep[k] for k in ("scale", "steps", "skipped")} | {"consecutive_skipped": rep["consecutive_skipped"]}

    # ------------------------------------------------------------------------------- custom loop
    def _scaling_for(self, model, optimizer, flavor: Flavor):
        """The optimizer the step applies through: ``optimizer`` itself, unless the model computes in
        float16 and it does not scale the loss — then a loss-scale optimizer around it (made once, said once)."""
        if flavor.is_loss_scale_optimizer(optimizer):
            return self._upgraded(optimizer, flavor)
        if id(optimizer) in self._added_scaling:
            return self._added_scaling[id(optimizer)][1]
        key = (id(model), id(optimizer))
        if key not in self._checked:
            from .policy import float16_layers

            self._checked[key] = bool(float16_layers(model))
        if not self._checked[key]:
            return optimizer
        wrapped = flavor.wrap(optimizer, self.initial_scale, self.dynamic_growth_steps)
        self._added_scaling[id(optimizer)] = (optimizer, wrapped)
        warnings.warn(f"ampkit.keras: the model computes in float16 but {type(optimizer).__name__} does not scale the "
                      "loss; train_step applies it through a dynamic LossScaleOptimizer (mp.optimizer(opt) makes "
                      "that explicit)", stacklevel=3)
        return wrapped

    def train_step(self, model, optimizer, x, y, loss_fn):
        """One custom-loop step: scale the loss (fp16), differentiate, unscale and apply — which skips
        a step with non-finite gradients (on every replica under a ``tf.distribute`` strategy) and
        updates the scale. Returns the unscaled loss.

        TensorFlow: ``GradientTape`` (also inside ``strategy.run`` in a ``tf.function``; the optimizer is
        built on the first call, no ``opt.build`` needed). Keras 3 on torch/JAX: ``loss.backward()`` /
        ``jax.grad`` (:mod:`.keras_backends`). A model that computes in float16 is never trained
        without loss scaling, whichever policy made it so.
        """
        _check_step_args(model, optimizer, loss_fn)
        flavor = flavor_of(optimizer) or flavor_of(model) or self.flavor
        opt = self._scaling_for(model, optimizer, flavor)
        if not flavor.legacy:
            from .scaling import ensure_built

            ensure_built(opt, model.trainable_variables, self.backend)
        if flavor.legacy or self.backend == "tensorflow":
            from ..tfimport import import_tensorflow

            tf = import_tensorflow()
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                loss = loss_fn(y, pred)
                scaled = flavor.scale_loss(opt, loss)
            grads = tape.gradient(scaled, model.trainable_variables)
            flavor.apply(opt, grads, model.trainable_variables)
        else:
            from .keras_backends import train_step

            loss = train_step(self.backend, model, opt, x, y, loss_fn, lambda value: flavor.scale_loss(opt, value))
        self._observe(opt, flavor)
        return loss

    def _observe(self, opt, flavor: Flavor) -> None:
        """Feed the alarm after an eager step (a traced ``tf.function`` step cannot read host values:
        there the ``fit`` callback, or reading :func:`loss_scale_of` yourself, tells)."""
        if not flavor.is_loss_scale_optimizer(opt):
            return
        if self.backend == "tensorflow" or flavor.legacy:
            from ..tfimport import import_tensorflow

            tf = import_tensorflow()
            if not tf.executing_eagerly():
                return
            if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
                # eager strategy.run: the replicas share the (mirrored) scale; the first one feeds the alarm once a step
                if int(tf.distribute.get_replica_context().replica_id_in_sync_group) != 0:
                    return
        before = self._last_scale.get(id(opt), float(getattr(opt, "initial_scale", 0.0)) or None)
        scale = flavor.loss_scale(opt)
        skipped = flavor.skipped(opt, before, scale)
        self._health.observe(self._health.steps + 1, scale, skipped, scale_used=before)   # 1-based
        self._last_scale[id(opt)] = scale


def _scale_args(initial_scale, growth_steps) -> tuple[float, int]:
    from ....errors import UsageError

    try:
        scale, steps = float(initial_scale), int(growth_steps)
    except (TypeError, ValueError):
        scale = steps = None
    if scale is None or not 0 < scale < float("inf") or steps != growth_steps or steps < 1:
        raise UsageError(f"MixedPrecision: initial_scale must be a finite number > 0 and dynamic_growth_steps an "
                         f"int >= 1; received {initial_scale!r:.30}, {growth_steps!r:.30}")
    return scale, steps


def _need_model(model, call: str) -> None:
    from ....errors import UsageError

    if not callable(model) or not hasattr(model, "trainable_variables") or not hasattr(model, "layers"):
        raise UsageError(f"{call}: expected a Keras model, got {type(model).__name__} {model!r:.40}")


def _need_optimizer(optimizer, call: str) -> None:
    from ....errors import UsageError

    if not (hasattr(optimizer, "apply_gradients") or hasattr(optimizer, "apply")) or isinstance(optimizer, type):
        raise UsageError(f"{call}: expected a Keras optimizer instance, got {type(optimizer).__name__} "
                         f"{optimizer!r:.40} (e.g. keras.optimizers.Adam())")


def _check_step_args(model, optimizer, loss_fn) -> None:
    """train_step's arguments, refused in one line before any Keras call fails on them."""
    from ....errors import UsageError

    _need_model(model, "train_step(model, ...)")
    _need_optimizer(optimizer, "train_step(model, optimizer, ...)")
    if not callable(loss_fn):
        raise UsageError(f"train_step(..., loss_fn): expected a callable loss_fn(y_true, y_pred), got "
                         f"{type(loss_fn).__name__} {loss_fn!r:.40} (e.g. keras.losses.get({loss_fn!r:.40}))")


def float32_output(x, name: str | None = None):
    """Pass a tensor through a float32 linear activation (of ``x``'s Keras): the model's output stays float32."""
    flavor = flavor_of(x) or keras3()
    return flavor.module.layers.Activation("linear", dtype="float32", name=name)(x)


# train_step is plain Python around Keras calls: AutoGraph (strategy.run, tf.function) runs it as it is
# instead of trying to convert it and everything it calls (the attribute tf.autograph.experimental.
# do_not_convert sets, set here without importing TensorFlow)
MixedPrecision.train_step.autograph_info__ = None
