"""The pane session is plain Python: nothing it imports, directly or through other app modules,
is Textual or the widgets and screens that draw it (read from the source with ast, as
tests/test_layers.py reads the layers)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FORBIDDEN = ("textual", "app.ui.widgets", "app.ui.screens")


def module_path(module: str) -> Path | None:
    """The file of an `app` module, if it is one of ours."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported(path: Path) -> set[str]:
    """Every module `path` imports, nested imports (lazy, TYPE_CHECKING) included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # a submodule, maybe
    return names


def test_the_session_imports_nothing_from_textual_nor_from_the_views() -> None:
    seen: dict[str, str] = {}  # module -> the module that imported it first
    todo = [f"app.session.{p.stem}" for p in sorted((ROOT / "app" / "session").glob("*.py"))]
    seen.update((m, "app/session") for m in todo)
    wrong = []
    while todo:
        module = todo.pop()
        path = module_path(module)
        if path is None:
            continue
        for name in sorted(imported(path)):
            if name.startswith(FORBIDDEN):
                wrong.append(f"{module} imports {name} (reached from {seen[module]})")
            elif name.startswith("app") and name not in seen and module_path(name) is not None:
                seen[name] = module
                todo.append(name)
    assert not wrong, "app/session must run without Textual:\n" + "\n".join(wrong)
