"""ampkit.progress without a kernel: one display, updated in place and throttled; off with
progress=False; a caller's own callable untouched; nothing outside a notebook."""

from __future__ import annotations

import pytest

from ampkit import progress as prog


class FakeHandle:
    def __init__(self, shown):
        self.shown = shown

    def update(self, obj):
        self.shown.append(("update", obj))


@pytest.fixture
def shown(monkeypatch):
    """What IPython's display would publish: ("display", obj) once, then ("update", obj)."""
    import IPython.display

    out = []

    def display(obj, display_id=None):
        assert display_id is True
        out.append(("display", obj))
        return FakeHandle(out)

    monkeypatch.setattr(IPython.display, "display", display)
    return out


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_thirty_steps_are_one_display_updated_in_place_and_throttled(shown):
    clock = Clock()
    live = prog.NotebookProgress("bench mlp", clock=clock)
    live.bench({"mode": "fp32", "kind": "start", "repeat": 1, "repeats": 1, "steps": 30})
    for done in range(1, 31):
        clock.t += 0.05                       # 20 steps a second: faster than the display refreshes
        live.bench({"mode": "fp32", "kind": "train", "done": done, "total": 30})

    class Row:
        mode, status = "fp32", "ok"

    live.row(Row())
    live.close()
    assert [kind for kind, _ in shown].count("display") == 1
    assert 4 <= len(shown) <= 12              # start, every 0.25 s of 1.5 s, the row, the end: never 30
    last = shown[-1][1]
    assert repr(last).startswith("ampkit bench mlp — done (1.5 s): fp32 ok 30/30")
    assert '<progress value="30" max="30"' in last._repr_html_() and "<script" not in last._repr_html_()


def test_a_second_set_of_bench_processes_says_which_set_it_is(shown):
    live = prog.NotebookProgress("bench mlp", clock=Clock())
    live.bench({"mode": "bf16", "kind": "start", "steps": 4, "interleaved": True, "set": 2, "sets": 2})
    assert repr(shown[-1][1]).endswith("bf16 starting (process set 2/2) 0/4")


def test_parity_runs_show_one_line_per_mode_and_seed(shown):
    live = prog.NotebookProgress("parity digits", clock=Clock())
    for mode in ("fp32", "bf16"):
        for seed in (0, 1):
            for done in range(0, 4):
                live.parity(mode, seed, done, 3)
    live.close(interrupted=True)
    text = repr(shown[-1][1])
    assert "interrupted" in text and "fp32 seed 0 done 3/3" in text and "bf16 seed 1 done 3/3" in text


def test_outside_a_kernel_and_with_progress_false_nothing_is_shown(monkeypatch):
    assert not prog.in_notebook()            # pytest is no Jupyter kernel
    assert prog.notebook_progress(None, "bench") is None
    monkeypatch.setattr(prog, "in_notebook", lambda: True)
    assert isinstance(prog.notebook_progress(None, "bench"), prog.NotebookProgress)
    assert isinstance(prog.notebook_progress(True, "bench"), prog.NotebookProgress)
    assert prog.notebook_progress(False, "bench") is None
    mine = []
    assert prog.notebook_progress(mine.append, "bench") is None
    assert prog.callback(mine.append, None, "bench") == mine.append   # the caller's own callable, untouched
    assert prog.callback(False, None, "bench") is None and prog.callback(True, None, "bench") is None


def test_shown_closes_the_display_as_interrupted_when_the_call_raises(monkeypatch, shown):
    monkeypatch.setattr(prog, "in_notebook", lambda: True)

    def boom(cb, live):
        cb({"mode": "fp32", "kind": "start", "steps": 3})
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prog.shown(None, "bench mlp", "bench", boom)
    assert "interrupted" in repr(shown[-1][1])


def test_the_doctors_display_ends_in_its_final_state(shown):
    """Issue #49: the saved notebook's doctor display still read "torch self-test bf16" after the doctor
    had finished; its end says finished (or where it stopped), the step's words gone."""
    live = prog.NotebookProgress("doctor torch", clock=Clock())
    for msg in ("torch self-test fp32", "torch self-test bf16"):
        live.doctor(msg)
    live.close()
    assert repr(shown[-1][1]) == "ampkit doctor torch — done (0.0 s): doctor finished"
    assert "self-test" not in shown[-1][1]._repr_html_()
    stopped = prog.NotebookProgress("doctor torch", clock=Clock())
    stopped.doctor("torch timing bf16")
    stopped.close(interrupted=True)
    assert repr(shown[-1][1]).endswith("doctor stopped during torch timing bf16")


def test_a_call_from_a_notebook_quiets_tensorflows_native_log_unless_the_user_set_it(monkeypatch, shown):
    """Issue #49: TensorFlow's C++ lines (oneDNN, cuInit) were pink stderr blocks in the Keras cells, once per
    child; the call (and the children it starts, which inherit the environment) runs with its log level set."""
    import os

    seen = []
    monkeypatch.setattr(prog, "in_notebook", lambda: True)
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    prog.shown(False, "bench mlp", "bench", lambda cb, live: seen.append(os.environ.get("TF_CPP_MIN_LOG_LEVEL")))
    assert seen == ["3"] and "TF_CPP_MIN_LOG_LEVEL" not in os.environ  # restored afterwards
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")  # the user's own choice is kept
    prog.shown(False, "bench mlp", "bench", lambda cb, live: seen.append(os.environ.get("TF_CPP_MIN_LOG_LEVEL")))
    assert seen[-1] == "1" and os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"
    monkeypatch.setattr(prog, "in_notebook", lambda: False)  # a script: nothing changes
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
    prog.shown(None, "bench mlp", "bench", lambda cb, live: seen.append(os.environ.get("TF_CPP_MIN_LOG_LEVEL")))
    assert seen[-1] is None
