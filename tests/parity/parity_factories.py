"""Model and data factories as a user writes them, for ``ampkit parity --model ... --data ...``
(tests/parity/test_parity_user.py runs them from this folder)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset


# ---------------------------------------------------------------- a torchvision model on in-memory images
def squeezenet():
    import torchvision

    return torchvision.models.squeezenet1_1(num_classes=4)  # random weights: nothing is downloaded


def images():
    """48 20x20 RGB images, the class a bright quadrant: a shuffling DataLoader of 16 for training
    (ampkit keeps its batch size and replaces its order by the paired one), a Dataset to validate."""
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (48,), generator=g)
    x = torch.randn(48, 3, 20, 20, generator=g) * 0.5
    for c in range(4):
        r, k = (c // 2) * 10, (c % 2) * 10
        x[y == c, :, r:r + 10, k:k + 10] += 1.5
    return DataLoader(TensorDataset(x[:32], y[:32]), batch_size=16, shuffle=True), TensorDataset(x[32:], y[32:])


# ---------------------------------------------------------------- fp16 degrades for real: forward underflow
class NormalizedHead(nn.Module):
    """A bias-free projection, LayerNorm (eps small enough for small activations), a classifier.
    The normalisation makes the input's scale irrelevant -- in fp32 and bf16. In fp16 the
    projection's input is cast to float16 first, and readings of order 1e-8 are below fp16's
    smallest subnormal (6e-8): they become 0, LayerNorm has nothing to rescale, and its backward
    at zero variance overflows, so most steps are skipped. Loss scaling multiplies gradients,
    not activations: it cannot bring the inputs back."""

    def __init__(self, features: int = 8, classes: int = 4):
        super().__init__()
        self.project = nn.Linear(features, 32, bias=False)
        self.norm = nn.LayerNorm(32, eps=1e-24)
        self.classify = nn.Linear(32, classes)

    def forward(self, x):
        return self.classify(torch.relu(self.norm(self.project(x))))


def normalized_head():
    return NormalizedHead()


def _blobs(n: int, scale: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(4, 8, generator=g) * 2
    y = torch.randint(0, 4, (n,), generator=g)
    x = (centers[y] + torch.randn(n, 8, generator=g)) * scale
    return x, y


def sensor_readings():
    """Raw sensor readings in SI units (order 1e-8), 4 classes, as (inputs, targets) tensors."""
    x, y = _blobs(192, 1e-8)
    return (x[:128], y[:128]), (x[128:], y[128:])


def blobs():
    """The same problem in ordinary units: every mode learns it."""
    x, y = _blobs(320, 1.0)
    return (x[:256], y[:256]), (x[256:], y[256:])


# ---------------------------------------------------------------- a clean model with a continuous metric
def regressor():
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))


def curve():
    """A noisy regression (float targets): the metric is the validation loss, lower is better."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(320, 8, generator=g)
    y = torch.sin(x @ torch.randn(8, 1, generator=g)) + 0.3 * torch.randn(320, 1, generator=g)
    return (x[:256], y[:256]), (x[256:], y[256:])


# ---------------------------------------------------------------- a loss that goes NaN in fp16
def overflowing():
    """An MLP fed raw pressures in pascals (order 1e4-1e5, some beyond fp16's 65,504): cast to
    float16 they are inf, the loss is NaN in every seed; fp32 and bf16 have the range."""
    return nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 4))


def pressures():
    x, y = _blobs(160, 3e4)
    return (x[:128], y[:128]), (x[128:], y[128:])


def glitchy():
    """Readings of order 1e3 (fine in fp16) with one sensor glitch, sample 13, at 1e6: beyond fp16's
    65,504. A run of 2 steps of 16 sees 32 of the 128 samples: seed 0's order reaches the glitch
    (NaN loss in fp16), seed 1's does not."""
    x, y = _blobs(160, 1e3)
    x[13] = 1e6
    return (x[:128], y[:128]), (x[128:], y[128:])


# ---------------------------------------------------------------- bad factories
def not_a_model():
    return "resnet18"


def one_dataset():
    return TensorDataset(torch.zeros(4, 8), torch.zeros(4).long())


class Empty(Dataset):
    def __len__(self):
        return 0

    def __getitem__(self, i):
        raise IndexError(i)


def empty():
    return Empty(), blobs()[1]


def wrong_features():
    """16 features per sample for a model that takes 8."""
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)), blobs()[1]


def uneven():
    return (torch.zeros(10, 8), torch.zeros(7).long()), blobs()[1]


def short_drop_last():
    """10 samples in a DataLoader of 16 that drops the last, incomplete batch: no batch at all."""
    (x, y), test = blobs()
    return DataLoader(TensorDataset(x[:10], y[:10]), batch_size=16, drop_last=True), test


def flat_curve():
    """curve()'s targets flattened to (N,): against the regressor's (N, 1) output the default mean
    squared error would broadcast to (N, N) and train on a wrong loss."""
    (x, y), (vx, vy) = curve()
    return (x, y[:, 0]), (vx, vy[:, 0])


# ---------------------------------------------------------------- an ampkit.Workload with its own metric
def mean_abs_error(logits, targets):
    return -(logits.float() - targets.float()).abs().mean()  # higher is better: the negated error


def workload():
    import ampkit

    return ampkit.Workload(regressor(), make_batch=None, loss_fn=lambda out, y: F.mse_loss(out.float(), y),
                           metric_fn=mean_abs_error)


# ---------------------------------------------------------------- factories that fail the hard way (issue #40)
def exits_zero():
    import sys

    sys.exit(0)


def exits_three():
    import sys

    sys.exit(3)


def aborts():
    import os

    os.abort()


def hangs():
    import time

    time.sleep(3600)


def interrupts():
    raise KeyboardInterrupt


class _Counting(torch.utils.data.IterableDataset):
    """An iterable data set without __len__: ``n`` samples (None: endless)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        i = 0
        while self.n is None or i < self.n:
            x = torch.randn(8, generator=g)
            yield x, int(x[0] > 0)
            i += 1


def finite_iterable():
    """A finite IterableDataset (no __len__) to train on, and one inside a DataLoader to validate."""
    return _Counting(48), DataLoader(_Counting(32), batch_size=16)


def endless_iterable():
    return _Counting(None), _Counting(32)


class Sleepy(nn.Module):
    """Sleeps in every training forward (the checks before training run without gradients): every
    run outlasts a short --timeout."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        if self.training and torch.is_grad_enabled():
            import time

            time.sleep(30)
        return self.lin(x)


def exits_on_a_later_call():
    """Fine when ampkit checks it (in a child, then before training); sys.exit(0) from the third call
    on, in the runs (calls counted in EXIT_LATER_FILE)."""
    import os
    import sys

    path = os.environ["EXIT_LATER_FILE"]
    calls = int(open(path).read()) if os.path.exists(path) else 0
    with open(path, "w") as fh:
        fh.write(str(calls + 1))
    if calls >= 2:
        sys.exit(0)
    return normalized_head()


def moves_the_working_folder():
    """A factory that changes the working folder: ampkit's outputs must not move with it."""
    import os

    os.makedirs("elsewhere", exist_ok=True)
    os.chdir("elsewhere")
    return normalized_head()


def spawns_then_hangs():
    """Starts a process of its own (a marked sleep), then hangs: --timeout must stop both."""
    import subprocess
    import time

    subprocess.Popen(["sleep", "377.25"])
    time.sleep(3600)
