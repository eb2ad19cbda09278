"""The doctor, once for every framework: capability and a self-test per mode, interleaved rounds
against fp32, verdicts and one recommendation (:func:`ampkit.doctor.verdicts.evaluate`), the report,
and the verdict cached for ``auto`` (:func:`ampkit.auto.remember_for_auto`).

The backend supplies only :class:`~ampkit.doctor.ops.DoctorOps` (and ``target``, ``mode_support``,
``environment`` from :class:`~ampkit.backends.base.EnvironmentOps`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..auto import cached_verdict, remember_for_auto
from ..cpu import cpu_emulation_note
from ..rounds import Plan
from ..threads import resolve as resolve_threads
from .config import DoctorConfig
from .report import DoctorReport
from .sizes import CPU_SIZES, GPU_SIZES
from .verdicts import evaluate

#: rounds on an accelerator: its ops take milliseconds, so more reps per round and a longer budget; the
#: screen on the main matmul (a 256² one is launch-bound on a GPU: it would hide an emulated mode)
ACCELERATOR_PLAN = Plan(budget_s=10.0, op_box_s=0.1, max_reps=10, screen_n=None)


def run(config: DoctorConfig | str = "auto", backend="auto", *, progress: Callable[[str], None] | None = None,
        quick: bool | None = None, modes: tuple[str, ...] | None = None, thorough: bool | None = None) -> DoctorReport:
    """The doctor's report for ``config`` (:class:`~ampkit.doctor.config.DoctorConfig`) on ``backend``
    (a Backend, or a framework name: ``auto``, ``torch``, ``tensorflow``, a registered one) -- the
    same ``run(config, backend)`` as bench's and parity's drivers. The older call, ``run(device,
    backend, quick=..., modes=..., thorough=...)``, still works: those keywords make the config.

    ``quick``: self-tests only (no measurement, nothing cached for ``auto``); the recommendation is
    the measured verdict cached for this environment (dated, with its thread count), else None
    ("not measured"). ``config.threads``: the CPU threads of the rounds (:mod:`ampkit.threads`; one
    on a CPU by default), read back into ``environment.cpu.threads``. ``progress(msg)``
    hears each step, named by framework ("torch self-test bf16"). ``modes``: the rows of the
    report (every mode; a mode the device cannot run is reported unsupported, with the reason).
    ``thorough``: also the self-tests that cannot change the recommendation, deferred by default
    (each says so where it would be): a mode this device can only emulate (fp8 through torchao on a
    CPU: loading the emulation takes seconds), and a framework's other builds (``doctor_variants``:
    tf_keras beside Keras 3, where ``tf.keras`` is not tf_keras).
    """
    asked = {k: v for k, v in (("quick", quick), ("modes", modes), ("thorough", thorough)) if v is not None}
    if not isinstance(config, DoctorConfig):  # run(device, backend, ...): the call before the config
        config = DoctorConfig(device=config, **asked)
    elif asked:
        raise TypeError(f"run(config, ...) takes {', '.join(asked)} from the DoctorConfig, not as keywords")
    from ..registry import get_backend

    if isinstance(backend, str):
        backend = get_backend(backend)
    t0 = time.perf_counter()
    target = backend.target(config.device)
    prefix = f"{backend.name} "
    say = (lambda msg: progress(prefix + msg)) if progress else (lambda msg: None)
    with backend.doctor_session(target, resolve_threads(config.threads, target.accelerator)):
        reports, recommended, reason = evaluate(
            config.modes, lambda m: backend.mode_support(m, target), lambda m: backend.selftest(m, target),
            lambda m: backend.doctor_work(m, target), quick=config.quick,
            plan=ACCELERATOR_PLAN if target.accelerator else Plan(),
            sizes=GPU_SIZES if target.accelerator else CPU_SIZES,
            emulation_note=lambda m: "" if target.accelerator else cpu_emulation_note(m), say=say,
            training=lambda m: backend.training_support(m, target), emulated_selftest=config.thorough)
        fp = backend.auto_fingerprint(target)
        if config.quick:  # nothing timed now: the measured verdict cached for this environment, or none
            recommended, reason = cached_verdict(fp, target.label if target.accelerator else "this CPU", reports)
            if recommended is not None:
                reports[recommended].verdict = "recommended"
        report = DoctorReport(backend.name, target.label, reports, recommended, reason, backend.environment(target),
                              config.quick)
        report.variants.update(backend.doctor_variants({m for m, r in reports.items() if r.supported}, target, say,
                                                       thorough=config.thorough))
    report.elapsed_s = round(time.perf_counter() - t0, 3)
    remember_for_auto(report, fp)  # auto follows this measurement from now on
    return report
