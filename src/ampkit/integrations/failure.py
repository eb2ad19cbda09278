"""The first failure of a trainer callback's run, as :class:`~ampkit.integrations.record.TrainRecord`
tells it: which module and phase went non-finite first (and, once a backend's op-level trace of a
later forward says so, the op inside the module's own code, whether float32 fails there too and
the upstream cause), the finding's advice, and where its document goes."""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass

log = logging.getLogger("ampkit.integrations")


@dataclass
class StepRow:
    """One optimizer step as the host sees it. ``fwd``: each watched module's forward amax (None:
    it did not run); ``grad``: each parameter-holding module's gradient norm; ``scale_used``/``scale``:
    the loss scale the step ran with and after the scaler's update (None without a scaler);
    ``sched``: each scheduler's step counter before this step."""

    step: int
    loss: float | None
    fwd: list
    grad: list
    scale_used: float | None = None
    scale: float | None = None
    skipped: bool = False
    sched: tuple = ()


def rank_path(path: str, rank) -> str:
    """``run.json`` -> ``run.rank1.json``: one rank's own document in a multi-process run."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext or '.json'}"


def _bad(v) -> bool:
    return v is not None and not math.isfinite(v)


def _num(v):
    """A value for the ring buffer's JSON: finite floats as they are, inf/NaN as strings."""
    if v is None or math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def _fmt(x) -> str:
    return "—" if x is None else f"{x:.6g}"


