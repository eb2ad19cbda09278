"""The audit's back-off below 1 against a real ``torch.amp.GradScaler`` (issue #50, acceptance 5).

torchvision's ResNet-18 (random weights, 10 classes) whose cross-entropy is multiplied by 3e4: its
gradients overflow fp16 at every scale >= 1, and a real GradScaler (defaults: init 65536, backoff 0.5)
skips steps until the scale is fractional. This script runs that real loop (fp16 autocast on the CPU,
the same model, batch and seed as the audit), then ``ampkit audit --mode fp16`` and ``--what-if`` on
the same factory, timed, and prints the real final scale and skips next to the audit's
``suggested_loss_scale``, ``loss_scale`` and ``skipped_steps``.

    python benchmarks/audit_backoff.py [--size 32] [--batch 4] [--factor 3e4] [--what-if]

The file is also the factory the audit imports: ``--model benchmarks/audit_backoff.py:build``
(``AMPKIT_BACKOFF_SIZE``, ``AMPKIT_BACKOFF_BATCH`` and ``AMPKIT_BACKOFF_FACTOR`` carry the options there).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _opts() -> tuple[int, int, float]:
    return (int(os.environ.get("AMPKIT_BACKOFF_SIZE", "32")), int(os.environ.get("AMPKIT_BACKOFF_BATCH", "4")),
            float(os.environ.get("AMPKIT_BACKOFF_FACTOR", "3e4")))


def make_model():
    import torch
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None, num_classes=10)


def make_batch(n, device, gen):
    import torch

    size = _opts()[0]
    x = torch.randn(n, 3, size, size, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    return x.to(device), y.to(device)


def loss_fn(out, y):
    import torch.nn.functional as F

    return F.cross_entropy(out.float(), y) * _opts()[2]


def build():
    """The audit's factory: ResNet-18, loss x factor, batch of ``AMPKIT_BACKOFF_BATCH`` images."""
    import ampkit

    return ampkit.Workload(model=make_model(), make_batch=make_batch, loss_fn=loss_fn, name="resnet18-loss-x3e4",
                           batch_size=_opts()[1])


def real_gradscaler(limit: int = 64) -> tuple[int, float, float]:
    """A plain torch loop with GradScaler's defaults on the audit's batch (seed 0): the steps it skips, the
    scale of its first step taken, and the loop's wall time."""
    import torch

    t0 = time.perf_counter()
    model = make_model()
    x, y = make_batch(_opts()[1], torch.device("cpu"), torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    for skips in range(limit):
        scale = scaler.get_scale()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if scaler.get_scale() >= scale:  # not lowered: the step was taken
            return skips, scale, time.perf_counter() - t0
    raise SystemExit(f"GradScaler still skipping after {limit} steps")


def audit(what_if: bool) -> tuple[dict, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "a.json"
        cmd = [sys.executable, "-m", "ampkit", "audit", "--framework", "torch", "--device", "cpu",
               "--model", f"{__file__}:build", "--json", str(out)] + (["--what-if"] if what_if else ["--mode", "fp16"])
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).returncode
        wall = time.perf_counter() - t0
        return (json.loads(out.read_text()) if out.exists() else {}), wall, rc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--factor", type=float, default=3e4)
    p.add_argument("--what-if", action="store_true", help="also time `ampkit audit --what-if`")
    a = p.parse_args()
    os.environ.update(AMPKIT_BACKOFF_SIZE=str(a.size), AMPKIT_BACKOFF_BATCH=str(a.batch), AMPKIT_BACKOFF_FACTOR=str(a.factor))
    skips, scale, loop_s = real_gradscaler()
    print(f"resnet18, {a.size}x{a.size}, batch {a.batch}, loss x{a.factor:g}; load {os.getloadavg()[0]:.2f}")
    print(f"real GradScaler: skips {skips}, trains at {scale:g} ({loop_s:.1f} s)")
    doc, wall, rc = audit(False)
    print(f"ampkit audit --mode fp16: exit {rc}, {wall:.1f} s; skipped_steps {doc.get('skipped_steps')}, loss_scale "
          f"{doc.get('loss_scale')}, suggested_loss_scale {doc.get('suggested_loss_scale')}")
    print("  agrees with GradScaler" if doc.get("suggested_loss_scale") == scale and doc.get("skipped_steps") == skips
          else "  DIFFERS from GradScaler")
    if a.what_if:
        doc, wall, rc = audit(True)
        fp16 = (doc.get("what_if") or {}).get("fp16", {})
        print(f"ampkit audit --what-if: exit {rc}, {wall:.1f} s; fp16 verdict {fp16.get('verdict')}, loss_scale_range "
              f"{fp16.get('loss_scale_range')}, suggested_loss_scale {doc.get('suggested_loss_scale')}")


if __name__ == "__main__":
    main()
