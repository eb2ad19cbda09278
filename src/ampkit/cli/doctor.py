"""ampkit doctor [--framework auto|torch|tensorflow|all] [--device DEV] [--quick] [--json PATH|-]"""

from __future__ import annotations

from .common import add_device, add_framework, add_json, progress_printer


def add_arguments(p) -> None:
    add_framework(p, allow_all=True)
    add_device(p)
    p.add_argument("--quick", action="store_true", help="skip the micro-benchmarks (speedup/accelerated are null)")
    add_json(p)


def run(args) -> int:
    import sys

    from .. import signals
    from ..auto_cache import cache_path
    from ..backends import FRAMEWORKS, parse_framework, resolve_framework
    from ..doctor import run_doctor
    from ..doctor.auto import doctor_entry
    from ..render import doctor as render_doctor
    from ..render.output import console, write_json
    from . import validate as v

    framework = parse_framework(args.framework, allow_all=True)
    v.outputs(args, ("json", "JSON", "--json", True))
    con = console(json_to_stdout=args.json == "-")
    frameworks = list(FRAMEWORKS) if framework == "all" else [resolve_framework(framework)]
    reports = {}
    try:
        for fw in frameworks:
            reports[fw] = run_doctor(fw, args.device, quick=args.quick, progress=progress_printer(con))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: write the frameworks that finished, marked
        signals.ignore_further()
        for report in reports.values():
            render_doctor.render(report, con)
        if args.json:
            from .._version import __version__
            from ..environment import base_environment

            first = next(iter(reports.values()), None)
            write_json({"ampkit_version": __version__, "command": "doctor", "interrupted": True,
                        "environment": first.environment if first else base_environment(frameworks[0], ""),
                        "frameworks": {k: r.to_dict() for k, r in reports.items()}}, args.json)
        print(f"ampkit: {signals.describe()}: the doctor kept {len(reports)} finished framework(s)", file=sys.stderr)
        return signals.exit_code()
    for report in reports.values():
        render_doctor.render(report, con)
        if report.auto_cache:  # `auto` (engine, bench, parity, audit) follows this measurement from now on
            con.print(f"auto will follow this measurement for {report.framework} on {report.device}: "
                      f"{report.recommended} (cached in {report.auto_cache})")
        elif doctor_entry(report) is not None:  # measured, but the cache could not be written
            con.print(f"auto could not cache this measurement ({cache_path()} cannot be written; "
                      "AMPKIT_CACHE_DIR chooses the folder): auto measures quickly itself instead",
                      markup=False, highlight=False)
    if args.json:
        if framework == "all":
            from .._version import __version__

            doc = {"ampkit_version": __version__, "command": "doctor",
                   "environment": reports["torch"].environment,
                   "frameworks": {k: v.to_dict() for k, v in reports.items()}}
        else:
            doc = reports[frameworks[0]].to_dict()
        write_json(doc, args.json)
    return 1 if any(r.failed for r in reports.values()) else 0
