"""The Lightning callback as a team leaves it on: every logger gets the ``amp/`` values, a scheduler
judged per its interval, exceptions and Ctrl-C, resume from a checkpoint.

A real GradScaler on this CPU (Lightning's ``MixedPrecision("16-mixed", "cpu")`` plugin, as in
test_lightning_callback.py); a module's backward multiplies its gradient by inf at one global step:
the forward stays finite, the scaler skips that step (1024 -> 512).
"""

from __future__ import annotations

import csv
import json
import signal
import warnings

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

from ampkit.integrations.lightning import AmpkitCallback  # noqa: E402
from ampkit.integrations.record import SchedulerStepWarning  # noqa: E402

BATCHES = 4   # per epoch


class GradBoom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * float("inf")


class Planted(torch.nn.Module):
    def __init__(self, boom=None, raise_=None):
        super().__init__()
        self.step, self.boom, self.raise_ = 0, boom, raise_

    def forward(self, x):
        if self.training and self.step == self.boom:
            if self.raise_ is not None:
                raise self.raise_("planted at step 6")
            return GradBoom.apply(x)
        return x


class Module(L.LightningModule):
    def __init__(self, boom=None, raise_=None, interval="step"):
        super().__init__()
        torch.manual_seed(0)
        self.planted = Planted(boom, raise_)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), self.planted, torch.nn.Linear(16, 2))
        self.interval = interval

    def on_train_batch_start(self, batch, batch_idx):
        self.planted.step = self.trainer.global_step + 1

    def training_step(self, batch, _i):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": self.interval}}


def _data():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8 * BATCHES, 8, generator=g), torch.randint(0, 2, (8 * BATCHES,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def _fit(tmp, cb, module, *, steps=8, logger=False, ckpt_every=None, ckpt_path=None):
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.plugins import MixedPrecision

    callbacks = [cb]
    if ckpt_every:
        callbacks.append(ModelCheckpoint(dirpath=str(tmp / "ckpt"), every_n_train_steps=ckpt_every, save_top_k=-1,
                                         filename="{step}"))
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", callbacks=callbacks, logger=logger,
                        enable_checkpointing=bool(ckpt_every), enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(tmp), log_every_n_steps=2,
                        plugins=[MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, _data(), ckpt_path=ckpt_path)
    return trainer, [str(w.message) for w in caught if issubclass(w.category, SchedulerStepWarning)]


def _hooks(model) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_csv_logger_gets_amp_columns(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    cb = AmpkitCallback()
    logger = CSVLogger(str(tmp_path), name="csv", version=0)
    _fit(tmp_path, cb, Module(boom=5), logger=logger)
    with open(tmp_path / "csv" / "version_0" / "metrics.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("amp/skipped_steps")]
    assert [float(r["amp/loss_scale"]) for r in rows] == [1024.0, 1024.0, 512.0, 512.0]
    assert [float(r["amp/skipped_steps"]) for r in rows] == [0.0, 0.0, 1.0, 1.0]
    assert [float(r["amp/skipped_in_window"]) for r in rows] == [0.0, 0.0, 1.0, 0.0]
    assert cb.ledger["skipped_steps"] == [5]


def test_epoch_scheduler_with_a_skip_on_an_epochs_last_batch_is_not_a_warning(tmp_path):
    cb = AmpkitCallback()
    trainer, said = _fit(tmp_path, cb, Module(boom=BATCHES, interval="epoch"))
    assert cb.ledger["skipped_steps"] == [BATCHES] and said == []
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 2    # two epochs: the decay is kept


def test_step_scheduler_advancing_on_a_skip_is_the_warning_with_its_cause(tmp_path):
    cb = AmpkitCallback()
    _trainer, said = _fit(tmp_path, cb, Module(boom=BATCHES, interval="step"))
    assert len(said) == 1
    assert f"advanced on step {BATCHES}" in said[0] and "interval='step'" in said[0]
    assert "lr_scheduler_step" in said[0] and "get_scale() did not drop" in said[0]
    assert cb.summary["scheduler_advanced_on_skipped"] == [BATCHES]


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_an_exception_at_step_6_leaves_no_hook_and_a_document_of_5_steps(tmp_path, exc):
    path = tmp_path / "run.json"
    cb = AmpkitCallback(json_path=str(path), read_every=4)
    module = Module(boom=6, raise_=exc)
    sigint = signal.getsignal(signal.SIGINT)
    try:   # Lightning answers Ctrl-C with on_exception, then sys.exit(1), SIGINT ignored from then on
        with pytest.raises(SystemExit if exc is KeyboardInterrupt else exc):
            _fit(tmp_path, cb, module)
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert _hooks(module) == 0
    doc = json.loads(path.read_text())
    assert doc["steps"] == 5 and doc["ring_buffer"]["steps"] == [1, 2, 3, 4, 5]
    assert f"training ended by {exc.__name__} after 5 recorded step(s)" in " ".join(doc["summary"]["warnings"])
    assert cb.summary["steps"] == 5
    module2 = Module()
    _fit(tmp_path, cb, module2)    # reused: starts clean
    assert cb.ledger["steps"] == 8 and cb.summary["warnings"] == [] and _hooks(module2) == 0


def test_resume_numbers_global_steps_and_continues_the_ledger(tmp_path):
    first = AmpkitCallback()
    _fit(tmp_path, first, Module(boom=3), ckpt_every=4)
    assert first.ledger["skipped_steps"] == [3]
    resumed = AmpkitCallback(json_path=str(tmp_path / "resumed.json"))
    _fit(tmp_path, resumed, Module(boom=7), ckpt_path=str(tmp_path / "ckpt" / "step=4.ckpt"))
    assert resumed.ledger["steps"] == 8 and resumed.ledger["skipped_steps"] == [3, 7]
    assert json.loads((tmp_path / "resumed.json").read_text())["ring_buffer"]["steps"] == [5, 6, 7, 8]


class Overflow(torch.nn.Module):
    """x * 1e6 at global steps 5 and 6: inf in float16 (the forward fails, the scaler skips both)."""

    def __init__(self):
        super().__init__()
        self.step = 0

    def forward(self, x):
        return x * 1e6 if self.training and self.step in (5, 6) else x


def test_first_failure_file_ends_with_the_runs_one_ledger(tmp_path):
    cb = AmpkitCallback()                     # no json_path: the first failure goes to the trainer's folder
    module = Module()
    module.planted = Overflow()
    module.net[2] = module.planted
    _fit(tmp_path, cb, module)
    doc = json.loads((tmp_path / "ampkit_first_failure.json").read_text())
    first = doc["first_nonfinite"]  # and the origin's "op"/"in_reference" (#34)
    assert {k: first.get(k) for k in ("name", "phase", "step")} == \
        {"name": "planted", "phase": "forward", "step": 5}
    # written at step 5 (skips: [5]); at the end it holds the run's ledger, the same everywhere in it
    assert doc["ledger"]["skipped_steps"] == doc["summary"]["skipped_steps"] == cb.ledger["skipped_steps"] == [5, 6]
    assert "2 skipped [5, 6]" in doc["note"] and doc["skipped_steps"] == 2
