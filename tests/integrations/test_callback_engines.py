"""An engine that keeps its own loss scaler: DeepSpeed.

DeepSpeed is not installed here (its CPU accelerator needs oneCCL/IPEX builds), so the test uses
a stand-in of DeepSpeed's documented shape: its fp16 ZeRO optimizer (``DeepSpeedZeroOptimizer``)
holds ``loss_scaler`` with a host float ``cur_scale`` that its dynamic scaler halves on an
overflow, and sets ``overflow``; accelerate wraps it in its real ``DeepSpeedOptimizerWrapper``
(``scaler=None``, ``step_was_skipped`` = ``overflow``), which is what the HF Trainer hands its
callbacks. The HF callback's events are driven by hand around a tiny model's steps.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
accelerate_ds = pytest.importorskip("accelerate.utils.deepspeed")

from transformers import TrainerControl, TrainerState, TrainingArguments  # noqa: E402

from ampkit.backends.torch.integrations.engines import HostScale, scaler_of  # noqa: E402
from ampkit.integrations.transformers import AmpkitCallback  # noqa: E402


class DynamicLossScaler:
    def __init__(self, scale):
        self.cur_scale = scale


class DeepSpeedZeroOptimizer:
    """DeepSpeed's shape: ``loss_scaler.cur_scale``, ``overflow``, ``param_groups``, ``step()``."""

    def __init__(self, params, overflow_at=(), with_scaler=True):
        self.inner = torch.optim.SGD(params, lr=0.01)
        self.param_groups, self.state, self.defaults = self.inner.param_groups, self.inner.state, self.inner.defaults
        if with_scaler:
            self.loss_scaler = DynamicLossScaler(2.0**16)
        self.overflow, self.n, self.overflow_at = False, 0, set(overflow_at)

    def step(self, closure=None):
        self.n += 1
        self.overflow = self.n in self.overflow_at
        if self.overflow:
            if hasattr(self, "loss_scaler"):
                self.loss_scaler.cur_scale /= 2
            return
        self.inner.step()

    def zero_grad(self, set_to_none=True):
        self.inner.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return {}


DeepSpeedZeroOptimizer.__module__ = "deepspeed.runtime.zero.stage_1_and_2"


@pytest.fixture(autouse=True)
def accelerator():
    import accelerate

    return accelerate.Accelerator(cpu=True)   # accelerate's optimizer wrappers need its state


def _drive(tmp, overflow_at, with_scaler=True, steps=6, fp16=False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ds = DeepSpeedZeroOptimizer(model.parameters(), overflow_at, with_scaler)
    opt = accelerate_ds.DeepSpeedOptimizerWrapper(ds)
    args = TrainingArguments(output_dir=str(tmp), use_cpu=True, report_to=[])
    args.fp16 = fp16           # what a DeepSpeed fp16 config declares (accelerate on a CPU refuses the flag)
    state, control = TrainerState(), TrainerControl()
    cb = AmpkitCallback()
    cb.on_train_begin(args, state, control, model=model, optimizer=opt)
    skipped = []
    for _ in range(steps):
        model(torch.randn(4, 4)).square().mean().backward()
        ds.step()                  # DeepSpeed's engine steps in accelerator.backward; the wrapper's step() is a no-op
        cb.on_pre_optimizer_step(args, state, control, optimizer=opt)
        opt.step()
        cb.on_optimizer_step(args, state, control, optimizer=opt)
        skipped.append(opt.step_was_skipped)
        opt.zero_grad()
        state.global_step += 1
    cb.on_train_end(args, state, control)
    return cb, skipped


def test_deepspeed_scale_is_read_and_its_skips_are_the_ledger(tmp_path):
    model = torch.nn.Linear(2, 2)
    ds = DeepSpeedZeroOptimizer(model.parameters(), overflow_at={3, 4})
    assert isinstance(scaler_of(accelerate_ds.DeepSpeedOptimizerWrapper(ds)), HostScale)
    cb, skipped = _drive(tmp_path, {3, 4})
    assert cb.ledger["skipped_steps"] == [i + 1 for i, s in enumerate(skipped) if s] == [3, 4]
    assert cb.ledger["scales"] == [65536.0, 65536.0, 32768.0, 16384.0, 16384.0, 16384.0]
    assert not any("not visible" in w for w in cb.summary["warnings"])


def test_deepspeed_without_a_readable_scale_is_one_line_saying_what_is_still_watched(tmp_path):
    cb, skipped = _drive(tmp_path, {3}, with_scaler=False, fp16=True)
    said = [w for w in cb.summary["warnings"] if "not visible" in w]
    assert len(said) == 1 and "DeepSpeed (DeepSpeedZeroOptimizer)" in said[0]
    assert "still watched: each module's output amax, the gradient norms, the loss" in said[0]
    assert cb.ledger["scales"] == [] and cb.record.not_watched == ["loss scale"]
    assert skipped[2] is True      # accelerate's own view: the skip the ledger cannot count
