"""Constrained decoding: a request's `Structure` (spec.py) compiled by llguidance (compiler.py)
into a token mask per step that the runner applies before sampling (masks.py)."""
