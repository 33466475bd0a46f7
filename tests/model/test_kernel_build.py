"""The native kernels' build: what makes torch reuse a build, what must not, and a killed build's lock."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

# the package re-exports a function named build over its module of that name
build = importlib.import_module("model.native.kernels.build")


def _copy_sources(folder: Path) -> tuple[Path, ...]:
    folder.mkdir()
    return tuple(Path(shutil.copy(source, folder / source.name)) for source in build.SOURCES)


def test_two_copies_of_the_same_sources_build_under_two_names(tmp_path):
    """A checkout and an installed wheel: torch's build file names sources by absolute path, so one
    shared name would make each rebuild over the other at every launch."""
    checkout = _copy_sources(tmp_path / "checkout")
    wheel = _copy_sources(tmp_path / "site-packages")
    assert build._digest(checkout, "avx2") != build._digest(wheel, "avx2")


def test_a_build_is_reused_only_for_the_same_sources_and_flags(tmp_path):
    sources = _copy_sources(tmp_path / "checkout")
    first = build._digest(sources, "avx2")
    assert build._digest(sources, "avx2") == first
    assert build._digest(sources, "avxvnni") != first
    sources[0].write_text(sources[0].read_text() + "\n// changed\n")
    assert build._digest(sources, "avx2") != first


def test_a_killed_builds_lock_is_removed_and_a_running_builds_is_kept(tmp_path):
    """torch waits forever on the lock a killed build (kill -9 during the first launch) left behind."""
    lock = tmp_path / "lock"
    lock.touch()
    made = lock.stat().st_mtime
    assert not build.clear_stale_lock(tmp_path, now=made + 60) and lock.exists()  # a build under way
    assert build.clear_stale_lock(tmp_path, now=made + build.STALE_LOCK_SECONDS + 1)
    assert not lock.exists()
    assert not build.clear_stale_lock(tmp_path)  # no lock: nothing to do