class FailureStory:
    """The failure half of :class:`~ampkit.integrations.record.TrainRecord` (a mixin: it reads the
    record's modules, ring, findings and mode)."""

    def _origin(self, row: StepRow) -> dict:
        # "op"/"in_reference" (issue #34): unknown from module outputs; a backend's op-level trace of a
        # later forward fills them (locate_origin)
        for (name, _t), v in zip(self.fwd_modules, row.fwd):
            if _bad(v):
                return {"name": name, "phase": "forward", "step": row.step, "op": None, "in_reference": False}
        if _bad(row.loss):
            return {"name": "(loss)", "phase": "loss", "step": row.step, "op": None, "in_reference": False}
        bad = [name for name, v in zip(self.grad_modules, row.grad) if _bad(v)]
        # backward runs in reverse: the module latest in the forward order is where it began
        return {"name": bad[-1] if bad else "", "phase": "backward", "step": row.step, "op": None,
                "in_reference": False}

    def _advice(self, row: StepRow) -> str:
        first = self.first
        name, phase = first["name"], first["phase"]
        seen = first.get("received_by", name)   # the ring holds module outputs: the recipient's
        history = ", ".join(_fmt(r.fwd[i]) if phase == "forward" else _fmt(r.grad[j]) if phase == "backward"
                            else _fmt(r.loss) for r in self.failure_rows
                            for i in [self._index(self.fwd_modules, seen)] for j in [self._grad_index(seen)])
        what = {"forward": "output amax", "backward": "gradient norm", "loss": "loss"}[phase]
        made = (f", made by {first['op']} in its own code" + (f" and passed on to {seen}" if seen != name else "")
                if first.get("op") else "")
        fix = ("float32 computes it non-finite too (the op on the same inputs): this is not a precision problem"
               + (f"; it began upstream in {first['cause']['name']}: {first['cause']['why']}" if first.get("cause")
                  else " — look for log/sqrt/division at 0 or an exploding input") + "."
               if first.get("in_reference") else
               # a float32 run has no precision to change: no "keep it in float32" there (issue #50)
               "the run is in float32 already, so this is not a precision problem — look for log/exp/sqrt/division "
               "out of range or an exploding input there." if self.mode == "fp32" else
               ("Find the layer that produced it" if phase == "loss" or not self.fwd_modules else
                f"Keep {'this module' if not first.get('op') else name} in float32, or find the cause")
               + f" with `ampkit audit --mode {self.mode if self.mode != 'fp32' else 'bf16'}`.")
        where = "in the loss" if phase == "loss" else f"in the {phase} of {name or '(model)'}"
        return (f"first inf/NaN at step {row.step} {where}{made} ({self.mode}"
                f"{', loss scale ' + _fmt(row.scale_used) if row.scale_used is not None else ''}); "
                f"{'the output amax of ' + seen if seen != name else 'its ' + what} over "
                f"the last {len(self.failure_rows)} step(s): {history}. {fix}")

    def locate_origin(self, origin: dict | None) -> None:
        """An op-level trace (the backend's: a replay of the failing step, or a later training forward,
        as ``origin["traced"]`` says) names the module whose own code made the inf/NaN that the first
        failing module held, the op and whether float32 fails there too: the first failure, its finding
        and its document say so (one more line is logged). Once: a first failure with an op is kept."""
        first = self.first
        if origin is None or first is None or first.get("phase") != "forward" or first.get("op"):
            return
        recipient = origin.get("recipient")
        if recipient not in (None, first["name"]) and any(n == recipient for n, _t in self.fwd_modules):
            return   # that forward failed elsewhere (weights a non-finite step updated): it explains nothing here
        received = first["name"]
        first.update(name=origin["name"], op=origin.get("op"), in_reference=bool(origin.get("in_reference")))
        if origin.get("traced"):
            first["traced"] = origin["traced"]
        if received != origin["name"]:
            first["received_by"] = received
        finding = next((f for f in self.findings if f["kind"] == "nonfinite"), None)
        if origin.get("cause"):
            first["cause"] = dict(origin["cause"])
        if finding is not None and self.failure_rows:
            finding.update(layer=origin["name"], advice=self._advice(self.failure_rows[-1]))
            if origin.get("cause"):
                finding["cause"] = dict(origin["cause"])
            log.warning("%s: origin traced in the %s: %s made the inf/NaN with %s in its own code%s%s", self.source,
                        "failing step's replay" if origin.get("traced") == "failing step" else "next forward",
                        origin["name"], origin.get("op"),
                        f" ({received} received it)" if received != origin["name"] else "",
                        "; float32 fails there too" if first["in_reference"] else "")
        if self.failure_path:
            self.write(self.failure_path)

    def _failure(self, row: StepRow) -> None:
        self.first = self._origin(row)
        if self.world > 1:
            self.first["rank"] = self.rank
        self.failure_rows = list(self.ring)
        name = self.first["name"]
        advice = self._advice(row)
        self.findings.insert(0, {"layer": name, "kind": "nonfinite", "severity": "error", "advice": advice,
                                 "code": None})
        line = f"{self.source}: {advice}"
        self.warnings.append(line)
        # several processes: which rank produced it is settled when rank 0 gathers the ranks' records
        say = log.info if self.world > 1 else log.warning
        say(f"rank {self.rank}: {line}" if self.world > 1 else line)
        if self.json_path is None and self.fallback_dir is None:
            say("%s: the last %d steps before it are kept in memory (record.document()); pass "
                "json_path= to write them for `ampkit report`", self.source, len(self.failure_rows))
            return
        self.failure_path = self.write(self.failure_target())
        if self.failure_path:
            say("%s: the last %d steps before it are in %s (`ampkit report %s`)", self.source,
                len(self.failure_rows), self.failure_path, self.failure_path)

    def failure_target(self) -> str:
        """Where the first failure's document goes: ``json_path`` (or the trainer's folder); in a
        multi-process run one file per rank (``<stem>.rank<N>.json``): rank 0 writes ``json_path``
        for the run at the end, after gathering every rank's record."""
        path = self.json_path or os.path.join(self.fallback_dir, "ampkit_first_failure.json")
        return rank_path(path, self.rank) if self.world > 1 else path

    @staticmethod
    def _index(mods, name):
        return next((i for i, (n, _t) in enumerate(mods) if n == name), 0)

    def _grad_index(self, name):
        return self.grad_modules.index(name) if name in self.grad_modules else 0
