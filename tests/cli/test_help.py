"""Every command's --help groups its flags and shows examples to copy."""

from __future__ import annotations

import re

import pytest

from ampkit.cli import help as cli_help
from ampkit.cli.main import COMMANDS, build_parser, main


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_groups_flags_and_shows_examples(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "examples:\n  ampkit " + command in out
    titles = re.findall(r"^([a-z][a-z ,]+):$", out, flags=re.M)
    assert len([t for t in titles if t not in ("examples", "other options", "positional arguments")]) >= 1, titles
    # every flag sits in a named group: a new flag belongs in ampkit.cli.help.GROUPS
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    leftover = [s for a in sub._optionals._group_actions for s in a.option_strings if s not in ("-h", "--help")]
    assert not leftover, f"ampkit {command}: add {leftover} to a group in ampkit.cli.help.GROUPS"


def test_a_flag_no_group_names_is_kept_under_other_options():
    import argparse

    p = argparse.ArgumentParser(prog="x")
    p.add_argument("--json")
    p.add_argument("--brand-new")
    cli_help.arrange("doctor", p)
    text = p.format_help().split("\n\n", 1)[1]  # past the usage line
    assert text.index("output:") < text.index("--json") < text.index("other options:") < text.index("--brand-new")
    assert "examples:" in text
