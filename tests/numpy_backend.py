"""A third framework in one file: NumPy. It implements the whole :class:`ampkit.backends.base.Backend`
protocol -- doctor, bench, parity and audit run on it through the neutral drivers, from the CLI and
the library, once ``register_backend("numpy", "numpy_backend:NumpyBackend")`` names it.

The model is a two-layer MLP (fc1 -> relu -> fc2) trained by SGD; fp16 runs its forward and backward
in ``np.float16`` over float32 master weights with a dynamic loss scale (skip and halve on inf/NaN);
NumPy has no bfloat16, TF32 or fp8, so those modes are unsupported, with the reason.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from ampkit.audit.ops import Advice, AuditSession, StepOutcome
from ampkit.audit.report import LayerStats, merge_dtypes
from ampkit.auto_cache import fingerprint
from ampkit.backends.base import Backend
from ampkit.bench.ops import BenchSession, Measured, ModelProbe
from ampkit.compare import relative_error
from ampkit.environment import base_environment
from ampkit.errors import ModeUnavailableError, UsageError
from ampkit.formats import format_of, lost_below
from ampkit.parity.ops import loader_order
from ampkit.parity.report import RunRecord
from ampkit.rounds import Work
from ampkit.target import Target

DTYPE = {"fp32": np.float32, "fp16": np.float16}
LAYERS = ("fc1", "relu", "fc2")


def forward_backward(params, x, y, mode: str, scale: float = 1.0):
    """(loss, float32 gradients unscaled, {layer: output}, {layer: scaled gradient w.r.t. it})."""
    dt = DTYPE[mode]
    w1, b1, w2, b2 = (p.astype(dt) for p in params)
    with np.errstate(all="ignore"):
        a1 = x.astype(dt) @ w1 + b1
        h = np.maximum(a1, dt(0))
        z = h @ w2 + b2
        zf = z.astype(np.float32)
        p = np.exp(zf - zf.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
        dz = ((p - np.eye(z.shape[1], dtype=np.float32)[y]) / len(y) * scale).astype(dt)
        dh = dz @ w2.T
        da1 = dh * (a1 > 0)
        grads = [g.astype(np.float32) / np.float32(scale) for g in (x.astype(dt).T @ da1, da1.sum(0), h.T @ dz, dz.sum(0))]
    return loss, grads, dict(zip(LAYERS, (a1, h, z))), dict(zip(LAYERS, (da1, dh, dz)))


class Trainer:
    def __init__(self, mode: str, seed: int, features: int = 64, classes: int = 10, lr: float = 0.1):
        r = np.random.default_rng(seed)
        self.params = [r.normal(0, features ** -0.5, (features, 32)).astype(np.float32), np.zeros(32, np.float32),
                       r.normal(0, 32 ** -0.5, (32, classes)).astype(np.float32), np.zeros(classes, np.float32)]
        self.mode, self.lr, self.skipped = mode, lr, 0
        self.scale = 2.0**16 if mode == "fp16" else 1.0

    def step(self, x, y, scale: float | None = None) -> float:
        loss, grads, _, _ = forward_backward(self.params, x, y, self.mode, scale or self.scale)
        if not all(np.isfinite(g).all() for g in grads):  # skip the step, halve the scale
            self.skipped, self.scale = self.skipped + 1, self.scale / 2
            return loss
        for p, g in zip(self.params, grads):
            p -= self.lr * g
        return loss


def batch(n: int, seed: int = 0, features: int = 64):
    r = np.random.default_rng(seed)
    return r.normal(size=(n, features)).astype(np.float32), r.integers(0, 10, n)


def _small(values, fmt) -> tuple[int, int, int]:
    """Nonzero values, those below the format's smallest normal, those it loses (ampkit.audit.core)."""
    nz = values > 0
    return int(nz.sum()), int((nz & (values < fmt.smallest_normal)).sum()), int((nz & (values < lost_below(fmt))).sum())


