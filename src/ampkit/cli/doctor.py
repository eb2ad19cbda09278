"""ampkit doctor [--framework auto|torch|tensorflow|all] [--device DEV] [--quick] [--thorough] [--threads N] [--json PATH|-]"""

from __future__ import annotations

from .common import add_device, add_framework, add_json, add_threads, progress_printer


def add_arguments(p) -> None:
    add_framework(p, allow_all=True)
    add_device(p)
    p.add_argument("--quick", action="store_true", help="skip the micro-benchmarks (speedup/accelerated are null)")
    p.add_argument("--thorough", action="store_true",
                   help="also the self-tests that cannot change the recommendation: a mode this device can only "
                        "emulate (fp8 via torchao), tf_keras beside Keras 3")
    add_threads(p)
    add_json(p)


def run(args) -> int:
    from ..doctor import run_doctor
    from ..doctor.report import DoctorSet
    from ..environment import base_environment
    from ..registry import FRAMEWORKS, get_backend, parse_framework, resolve_framework
    from ..render.output import console
    from ..threads import check as check_threads
    from . import validate as v
    from .finish import finish

    framework = parse_framework(args.framework, allow_all=True)
    threads = check_threads(args.threads)
    v.outputs(args, ("json", "JSON", "--json", True))
    con = console(json_to_stdout=args.json == "-")
    frameworks = list(FRAMEWORKS) if framework == "all" else [resolve_framework(framework)]
    for fw in frameworks:  # a framework that cannot run (not installed, Keras on torch/JAX) refuses before any measures
        get_backend(fw)
    reports, cause = {}, None
    try:
        for fw in frameworks:
            reports[fw] = run_doctor(fw, args.device, quick=args.quick, progress=progress_printer(con),
                                     thorough=args.thorough, threads=threads)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the frameworks that finished, in one marked document
        cause = exc
    if cause is None and framework != "all":
        document = reports[frameworks[0]]
    else:  # --framework all, or an interrupted doctor: one document, a report per framework
        first = next(iter(reports.values()), None)
        document = DoctorSet(reports, first.environment if first else base_environment(frameworks[0], ""),
                             interrupted=cause is not None)
    return finish(document, args, con, _render, kept=f"the {len(reports)} finished framework(s)", cause=cause)


def _render(document, con) -> None:
    """Each framework's report; after a finished one, whether ``auto`` follows its measurement now."""
    from ..auto import doctor_entry
    from ..auto_cache import cache_path
    from ..doctor.report import DoctorSet
    from ..render import doctor as render_doctor

    interrupted = isinstance(document, DoctorSet) and document.interrupted
    for report in document.reports.values() if isinstance(document, DoctorSet) else [document]:
        render_doctor.render(report, con)
        if interrupted:
            continue
        if report.quick and not (report.recommended and report.reason.startswith("cached measurement")):
            continue
        if report.quick:  # the cached measurement it reported: auto follows the same one
            con.print(f"auto follows the same cached measurement for {report.framework} on {report.device}: "
                      f"{report.recommended}", markup=False, highlight=False)
        elif report.auto_cache:  # `auto` (engine, bench, parity, audit) follows this measurement from now on
            con.print(f"auto will follow this measurement for {report.framework} on {report.device}: "
                      f"{report.recommended} (cached in {report.auto_cache})")
        elif doctor_entry(report) is not None:  # measured, but the cache could not be written
            con.print(f"auto could not cache this measurement ({cache_path()} cannot be written; "
                      "AMPKIT_CACHE_DIR chooses the folder): auto measures quickly itself instead",
                      markup=False, highlight=False)
