"""The torch side of the trainer callbacks (``ampkit.integrations``): the watch that hooks a model
(:mod:`.watch`), the HuggingFace ``TrainerCallback`` (:mod:`.hf`) and the Lightning ``Callback``
(:mod:`.lightning_cb`). Imported only by ``ampkit.integrations.transformers`` / ``.lightning``."""
