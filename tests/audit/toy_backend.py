"""A backend for the audit's driver in plain Python (no framework): a model is a line of scaling
layers, ``[(name, factor), ...]``, run on the input 1.0. In fp16 a value beyond 65504 is inf; a
gradient (the product of the later factors, times the loss scale) likewise. Every call the driver
makes is logged, so the tests can check the flow itself: back-off, retries, training steps, close.

Registered with ``ampkit.registry.register_backend("toy", "toy_backend:ToyBackend")`` it runs from
the CLI too (the audit's child process loads it by that spec).
"""

from __future__ import annotations

from ampkit.audit.core import Advice, LayerStats
from ampkit.audit.ops import AuditOps, AuditSession, StepOutcome
from ampkit.errors import UsageError
from ampkit.isolation import _on_stop_request
from ampkit.target import Target

FP16_MAX = 65504.0
WORKLOADS = {"line": [("enc", 2.0), ("mid", 3.0), ("head", 0.5)],
             "hot": [("enc", 2.0), ("boom", 1e5), ("head", 0.5)],
             "steep": [("enc", 2.0), ("mid", 1.0), ("head", 100.0)]}  # gradients 100 x scale: overflow above 655


def broken_line():
    """A --model factory whose model fails under the audit."""
    return [("enc", 2.0), ("fails", None)]


class ToySession(AuditSession):
    initial_scale = 2.0**16

    def __init__(self, layers, mode: str, name: str | None, stop_at_train: int | None = None):
        self.spec, self.mode, self.workload, self.device, self.notes = layers, mode, name, "toy:0", ("a toy note",)
        self.max = FP16_MAX if mode == "fp16" else 3.4e38
        self.stats = {n: LayerStats(n, "Scale") for n, _ in layers}
        self.log: list[tuple] = []
        self.stop_at_train = stop_at_train
        self.closed = False

    def measure(self, step: int, scale: float) -> StepOutcome:
        self.log.append(("measure", step, scale))
        v, outs = 1.0, []
        for n, f in self.spec:
            if f is None:
                raise RuntimeError(f"layer {n} cannot run\nsecond line")
            v *= f
            outs.append((n, v))
        g, grads = 1.0, []
        for n, f in reversed(self.spec):  # backward order
            grads.append((n, g))
            g *= f
        self.outs, self.grads, self.scale = outs, grads, scale
        fwd = next((n for n, v in outs if abs(v) > self.max), None)
        bwd = next((n for n, g in grads if abs(g * scale) > self.max), None)
        first = {"name": fwd, "phase": "forward"} if fwd else ({"name": bwd, "phase": "backward"} if bwd else None)
        return StepOutcome(fwd is not None, bwd is not None, False, first)

    def rewind(self) -> None:
        self.log.append(("rewind",))

    def record(self) -> None:
        self.log.append(("record",))
        for n, v in self.outs:
            st = self.stats[n]
            st.calls += 1
            st.fwd_amax = max(st.fwd_amax, abs(v))
            st.fwd_nonfinite += int(abs(v) > self.max)
            st.count_forward(1, 0, 0)
        for n, g in self.grads:
            st = self.stats[n]
            st.grad_amax = max(st.grad_amax, abs(g))
            st.grad_nonfinite += int(abs(g * self.scale) > self.max)
            st.count_grad(1, 0, 0)

    def train(self, scale: float) -> None:
        self.log.append(("train", scale))
        if self.stop_at_train == sum(1 for e in self.log if e[0] == "train"):
            _on_stop_request(None, None)  # what the parent's stop signal does, during this step

    def layers(self) -> list[LayerStats]:
        return [self.stats[n] for n, _ in self.spec]

    def advice(self) -> Advice:
        return Advice(lambda n: f"keep_in_float32({n!r})", "ToyScaler", "init_scale")

    def environment(self) -> dict:
        return {"framework": "toy", "framework_version": "0.1"}

    def close(self) -> None:
        self.closed = True


class ToyBackend(AuditOps):  # derived from the protocol: its optional operations' defaults
    name = "toy"
    audit_sessions = {"plain": ToySession}  # no what-if: refused, saying why
    auto = ("fp32", "the toy has no fast low precision")
    sessions: list[ToySession] = []  # what each audit opened (in this process)
    stop_at_train: int | None = None  # the training step during which a stop request lands

    def target(self, device: str) -> Target:
        if device not in ("auto", "cpu"):
            raise UsageError(f"the toy runs on the cpu only; received --device {device!r}")
        return Target("cpu", False, "toy:0")

    def resolve_auto(self, target: Target) -> tuple[str, str]:
        return self.auto

    def default_workload(self, target: Target) -> str:
        return "line"

    def check_workload(self, name: str) -> str:
        if name not in WORKLOADS:
            raise UsageError(f"unknown workload {name!r} for the toy; built-in: {', '.join(WORKLOADS)}")
        return name

    def audit_session(self, config, target, live=None) -> ToySession:
        from ampkit.factory import call_factory

        if live is not None:
            layers, name = live.model, live.name
        elif config.model:
            layers, name = call_factory(config.model), config.model
        else:
            layers, name = WORKLOADS[config.workload], config.workload
        session = ToySession(layers, config.mode, name, stop_at_train=self.stop_at_train)
        self.sessions.append(session)
        return session
