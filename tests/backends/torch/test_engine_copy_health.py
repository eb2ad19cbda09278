"""Issue #22: the engine pickles and deep-copies like GradScaler, and its loss-scale alarm fires once.

A copy continues exactly where the original was (scale, growth tracker, statistics, alarm); the
alarm is fed from the host mirror and fires at the documented step: the 10th skipped step in a row,
or the first step whose scale is below ``min_scale_warning``, whichever comes first.
"""

from __future__ import annotations

import copy
import io
import pickle
import warnings

import pytest
import torch
import torch.nn as nn

import ampkit
from ampkit.backends.torch.engine import MixedPrecision

INF, NAN = float("inf"), float("nan")
KW = dict(init_scale=2.0**10, growth_factor=3.0, backoff_factor=0.3, growth_interval=2)


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(6, 8, generator=g), torch.randint(0, 4, (6,), generator=g)) for _ in range(n)]


def train(mp, model, opt, data, inject):
    out = []
    for i, (x, y) in enumerate(data):
        with mp.autocast():
            loss = nn.functional.cross_entropy(model(x), y) * inject.get(i, 1.0)
        mp.backward(loss)
        r = mp.step(opt, zero_grad=True)
        assert r.scale == mp.stats["scale"] == mp.get_scale()
        out.append((r.skipped, r.scale, dict(mp.stats), mp.health()))
    return out


def twin(model, opt):
    m2 = copy.deepcopy(model)
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-2)
    o2.load_state_dict(copy.deepcopy(opt.state_dict()))  # (a state_dict shares its tensors)
    return m2, o2


@pytest.mark.filterwarnings("ignore::ampkit.LossScaleWarning")
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copy_continues_identically_over_20_steps_with_injected_infs(how):
    model = tiny_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    mp = MixedPrecision("fp16", "cpu", model=model, consecutive_skip_warning=3, **KW)
    train(mp, model, opt, batches(6), {1: INF, 2: NAN, 3: INF})  # the alarm fired here (3 skips in a row)
    assert mp.health()["fired_at"] == 4
    dup = copy.deepcopy(mp) if how == "deepcopy" else pickle.loads(pickle.dumps(mp))
    assert dup.model is None and mp.model is model  # the model is not part of a copy
    assert dup.state_dict() == mp.state_dict() and dup.health() == mp.health()
    m2, o2 = twin(model, opt)
    later = batches(20, seed=7)
    inject = {0: INF, 4: NAN, 5: INF, 6: INF, 11: INF, 17: NAN}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ampkit.LossScaleWarning)  # the alarm travels as fired: no second one
        a = train(mp, model, opt, later, inject)
        b = train(dup, m2, o2, later, inject)
    assert a == b
    assert [s for s, *_ in a].count(True) == len(inject)
    assert len({scale for _, scale, *_ in a}) > 3  # the scale moved with factors 3/0.3
    for p, q in zip(model.parameters(), m2.parameters()):
        assert torch.equal(p, q)


def test_the_original_keeps_its_optimizer_hooks_and_the_copy_makes_its_own():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("fp16", "cpu", **KW)
    train(mp, model, opt, batches(1), {})
    hooks = len(opt._optimizer_step_post_hooks)
    dup = copy.deepcopy(mp)
    assert len(opt._optimizer_step_post_hooks) == hooks  # the copy touched nothing of the original's
    m2, _ = twin(model, torch.optim.Adam(model.parameters()))
    o2 = torch.optim.SGD(m2.parameters(), lr=0.1)
    res = train(dup, m2, o2, batches(2), {1: INF})
    assert [r[0] for r in res] == [False, True] and len(o2._optimizer_step_post_hooks) == 1
    assert [r[0] for r in train(mp, model, opt, batches(2), {0: INF})] == [True, False]


def test_copying_between_unscale_and_the_update_is_refused_like_gradscaler():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("fp16", "cpu")
    mp.backward(model(torch.randn(2, 8)).sum())
    mp.scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="only between steps"):
        pickle.dumps(mp)


@pytest.mark.parametrize("mode", ["bf16", "fp32"])
def test_modes_without_loss_scaling_copy_too_and_their_health_is_ok(mode):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision(mode, "cpu", model=model)
    train(mp, model, opt, batches(2), {})
    dup = pickle.loads(pickle.dumps(mp))
    with dup.autocast():
        assert torch.is_autocast_enabled("cpu") == (mode == "bf16")
    h = dup.health()
    assert h["status"] == "ok" and h["messages"] == [] and h["loss_scaling"] is False and h["steps"] == 2


