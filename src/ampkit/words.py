"""Words and small numbers that the computations and the presenters (:mod:`ampkit.render`) share:
a finding's rank, bench's speedup words and categories, a row's name, a signed difference. It sits
low in the house so that what a command decides and how it is shown read the same definitions."""

from __future__ import annotations

from .stats import FASTER, SAME, SLOWER, SMALL

#: audit findings, most severe first (a finding's rank orders the table and the verdict)
SEVERITY = {"nonfinite": 0, "overflow": 1, "underflow": 2, "contract": 3, "precision": 4, "compile": 4}
#: the words of each rank: a precision note never reads like an overflow
SEVERITY_LABEL = {0: "error", 1: "error", 2: "warning", 3: "warning", 4: "note"}

#: the doctor's threshold (ampkit.doctor.verdicts.ACCEL_THRESHOLD, ampkit.auto): faster/slower only beyond it
THRESHOLD = 1.10
#: a training step's median ratio must show at least this gain for the doctor (and auto's quick check) to recommend a mode
TRAINING_GAIN = 1.05
#: the reason of a --quick doctor with no measurement to report (no mode recommended), and of auto with nothing cached
NOT_MEASURED = ("not measured: --quick times nothing and no measured verdict is cached for this environment; "
                "`ampkit doctor` measures (a few seconds) and auto follows it")


def describe(verdict: str | None) -> str:
    """A bench row's speedup verdict in words, with the threshold it was read against."""
    return {FASTER: f"faster (interval clears {THRESHOLD:.2f}x)",
            SLOWER: f"slower (interval below 1/{THRESHOLD:.2f})",
            SAME: "no measurable difference",
            SMALL: f"small difference (within {THRESHOLD:.2f}x)"}.get(verdict or "", "—")


#: bench --explain: the categories a step's time is split into (in this order), and a GPU's idle time
CATEGORIES = ("matmul_conv", "elementwise_norm", "casts", "optimizer", "loss_scaling", "other")
HOST_IDLE = "host_idle"


def row_label(row) -> str:
    """A row's name in tables and sentences: its mode, marked when compiled (``--compile on|both``)."""
    return row.mode + (" (compiled)" if getattr(row, "compiled", False) else "")


def signed(x: float) -> str:
    """``+0.0123`` -- or, for a value too small for 4 decimals, ``-1.7e-05``: a loss metric's tiny
    differences stay readable."""
    return f"{x:+.3g}" if x != 0 and abs(x) < 5e-4 else f"{x:+.4f}"
