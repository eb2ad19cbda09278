"""ampkit inside the trainers people already use.

* ``ampkit.integrations.transformers.AmpkitCallback`` — a HuggingFace ``TrainerCallback``
  (extra ``ampkit[transformers]``);
* ``ampkit.integrations.lightning.AmpkitCallback`` — a Lightning ``Callback``; Fabric users pass the
  same object to ``Fabric(callbacks=[...])`` (extra ``ampkit[lightning]``).

Both read the trainer's own scaler and optimizers and keep a skip ledger, the loss-scale health
alarm (:mod:`ampkit.health`), the check that the LR scheduler did not advance on a skipped step, a
pre-failure ring buffer written as an ``audit``-compatible document on the first inf/NaN, and the
declared precision checked against what runs. The framework-neutral bookkeeping is
:mod:`ampkit.integrations.record`; the torch side lives in ``ampkit.backends.torch.integrations``
(everything that imports torch stays in the torch backend). ``import ampkit`` imports none of this.
"""
