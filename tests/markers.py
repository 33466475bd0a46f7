"""The ``pilot`` and ``subprocess`` markers, set by a rule so no test can forget them.

A test is ``pilot`` when it drives the Textual app (``App.run_test``, or pytest-textual-snapshot's
``snap_compare``), and ``subprocess`` when it starts a program of its own (``subprocess.run``,
``Popen``...). The rule reads the code the test runs from tests/: the test function, the fixtures
it requests, and every function or class of tests/ those name, transitively. A test that reaches
either only through the project's own code (bench's RSS workload starts a process) is marked by
hand; one that runs Pilot unmarked fails (``pilot_only_if_marked``). ``slow`` is set by hand,
from measured durations (docs/TESTING.md).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.app import App

TESTS = Path(__file__).resolve().parent
RULES: dict[str, re.Pattern[str]] = {
    "pilot": re.compile(r"\.run_test\("),
    "subprocess": re.compile(r"\bsubprocess\.(?:run|Popen|call|check_call|check_output)\(|\bPopen\("),
}
PILOT_FIXTURES = frozenset({"snap_compare"})  # pytest-textual-snapshot runs the app under Pilot


def apply(items: list[pytest.Item]) -> None:
    """Add each rule's marker to the collected test functions its pattern finds in their code."""
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        sources = [_source(code) for code in _reached(item)]
        for marker, pattern in RULES.items():
            if any(pattern.search(text) for text in sources):
                item.add_marker(marker)
        if PILOT_FIXTURES.intersection(item.fixturenames):
            item.add_marker("pilot")


# A rough cost per test by its markers (seconds on an idle core, from --durations): enough to rank files.
COST_BY_MARKER = {"slow": 20.0, "subprocess": 8.0, "pilot": 4.0}
PLAIN_TEST_COST = 0.2


def costliest_files_first(items: list[pytest.Item]) -> None:
    """Order the files by their estimated cost, dearest first, each file's tests in their own order.

    pytest-xdist hands out whole files (bin/test: --dist loadfile --no-loadscope-reorder) in this
    order; its own default, most tests first, left the few-test files that take a minute (a
    hostile server, 8 panes streaming) for last, where one worker ran them while the other idled.
    """

    def cost(item: pytest.Item) -> float:
        marked = [COST_BY_MARKER[m] for m in COST_BY_MARKER if item.get_closest_marker(m) is not None]
        return max(marked, default=PLAIN_TEST_COST)

    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    by_file: dict[str, float] = {}
    for item in items:
        by_file[file_of(item)] = by_file.get(file_of(item), 0.0) + cost(item)
    items.sort(key=lambda item: -by_file[file_of(item)])  # stable: in-file order kept


@contextlib.contextmanager
def pilot_only_if_marked(item: pytest.Item) -> Iterator[None]:
    """While ``item`` runs, ``App.run_test`` fails unless it is marked ``pilot``: what the rule missed
    shows up as a failure naming the fix, not as a Pilot test in the quick loop."""
    if item.get_closest_marker("pilot") is not None:
        yield
        return

    def unmarked(*args: object, **kwargs: object) -> None:
        raise AssertionError(
            f"{item.nodeid} drives the app under Pilot but is not marked: add @pytest.mark.pilot"
        )

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(App, "run_test", unmarked)
        yield


def _reached(item: pytest.Function) -> set[types.CodeType]:
    """The code under tests/ that ``item`` may run: its function, its fixtures, and what they name."""
    fixtures = [d.func for definitions in item._fixtureinfo.name2fixturedefs.values() for d in definitions]
    pending = [f for f in map(_written_in_tests, [item.function, *fixtures]) if f is not None]
    seen: set[types.CodeType] = set()
    while pending:
        function = pending.pop()
        if function.__code__ not in seen:
            seen.add(function.__code__)
            pending.extend(_named_functions(function))
    return seen


def _written_in_tests(thing: object) -> types.FunctionType | None:
    """``thing`` as a plain function when it is one written in tests/ (a method's or fixture's too)."""
    function = inspect.unwrap(getattr(thing, "__func__", thing))
    if not isinstance(function, types.FunctionType):
        return None
    return function if Path(function.__code__.co_filename).resolve().is_relative_to(TESTS) else None


@functools.cache
def _named_functions(function: types.FunctionType) -> list[types.FunctionType]:
    """The functions of tests/ that ``function`` names: directly, through a module of tests/, or as
    the methods of a class of tests/."""
    names = set(_names(function.__code__))
    found = []
    for thing in _named(function.__globals__, names):
        members = vars(thing).values() if isinstance(thing, type) else [thing]
        found.extend(f for f in map(_written_in_tests, members) if f is not None)
    return found


def _named(namespace: dict[str, object], names: set[str]) -> Iterator[object]:
    for name in names & namespace.keys():
        thing = namespace[name]
        if isinstance(thing, types.ModuleType) and _in_tests(thing):
            yield from (vars(thing)[attr] for attr in names & vars(thing).keys())
        else:
            yield thing


def _names(code: types.CodeType) -> Iterator[str]:
    """Every global or attribute name ``code`` and its nested functions and lambdas use."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def _in_tests(module: types.ModuleType) -> bool:
    path = getattr(module, "__file__", None)
    return path is not None and Path(path).resolve().is_relative_to(TESTS)


@functools.cache
def _source(code: types.CodeType) -> str:
    try:
        return inspect.getsource(code)
    except (OSError, TypeError):  # made at run time (exec), no file to read
        return ""
