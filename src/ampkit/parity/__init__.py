"""``ampkit parity``: does mixed precision converge like fp32? Statistics over seeds.

This package holds what both frameworks share (data, data order, statistics, verdicts, the
report); the training lives in each backend. The module itself is callable, so
``ampkit.parity(make_model, train, test, ...)`` is the PyTorch entry point
(:func:`ampkit.backends.torch.parity.parity`) whether or not this package has been imported.
"""

from __future__ import annotations

from .._callable import make_callable
from .core import ParityConfig, ParityReport, ParityResult, RunRecord

__all__ = ["ParityConfig", "ParityReport", "ParityResult", "RunRecord", "parity"]


def parity(*args, **kwargs):
    """``ampkit.parity(make_model, train, test, *, modes=None, seeds=3, ...)`` for PyTorch."""
    from ..backends.torch.parity import parity as _parity

    return _parity(*args, **kwargs)


make_callable(__name__, parity)
