"""How loading reports to a UI: the callable every stage reports to, from the Hub download to the cache.

Defined here, below both of its users: the loader (model/checkpoint/loader.py) reports its weight
stages to one, and the engine's load path (engine/loop/build.py, engine/loop/launch.py) passes the UI's down
to it. Torch-free, so the launcher can name it before torch is imported.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str, "float | None"], None]
"""``progress(stage, fraction)``: what is being done, and how much of it is (None: not known)."""

FractionDone = Callable[[float], None]
"""One stage's own progress, 0 to 1: what a step inside a stage reports to the stage."""
