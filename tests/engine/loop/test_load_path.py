"""Loading resolves once: each load reads a checkpoint's config.json once and resolves the engine's
config once, whichever entry point starts it and whether or not a draft model comes along.

The loads are real (tiny checkpoints); only the two calls are wrapped, to count them.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

import pytest

from engine import CheckpointError, Engine, EngineConfig, ModelSource, SamplingParams, load_engine
from model.checkpoint.loader import load_model
from model.native import kernels as native_kernels
from model.text.tokenizer import Tokenizer
from tests.engine.speculative.test_draft_model import DRAFT_PRESET

CONFIG = {"dtype": "float32", "num_kv_blocks": 64}
GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


class Counts:
    """How often the engine's config was resolved, and each checkpoint's config.json opened: through
    Path.open, or os.open (model/small_file.py reads a checkpoint's files as untrusted)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.resolves = 0
        self.config_reads: Counter[Path] = Counter()
        resolve, open_file, os_open = EngineConfig.resolve, Path.open, os.open

        def counting_resolve(config: EngineConfig, *args, **kwargs) -> EngineConfig:
            self.resolves += 1
            return resolve(config, *args, **kwargs)

        def counting_open(path: Path, *args, **kwargs):
            if path.name == "config.json":  # Path.read_text and read_bytes open through here too
                self.config_reads[path.parent.resolve()] += 1
            return open_file(path, *args, **kwargs)

        def counting_os_open(path: str | os.PathLike[str], *args, **kwargs) -> int:
            if Path(path).name == "config.json":
                self.config_reads[Path(path).parent.resolve()] += 1
            return os_open(path, *args, **kwargs)

        monkeypatch.setattr(EngineConfig, "resolve", counting_resolve)
        monkeypatch.setattr(Path, "open", counting_open)
        monkeypatch.setattr(os, "open", counting_os_open)


@pytest.fixture
def draft_ckpt(tiny_ckpt_factory) -> Path:
    """Another model with the tiny checkpoints' tokenizer."""
    return tiny_ckpt_factory(DRAFT_PRESET)


@pytest.mark.parametrize("with_draft", [False, True], ids=["alone", "with-draft"])
def test_from_pretrained_reads_and_resolves_the_config_once(tiny_ckpt, draft_ckpt, with_draft, monkeypatch):
    draft = {"draft_model": str(draft_ckpt)} if with_draft else {}
    counts = Counts(monkeypatch)
    engine = Engine.from_pretrained(tiny_ckpt, EngineConfig(**CONFIG, **draft))
    assert counts.resolves == 1
    expected = {tiny_ckpt.resolve(): 1, **({draft_ckpt.resolve(): 1} if with_draft else {})}
    assert dict(counts.config_reads) == expected
    assert len(engine.generate([[20, 21, 22]], GREEDY)[0].token_ids) == 4


def test_an_engine_on_a_loaded_model_resolves_once_and_loads_the_draft_once(
    tiny_ckpt, draft_ckpt, monkeypatch
):
    model, tokenizer = load_model(tiny_ckpt, "float32"), Tokenizer.from_pretrained(tiny_ckpt)
    counts = Counts(monkeypatch)
    engine = Engine(model, tokenizer, EngineConfig(**CONFIG, draft_model=str(draft_ckpt)))
    assert counts.resolves == 1
    assert dict(counts.config_reads) == {draft_ckpt.resolve(): 1}  # the model's was read by its caller
    engine.generate([[20, 21, 22, 20, 21, 22]], GREEDY)
    assert engine.metrics.spec_draft_tokens > 0


def test_a_launch_reads_and_resolves_once_and_reports_each_stage_in_order(
    tiny_ckpt, draft_ckpt, tmp_path, monkeypatch
):
    """The app's and `serve`'s path (engine/loop/launch.py), the stages as the loading screen shows them."""
    stages: list[str] = []

    def progress(stage: str, fraction: float | None) -> None:
        if not stages or stages[-1] != stage:
            stages.append(stage)

    counts = Counts(monkeypatch)
    source = ModelSource(model=str(tiny_ckpt))
    load_engine(source, {**CONFIG, "draft_model": str(draft_ckpt)}, tmp_path, progress)
    assert counts.resolves == 1
    assert dict(counts.config_reads) == {tiny_ckpt.resolve(): 1, draft_ckpt.resolve(): 1}
    kernels = [s for s in stages if s.startswith("building CPU kernels")]
    assert stages == [
        "locating checkpoint",  # once: Engine.from_pretrained takes the directory the launch located
        "importing PyTorch",
        *kernels,
        "loading weights",
        "draft model: locating checkpoint",
        "draft model: loading weights",
        "allocating cache",
    ]


def test_a_launch_says_building_kernels_only_when_they_are_not_built(tiny_ckpt, tmp_path):
    """Once built (a launch before this one), the kernels load in a moment: no "first launch" stage."""
    if native_kernels.load() is None:
        pytest.skip(f"native CPU kernels cannot run here: {native_kernels.unavailable_reason()}")
    stages: list[str] = []
    load_engine(ModelSource(model=str(tiny_ckpt)), CONFIG, tmp_path, lambda stage, _: stages.append(stage))
    assert "loading weights" in stages
    assert not [s for s in stages if s.startswith("building CPU kernels")]


def test_a_launch_builds_the_engine_on_a_thread_that_has_ended_when_it_returns(tiny_ckpt, tmp_path):
    """OpenMP keeps a pool of workers for each thread that ran a parallel loop while that thread
    lives; the loading thread's would slow every step of the engine thread's team (launch.py)."""
    loaders: set[threading.Thread] = set()

    def progress(stage: str, fraction: float | None) -> None:
        loaders.add(threading.current_thread())

    load_engine(ModelSource(model=str(tiny_ckpt)), CONFIG, tmp_path, progress)
    builders = [t for t in loaders if t is not threading.current_thread()]
    assert builders, "no stage of the load ran off the caller's thread"
    assert not any(t.is_alive() for t in builders)


def test_a_launch_that_fails_raises_in_the_caller(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError):
        load_engine(ModelSource(model=str(broken)), CONFIG, tmp_path, lambda stage, _: None)
