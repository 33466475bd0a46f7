"""Shared fixtures: tiny random LFM2 checkpoints (real weights cannot be downloaded in CI).

``native``             the compiled kernels, once per instruction set this CPU runs (AVX-512
                       machines test their AVX2 build too); skipped, with the reason, only where
                       the CPU runs none. A build that fails where the CPU could run it fails.
``native_models``      ``native``, with every model the test loads running on that build.
``bf16_kernels``       each way a bf16 model runs here: every native build, then PyTorch's kernels.
``tiny_ckpt``          Path of the "default" preset (conv-first, GQA, tied head), made once per session.
``tiny_ckpt_factory``  ``make(preset="default", **overrides) -> Path``: a checkpoint for a named preset
                       of ``model.tiny.lfm2.TINY_CONFIGS`` (LFM2), ``model.tiny.lfm3.TINY_LFM3_CONFIGS`` or
                       ``model.tiny.lfm2_moe.TINY_MOE_CONFIGS`` (LFM2-MoE),
                       with any keyword of its writer overridden (``seed=1``, ``dtype=torch.bfloat16``,
                       ``layer_types=[...]``...).
                       Written as the Hub holds checkpoints: by transformers' save_pretrained
                       (tests/transformers_writer.py), from the writer's seeded weights; by the writer
                       alone where transformers is not installed (tests/model/test_tiny.py: both agree).
                       Each distinct request is written once per session and reused; treat the
                       directories as read-only (copy one with shutil.copytree before editing).

Torch runs single-threaded in tests: the tiny models are far too small to gain from threads, and
on a shared 2-core machine several processes with 2 threads each slow everything down ~50x.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from model.checkpoint import quantized_cache
from model.native import kernels
from model.tiny.lfm2 import TINY_CONFIGS, write_tiny_checkpoint
from model.tiny.lfm2_moe import TINY_MOE_CONFIGS, write_tiny_moe_checkpoint
from model.tiny.lfm3 import TINY_LFM3_CONFIGS, write_tiny_lfm3_checkpoint
from tests import markers

TinyCheckpointFactory = Callable[..., Path]
RUNNABLE_ISAS = kernels.runnable_isas()
# every tiny preset with the writer of its architecture
TINY_PRESETS: dict[str, tuple[Callable[..., Path], dict[str, Any]]] = {
    **{name: (write_tiny_checkpoint, fields) for name, fields in TINY_CONFIGS.items()},
    **{name: (write_tiny_lfm3_checkpoint, fields) for name, fields in TINY_LFM3_CONFIGS.items()},
    **{name: (write_tiny_moe_checkpoint, fields) for name, fields in TINY_MOE_CONFIGS.items()},
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    markers.apply(items)  # pilot and subprocess, by rule
    markers.costliest_files_first(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with markers.pilot_only_if_marked(item):
        return (yield)


@pytest.fixture(scope="session", autouse=True)
def _single_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _private_quantized_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Quantized weights cached by any test (and its subprocesses) go to a temporary directory, never
    to the user's cache; set in os.environ so session fixtures built before any test see it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(quantized_cache.CACHE_ENV, str(tmp_path_factory.mktemp("quantized-cache")))
        yield


@pytest.fixture(scope="session", autouse=True)
def _kernels_built() -> None:
    """Compile this machine's native kernels before the first test: in a fresh checkout the build
    takes a minute or more, which must not fall inside an app test's wait for its chat screen."""
    kernels.load()


def in_hub_format(ours: Path, out: Path) -> Path:
    """``ours`` written again by transformers' save_pretrained (tests/transformers_writer.py), as the Hub
    holds checkpoints; ``ours`` itself where transformers is not installed."""
    try:
        from tests.transformers_writer import resave_with_transformers
    except ImportError:
        return ours
    return resave_with_transformers(ours, out)


@pytest.fixture(scope="session")
def tiny_ckpt_factory(tmp_path_factory: pytest.TempPathFactory) -> TinyCheckpointFactory:
    made: dict[str, Path] = {}

    def make(preset: str = "default", **overrides: Any) -> Path:
        if preset not in TINY_PRESETS:
            raise KeyError(f"unknown tiny preset {preset!r}; choose from {sorted(TINY_PRESETS)}")
        key = json.dumps([preset, overrides], sort_keys=True, default=str)
        if key not in made:
            write, fields = TINY_PRESETS[preset]
            ours = write(tmp_path_factory.mktemp(f"tiny-{preset}-ours"), **{**fields, **overrides})
            made[key] = in_hub_format(ours, tmp_path_factory.mktemp(f"tiny-{preset}"))
        return made[key]

    return make


@pytest.fixture(scope="session")
def tiny_ckpt(tiny_ckpt_factory: TinyCheckpointFactory) -> Path:
    return tiny_ckpt_factory("default")


@pytest.fixture(params=RUNNABLE_ISAS or [None], ids=lambda isa: isa or "no-isa", scope="session")
def native(request: pytest.FixtureRequest) -> ModuleType:
    isa = request.param
    if isa is None:
        pytest.skip(f"native CPU kernels cannot run on this machine: {kernels.unavailable_reason()}")
    module, reason = kernels.availability(isa)
    if module is None:
        pytest.fail(f"the {isa} kernels did not build on a CPU that runs them: {reason}")
    assert isa == module.ISA
    return module


@contextlib.contextmanager
def _models_on(monkeypatch: pytest.MonkeyPatch, isa: str | None) -> Iterator[None]:
    """Models loaded meanwhile use the ``isa`` build, or PyTorch's kernels where it is None."""
    if isa is None:
        monkeypatch.setenv(kernels.DISABLE_ENV, "0")
    else:
        monkeypatch.setenv(kernels.ISA_ENV, isa)
    kernels.clear_cache()
    yield
    kernels.clear_cache()


@pytest.fixture
def native_models(native: ModuleType, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    with _models_on(monkeypatch, native.ISA):
        yield native


@pytest.fixture(params=[*RUNNABLE_ISAS, "torch"])
def bf16_kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with _models_on(monkeypatch, None if request.param == "torch" else request.param):
        yield request.param
