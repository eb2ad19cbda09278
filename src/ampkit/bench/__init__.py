"""``ampkit bench``: training steps side by side in every mode."""
