"""How loading reports to a UI: a callable taking the stage and its fraction done, if known.

Its own module because both the launcher (engine/launch.py) and what it launches (engine/build.py,
engine/engine.py) take one: with the alias in the launcher the two imported each other.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str, "float | None"], None]
