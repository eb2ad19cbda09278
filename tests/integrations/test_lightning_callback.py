"""ampkit.integrations.lightning.AmpkitCallback in a real Lightning Trainer and in Fabric, on this CPU.

Runs (one module-scoped fixture, every check reads them):

* fp16 with a real GradScaler (Lightning's own ``MixedPrecision("16-mixed", "cpu")`` plugin, as
  FIELD.md notes) and a module planted to overflow from step 5 on, a per-step StepLR: Lightning
  2.x steps the scheduler after every batch, skipped or not (Lightning #18828) -> the check fires;
* the same with the community workaround (``lr_scheduler_step`` skips when the scale dropped,
  after upstream's bug-report model) -> quiet;
* Fabric, fp16 plugin, a loop that steps its scheduler only after a taken step, the device read
  every 4 steps (the lazy path a GPU takes) -> quiet, and the ring still holds the steps before;
* ``precision="16-mixed"`` clean -> one line: bf16 runs; ``precision="bf16-mixed"`` clean -> nothing.

The trainer's own scaler history is recorded apart from ampkit by wrapping the scaler's
``update`` (found_inf from the scaler's per-optimizer state, then ``get_scale()``).
"""

from __future__ import annotations

import json
import logging
import warnings

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

from ampkit.health import LossScaleWarning  # noqa: E402
from ampkit.integrations.lightning import AmpkitCallback  # noqa: E402
from ampkit.integrations.record import SchedulerStepWarning  # noqa: E402
from helpers import record_scaler_history  # noqa: E402

PLANT_FROM = 5
STEPS = 10


