"""The rule of tests/markers.py, seen by the tests it marks: each test reads its own markers.

The helpers and the fixture below are never run for what they start; the rule only reads them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
from textual.app import App


async def _drive_an_app() -> None:
    async with App().run_test() as pilot:
        await pilot.pause()


def _through_a_helper() -> Callable[[], object]:
    return _drive_an_app


@pytest.fixture
def start_a_process() -> Callable[[], object]:
    return lambda: subprocess.run([sys.executable, "-c", "pass"], check=True)


def markers(request: pytest.FixtureRequest) -> set[str]:
    return {mark.name for mark in request.node.iter_markers()}


def test_a_test_that_reaches_run_test_through_its_helpers_is_pilot(request: pytest.FixtureRequest) -> None:
    assert _through_a_helper() is _drive_an_app
    assert markers(request) >= {"pilot"} and "subprocess" not in markers(request)


def test_a_test_whose_fixture_starts_a_process_is_subprocess(
    request: pytest.FixtureRequest, start_a_process: Callable[[], object]
) -> None:
    assert callable(start_a_process)
    assert markers(request) >= {"subprocess"} and "pilot" not in markers(request)


def test_a_test_that_only_names_the_modules_is_neither(request: pytest.FixtureRequest) -> None:
    assert subprocess.__name__ == "subprocess" and App.__name__ == "App"
    assert not markers(request) & {"pilot", "subprocess"}


async def test_a_pilot_the_rule_cannot_see_fails_and_names_the_fix(request: pytest.FixtureRequest) -> None:
    run = getattr(App(), "run_" + "test")  # out of the rule's sight
    with pytest.raises(AssertionError, match=r"not marked: add @pytest\.mark\.pilot"):
        run()
    assert "pilot" not in markers(request)
