"""Precision plans: which modules of a model keep float32 (or stay out of fp8) while the rest runs
in a mode -- a JSON document the engines apply and ``ampkit audit --plan`` / ``ampkit plan`` propose."""

from ..plan_format import KIND, MODULE_MODES, VERSION, Plan, load_plan, pattern_matches
from .propose import propose_plan

__all__ = ["KIND", "VERSION", "MODULE_MODES", "Plan", "load_plan", "pattern_matches", "propose_plan"]
