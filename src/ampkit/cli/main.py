"""``ampkit``: parse arguments, call the library, render. Bad input -> one line and exit 2."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from .._version import __version__
from ..errors import UsageError
from .help import arrange

#: subcommand -> module under ampkit.cli with add_arguments(parser) and run(args) -> int
COMMANDS = {
    "doctor": "does this environment support mixed precision, and does it pay off here?",
    "bench": "training steps side by side in every mode: throughput, memory, max batch, speedup",
    "parity": "does mixed precision converge like fp32 on real data? (statistics over seeds)",
    "audit": "per-layer numerics: overflow headroom, gradient underflow, the first inf/NaN",
    "plan": "a precision plan proven on your model: the fastest mode, with modules kept in fp32 where needed",
    "report": "doctor/bench/parity/audit JSON documents -> one HTML page or Markdown, machines side by side",
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as exactly one line and exit code 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ampkit", description="Mixed-precision training you can check, measure and trust.")
    parser.add_argument("--version", action="version", version=f"ampkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_text in COMMANDS.items():
        if importlib.util.find_spec(f"ampkit.cli.{name}") is None:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        _module(name).add_arguments(p)
        arrange(name, p)
    return parser


def _module(name: str):
    return importlib.import_module(f"ampkit.cli.{name}")


def error_exit(message: str) -> int:
    print(f"ampkit: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    from .. import lean_imports, outputs, signals

    if argv is None:  # the program itself (not a test calling main): SIGTERM keeps work like Ctrl-C,
        signals.install()  # and stdout may be reserved for the JSON document
        outputs.own_stdout()
        lean_imports.skip_unused_imports()  # TensorFlow without its imports for what training never uses
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not args.command:
            raise UsageError(f"no command given; choose one of: {', '.join(COMMANDS)} (see 'ampkit --help')")
        return int(_module(args.command).run(args) or 0)
    except UsageError as exc:
        return error_exit(str(exc))
    except KeyboardInterrupt as exc:
        print(f"ampkit: {signals.describe()}", file=sys.stderr)
        return signals.exit_code(exc)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
