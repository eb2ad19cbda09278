"""ampkit.health.LossScaleHealth: one alarm, at the documented step, with the status it says."""

from __future__ import annotations

import warnings

import pytest

import ampkit
from ampkit.health import LossScaleHealth


def _feed(h, scales_skips, start=0):
    fired = []
    for i, (scale, skipped) in enumerate(scales_skips, start):
        m = h.observe(i, scale, skipped)
        if m:
            fired.append((i, m))
    return fired


def test_every_step_overflowing_warns_once_at_the_tenth_skip():
    h = LossScaleHealth()
    seq = [(65536.0 * 0.5 ** (i + 1), True) for i in range(30)]  # scale after each skipped step's backoff
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fired = _feed(h, seq)
    alarms = [x for x in w if issubclass(x.category, ampkit.LossScaleWarning)]
    assert len(alarms) == 1 and [f[0] for f in fired] == [9]
    msg = str(alarms[0].message)
    assert "10 steps in a row" in msg and "since step 0" in msg and "No step has been taken" in msg
    rep = h.report()
    assert rep["status"] == "collapsed" and rep["fired_at"] == 9 and rep["skipped"] == 30
    assert rep["messages"] == [msg]


def test_scale_below_threshold_fires_even_without_a_long_run_and_names_the_scale_that_fit():
    h = LossScaleHealth(min_scale_warning=4.0, consecutive_skip_warning=100)
    seq = [(8.0, False), (4.0, True), (4.0, False), (2.0, True), (2.0, False)]
    with pytest.warns(ampkit.LossScaleWarning, match=r"fell to 2, below 4.*init_scale=4 fits") as w:
        fired = _feed(h, seq)
    assert len(w) == 1 and fired[0][0] == 3
    assert h.report()["status"] == "collapsed"
    for i in range(5, 8):  # the scale grows back above the threshold: the run recovered
        h.observe(i, 8.0, False)
    assert h.report()["status"] == "warning"


def test_healthy_run_stays_quiet_and_ok():
    h = LossScaleHealth()
    seq = [(65536.0, i % 7 == 3) for i in range(201)]  # an occasional skip is GradScaler working
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _feed(h, seq) == []
    assert h.report() == {"status": "ok", "messages": [], "steps": 201, "skipped": 29, "consecutive_skipped": 0,
                          "scale": 65536.0, "fired_at": None}


def test_state_round_trip_keeps_the_run_and_does_not_fire_twice():
    h = LossScaleHealth(consecutive_skip_warning=3, warn=False)
    _feed(h, [(2.0 ** (10 - k), True) for k in range(5)])
    g = LossScaleHealth(consecutive_skip_warning=3)
    g.load_state_dict(h.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert g.observe(5, 0.01, True) is None  # below the threshold too: still one alarm
    assert g.report()["consecutive_skipped"] == 6 and g.report()["fired_at"] == 2


@pytest.mark.parametrize("kw", [{"min_scale_warning": 0}, {"min_scale_warning": float("nan")},
                                {"consecutive_skip_warning": 0}, {"consecutive_skip_warning": 2.5},
                                {"consecutive_skip_warning": True}])
def test_bad_thresholds_are_refused(kw):
    with pytest.raises(ValueError):
        LossScaleHealth(**kw)
