"""``ampkit.integrations.transformers.AmpkitCallback``: a HuggingFace ``TrainerCallback`` (extra
``ampkit[transformers]``). The implementation lives in the torch backend
(``ampkit.backends.torch.integrations.hf``), where everything that imports torch stays."""

from __future__ import annotations

from ..backends.torch.integrations.hf import AmpkitCallback

__all__ = ["AmpkitCallback"]
