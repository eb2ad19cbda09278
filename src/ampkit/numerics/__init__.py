"""``ampkit audit``: per-layer numerics (the implementation of the command)."""
