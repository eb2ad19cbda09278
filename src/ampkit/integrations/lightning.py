"""``ampkit.integrations.lightning.AmpkitCallback``: a Lightning ``Callback``, and the same object for
Fabric (``Fabric(callbacks=[cb])``; extra ``ampkit[lightning]``). The implementation lives in the
torch backend (``ampkit.backends.torch.integrations.lightning_cb``)."""

from __future__ import annotations

from ..backends.torch.integrations.lightning_cb import AmpkitCallback

__all__ = ["AmpkitCallback"]
