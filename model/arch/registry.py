"""The Liquid text architectures lfm-chat runs, keyed by config.json's ``model_type``.

One entry per architecture: its config class (which fields it reads, which tensors its
checkpoints hold) and its module (which also knows how checkpoint tensors fuse into its
layout). Everything that builds a model asks here, so an unsupported ``model_type`` is refused
in one place with one message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from model.arch.lfm2 import Lfm2ForCausalLM
from model.arch.lfm2_config import Lfm2Config, generation_stop_ids, read_config_json
from model.arch.lfm2_moe import Lfm2MoeForCausalLM
from model.arch.lfm2_moe_config import Lfm2MoeConfig
from model.arch.lfm3 import Lfm3ForCausalLM
from model.arch.lfm3_config import Lfm3Config
from model.errors import CheckpointError


@dataclass(frozen=True, slots=True)
class Architecture:
    """What lfm-chat needs to know to load one architecture."""

    label: str  # what the title bar and dashboard call it
    config: type[Lfm2Config]
    causal_lm: type[Lfm2ForCausalLM]


ARCHITECTURES: dict[str, Architecture] = {
    Lfm2Config.MODEL_TYPE: Architecture("LFM2", Lfm2Config, Lfm2ForCausalLM),
    Lfm3Config.MODEL_TYPE: Architecture("LFM3", Lfm3Config, Lfm3ForCausalLM),
    Lfm2MoeConfig.MODEL_TYPE: Architecture(Lfm2MoeConfig.LABEL, Lfm2MoeConfig, Lfm2MoeForCausalLM),
}


def architecture(model_type: object) -> Architecture:
    """The entry for ``model_type``, or a CheckpointError naming what lfm-chat runs."""
    if isinstance(model_type, str) and model_type in ARCHITECTURES:  # config.json may hold a list here
        return ARCHITECTURES[model_type]
    supported = ", ".join(f"{a.label} ('{name}')" for name, a in ARCHITECTURES.items())
    raise CheckpointError(
        f"config.json has model_type {model_type!r}; lfm-chat runs {supported} checkpoints."
    )


def config_from_dict(raw: dict) -> Lfm2Config:
    """A config.json dict as its architecture's config class."""
    return architecture(raw.get("model_type")).config.from_dict(raw)


def load_config(checkpoint_dir: str | Path) -> Lfm2Config:
    """Read a local checkpoint's config.json as its architecture's config class, its eos ids joined by
    generation_config.json's (the ids generation stops on)."""
    config = config_from_dict(read_config_json(checkpoint_dir))
    extra = [i for i in generation_stop_ids(checkpoint_dir) if i not in config.eos_token_id]
    config.eos_token_id = [*config.eos_token_id, *extra]
    return config
