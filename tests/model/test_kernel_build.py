"""The native kernels' build: what makes torch reuse a build, what must not, and a killed build's lock."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import RUNNABLE_ISAS
from tests.waiting import HANG_GUARD

# the package re-exports a function named build over its module of that name
build = importlib.import_module("model.native.kernels.build")


def _copy_sources(folder: Path) -> tuple[Path, ...]:
    folder.mkdir()
    return tuple(Path(shutil.copy(source, folder / source.name)) for source in build.SOURCES)


def test_two_copies_of_the_same_sources_share_one_build(tmp_path):
    """A checkout, a fresh clone and an installed wheel build once between them: the name is the
    contents', and the build compiles copies staged in its own folder, at one absolute path."""
    checkout = _copy_sources(tmp_path / "checkout")
    wheel = _copy_sources(tmp_path / "site-packages")
    assert build._digest(checkout, "avx2") == build._digest(wheel, "avx2")
    folder = tmp_path / "build" / "src"
    staged = build.stage_sources(checkout, folder)
    assert [path.read_bytes() for path in staged] == [path.read_bytes() for path in build.SOURCES]
    assert (folder / "vec" / "avx2.h").read_bytes() == (
        build.SOURCES[0].parent / "vec" / "avx2.h"
    ).read_bytes()


def test_staging_again_leaves_the_staged_files_alone(tmp_path):
    """ninja rebuilds a source newer than its object: staging the same sources must not touch them."""
    folder = tmp_path / "src"
    staged = build.stage_sources(build.SOURCES, folder)
    before = [path.stat().st_mtime_ns for path in staged]
    for path in staged:  # an mtime a rewrite could not keep
        os.utime(path, ns=(1, 1))
    build.stage_sources(build.SOURCES, folder)
    assert [path.stat().st_mtime_ns for path in staged] == [1] * len(staged) != before


def test_a_build_is_reused_only_for_the_same_sources_and_flags(tmp_path):
    sources = _copy_sources(tmp_path / "checkout")
    first = build._digest(sources, "avx2")
    assert build._digest(sources, "avx2") == first
    assert build._digest(sources, "avxvnni") != first
    sources[0].write_text(sources[0].read_text() + "\n// changed\n")
    assert build._digest(sources, "avx2") != first


def test_a_killed_builders_lock_is_removed_once_it_is_dead_and_not_before(tmp_path):
    """torch waits forever on the lock file a killed build (kill -9 or SIGTERM during the first launch)
    left behind; the builder's flock says whether that builder still lives."""
    holder = (
        "import fcntl, sys, time, pathlib\n"
        f"d = pathlib.Path({str(tmp_path)!r})\n"
        "h = open(d / 'builder.lock', 'a'); fcntl.flock(h, fcntl.LOCK_EX)\n"
        "(d / 'lock').touch(); print('building', flush=True); time.sleep(600)\n"
    )
    builder = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    assert builder.stdout is not None and builder.stdout.readline() == "building\n"
    entered = threading.Event()

    def launch() -> None:
        with build.builder_lock(tmp_path):
            entered.set()

    waiting = threading.Thread(target=launch)
    waiting.start()
    assert not entered.wait(0.5) and (tmp_path / "lock").exists()  # a live build is waited for
    builder.kill()
    builder.wait()
    waiting.join(HANG_GUARD)
    assert entered.is_set() and not (tmp_path / "lock").exists()


def test_a_build_is_found_built_only_once_it_finished(tmp_path, monkeypatch):
    """The loading screen says "building CPU kernels" only when a compile is coming; a library file
    alone may be the half a killed link left."""
    from torch.utils.cpp_extension import LIB_EXT

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert not build.is_built("avx2")
    name = build.build_name("avx2")
    (tmp_path / name).mkdir(exist_ok=True)
    (tmp_path / name / f"{name}{LIB_EXT}").touch()
    assert not build.is_built("avx2")
    (tmp_path / name / "finished").touch()
    assert build.is_built("avx2") and not build.is_built("avxvnni")


def test_a_finished_build_loads_without_running_the_builder(monkeypatch):
    """A fresh clone's venv names torch's headers by another path: had ninja run, it would rebuild
    the whole library (a minute and a half on two cores) for the same sources and torch."""
    from torch.utils import cpp_extension

    from model.native.kernels import availability, chosen_isa

    isa, reason = chosen_isa()
    module, reason = availability()
    if isa is None or module is None:
        pytest.skip(f"no native kernels here: {reason}")
    assert build.is_built(isa)

    def no_builder(*args: object, **kwargs: object) -> None:
        raise AssertionError("the builder ran for a finished build")

    monkeypatch.setattr(cpp_extension, "load", no_builder)
    loaded, reason = build.build(isa)
    assert reason is None and loaded is not None and loaded.__file__ == module.__file__


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
@pytest.mark.parametrize("isa", [isa for isa in build.ISAS if isa not in RUNNABLE_ISAS] or [None])
def test_the_sources_compile_for_an_instruction_set_this_cpu_cannot_run(isa):
    """A user's CPU builds its widest set, which the suite on a narrower CPU never runs: once a
    change that compiled only for the sets at hand sent AVX512_BF16 CPUs back to PyTorch's kernels.
    A syntax check (templates instantiated, no code generated) of every source with that set's flags."""
    if isa is None:
        pytest.skip("this CPU runs every instruction set: the suite builds them all")
    from torch.utils.cpp_extension import include_paths

    includes = [
        flag for path in [*include_paths(), sysconfig.get_paths()["include"]] for flag in ("-isystem", path)
    ]
    command = [
        "g++",
        "-fsyntax-only",
        "-std=c++20",
        "-w",
        *build.compile_flags(isa),
        *includes,
        "-DTORCH_EXTENSION_NAME=syntax_check",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
    ]

    def check(source: Path) -> str:
        done = subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=300)
        return "" if done.returncode == 0 else f"{source.name}: {done.stderr[-2000:]}"

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        failures = [failure for failure in pool.map(check, build.SOURCES) if failure]
    assert not failures, "\n".join(failures)
