"""A tokenizer whose native code panics on some text (here: a pre-tokenizer regex that runs past
Oniguruma's backtracking limit, which the Rust library turns into a panic, pyo3's PanicException,
a BaseException): that one request ends with a sentence, and the engine's thread serves on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine import EngineWorker, SamplingParams
from model.errors import TokenizerCrash
from model.text.tokenizer import Tokenizer
from tests.engine.streams import submit

CATASTROPHIC = {"type": "Split", "pattern": {"Regex": "(a|a)+$"}, "behavior": "Isolated", "invert": False}
PANICS = "a" * 40 + "b"  # (a|a)+$ tries 2**40 ways before it fails at the b
FINE = "Hello! How are you"
PARAMS = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


@pytest.fixture
def panicking_ckpt(tiny_ckpt: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, target)
    path = target / "tokenizer.json"
    spec = json.loads(path.read_text())
    pipeline = [spec["pre_tokenizer"]] if spec.get("pre_tokenizer") else []
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [CATASTROPHIC, *pipeline]}
    path.write_text(json.dumps(spec))
    return target


def test_the_panic_is_a_tokenizer_crash_naming_the_cause(panicking_ckpt: Path) -> None:
    tokenizer = Tokenizer.from_pretrained(panicking_ckpt)
    with pytest.raises(TokenizerCrash) as crashed:
        tokenizer.encode(PANICS)
    message = str(crashed.value)
    assert message.startswith("the checkpoint's tokenizer crashed on this text (") and "\n" not in message
    assert "retry-limit" in message
    assert tokenizer.encode(FINE)  # the tokenizer is still usable


def test_the_request_ends_with_a_sentence_and_the_worker_serves_on(panicking_ckpt: Path, make_engine) -> None:
    worker = EngineWorker(make_engine(panicking_ckpt, max_num_seqs=4)).start()
    try:
        _, good = submit(worker, FINE, PARAMS)
        _, bad = submit(worker, PANICS, PARAMS)
        (event,) = bad.until_finished()
        assert event.finish_reason == "error" and "tokenizer crashed" in event.error
        assert good.until_finished()[-1].finish_reason == "length"
        _, later = submit(worker, FINE, PARAMS)
        assert later.until_finished()[-1].finish_reason == "length"
    finally:
        worker.shutdown()
