"""fp8 training for ``ampkit.MixedPrecision("fp8")``: torchao's float8 training API, not a copy of it."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import logging
import types

from ....errors import ModeUnavailableError, UsageError, one_line
from ....precision import Precision, parse_mode

__all__ = ["FP8_EXTRA", "FP8_REGION", "RECIPES", "Fp8Training", "fp8_engine", "fp8_support", "torchao_installed"]

#: the one line a user without torchao reads
FP8_EXTRA = "fp8 training needs torchao: pip install 'ampkit[fp8]'"
RECIPES = ("tensorwise", "rowwise")
#: both dimensions of an fp8 matmul's weight must be multiples of this (torch._scaled_mm)
MULTIPLE = 16


#: the forward region of fp8: everything that is not a converted Linear computes under bf16 autocast
FP8_REGION = Precision("fp8", "bfloat16", autocast=True)


def fp8_engine(mode, device, recipe: str | None, skip_first_last: bool, module_filter=None) -> Fp8Training | None:
    """The engine's fp8 part when ``mode`` is fp8, else None (the fp8 keywords are then refused)."""
    if parse_mode(mode) != "fp8":
        if recipe is not None or skip_first_last is not True or module_filter is not None:
            raise UsageError(f"fp8_recipe, fp8_skip_first_last and fp8_filter are for mode 'fp8'; received mode {mode!r}")
        return None
    return Fp8Training(device, recipe, skip_first_last, module_filter)


def torchao_installed() -> bool:
    """Whether torchao can be found (not imported: no import-time cost)."""
    return importlib.util.find_spec("torchao") is not None


def fp8_support(device) -> tuple[bool, bool, str]:
    """``(trainable, emulated, why)``: whether the engine can train in fp8 on ``device`` at all, and
    whether it does so in torchao's emulation (no fp8 hardware here)."""
    from ..devices import mode_support

    if not torchao_installed():
        return False, False, FP8_EXTRA
    broken = torchao_import_error() if _check_import else None
    if broken:  # found but broken: said now, before any work (not after fp32 trained)
        return False, False, broken
    native, why = mode_support("fp8", device)
    if native:
        return True, False, f"{why}; torchao float8 training kernels"
    return True, True, (f"{why}; fp8 numerics can be tried here in torchao's emulation (emulate=True), "
                        "without fp8 speed")


#: whether fp8_support imports torchao to find a broken install (off inside :func:`found_only`)
_check_import = True


@contextlib.contextmanager
def found_only():
    """Inside: :func:`fp8_support` asks only whether torchao is found, without importing it (a second
    or two): for the doctor, which says whether fp8 could run without running it (its --thorough
    self-test runs the engine, and a broken install fails there with its reason)."""
    global _check_import
    before, _check_import = _check_import, False
    try:
        yield
    finally:
        _check_import = before


@functools.lru_cache(maxsize=1)
def torchao_import_error() -> str | None:
    """Why torchao's float8 API cannot be imported (a broken install: the import fails or raises),
    else None. Imports it once (a second or two): called only where fp8 is asked for."""
    try:
        _torchao_float8()
    except ModeUnavailableError as exc:
        return str(exc)
    return None


def _torchao_float8():
    """torchao's float8 training API: ``convert_to_float8_training``, ``Float8LinearConfig``, ``Float8Linear``."""
    # torchao's import logs a deprecation of torch's pytree API (register_constant on an Enum) on
    # every run: torch's and torchao's business, not the user's, so it stays out of ampkit's output
    pytree_log = logging.getLogger("torch.utils._pytree")
    level = pytree_log.level
    pytree_log.setLevel(logging.ERROR)
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        from torchao.float8.float8_linear import Float8Linear
    except Exception as exc:  # a broken install (an ImportError, or an error raised while importing) reads
        # like a missing one, with its cause
        raise ModeUnavailableError(f"{FP8_EXTRA} (import failed: {one_line(exc, 200)})") \
            from None
    finally:
        pytree_log.setLevel(level)
    return types.SimpleNamespace(convert_to_float8_training=convert_to_float8_training,
                                 Float8LinearConfig=Float8LinearConfig, Float8Linear=Float8Linear)