class NumpySession(AuditSession):
    initial_scale = 2.0**16

    def __init__(self, mode: str, n: int, name: str):
        self.mode, self.fmt, self.workload, self.device, self.notes = mode, format_of(mode), name, "numpy:cpu", ()
        self.trainer, (self.x, self.y) = Trainer(mode, 0), batch(n)
        self.stats = {n: LayerStats(n, "Dense" if n != "relu" else "ReLU") for n in LAYERS}

    def measure(self, step: int, scale: float) -> StepOutcome:
        self.ref = forward_backward(self.trainer.params, self.x, self.y, "fp32")
        self.aud, self.scale = forward_backward(self.trainer.params, self.x, self.y, self.mode, scale), scale
        bad = lambda arrays: [n for n in LAYERS if not np.isfinite(arrays[n]).all()]  # noqa: E731
        fwd, bwd = bad(self.aud[2]), bad(self.aud[3])[::-1]  # backward order: fc2 first
        first = {"name": fwd[0], "phase": "forward"} if fwd else ({"name": bwd[0], "phase": "backward"} if bwd else None)
        return StepOutcome(bool(fwd), bool(bwd), bool(bad(self.ref[2]) or bad(self.ref[3])), first)

    def rewind(self) -> None:  # measuring changes nothing; closing gives nothing back
        pass

    close = rewind

    def record(self) -> None:
        for n in LAYERS:
            st, ref, a, g = self.stats[n], np.abs(self.ref[2][n]), self.aud[2][n], np.abs(self.ref[3][n])
            st.calls, st.fwd_amax, st.grad_amax = st.calls + 1, max(st.fwd_amax, float(ref.max())), max(st.grad_amax, float(g.max()))
            st.count_forward(*_small(ref, self.fmt))
            st.count_grad(*_small(g * self.scale, self.fmt))
            st.fwd_nonfinite += int((~np.isfinite(a)).sum())
            st.grad_nonfinite += int((~np.isfinite(self.aud[3][n])).sum())
            if np.isfinite(a).all():
                dist = float(np.linalg.norm(a.astype(np.float64) - self.ref[2][n]))
                st.rel_error = max(st.rel_error or 0.0, relative_error(dist, float(np.linalg.norm(ref)), ref.size, self.fmt))
            merge_dtypes(st, [a.dtype.name])

    def train(self, scale: float) -> None:
        self.trainer.step(self.x, self.y, scale)

    def layers(self) -> list[LayerStats]:
        return [self.stats[n] for n in LAYERS]

    def advice(self) -> Advice:
        return Advice(lambda n: f"model.keep_in_float32({n!r})", "NumpyScaler", "init_scale")

    def environment(self) -> dict:
        return NumpyBackend().environment(None)


