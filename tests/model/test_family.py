"""Per-family sampling defaults: the model card's values, picked from config.json and the repo name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import SamplingParams
from model.text.model_cards import SAMPLING_OFF, FamilySampling, checkpoint_sampling, recommended_sampling

LFM2 = {"temperature": 0.3, "top_k": 0, "top_p": 1.0, "min_p": 0.15, "repetition_penalty": 1.05}
LFM25 = {"temperature": 0.1, "top_k": 50, "top_p": 0.1, "min_p": 0.0, "repetition_penalty": 1.05}
THINKING = {"temperature": 0.05, "top_k": 50, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.05}


@pytest.mark.parametrize(
    ("repo", "name", "values"),
    [
        ("LiquidAI/LFM2-350M", "LFM2 card defaults", LFM2),
        ("LiquidAI/LFM2-1.2B", "LFM2 card defaults", LFM2),
        ("LiquidAI/LFM2.5-1.2B-Instruct", "LFM2.5 card defaults", LFM25),
        ("LiquidAI/LFM2.5-1.2B-Thinking", "LFM2.5 Thinking card defaults", THINKING),
        (
            "/cache/hub/models--LiquidAI--LFM2.5-1.2B-Thinking/snapshots/0123abc",
            "LFM2.5 Thinking card defaults",
            THINKING,
        ),
        ("/models/lfm2.5/my-finetune", "LFM2 card defaults", LFM2),  # a parent directory does not decide
        ("./ckpt", "LFM2 card defaults", LFM2),
    ],
)
def test_the_card_follows_the_repo_name(repo: str, name: str, values: dict[str, float]) -> None:
    family = recommended_sampling({"model_type": "lfm2"}, repo)
    assert family == FamilySampling(name, values)
    SamplingParams(**family.values)  # every row is a valid engine setting


def test_every_family_sets_every_knob() -> None:
    for repo in ("LiquidAI/LFM2-350M-Math", "LiquidAI/LFM2-1.2B-Tool", "LiquidAI/LFM2.5-1.2B-Instruct"):
        assert recommended_sampling(None, repo).values.keys() == SAMPLING_OFF.keys()


def test_config_name_or_path_names_a_local_copy() -> None:
    config = {"model_type": "lfm2", "_name_or_path": "LiquidAI/LFM2.5-1.2B-Instruct"}
    assert recommended_sampling(config, "/data/ckpt").name == "LFM2.5 card defaults"


def test_lfm2_moe_checkpoints_take_the_lfm2_card() -> None:
    """LiquidAI/LFM2-8B-A1B's card: temperature 0.3, min_p 0.15, repetition_penalty 1.05, as LFM2's."""
    family = recommended_sampling({"model_type": "lfm2_moe"}, "LiquidAI/LFM2-8B-A1B")
    assert family == recommended_sampling({"model_type": "lfm2"}, "LiquidAI/LFM2-350M")


def test_another_model_type_has_no_card_here() -> None:
    family = recommended_sampling({"model_type": "llama"}, "LiquidAI/LFM2.5-1.2B-Instruct")
    assert family == FamilySampling("no card defaults for llama", SAMPLING_OFF)


def test_a_local_checkpoint_is_read_without_torch_and_a_broken_config_is_not_fatal(
    tiny_ckpt: Path, tmp_path: Path
) -> None:
    assert checkpoint_sampling(str(tiny_ckpt)).name == "LFM2 card defaults"
    other = tmp_path / "LFM2.5-1.2B-Instruct"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "lfm2_vl"}))
    assert checkpoint_sampling(str(other)).name == "no card defaults for lfm2_vl"
    (other / "config.json").write_text("{not json")
    assert checkpoint_sampling(str(other)).name == "LFM2.5 card defaults"


def test_flags_override_one_value_each_and_say_so() -> None:
    family = recommended_sampling(None, "LiquidAI/LFM2.5-1.2B-Instruct")
    assert family.overridden({}) is family
    changed = family.overridden({"top_k": 40, "min_p": 0.05})
    assert changed.name == "LFM2.5 card defaults + --top-k, --min-p"
    assert changed.values == {**LFM25, "top_k": 40, "min_p": 0.05}
