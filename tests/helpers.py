"""Assertions shared by the tests (tests/ is on sys.path under pytest's default import mode)."""

from __future__ import annotations


def assert_usage_error(result, needle: str) -> None:
    """A CompletedProcess that failed as bad input must: exit 2, print exactly one line
    ``ampkit: error: ...`` naming ``needle`` on stderr, and no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ampkit: error: ") and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr
