"""ampkit report FILE... [--html PATH] [--markdown PATH] [--plots DIR]"""

from __future__ import annotations

import argparse

EPILOG = """\
FILE is any mix of JSON documents written by 'ampkit doctor|bench|parity|audit --json PATH',
from one machine or several (doctor --framework all documents too). Documents are grouped by
environment; with several environments the page puts them side by side and marks what differs.

Without --html or --markdown, a short verdict table goes to stdout and a hint to stderr.
--html PATH writes one self-contained page (inline styles and SVG charts, no network needed).
--markdown PATH writes Markdown tables for an issue or a pull request; '-' prints them to stdout.
--plots DIR also writes each chart as a PNG into DIR and links them from the Markdown.

Exit codes: 0 the report was written (whatever verdicts it shows); 2 a file is missing, not
JSON, truncated, not an ampkit document, or an output path cannot be written.

examples:
  ampkit report doctor.json bench.json parity.json audit.json --html report.html
  ampkit report a/*.json b/*.json --markdown report.md --plots plots/
"""


def add_arguments(p) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("files", nargs="*", metavar="FILE", help="JSON documents written by doctor, bench, parity, audit")
    p.add_argument("--html", default=None, metavar="PATH", help="write the self-contained HTML page to PATH (.html)")
    p.add_argument("--markdown", default=None, metavar="PATH",
                   help="write Markdown to PATH (.md), or '-' for stdout")
    p.add_argument("--plots", default=None, metavar="DIR",
                   help="also write the charts as PNG files into DIR (created if missing); the Markdown links them")


def run(args) -> int:
    import os
    import sys

    from ..outputs import check_distinct, check_output, check_output_dir, salvage, write_stdout, write_text
    from ..report import build, load_all
    from ..report import render as render_report

    # every output path first (exit 2 before any document is read); --markdown alone may be stdout
    check_output(args.html, "HTML", "--html", stdout_ok=False, inputs=args.files)
    check_output(args.markdown, "Markdown", "--markdown", inputs=args.files)
    check_output_dir(args.plots, "--plots", "PNG charts")
    check_distinct((args.html, "--html"), (args.markdown, "--markdown"))
    report = build(load_all(args.files))

    # each output on its own: one the OS refuses (full disk, folder gone) is one line and a
    # fallback file (outputs.salvage), never the loss of the others
    lost = []
    pngs = {}
    if args.plots:
        try:
            os.makedirs(args.plots, exist_ok=True)
            pngs = render_report.attach_charts(report, svg=False, png_dir=args.plots)
        except OSError as exc:
            lost.append(f"--plots {args.plots!r}")
            print(f"ampkit: error: could not write the PNG charts into --plots {args.plots!r} "
                  f"({exc.strerror or type(exc).__name__}); the page and the Markdown are written without them",
                  file=sys.stderr)
    if args.html:
        page = render_report.html(report)
        if salvage(lambda p: write_text(p, page), args.html, "--html", "ampkit-report.html") is None:
            print(f"wrote {args.html} ({report.counts})", file=sys.stderr)
        else:
            lost.append(args.html)
    if args.markdown:
        text = render_report.markdown(report, pngs, args.markdown)

        def write_md(path: str) -> None:
            if path == "-":
                write_stdout(text)
            else:
                write_text(path, text)

        if salvage(write_md, args.markdown, "--markdown", "ampkit-report.md") is not None:
            lost.append(args.markdown)
        elif args.markdown != "-":
            print(f"wrote {args.markdown}", file=sys.stderr)
    if pngs:
        print(f"wrote {len(pngs)} PNG charts into {args.plots}", file=sys.stderr)
    if lost:
        return 1
    if not args.html and not args.markdown:
        _summary(report)
        print("ampkit report: for the full page with tables and charts add --html report.html "
              "(or --markdown report.md for an issue)", file=sys.stderr)
    return 0


def _summary(report) -> None:
    """The verdicts side by side, as a terminal table on stdout."""
    from rich.table import Table

    from ..render.output import console

    con = console(json_to_stdout=False)
    styles = {"good": "green", "bad": "bold red", "neutral": "yellow", "muted": "dim", "info": "bold", "none": "dim"}
    table = Table(title=f"ampkit report — {report.counts}", title_justify="left")
    table.add_column("")
    for env in report.environments:
        table.add_column(f"{env.letter}: {env.title}", overflow="fold")
    for row in report.env_rows():
        if row["differs"] or (len(report.environments) == 1 and row["label"] in ("framework", "GPU", "CPU ISA")):
            table.add_row(f"[yellow]{row['label']} ≠[/]" if row["differs"] else row["label"], *row["values"])
    table.add_section()
    for row in report.verdict_rows():
        label = f"{row['label']} ≠" if row["differs"] else row["label"]
        table.add_row(label, *[f"[{styles.get(v['tone'], 'default')}]{_esc(v['text'])}[/]" for v in row["values"]])
    con.print(table)
    for doc in report.interrupted:
        con.print(f"[yellow]interrupted:[/] {_esc(doc.label)} holds only what finished")


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)