class NumpyBackend(Backend):  # derived from the protocol: its optional operations' defaults
    name = "numpy"
    bench_searches_in_child = False
    audit_sessions = {"plain": NumpySession}  # no what-if, no fp8: refused, saying why

    # ---- EnvironmentOps
    def target(self, device: str) -> Target:
        if device not in ("auto", "cpu"):
            raise UsageError(f"--framework numpy runs on --device cpu only; received {device!r}")
        return Target("cpu", False, "numpy:cpu")

    def environment(self, target) -> dict:
        return {**base_environment("numpy", np.__version__), "device": "numpy:cpu"}

    def mode_support(self, mode: str, target) -> tuple[bool, str]:
        return (True, f"np.{DTYPE[mode].__name__}") if mode in DTYPE else (False, f"NumPy has no {mode} dtype")

    def training_support(self, mode: str, target) -> tuple[bool, bool, str]:
        ok, why = self.mode_support(mode, target)
        return ok, False, why

    def resolve_auto(self, target) -> tuple[str, str]:
        return "fp32", "NumPy's float16 runs without hardware acceleration"

    def default_workload(self, target) -> str:
        return "mlp"

    def check_workload(self, name: str) -> str:
        if name != "mlp":
            raise UsageError(f"unknown workload {name!r} for --framework numpy; built-in: mlp")
        return name

    @staticmethod
    def _only_mlp(config) -> None:
        from ampkit.workload_sizes import size_kwargs

        if config.model:
            raise UsageError(f"--framework numpy runs its built-in mlp only; it does not take --model {config.model}")
        size_kwargs("numpy", config.workload, None, config.seq_len, config.image_size)  # the mlp takes no size

    # ---- DoctorOps
    def doctor_session(self, target, threads=None):
        return contextlib.nullcontext()  # plain numpy: one thread, whatever the count asked for

    def doctor_variants(self, supported, target, say, *, thorough: bool = False) -> dict:
        return {}

    def selftest(self, mode: str, target) -> tuple[str, str]:
        t, (x, y) = Trainer(mode, 0), batch(32)
        losses = [t.step(x, y) for _ in range(3)]
        seen = forward_backward(t.params, x, y, mode)[2]["fc2"].dtype
        ok = seen == DTYPE[mode] and np.isfinite(losses).all() and losses[-1] < losses[0]
        return ("pass" if ok else "fail"), f"3 SGD steps in {seen}: loss {losses[0]:.3f} -> {losses[-1]:.3f}"

    def doctor_work(self, mode: str, target) -> Work:
        a = np.random.default_rng(0).normal(size=(128, 128)).astype(DTYPE[mode])
        t, (x, y) = Trainer(mode, 0), batch(64)
        return Work({"matmul": (lambda: a @ a, 2.0 * 128**3)}, {"mlp": (lambda: t.step(x, y), None)})

    def auto_fingerprint(self, target) -> dict:
        return fingerprint("numpy", np.__version__, "cpu")

    # ---- BenchOps
    def bench_start(self, config):
        return None

    def bench_probe(self, config, target) -> ModelProbe:
        self._only_mlp(config)
        return ModelProbe(config.workload, 6.0 * (64 * 32 + 32 * 10), [64], 32)

    def bench_open(self, request) -> NumpyBenchSession:
        ok, why = self.mode_support(request.mode, request.target)
        if not ok:
            raise ModeUnavailableError(why)
        return NumpyBenchSession(request.mode, request.config.seed)

    # ---- ParityOps
    def prepare_parity(self, data, target):
        if data.sets is not None or data.steps:
            raise UsageError("--framework numpy trains only the built-in mlp datasets, by epochs "
                             "(no --model/--data, no --steps)")
        return data

    def train_seed(self, data, mode: str, seed: int, target, *, epochs: int, on_epoch=None) -> RunRecord:
        if data.model != "mlp":
            raise UsageError(f"--framework numpy trains only the mlp datasets; {data.name!r} needs {data.model!r}")
        a = data.arrays  # the built-in datasets' Arrays
        t0, t = time.perf_counter(), Trainer(mode, seed, features=a.x_train.shape[1])
        rec = RunRecord(mode, seed, [], [], [], 0, 0.0)
        for epoch in range(epochs):
            order = loader_order(len(a.x_train), seed, epoch)
            chunks = [order[i:i + data.batch_size] for i in range(0, len(order), data.batch_size)]
            rec.train_loss.append(float(np.mean([t.step(a.x_train[c], a.y_train[c]) for c in chunks])))
            loss, _, outs, _ = forward_backward(t.params, a.x_test, a.y_test, mode)
            rec.test_accuracy.append(float((outs["fc2"].argmax(1) == a.y_test).mean()))
            rec.test_loss.append(loss)
            if on_epoch:
                on_epoch(epoch + 1, epochs)
        rec.skipped_steps, rec.seconds = t.skipped, time.perf_counter() - t0
        return rec

    # ---- AuditOps
    def audit_session(self, config, target, live=None) -> NumpySession:
        ok, why = self.mode_support(config.mode, target)
        if not ok:
            raise UsageError(f"--mode {config.mode} cannot run in --framework numpy: {why}")
        self._only_mlp(config)
        return NumpySession(config.mode, config.batch_size or 32, "mlp")


class NumpyBenchSession(BenchSession):
    """bench's session: the mlp's SGD steps on one fixed batch."""

    def __init__(self, mode: str, seed: int):
        self.trainer, self.seed, self.facts, self.losses = Trainer(mode, seed), seed, {}, []
        self.skipped = {True: 0, False: 0}

    def begin(self, batch_size: int) -> None:
        self.x, self.y = batch(batch_size, self.seed)

    def steps(self, n: int, timed: bool, on_step=None) -> list[float]:
        times, before = [], self.trainer.skipped
        for _ in range(n):
            t0 = time.perf_counter()
            self.losses.append(self.trainer.step(self.x, self.y))
            times.append(time.perf_counter() - t0)
            if on_step:
                on_step()
        self.skipped[timed] += self.trainer.skipped - before
        return times if timed else []

    def finish(self, profile_steps: int = 0) -> Measured:
        return Measured(None, None, self.skipped[True], self.skipped[False], self.losses[0], self.losses[-1])
