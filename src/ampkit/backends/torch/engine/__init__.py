"""The PyTorch training engine, ``ampkit.MixedPrecision`` (issue #21 split it by concept).

* :mod:`.mixed_precision` — the front: :class:`MixedPrecision` and :class:`StepResult`, one code path
  for every mode;
* :mod:`.regions` — the forward region of a mode (TF32 flags or ``torch.autocast``);
* :mod:`.scaling` — loss scaling: ``torch.amp.GradScaler`` wrapped, or nothing; the host-side scale
  mirror; every host-device sync of a step, stated;
* :mod:`.distributed` — DDP and FSDP: the sharded scaler, gradient sync during accumulation, clipping;
* :mod:`.schedulers` — LR schedulers, never stepped on a skipped step;
* :mod:`.following` — the optimizers seen, by identity;
* :mod:`.alarm` — the loss-scale alarm (``mp.health()``, :class:`ampkit.LossScaleWarning`), fed from
  the host mirror;
* :mod:`.contract` and :mod:`.watch` — the precision contract check (``mp.verify``, ``verify_torch``)
  and the one-shot recorder of a real forward and step it reads;
* :mod:`.copying` — ``pickle`` and ``copy.deepcopy`` of an engine.
"""

from .mixed_precision import MixedPrecision, StepResult

__all__ = ["MixedPrecision", "StepResult"]