class Fp8Training:
    """The fp8 part of one engine: the recipe, emulated or not, and the layers converted.

    Plain values only (no torchao objects), so ``copy.deepcopy(mp)`` and ``pickle`` keep working.
    """

    def __init__(self, device, recipe: str | None = "tensorwise", skip_first_last: bool = True,
                 module_filter=None) -> None:
        recipe = "tensorwise" if recipe is None else recipe
        if not isinstance(recipe, str) or recipe.strip().lower() not in RECIPES:
            raise UsageError(f"fp8_recipe must be one of {', '.join(RECIPES)}; received {recipe!r}")
        if not isinstance(skip_first_last, bool):
            raise UsageError(f"fp8_skip_first_last must be True or False; received {skip_first_last!r}")
        if module_filter is not None and not callable(module_filter):
            raise UsageError(f"fp8_filter must be a callable (module, name) -> bool, like torchao's module_filter_fn; "
                             f"received {type(module_filter).__name__}")
        ok, emulated, why = fp8_support(device)
        if not ok:
            raise ModeUnavailableError(why)
        _torchao_float8()  # asked for fp8: fail now, in one line, when torchao cannot be imported
        self.recipe = recipe.strip().lower()
        self.skip_first_last = skip_first_last
        self.module_filter = module_filter
        self.emulated = emulated
        self.reason = f"fp8 ({self.recipe}) requested: {why}"
        #: [{"name", "shape": [out, in], "converted", "reason"}] of every Linear, after prepare()
        self.layers: list[dict] = []
        #: a precision plan's say, ``(name, module) -> why it stays out of fp8, or None`` (.islands)
        self.plan_verdict = None

    def config(self):
        """torchao's ``Float8LinearConfig`` for the recipe, ``emulate`` set where there is no fp8 hardware."""
        cfg = _torchao_float8().Float8LinearConfig.from_recipe_name(self.recipe)
        return dataclasses.replace(cfg, emulate=True) if self.emulated else cfg

    def convert(self, model):
        """Swap the eligible Linear layers for torchao's Float8Linear (in place where torchao does;
        a root Linear is returned anew) and record every Linear in :attr:`layers`."""
        import torch.nn as nn

        float8 = _torchao_float8()
        linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
        ends = {}
        if linears and self.skip_first_last:
            ends = {linears[0][0]: "first", linears[-1][0]: "last"} if len(linears) > 1 else {linears[0][0]: "only"}
        plan = {name: self._verdict(name, m, ends.get(name), float8.Float8Linear) for name, m in linears}

        def module_filter_fn(mod, fqn: str) -> bool:
            return plan.get(fqn, (False, ""))[0] and not isinstance(mod, float8.Float8Linear)

        if any(convert and not isinstance(m, float8.Float8Linear) for (convert, _), (_, m) in zip(plan.values(), linears)):
            model = float8.convert_to_float8_training(model, module_filter_fn=module_filter_fn, config=self.config())
        self.layers = [{"name": name or "(root)", "shape": [m.out_features, m.in_features], "converted": plan[name][0],
                        "reason": plan[name][1]} for name, m in linears]
        return model

    def _verdict(self, name: str, m, end: str | None, float8_linear) -> tuple[bool, str]:
        import torch.nn as nn

        if isinstance(m, float8_linear):
            return True, "already a torchao Float8Linear"
        kept = self.plan_verdict(name, m) if self.plan_verdict is not None else None
        if kept:
            return False, kept
        if type(m) is not nn.Linear:
            return False, (f"{type(m).__name__} subclasses nn.Linear (its owner may call its weight directly, as "
                           "nn.MultiheadAttention does): kept as it is")
        if end is not None:
            return False, (f"the {end} Linear layer: kept in bf16 (fp8_skip_first_last=True; "
                           "MixedPrecision('fp8', fp8_skip_first_last=False) converts it too)")
        bad = [f"{what} {n}" for what, n in (("in_features", m.in_features), ("out_features", m.out_features))
               if n % MULTIPLE]
        if bad:
            return False, f"{' and '.join(bad)} not a multiple of {MULTIPLE} (fp8 matmuls need it): kept in bf16"
        if self.module_filter is not None and not self.module_filter(m, name):
            return False, "your fp8_filter returned False: kept in bf16"
        kind = "emulated" if self.emulated else "fp8 kernels"
        return True, f"converted to torchao Float8Linear ({self.recipe}, {kind})"

    def state_dict(self) -> dict:
        return {"recipe": self.recipe, "emulated": self.emulated, "skip_first_last": self.skip_first_last,
                "converted": [d["name"] for d in self.layers if d["converted"]]}

    def load_state_dict(self, state: dict | None) -> None:
        """Refuse a checkpoint of another recipe (its numerics differ); the layers' weights are the
        model's own state_dict, and torchao's dynamic scaling keeps no state between steps."""
        if not state:
            return
        if state.get("recipe") != self.recipe:
            raise ValueError(f"this state was saved with fp8_recipe={state.get('recipe')!r} but the engine runs "
                             f"fp8_recipe={self.recipe!r}; create MixedPrecision with the same recipe to resume")
