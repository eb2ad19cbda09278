"""Parity: train the same model in fp32 and in mixed precision over seeds; judge statistically.

Per seed, every mode starts from the same initial weights and sees the same data order, so the
accuracies are paired by seed. The verdict is a one-sided non-inferiority test (MLPerf judges
convergence statistically, over runs): H0 "the mode is worse than fp32 by at least
``tolerance``" against H1 "it is not", a paired t-test on the per-seed accuracy differences
(scipy.stats.ttest_1samp, alternative="greater"). The mode passes when p < ``alpha``.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..devices import mode_support, resolve_device
from ..engine import MixedPrecision
from ..errors import UsageError
from ..precision import parse_mode_list

ALPHA = 0.05


@dataclass
class RunRecord:
    """One (mode, seed) training run."""

    mode: str
    seed: int
    train_loss: list[float]       # per epoch, mean over its batches
    test_accuracy: list[float]    # per epoch
    test_loss: list[float]        # per epoch
    skipped_steps: int
    seconds: float


@dataclass
class ParityResult:
    mode: str
    seeds: list[int]
    final_loss: dict
    metric: dict
    delta_vs_fp32: float | None
    p_value: float | None
    verdict: str                  # baseline | pass | fail
    reason: str = ""
    skipped_steps: int = 0
    runs: list[RunRecord] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ParityResult":
        runs = [RunRecord(**r) for r in d.get("runs", [])]
        return cls(**{**{k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "runs"}, "runs": runs})


@dataclass
class ParityReport:
    dataset: str
    device: str
    results: list[ParityResult]
    environment: dict
    tolerance: float
    epochs: int
    alpha: float = ALPHA
    framework: str = "torch"
    elapsed_s: float | None = None

    @property
    def failed(self) -> bool:
        return any(r.verdict == "fail" for r in self.results)

    def to_dict(self) -> dict:
        from .._version import __version__

        return {"ampkit_version": __version__, "command": "parity", "environment": self.environment,
                "framework": self.framework, "dataset": self.dataset, "device": self.device,
                "tolerance": self.tolerance, "alpha": self.alpha, "epochs": self.epochs,
                "results": [r.to_dict() for r in self.results], "elapsed_s": self.elapsed_s}

    @classmethod
    def from_dict(cls, d: dict) -> "ParityReport":
        return cls(dataset=d["dataset"], device=d["device"], results=[ParityResult.from_dict(r) for r in d["results"]],
                   environment=d.get("environment", {}), tolerance=d["tolerance"], epochs=d["epochs"],
                   alpha=d.get("alpha", ALPHA), framework=d.get("framework", "torch"), elapsed_s=d.get("elapsed_s"))


# ---------------------------------------------------------------- statistics
def non_inferiority(mode_acc: list[float], base_acc: list[float], tolerance: float) -> tuple[float, float | None]:
    """(mean difference, one-sided p-value) that the mode is not worse than fp32 by >= tolerance.

    Paired by seed. With one seed there is no variance to test: p is None. When every paired
    difference is the same, the t statistic is infinite and p is 0 or 1 by the sign.
    """
    diffs = [m - b for m, b in zip(mode_acc, base_acc)]
    delta = statistics.fmean(diffs)
    if len(diffs) < 2:
        return delta, None
    if max(diffs) - min(diffs) < 1e-12:
        return delta, 0.0 if delta > -tolerance else 1.0
    from scipy import stats

    res = stats.ttest_1samp(diffs, popmean=-tolerance, alternative="greater")
    return delta, float(res.pvalue)


def verdict_for(delta: float, p_value: float | None, tolerance: float, alpha: float = ALPHA) -> tuple[str, str]:
    if p_value is None:
        ok = delta > -tolerance
        return ("pass" if ok else "fail"), (
            f"one seed, no statistics: accuracy {delta:+.4f} vs fp32 is {'within' if ok else 'beyond'} "
            f"the tolerance {tolerance:g}; use --seeds 3 or more for a test")
    if p_value < alpha:
        return "pass", (f"not worse than fp32 by {tolerance:g} or more (one-sided paired t-test p={p_value:.3g} "
                        f"< {alpha:g}); mean accuracy {delta:+.4f} vs fp32")
    return "fail", (f"cannot rule out being worse than fp32 by {tolerance:g} (p={p_value:.3g} >= {alpha:g}); "
                    f"mean accuracy {delta:+.4f} vs fp32")


def _mean_std(xs: list[float]) -> dict:
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0}


# ---------------------------------------------------------------- training
def _loader_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + epoch)
    return torch.randperm(n, generator=g)


@torch.no_grad()
def _evaluate(model, mp, x, y, batch_size, metric_fn):
    model.eval()
    outs = []
    for i in range(0, len(x), 1024):
        with mp.autocast():
            outs.append(model(x[i:i + 1024]).float())
    logits = torch.cat(outs)
    model.train()
    return float(metric_fn(logits, y)), float(F.cross_entropy(logits, y))


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (logits.argmax(-1) == targets).float().mean()


def train_one(make_model: Callable[[], nn.Module], mode: str, seed: int, device, train, test, *, epochs: int,
              batch_size: int, lr: float, loss_fn=F.cross_entropy, metric_fn=accuracy, on_epoch=None) -> RunRecord:
    """Train one seed in one mode; the same seed gives the same weights and order in every mode."""
    torch.manual_seed(seed)
    model = make_model().to(device)
    mp = MixedPrecision(mode, device, model=model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    xtr, ytr = train[0].to(device), train[1].to(device)
    xte, yte = test[0].to(device), test[1].to(device)
    rec = RunRecord(mode, seed, [], [], [], 0, 0.0)
    t0 = time.perf_counter()
    for epoch in range(epochs):
        order = _loader_order(len(xtr), seed, epoch).to(device)
        total = torch.zeros((), device=device)
        batches = 0
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            with mp.autocast():
                loss = loss_fn(model(xtr[idx]).float(), ytr[idx])
            mp.backward(loss)
            mp.step(opt, zero_grad=True)
            total += loss.detach()  # summed on the device: no per-step sync
            batches += 1
        rec.train_loss.append(float(total) / batches)  # one sync per epoch
        acc, test_loss = _evaluate(model, mp, xte, yte, batch_size, metric_fn)
        rec.test_accuracy.append(acc)
        rec.test_loss.append(test_loss)
        if on_epoch:
            on_epoch(epoch + 1, epochs)
    rec.skipped_steps = mp.stats["skipped"]
    rec.seconds = time.perf_counter() - t0
    return rec


def summarize(records: list[RunRecord], modes: list[str], tolerance: float, alpha: float = ALPHA) -> list[ParityResult]:
    by_mode = {m: sorted((r for r in records if r.mode == m), key=lambda r: r.seed) for m in modes}
    base = by_mode.get("fp32")
    base_acc = [r.test_accuracy[-1] for r in base] if base else None
    results = []
    for mode in modes:
        runs = by_mode[mode]
        if not runs:
            continue
        accs = [r.test_accuracy[-1] for r in runs]
        losses = [r.train_loss[-1] for r in runs]
        res = ParityResult(mode, [r.seed for r in runs], _mean_std(losses), {"name": "accuracy", **_mean_std(accs)},
                           None, None, "baseline", skipped_steps=sum(r.skipped_steps for r in runs), runs=runs)
        if mode == "fp32":
            res.reason = "the reference"
        elif base_acc is None:
            res.verdict, res.reason = "fail", "no fp32 run to compare against (include fp32 in --modes)"
        else:
            n = min(len(accs), len(base_acc))
            delta, p = non_inferiority(accs[:n], base_acc[:n], tolerance)
            res.delta_vs_fp32, res.p_value = delta, p
            res.verdict, res.reason = verdict_for(delta, p, tolerance, alpha)
            if any(not math.isfinite(x) for r in runs for x in r.train_loss):
                res.verdict, res.reason = "fail", "training loss became non-finite"
        results.append(res)
    return results


# ---------------------------------------------------------------- entry points
def resolve_modes(modes, support, where: str) -> list[str]:
    """The modes to compare, fp32 (the baseline) first: the given ones, each of which must run
    here (else a usage error saying why), or, when none are given, every mode that runs here.

    ``support(mode) -> (ok, why)`` is the framework's capability check; ``where`` ends the error
    ("on cpu", "in TensorFlow here").
    """
    if modes is None:
        chosen = [m for m in ("fp32", "tf32", "bf16", "fp16") if support(m)[0]]
    else:
        chosen = parse_mode_list(modes) if isinstance(modes, str) else list(modes)
        for m in chosen:
            ok, why = support(m)
            if not ok:
                raise UsageError(f"mode {m!r} cannot run {where}: {why}")
    return chosen if "fp32" in chosen else ["fp32"] + chosen


def parity(make_model: Callable[[], nn.Module], train: tuple, test: tuple, *, modes=None, seeds: int | list[int] = 3,
           epochs: int = 10, batch_size: int = 64, lr: float = 1e-3, tolerance: float = 0.01, device="auto",
           loss_fn=F.cross_entropy, metric_fn=accuracy, dataset: str = "custom", progress=None) -> ParityReport:
    """Parity on your own model and data.

    Args:
        make_model: zero-argument callable returning a fresh float32 model (called after seeding,
            so each seed gives the same initial weights in every mode).
        train, test: ``(inputs, targets)`` tensors.
        modes: list or comma string; fp32 is the baseline and is added when missing.
        seeds: how many seeds (0, 1, 2, ...) or an explicit list.
        metric_fn: ``metric_fn(logits, targets) -> scalar``, higher is better (default accuracy).
        tolerance: how much worse than fp32 (absolute metric) still counts as parity.
    """
    from ..environment import torch_environment

    device = resolve_device(device)
    modes = resolve_modes(modes, lambda m: mode_support(m, device), f"on {device}")
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list:
        raise UsageError("parity needs at least one seed")
    if epochs < 1:
        raise UsageError(f"epochs must be >= 1; received {epochs}")
    t0 = time.perf_counter()
    records = []
    for seed in seed_list:
        for mode in modes:
            cb = (lambda done, total, _m=mode, _s=seed: progress(_m, _s, done, total)) if progress else None
            records.append(train_one(make_model, mode, seed, device, train, test, epochs=epochs,
                                     batch_size=batch_size, lr=lr, loss_fn=loss_fn, metric_fn=metric_fn, on_epoch=cb))
    results = summarize(records, modes, tolerance)
    return ParityReport(dataset, str(device), results, torch_environment(device), tolerance, epochs,
                        elapsed_s=round(time.perf_counter() - t0, 3))


@dataclass
class ParityConfig:
    dataset: str = "digits"
    modes: list[str] | None = None
    seeds: int = 3
    epochs: int | None = None
    tolerance: float = 0.01
    device: str = "auto"

    def validate(self) -> "ParityConfig":
        if self.seeds < 1:
            raise UsageError(f"--seeds must be >= 1; received {self.seeds}")
        if self.epochs is not None and self.epochs < 1:
            raise UsageError(f"--epochs must be >= 1; received {self.epochs}")
        if not (0 <= self.tolerance < 1):
            raise UsageError(f"--tolerance is an absolute accuracy in [0, 1); received {self.tolerance}")
        return self


def run_parity(cfg: ParityConfig, progress=None) -> ParityReport:
    """The CLI's entry: a built-in dataset with its model."""
    from .datasets import load

    cfg.validate()
    device = resolve_device(cfg.device)
    ds = load(cfg.dataset)
    return parity(ds.make_model, (ds.x_train, ds.y_train), (ds.x_test, ds.y_test), modes=cfg.modes,
                  seeds=cfg.seeds, epochs=cfg.epochs or ds.epochs, batch_size=ds.batch_size, lr=ds.lr,
                  tolerance=cfg.tolerance, device=device, dataset=ds.name, progress=progress)
