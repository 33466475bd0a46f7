"""The sampling a checkpoint's model card recommends: LFM2 and LFM2.5 ask for different settings.

No checkpoint says it in a file (their generation_config.json carries none of it), so the cards'
recommendations are transcribed here, keyed on what identifies a checkpoint: config.json's
``model_type`` and the repo name (a Hub id, a local directory's name, the repo a Hub-cache
snapshot belongs to, or config.json's ``_name_or_path``). Torch-free: the CLI resolves this
before the UI starts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.errors import CheckpointError
from model.small_file import JSON_BYTES, read_small_file

# Every knob a family sets, at its "off" value: a card's row overrides the ones it names, so the
# values are complete and switching families never keeps a filter the new card does not ask for.
SAMPLING_OFF: dict[str, float | int] = {
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
}
LFM2_MODEL_TYPE = "lfm2"
# the model types the cards below speak for: LFM2-8B-A1B's card (lfm2_moe) asks for LFM2's values
CARD_MODEL_TYPES = (LFM2_MODEL_TYPE, "lfm2_moe")
_HUB_CACHE_DIR = re.compile(r"models--([^/]+)--([^/]+)")  # HF_HUB_CACHE/models--org--name/snapshots/<sha>


@dataclass(frozen=True, slots=True)
class FamilySampling:
    """A name to show ("LFM2.5 card defaults") and SamplingParams field values (SAMPLING_OFF's keys)."""

    name: str
    values: Mapping[str, float | int] = field(default_factory=dict)

    def overridden(self, flags: Mapping[str, float | int]) -> FamilySampling:
        """These values with the command line's on top; the name says which flags changed them."""
        if not flags:
            return self
        named = ", ".join("--" + key.replace("_", "-") for key in flags)
        return FamilySampling(f"{self.name} + {named}", {**self.values, **flags})


@dataclass(frozen=True, slots=True)
class _Card:
    family: str
    pattern: re.Pattern[str]  # matched against a lower-cased repo name
    values: Mapping[str, float | int]


# Most specific first; the first row whose pattern a name matches wins.
_CARDS = (
    _Card(  # LiquidAI/LFM2.5-1.2B-Thinking: "temperature: 0.05, top_k: 50, repetition_penalty: 1.05"
        "LFM2.5 Thinking",
        re.compile(r"lfm2[._-]?5.*thinking"),
        {"temperature": 0.05, "top_k": 50, "repetition_penalty": 1.05},
    ),
    _Card(  # LiquidAI/LFM2.5-1.2B-Instruct (and the docs, for LFM2.5 text models)
        "LFM2.5",
        re.compile(r"lfm2[._-]?5"),
        {"temperature": 0.1, "top_k": 50, "top_p": 0.1, "repetition_penalty": 1.05},
    ),
    _Card(  # LiquidAI/LFM2-350M-Math
        "LFM2 Math",
        re.compile(r"lfm2.*-math"),
        {"temperature": 0.6, "top_p": 0.95, "min_p": 0.1, "repetition_penalty": 1.05},
    ),
    _Card(  # LiquidAI/LFM2-1.2B-Tool: "greedy decoding with a temperature=0"
        "LFM2 Tool",
        re.compile(r"lfm2.*-tool"),
        {"temperature": 0.0},
    ),
    _Card(  # LiquidAI/LFM2-350M (and every LFM2 size): "temperature=0.3, min_p=0.15, repetition_penalty=1.05"
        "LFM2",
        re.compile(r"lfm2"),
        {"temperature": 0.3, "min_p": 0.15, "repetition_penalty": 1.05},
    ),
)
_DEFAULT_CARD = _CARDS[-1]  # an LFM2 checkpoint under a name that says nothing (a fine-tune, "./ckpt")


def repo_name(repo_id: str) -> str:
    """The model's own name in a Hub id or a local path: the repo a Hub-cache snapshot belongs to, else
    the last path part (so a parent directory's name cannot pick the family)."""
    path = repo_id.replace("\\", "/").rstrip("/")
    cached = _HUB_CACHE_DIR.search(path)
    return cached[2] if cached else path.rpartition("/")[2]


def recommended_sampling(config: Mapping[str, Any] | None, repo_id: str) -> FamilySampling:
    """The card's sampling for a checkpoint, from its config.json (None: not at hand) and repo name.

    A model type other than LFM2's and LFM2-MoE's has no card here: the neutral values, named so.
    """
    model_type = (config or {}).get("model_type", LFM2_MODEL_TYPE)
    if model_type not in CARD_MODEL_TYPES:
        return FamilySampling(f"no card defaults for {model_type}", dict(SAMPLING_OFF))
    names = [repo_name(repo_id)]
    name_or_path = (config or {}).get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path:
        names.append(repo_name(name_or_path))
    lowered = [name.lower() for name in names]
    card = next((c for c in _CARDS if any(c.pattern.search(name) for name in lowered)), _DEFAULT_CARD)
    return FamilySampling(f"{card.family} card defaults", {**SAMPLING_OFF, **card.values})


def checkpoint_sampling(name_or_path: str) -> FamilySampling:
    """recommended_sampling for a --model value: a local directory's config.json is read if it can be."""
    return recommended_sampling(_local_config(Path(name_or_path).expanduser()), name_or_path)


def _local_config(directory: Path) -> dict[str, Any] | None:
    """config.json of a local checkpoint, or None (a Hub id, or a file the loader will report on later)."""
    path = directory / "config.json"
    if not path.exists():
        return None
    try:
        raw = json.loads(read_small_file(path, JSON_BYTES))
    except (CheckpointError, ValueError, RecursionError):  # CheckpointError is a ValueError: said here
        return None
    return raw if isinstance(raw, dict) else None
