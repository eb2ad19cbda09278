"""The pre-failure ring buffer of ``ampkit.keras.MixedPrecision.callback()`` for ``model.fit``."""

from __future__ import annotations

import logging
import math

from ....integrations.record import DEFAULT_K, StepRow, TrainRecord
from ....integrations.trackers import TrackerWindow
from .failing_calls import FailingCalls

__all__ = ["watch_fit", "KerasWatch"]

log = logging.getLogger("ampkit.integrations.keras")


def watch_fit(history, *, json_path=None, k: int = DEFAULT_K, mode: str = "fp32", flavor=None, seed: int | None = None):
    """Give ``history`` (a :class:`LossScaleHistory`) the ring buffer; returns it. ``k=0``: none."""
    if not k:
        return history
    from ....errors import UsageError

    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise UsageError(f"ampkit.keras callback: k (batches kept before a failure) must be an int >= 0, received {k!r}")
    if json_path is not None and not isinstance(json_path, str):
        raise UsageError(f"ampkit.keras callback: json_path must be a file path (str), received {json_path!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise UsageError(f"ampkit.keras callback: seed must be an int (the run's seed, for ampkit parity --runs), "
                         f"received {seed!r}")
    watch = KerasWatch(json_path=json_path, k=k, mode=mode, flavor=flavor)
    watch.seed = seed
    history.watch = watch
    for name in ("on_train_begin", "on_train_batch_end", "on_epoch_end", "on_train_end"):
        orig = getattr(history, name)

        def chained(*args, _orig=orig, _name=name, **kwargs):
            _orig(*args, **kwargs)
            getattr(watch, _name)(history, *args, **kwargs)
        setattr(history, name, chained)
    return history


def _first_float(out, tf):
    for t in tf.nest.flatten(out):
        if hasattr(t, "dtype") and getattr(t.dtype, "is_floating", False):
            return t
    return None


class KerasWatch:
    """The per-batch layer statistics of one ``fit`` and the record they feed."""

    def __init__(self, *, json_path=None, k: int = DEFAULT_K, mode: str = "fp32", flavor=None) -> None:
        self.json_path, self.k, self.mode, self.flavor = json_path, k, mode, flavor
        self.legacy = bool(getattr(flavor, "legacy", False))
        self.record: TrainRecord | None = None
        self.active = False
        self._undo: list = []
        self._failing = None   # the custom layers' failing calls (set when fit's layers are wrapped)
        self._batch_window, self._epoch_window = TrackerWindow(), TrackerWindow()
        self.seed: int | None = None  # the run's seed, for the run record (ampkit parity --runs)
        self._trace = None

    # ------------------------------------------------------------------ fit's events
    def on_train_begin(self, history, logs=None):
        from ..engine.keras_backends import configured_backend

        keras_name = "tf_keras" if self.legacy else "keras"
        self.record = TrainRecord(source="ampkit.keras callback", trainer=f"{keras_name} fit", k=self.k,
                                  json_path=self.json_path, workload=type(history.model).__name__,
                                  health=history.health)
        self.record.mode = self.mode
        opt = history.model.optimizer
        self.record.scaler = bool(self.flavor is not None and self.flavor.is_loss_scale_optimizer(opt))
        self.active, self.steps = False, 0
        self.base = int(getattr(history, "base_step", 0))
        self._n0 = len(history.scales)
        self._last_scale = getattr(history, "_last", None)
        self._batch_window.reset(), self._epoch_window.reset()
        from ....runlog import RunTrace

        self._trace = RunTrace()
        backend = "tensorflow" if self.legacy else configured_backend()
        if backend != "tensorflow":
            self.record.framework = backend
            self.record.extra = {"keras_backend": backend}
            return self._blind(f"on Keras's {backend} backend")
        from ..tfimport import import_tensorflow

        tf = import_tensorflow()
        if tf.distribute.has_strategy() and tf.distribute.get_strategy().num_replicas_in_sync > 1:
            return self._blind("under a tf.distribute strategy")
        from ..environment import tf_environment

        self.record.environment = tf_environment(self.flavor)
        self.record.device = "cpu" if not tf.config.list_logical_devices("GPU") else "gpu"
        self._attach(history.model, tf)
        self.active = True

    def _blind(self, where: str) -> None:
        """The layer statistics cannot be had here: one visible line, and the document says so."""
        self.record.not_watched = ["layer outputs", "layer gradients"]
        self.record.warn_line(f"ampkit.keras callback: {where} the callback records each batch's loss, the loss "
                              f"scale and the skipped steps, but not each layer's output or gradient (that needs "
                              f"Keras on TensorFlow): a first inf/NaN is located only as the loss")

    def on_train_batch_end(self, history, batch, logs=None):
        if self.record is None:
            return
        self.steps += 1
        loss = (logs or {}).get("loss")
        loss = float(loss) if loss is not None else None
        new = len(history.scales) == self._n0 + self.steps
        scale = history.scales[-1] if history.scales and new else None
        skipped = bool(history.skipped[-1]) if scale is not None else False
        used = self._last_scale if scale is not None else None
        self._last_scale = scale
        if self._trace is not None:
            self._trace.step_end()
            if loss is not None:
                self._trace.loss_at(self.base + self.steps, loss)
        if self.active:
            self._layers_row(loss, used, scale, skipped)
        else:
            self.record.add(StepRow(self.base + self.steps, loss, [], [], used, scale, skipped))
        if isinstance(logs, dict):
            logs.update(self._batch_window.metrics(self.record))

    def on_epoch_end(self, history, epoch, logs=None):
        if self._trace is not None and isinstance(logs, dict):  # the validation metrics fit logged
            self._trace.evaluate(self.base + self.steps, {k: v for k, v in logs.items() if k.startswith("val_")})
        if self.record is not None and isinstance(logs, dict):
            logs.update(self._epoch_window.metrics(self.record))

    def _layers_row(self, loss, used, scale, skipped) -> None:
        tf = self._tf
        flags = self._failing.flags() if self._failing is not None else []
        vals = tf.stack([v.read_value() for v in self._fvars + self._gvars + flags]).numpy().tolist()  # the batch's one host read
        n, ng = len(self._fvars), len(self._gvars)
        fwd = [None if (v == v and v < 0) else v for v in vals[:n]]
        grad = [None if (v == v and v < 0) else v for v in vals[n:n + ng]]
        if len(self._order) != self._tabled:  # the table changes only when a trace calls a layer first
            self._set_table()
        if self.record.add(StepRow(self.base + self.steps, loss, [fwd[i] for i in self._row_fwd],
                                   [grad[j] for j in self._row_grad], used, scale, skipped)) \
                and self.record.first["phase"] == "forward" and self._failing is not None:
            self.record.locate_origin(self._failing.explain(vals[n + ng:], self._order, self.record.first["name"]))

    def _set_table(self) -> None:
        """The record's module table, in the order the layers first ran, and where each row's values are."""
        order = list(self._order)
        gpos = {i: j for j, i in enumerate(self._glayers)}
        self.record.set_modules([(self._names[i], self._types[i]) for i in order],
                                [self._names[i] for i in order if i in self._glayer])
        self._row_fwd, self._row_grad = order, [gpos[i] for i in order if i in self._glayer]
        self._tabled = len(order)

    def on_train_end(self, history, logs=None):
        if self.record is None or not hasattr(self, "steps"):
            return
        self._detach(history.model)
        if self._trace is not None:
            from ....runlog import model_name

            try:  # the run record is an addition: it never ends (or follows) the user's fit
                self.record.extra["run"] = self._trace.run(
                    mode=self.mode, seed=self.seed, model=model_name(history.model), steps=self.steps,
                    skipped=len(self.record.skipped), framework=self.record.framework or "tensorflow")
            except Exception as exc:  # noqa: BLE001
                log.warning("ampkit.keras callback: no run record (%s: %s)", type(exc).__name__, exc)
        line = self.record.summary_line()
        log.warning(line) if self.record.warnings else log.info(line)
        if self.json_path:
            self.record.write(self.json_path)
        self.active = False

    # ------------------------------------------------------------------ wrapping
    def _attach(self, model, tf) -> None:
        self._tf = tf
        layers = [lay for lay in model._flatten_layers(include_self=False, recursive=True)
                  if callable(getattr(lay, "call", None))]
        # Keras 3's path ("sequential/attn/q"); a layer without weights may have none (GlobalAveragePooling1D): its name
        self._names = [(getattr(lay, "path", None) if not self.legacy else None) or lay.name for lay in layers]
        self._types = [type(lay).__name__ for lay in layers]
        self._order: list[int] = []
        self._tabled = -1   # len(self._order) when the record's module table was last set
        self._fvars = [tf.Variable(-1.0, trainable=False, dtype=tf.float32) for _ in layers]
        owner = {}
        for i, lay in enumerate(layers):
            for v in lay._trainable_variables if hasattr(lay, "_trainable_variables") else lay.trainable_weights:
                owner.setdefault(id(v), i)
        self._owner = owner
        self._glayers = sorted(set(owner.values()))
        self._glayer = set(self._glayers)
        self._gvars = [tf.Variable(-1.0, trainable=False, dtype=tf.float32) for _ in self._glayers]
        self._failing = FailingCalls(tf, layers, self._names, self.legacy)
        for i, lay in enumerate(layers):
            orig = lay.call

            def call(*args, _orig=orig, _i=i, **kwargs):
                out = _orig(*args, **kwargs)
                t = _first_float(out, tf)
                if t is not None:
                    if _i not in self._order:
                        self._order.append(_i)
                    amax = self._amax(t, tf)
                    self._fvars[_i].assign(amax)
                    self._failing.keep(_i, args, amax)
                return out
            object.__setattr__(lay, "call", call) if self.legacy else setattr(lay, "call", call)
            self._undo.append((lay, orig))
        opt = model.optimizer
        orig_apply = opt.apply_gradients

        def apply_gradients(grads_and_vars, *args, **kwargs):
            pairs = list(grads_and_vars)
            self._grad_norms(pairs, opt, tf)
            return orig_apply(pairs, *args, **kwargs)
        opt.apply_gradients = apply_gradients
        self._undo.append((opt, None))
        if self.legacy:
            model.train_function = model.make_train_function(force=True)
        else:
            model.make_train_function(force=True)

    def _detach(self, model) -> None:
        for obj, orig in self._undo:
            if orig is None:
                obj.__dict__.pop("apply_gradients", None)
            else:
                obj.__dict__.pop("call", None)
        self._undo = []

    @staticmethod
    def _amax(t, tf):
        """max |t| as float32, NaN when t holds a NaN (TensorFlow's max skips NaN)."""
        m = tf.cast(tf.reduce_max(tf.abs(t)), tf.float32)
        return tf.where(tf.reduce_any(tf.math.is_nan(t)), tf.constant(math.nan, tf.float32), m)

    def _grad_norms(self, pairs, opt, tf) -> None:
        sq = {}
        for g, v in pairs:
            i = self._owner.get(id(v))
            if g is None or i is None:
                continue
            n = tf.cast(tf.norm(tf.cast(g, tf.float32)), tf.float32)
            sq[i] = n * n if i not in sq else sq[i] + n * n
        scale = getattr(opt, "dynamic_scale", None)
        if scale is None and self.legacy and hasattr(opt, "loss_scale"):
            scale = opt.loss_scale
        for j, i in enumerate(self._glayers):
            if i in sq:
                norm = tf.sqrt(sq[i])
                if scale is not None:
                    norm = norm / tf.cast(scale, tf.float32)
                self._gvars[j].assign(norm)
