"""Arguments shared by several subcommands."""

from __future__ import annotations


def add_device(p) -> None:
    p.add_argument("--device", default="auto", metavar="DEV",
                   help="auto (first CUDA device, else CPU), cpu, cuda or cuda:N (default: auto)")


def add_json(p) -> None:
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write the JSON document to PATH; '-' writes it alone to stdout (human output to stderr)")


def add_framework(p, *, allow_all: bool = False) -> None:
    choices = "auto|torch|tensorflow" + ("|all" if allow_all else "")
    p.add_argument("--framework", default="auto", metavar=choices.upper(),
                   help=f"{choices} (default: auto = torch when it can be imported, else tensorflow)")


def progress_printer(con):
    """A progress callback that writes dim status lines to the human console."""
    def say(msg: str) -> None:
        con.print(f"[dim]… {msg}[/]")
    return say


def add_timeout(p, what: str) -> None:
    p.add_argument("--timeout", type=float, default=1800.0, metavar="SECONDS",
                   help=f"stop {what} after SECONDS and report it (default 1800)")
