"""Tiny random checkpoints for tests and the offline --demo (no real weights can be downloaded here)."""
