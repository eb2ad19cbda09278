"""Framework backends behind one small interface (:class:`~ampkit.backends.base.Backend`)."""
