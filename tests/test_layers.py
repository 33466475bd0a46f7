"""The layers point one way, read from the source with ast (DESIGN.md):

    cli -> app    -> engine -> model
    cli -> server -> engine -> model

The app sees `engine`'s public API only (`from engine import ...`, the names docs/ENGINE_API.md
lists), never its modules nor model/; server/ uses that API as the app does and never imports the
app; the command line (cli/) sits above both and talks to the engine through the same API; the
engine knows nothing above it, nor does the model.

Inside each of engine/, app/ and model/ the wings are floors (WINGS): a wing imports only the wings
on the floors below it, never one beside it or above. Inside model/, the architectures
(model/arch/) are plain PyTorch that reads like the reference: the native acceleration
(model/native/) builds on them and is swapped in underneath by the loader, so arch/ never imports
native/. Inside engine/, core/ is what every part shares and runs no model; the loop (scheduler,
runner, engine) stands on the parts. Inside app/, only ui/ (and the App in app.py) imports
Textual: the session (the conversation outside the widget) stands below the ui.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imports(package: str) -> Iterator[tuple[str, str]]:
    """(file, module) for every import in the package, nested ones (lazy, TYPE_CHECKING) included."""
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                yield from ((where, alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                yield where, node.module
                if node.module in ("engine", "model"):  # `from engine import worker` is a module too
                    yield from (
                        (where, f"{node.module}.{a.name}")
                        for a in node.names
                        if is_module(node.module, a.name)
                    )


def is_module(package: str, name: str) -> bool:
    return (ROOT / package / f"{name}.py").is_file() or (ROOT / package / name).is_dir()


def top(module: str) -> str:
    return module.partition(".")[0]


ABOVE_ENGINE = {"app", "server", "cli", "bench"}
RULES = {
    # package: (top-level packages it must not import, whether engine.<submodule> is allowed)
    "app": ({"model", "server", "cli", "bench"}, False),
    "cli": ({"model"}, False),
    "engine": (ABOVE_ENGINE, True),
    "model": ({"engine", *ABOVE_ENGINE}, True),
    "server": ({"model", "app", "cli", "bench"}, False),
}


@pytest.mark.parametrize("package", sorted(RULES))
def test_imports_point_down_the_layers(package: str) -> None:
    if not (ROOT / package).is_dir():
        pytest.skip(f"no {package}/ in this checkout")
    forbidden, submodules_ok = RULES[package]
    wrong = [
        f"{where}: {module}"
        for where, module in imports(package)
        if top(module) in forbidden or (not submodules_ok and module.startswith("engine."))
    ]
    assert not wrong, "imports against the layers (see the docstring):\n" + "\n".join(wrong)


# each package's wings from the bottom floor up; wings in one tuple share a floor
WINGS = {
    "engine": ["core", ("kv", "sample", "structured"), "speculative", "loop", "worker"],
    "app": ["core", ("backend", "tools"), "store", "session", "ui"],
    "model": ["arch", ("native", "text"), "quant", "checkpoint", "tiny"],
}


def inner_rules() -> dict[str, tuple[str, ...]]:
    """wing folder -> the wings of its package it must not import (its own floor and those above)."""
    rules = {}
    for package, floors in WINGS.items():
        floors = [(f,) if isinstance(f, str) else f for f in floors]
        for level, floor in enumerate(floors):
            higher = [w for f in floors[level:] for w in f]
            for wing in floor:
                rules[f"{package}/{wing}"] = tuple(f"{package}.{w}" for w in higher if w != wing)
    for wing in ("core", "backend", "tools", "store", "session"):
        rules[f"app/{wing}"] += ("textual",)
    return rules


INNER_RULES = inner_rules()


def test_every_wing_has_a_floor() -> None:
    """A new folder in engine/, app/ or model/ is placed on a floor, so the rule above covers it."""
    for package, floors in WINGS.items():
        placed = {w for f in floors for w in ((f,) if isinstance(f, str) else f)}
        folders = {p.name for p in (ROOT / package).iterdir() if (p / "__init__.py").is_file()}
        assert folders == placed, f"{package}/: place each wing on a floor in WINGS"


@pytest.mark.parametrize("package", sorted(INNER_RULES))
def test_inner_packages_point_one_way(package: str) -> None:
    wrong = [
        f"{where}: {module}"
        for where, module in imports(package)
        if any(module == other or module.startswith(f"{other}.") for other in INNER_RULES[package])
    ]
    assert not wrong, "imports against the floors of the wings (see the docstring):\n" + "\n".join(wrong)
