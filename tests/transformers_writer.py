"""Tiny checkpoints in the Hub's format: model/tiny/lfm2*.py's random weights, loaded by transformers
(its config class built from the keys it knows) and written back by its own ``save_pretrained``.

So every test that loads a tiny checkpoint loads the names, layout and config.json transformers
writes, while the weights stay the seeded ones of lfm-chat's writer (peaked, no greedy ties; the
same values with or without transformers). tests/model/test_tiny.py proves both writers agree.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import transformers

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
NOT_CONFIG_FIELDS = ("model_type", "transformers_version")


def resave_with_transformers(ours: Path, out: Path) -> Path:
    """``ours`` as transformers' save_pretrained writes it, into ``out``; raise if transformers left
    any tensor of it unloaded or any of its own tensors unfilled."""
    raw = json.loads((ours / "config.json").read_text(encoding="utf-8"))
    config_class = type(transformers.AutoConfig.for_model(raw["model_type"]))
    known = set(config_class().to_dict()) - set(NOT_CONFIG_FIELDS)
    config = config_class(**{key: value for key, value in raw.items() if key in known})
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        ours, config=config, dtype=getattr(torch, raw.get("dtype", "float32")), output_loading_info=True
    )
    problems = {kind: names for kind, names in info.items() if names and kind != "error_msgs"}
    if problems:
        raise AssertionError(f"transformers did not load {ours} whole: {problems}")
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copy(ours / name, out / name)
    if raw["model_type"] == "lfm2":  # vLLM reads conv_dim, which transformers no longer writes
        written = json.loads((out / "config.json").read_text(encoding="utf-8"))
        written["conv_dim"] = written["hidden_size"]
        (out / "config.json").write_text(json.dumps(written, indent=2) + "\n", encoding="utf-8")
    return out