# ---------------------------------------------------------------- the alarm
def overflowing_run(steps, **kw):
    """Gradients overflow at every step (the loss times inf), default thresholds unless given."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("fp16", "cpu", model=model, **kw)
    x, y = batches(1)[0]
    fired = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            with mp.autocast():
                loss = nn.functional.cross_entropy(model(x), y) * INF
            mp.backward(loss)
            mp.step(opt, zero_grad=True)
            fired.append(sum(issubclass(w.category, ampkit.LossScaleWarning) for w in caught))
    return mp, [w for w in caught if issubclass(w.category, ampkit.LossScaleWarning)], fired


def test_always_overflowing_gradients_warn_once_at_the_tenth_skipped_step():
    mp, alarms, fired = overflowing_run(25)
    assert len(alarms) == 1
    assert fired.index(1) == 9  # after the 10th step (1-based step 10)
    msg = str(alarms[0].message)
    assert msg.startswith("ampkit.MixedPrecision: loss scale collapsed at step 10: 10 steps in a row were skipped")
    assert "(since step 1)" in msg and "No step has been taken yet" in msg
    assert 'ampkit.MixedPrecision("bf16")' in msg  # this CPU runs bf16 (the test machine: AVX-512 or emulated)
    assert "`ampkit audit --model MODULE:FACTORY --mode fp16 --device cpu`" in msg
    # the alarm cannot know whether bf16 is healthy on the model: bf16 only once its own audit says so (#50)
    assert "Switch to bf16" not in msg and "once `ampkit audit --model MODULE:FACTORY --mode bf16 --device cpu` shows it healthy" in msg
    assert "the loss itself is inf/NaN" in msg  # the loss times inf: the forward's fault, said so
    assert alarms[0].filename == __file__  # the warning points at the user's mp.step line
    h = mp.health()
    assert h["status"] == "collapsed" and h["messages"] == [msg] and h["fired_at"] == 10
    assert h["steps"] == h["skipped"] == h["consecutive_skipped"] == 25 and h["scale"] == mp.stats["scale"]


def test_the_scale_falling_below_min_scale_warning_fires_first_when_it_comes_first():
    # 1024 * 0.5**k < 4 first at k = 9: before the 10th skip
    mp, alarms, fired = overflowing_run(12, init_scale=1024.0, min_scale_warning=4.0)
    assert len(alarms) == 1 and fired.index(1) == 8
    assert "fell to 2, below 4" in str(alarms[0].message)


def test_a_healthy_run_never_warns_and_a_recovered_run_says_warning():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mp = MixedPrecision("fp16", "cpu", model=model, init_scale=2.0**8, growth_interval=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ampkit.LossScaleWarning)
        train(mp, model, opt, batches(12), {2: INF, 7: NAN})
    assert mp.health()["status"] == "ok" and mp.health()["messages"] == []
    mp2 = MixedPrecision("fp16", "cpu", model=model, init_scale=2.0**8, consecutive_skip_warning=2)
    with pytest.warns(ampkit.LossScaleWarning, match=r"init_scale=256 fits"):
        train(mp2, model, opt, batches(5), {1: INF, 2: INF})
    assert mp2.health()["status"] == "warning"  # steps are taken again


def test_the_advice_names_an_importable_model_for_the_audit(tmp_path, monkeypatch):
    (tmp_path / "my_nets.py").write_text("import torch\nclass Net(torch.nn.Linear):\n"
                                         "    def __init__(self):\n        super().__init__(8, 4)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_nets

    mp = MixedPrecision("fp16", "cpu", model=my_nets.Net(), consecutive_skip_warning=1)
    opt = torch.optim.SGD(mp.model.parameters(), lr=0.1)
    mp.backward(mp.model(torch.randn(2, 8)).sum() * INF)
    with pytest.warns(ampkit.LossScaleWarning, match=r"ampkit audit --model my_nets:Net --mode fp16"):
        mp.step(opt)


@pytest.mark.parametrize("bad", [dict(min_scale_warning=0.0), dict(min_scale_warning=NAN),
                                 dict(consecutive_skip_warning=0), dict(consecutive_skip_warning=2.5)])
def test_bad_thresholds_are_refused_naming_the_keyword(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        MixedPrecision("fp16", "cpu", **bad)


@pytest.mark.filterwarnings("ignore::ampkit.LossScaleWarning")
def test_the_alarm_travels_in_state_dict_and_old_checkpoints_still_load(tmp_path):
    mp, _, _ = overflowing_run(12)
    torch.save(mp.state_dict(), tmp_path / "ckpt.pt")
    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    resumed = MixedPrecision("fp16", "cpu")
    resumed.load_state_dict(state)
    assert resumed.health() == mp.health() and resumed.stats == mp.stats
    old = {k: v for k, v in state.items() if k != "health"}  # saved before the alarm existed
    buf = io.BytesIO()
    torch.save(old, buf)
    buf.seek(0)
    older = MixedPrecision("fp16", "cpu")
    older.load_state_dict(torch.load(buf, weights_only=True))
    assert older.stats == mp.stats and older.health()["status"] == "ok"


def test_load_state_dict_takes_a_gradscaler_state_and_refuses_a_non_state_in_one_line():
    """A user moving from torch.amp.GradScaler loads its state_dict; None or a foreign dict is a
    one-line UsageError (it was AttributeError on None, and 'saved in mode None' for GradScaler's state)."""
    from ampkit.errors import UsageError

    scaler = torch.amp.GradScaler("cpu", init_scale=4096.0, growth_interval=7)
    mp = MixedPrecision("fp16", device="cpu")
    mp.load_state_dict(scaler.state_dict())
    assert mp.get_scale() == 4096.0 and mp.stats["scale"] == 4096.0
    assert mp.state_dict()["scaler"]["growth_interval"] == 7
    with pytest.raises(UsageError, match="received NoneType"):
        mp.load_state_dict(None)
    with pytest.raises(UsageError, match="not a MixedPrecision state_dict"):
        mp.load_state_dict({"foo": 1})
    with pytest.raises(UsageError, match="GradScaler state_dict"):
        MixedPrecision("bf16", device="cpu").load_state_dict(scaler.state_dict())