class Planted(torch.nn.Module):
    """x * 1e6 from the PLANT_FROM-th training forward on: inf in fp16 (max 65504), finite in fp32/bf16."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        if self.training:
            self.calls += 1
        return x * 1e6 if self.training and self.calls >= PLANT_FROM else x


def _net(plant):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), Planted() if plant else torch.nn.Identity(),
                               torch.nn.Linear(16, 2))


class Module(L.LightningModule):
    def __init__(self, plant=False, guard=False):
        super().__init__()
        self.net, self.guard, self.dropped = _net(plant), guard, False

    def training_step(self, batch, _i):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # the workaround users post for Lightning #18828: compare the scale around the step
    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        scaler = self.trainer.precision_plugin.scaler
        before = scaler.get_scale() if scaler is not None else None
        optimizer.step(closure=optimizer_closure)
        self.dropped = scaler is not None and scaler.get_scale() < before

    def lr_scheduler_step(self, scheduler, metric):
        if not (self.guard and self.dropped):
            scheduler.step()


def _data():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8 * STEPS, 8, generator=g), torch.randint(0, 2, (8 * STEPS,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def _capture(fn):
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda rec: lines.append(rec.getMessage()) if rec.levelno >= logging.WARNING else None
    logger = logging.getLogger("ampkit.integrations")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        logger.removeHandler(handler)
    return lines, [w for w in caught if issubclass(w.category, (LossScaleWarning, SchedulerStepWarning))]


def _trainer_run(tmp, name, *, precision=None, plant=False, guard=False, **cb_kw):
    from lightning.pytorch.plugins import MixedPrecision

    cb = AmpkitCallback(json_path=str(tmp / f"{name}.json"), **cb_kw)
    kw = {"precision": precision} if precision else {
        "plugins": [MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=2.0**16))]}
    trainer = L.Trainer(max_steps=STEPS, accelerator="cpu", callbacks=[cb], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp), **kw)
    history: list = []
    if trainer.precision_plugin.scaler is not None:
        record_scaler_history(trainer.precision_plugin.scaler, history)
    module = Module(plant, guard)
    lines, caught = _capture(lambda: trainer.fit(module, _data()))
    return {"cb": cb, "history": history, "lines": lines, "warnings": caught, "path": tmp / f"{name}.json",
            "trainer": trainer}


def _fabric_run(tmp):
    from lightning.fabric.plugins import MixedPrecision

    cb = AmpkitCallback(json_path=str(tmp / "fabric.json"), read_every=4)
    fabric = L.Fabric(accelerator="cpu", callbacks=[cb],
                      plugins=[MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))])
    net = _net(True)
    model, opt = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.9)
    cb.watch_schedulers(sched)
    scaler, history = fabric.strategy.precision.scaler, []
    record_scaler_history(scaler, history)

    def loop():
        for x, y in _data():
            fabric.backward(torch.nn.functional.cross_entropy(model(x), y))
            before = scaler.get_scale()
            opt.step()
            opt.zero_grad()
            if scaler.get_scale() >= before:   # a loop that knows: no scheduler step on a skipped step
                sched.step()
        fabric.call("on_train_end")
    lines, caught = _capture(loop)
    return {"cb": cb, "history": history, "lines": lines, "warnings": caught, "path": tmp / "fabric.json"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lightning")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # a tiny model: one thread, and no stall when the machine is shared
    try:
        return {"fp16": _trainer_run(tmp, "fp16", plant=True, consecutive_skip_warning=4),
                "guarded": _trainer_run(tmp, "guarded", plant=True, guard=True),
                "fabric": _fabric_run(tmp),
                "16-mixed": _trainer_run(tmp, "m16", precision="16-mixed"),
                "bf16-mixed": _trainer_run(tmp, "bf16", precision="bf16-mixed")}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("key", ["fp16", "guarded", "fabric"])
def test_skip_ledger_equals_the_trainers_own_scaler_history(runs, key):
    r = runs[key]
    ledger = r["cb"].ledger
    assert len(r["history"]) == ledger["steps"] == STEPS
    assert ledger["skipped_steps"] == [i + 1 for i, (found, _s) in enumerate(r["history"]) if found]
    assert ledger["scales"] == [s for _f, s in r["history"]]
    assert ledger["skipped_steps"][0] == PLANT_FROM


@pytest.mark.parametrize("key,name", [("fp16", "net.2"), ("guarded", "net.2"), ("fabric", "2")])
def test_planted_overflow_names_module_and_phase_and_writes_the_document(runs, key, name):
    r = runs[key]
    # x * 1e6 in the planted module's own code: traced on a replay of the failing step (issues #34, #46)
    assert r["cb"].summary["first_nonfinite"] == {"name": name, "phase": "forward", "step": PLANT_FROM, "op": "mul",
                                                  "in_reference": False, "traced": "failing step"}
    doc = json.loads(r["path"].read_text())
    assert doc["command"] == "audit" and doc["mode"] == "fp16" and doc["loss_scale"] == 2.0**16
    assert doc["first_nonfinite"]["name"] == name and doc["findings"][0]["kind"] == "nonfinite"
    ring = doc["ring_buffer"]
    assert ring["steps"] == [1, 2, 3, 4, 5] and ring["fwd_amax"][name][-1] == "inf"
    assert ring["skipped"] == [False] * 4 + [True]
    assert doc["ledger"]["skipped_steps"] == r["cb"].ledger["skipped_steps"]


def test_scheduler_check_fires_where_lightning_steps_it_on_a_skipped_step(runs):
    r = runs["fp16"]
    sched = [w for w in r["warnings"] if issubclass(w.category, SchedulerStepWarning)]
    assert len(sched) == 1
    text = str(sched[0].message)
    assert f"advanced on step {PLANT_FROM}" in text and f"lightning {L.__version__}" in text
    assert r["cb"].summary["scheduler_advanced_on_skipped"] == list(range(PLANT_FROM, STEPS + 1))
    # the scheduler really did step on every batch: StepLR's counter equals the batches
    assert r["trainer"].lr_scheduler_configs[0].scheduler.last_epoch == STEPS


@pytest.mark.parametrize("key", ["guarded", "fabric"])
def test_scheduler_check_is_quiet_where_the_scheduler_waits(runs, key):
    r = runs[key]
    assert not [w for w in r["warnings"] if issubclass(w.category, SchedulerStepWarning)]
    assert r["cb"].summary["scheduler_advanced_on_skipped"] == []


def test_health_alarm_same_words_and_thresholds_as_the_engine(runs):
    r = runs["fp16"]
    alarms = [w for w in r["warnings"] if issubclass(w.category, LossScaleWarning)]
    assert len(alarms) == 1   # 4 steps in a row skipped (5..8) with consecutive_skip_warning=4
    text = str(alarms[0].message)
    assert "loss scale collapsed at step 8" in text and "4 steps in a row were skipped" in text
    assert "init_scale=65536 fits this model" in text
    assert r["cb"].summary["health"] == "collapsed"
    assert not [w for w in runs["guarded"]["warnings"] if issubclass(w.category, LossScaleWarning)]  # 6 < 10


def test_16_mixed_on_a_cpu_says_once_that_bf16_runs(runs):
    r = runs["16-mixed"]
    said = [line for line in r["lines"] if "declares" in line]
    assert len(said) == 1
    line = said[0]
    assert "precision='16-mixed' declares fp16" in line and "bf16 autocast" in line
    assert f"lightning {L.__version__} replaces precision='16-mixed' by 'bf16-mixed'" in line
    assert r["warnings"] == []


def test_bf16_mixed_clean_run_has_no_findings_and_no_warnings(runs):
    r = runs["bf16-mixed"]
    assert r["lines"] == [] and r["warnings"] == []
    doc = json.loads(r["path"].read_text())
    assert doc["findings"] == [] and doc["first_nonfinite"] is None and doc["mode"] == "bf16"
    assert doc["summary"] == {**doc["summary"], "steps": STEPS, "skipped": 0, "warnings": []}


def test_plugin_fp16_declares_what_runs(runs):
    # a precision plugin given by the user is the declaration: fp16 with a GradScaler runs, no line
    assert not [line for line in runs["fp16"]["lines"] if "declares" in line]
    assert runs["fp16"]["cb"].record.mode == "fp16" and runs["fp16"]["cb"].record.scaler


def test_ampkit_report_renders_them(runs, tmp_path):
    from ampkit.cli.main import main

    md = tmp_path / "r.md"
    assert main(["report", *(str(runs[k]["path"]) for k in ("fp16", "fabric", "bf16-mixed")),
                 "--markdown", str(md)]) in (0, None)
    assert "first inf/NaN in `net.2` (forward)" in md.read_text()
