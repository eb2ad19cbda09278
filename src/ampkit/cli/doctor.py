"""ampkit doctor [--framework auto|torch|tensorflow|all] [--device DEV] [--quick] [--json PATH|-]"""

from __future__ import annotations

from .common import add_device, add_framework, add_json, progress_printer


def add_arguments(p) -> None:
    add_framework(p, allow_all=True)
    add_device(p)
    p.add_argument("--quick", action="store_true", help="skip the micro-benchmarks (speedup/accelerated are null)")
    add_json(p)


def run(args) -> int:
    from ..backends import FRAMEWORKS, parse_framework, resolve_framework
    from ..doctor import run_doctor
    from ..render import doctor as render_doctor
    from ..render.output import check_writable, console, write_json

    framework = parse_framework(args.framework, allow_all=True)
    check_writable(args.json, "JSON")
    con = console(json_to_stdout=args.json == "-")
    frameworks = list(FRAMEWORKS) if framework == "all" else [resolve_framework(framework)]
    reports = {}
    for fw in frameworks:
        reports[fw] = run_doctor(fw, args.device, quick=args.quick, progress=progress_printer(con))
    for report in reports.values():
        render_doctor.render(report, con)
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
