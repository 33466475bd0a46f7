"""`--speculative ngram|off` and `--draft-model`, shared by the chat and `serve`, reach EngineConfig;
n-gram drafting is the default."""

from __future__ import annotations

import argparse

import pytest

from cli.flags import UsageError, add_engine_flags, add_sampling_flags, model_flags
from engine import DEFAULT_SPECULATIVE, EngineConfig


def parse(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    add_engine_flags(parser)
    add_sampling_flags(parser)
    return model_flags(parser.parse_args(argv)).engine


def test_speculative_flag_sets_the_engine_config() -> None:
    assert parse([])["speculative"] == DEFAULT_SPECULATIVE == EngineConfig().speculative == "ngram"
    off = EngineConfig(**{k: v for k, v in parse(["--speculative", "off"]).items() if k != "device"})
    assert off.speculative == "off" and off.max_drafts == 0


def test_an_unknown_speculative_mode_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse(["--speculative", "eagle"])
    with pytest.raises(ValueError, match="speculative must be one of ngram, off"):
        EngineConfig(speculative="eagle")


def test_draft_model_flag_reaches_the_engine_config(tiny_ckpt) -> None:
    assert parse([])["draft_model"] is None
    engine = parse(["--draft-model", str(tiny_ckpt)])
    assert EngineConfig(**{k: v for k, v in engine.items() if k != "device"}).draft_model == str(tiny_ckpt)


def test_draft_model_with_speculation_off_is_refused() -> None:
    with pytest.raises(UsageError, match="--draft-model drafts for speculative decoding"):
        parse(["--draft-model", "LiquidAI/LFM2-350M", "--speculative", "off"])
