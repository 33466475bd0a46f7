"""`--speculative ngram|off`, shared by the chat and `serve`, reaches EngineConfig; n-gram is the default."""

from __future__ import annotations

import argparse

import pytest

from cli.flags import add_engine_flags, add_sampling_flags, model_flags
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
