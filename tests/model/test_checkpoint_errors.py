"""A broken checkpoint is a one-line CheckpointError that says what is wrong, never a traceback dump."""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest
from safetensors.torch import load_file, save_file

from model.checkpoint.loader import load_model
from model.errors import CheckpointError
from model.text.tokenizer import Tokenizer


@pytest.fixture
def checkpoint(tmp_path, tiny_ckpt):
    """A private copy of the tiny checkpoint that a test may damage."""
    target = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, target)
    return target


def load_error(path) -> str:
    with pytest.raises(CheckpointError) as info:
        load_model(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_directory(tmp_path):
    assert "does not exist" in load_error(tmp_path / "nowhere")


def test_directory_without_config(tmp_path):
    assert "config.json" in load_error(tmp_path)


@pytest.mark.parametrize("model_type", ["llama", ["lfm2"]])
def test_other_model_type(checkpoint, model_type):
    """Another architecture, or not a name at all (a list cannot even be looked up)."""
    config = json.loads((checkpoint / "config.json").read_text())
    config["model_type"] = model_type
    (checkpoint / "config.json").write_text(json.dumps(config))
    message = load_error(checkpoint)
    assert repr(model_type) in message and "lfm2" in message


def test_unparseable_config(checkpoint):
    (checkpoint / "config.json").write_text("{not json")
    assert "not valid JSON" in load_error(checkpoint)


def test_truncated_safetensors(checkpoint):
    weights = checkpoint / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    assert "corrupt or truncated" in load_error(checkpoint)


def test_garbage_safetensors(checkpoint):
    (checkpoint / "model.safetensors").write_bytes(b"\x00" * 64)
    assert "corrupt or truncated" in load_error(checkpoint)


def test_missing_tensor_is_named(checkpoint):
    tensors = load_file(checkpoint / "model.safetensors")
    del tensors["model.layers.1.feed_forward.w2.weight"]
    save_file(tensors, checkpoint / "model.safetensors")
    assert "missing tensor model.layers.1.feed_forward.w2.weight" in load_error(checkpoint)


def test_misshaped_tensor_is_named(checkpoint):
    tensors = load_file(checkpoint / "model.safetensors")
    tensors["model.embedding_norm.weight"] = tensors["model.embedding_norm.weight"][:-1].clone()
    save_file(tensors, checkpoint / "model.safetensors")
    message = load_error(checkpoint)
    assert "model.embedding_norm.weight" in message and "shape" in message


def test_unexpected_tensor_is_named(checkpoint):
    tensors = load_file(checkpoint / "model.safetensors")
    tensors["model.layers.0.surprise.weight"] = tensors["model.embedding_norm.weight"].clone()
    save_file(tensors, checkpoint / "model.safetensors")
    assert "unexpected tensor model.layers.0.surprise.weight" in load_error(checkpoint)


def test_no_weights_at_all(checkpoint):
    (checkpoint / "model.safetensors").unlink()
    assert "no *.safetensors" in load_error(checkpoint)


def edit_config(checkpoint, **changes) -> None:
    """Change config.json fields; None removes one."""
    path = checkpoint / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # without layer_types, the layer count alone once sized a 10^9-entry list (out of memory)
        ({"num_hidden_layers": 1e9, "layer_types": None}, "num_hidden_layers must be an integer in [1, 1024"),
        ({"num_hidden_layers": 10**9, "layer_types": None}, "got 1000000000"),
        ({"num_attention_heads": 0}, "num_attention_heads must be an integer in [1, 1024], got 0"),  # was 1/0
        ({"num_key_value_heads": 0}, "num_key_value_heads must be an integer in [1, 1024], got 0"),
        ({"vocab_size": 2**40}, "vocab_size must be an integer in [1, 16777216]"),
        ({"hidden_size": "64"}, "hidden_size must be an integer"),
        ({"norm_eps": -1}, "norm_eps must be a number in (0, 1]"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings must be true or false"),
        ({"layer_types": ["conv"]}, "layer_types has 1 entries for 4 layers"),
        ({"layer_types": None, "full_attn_idxs": [1, 7]}, "full_attn_idxs must list layer indices in [0, 4)"),
        ({"hidden_size": 36, "num_attention_heads": 4}, "head_dim (hidden_size / heads) is 9; RoPE needs"),
    ],
    ids=[
        "layers-1e9",
        "layers-10**9",
        "zero-heads",
        "zero-kv-heads",
        "vocab-2**40",
        "hidden-as-text",
        "negative-eps",
        "tie-as-text",
        "short-layer-types",
        "attention-index-past-the-end",
        "odd-head-dim",
    ],
)
def test_absurd_config_values_are_named_before_anything_is_sized(checkpoint, changes, message):
    edit_config(checkpoint, **changes)
    assert message in load_error(checkpoint)


def edit_header(checkpoint, name: str, **entry) -> dict:
    """Rewrite one tensor's safetensors header entry (the data stays as it is); returns the old entry."""
    weights = checkpoint / "model.safetensors"
    data = weights.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + length])
    old = dict(header[name])
    header[name].update(entry)
    raw = json.dumps(header).encode()
    weights.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + length :])
    return old


TERABYTES_4 = [2**20, 2**20]  # float32: 4 TiB


def test_a_header_claiming_a_4_tb_tensor_is_refused_before_allocating(checkpoint):
    old = edit_header(checkpoint, "model.embed_tokens.weight", shape=TERABYTES_4)
    begin = old["data_offsets"][0]
    edit_header(checkpoint, "model.embed_tokens.weight", data_offsets=[begin, begin + 4 * 2**40])
    message = load_error(checkpoint)
    assert "model.embed_tokens.weight runs past the end of the file" in message


def test_a_header_whose_shape_and_byte_range_disagree_is_refused(checkpoint):
    edit_header(checkpoint, "model.embed_tokens.weight", shape=TERABYTES_4)
    message = load_error(checkpoint)
    assert "model.embed_tokens.weight of shape (1048576, 1048576) needs 4398046511104 bytes" in message


def test_weights_stored_as_integers_are_refused(checkpoint):
    edit_header(checkpoint, "model.embedding_norm.weight", dtype="I32")  # same size as F32
    assert "model.embedding_norm.weight is stored as torch.int32" in load_error(checkpoint)


def plant(path, kind: str) -> None:
    """Replace the file at `path` with something hostile under its name."""
    path.unlink(missing_ok=True)
    if kind == "fifo":  # open() and read() would wait forever for a writer
        os.mkfifo(path)
    elif kind == "dev_zero":  # read() would never end: memory runs out
        path.symlink_to("/dev/zero")
    elif kind == "huge":  # a sparse 100 MiB file: costs no disk
        with path.open("wb") as file:
            file.truncate(100 << 20)
    elif kind == "deep":  # Python's JSON parser recurses once per level
        path.write_text("[" * 200_000 + "]" * 200_000)


HOSTILE = {
    "fifo": "is not a regular file",
    "dev_zero": "is not a regular file",
    "huge": "is larger than 64 MiB",
    "deep": "not valid JSON",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_config_json_is_one_sentence(checkpoint, kind):
    plant(checkpoint / "config.json", kind)
    message = load_error(checkpoint)
    assert "config.json" in message and HOSTILE[kind] in message


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "huge"])
@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"])
def test_hostile_tokenizer_files_are_one_sentence(checkpoint, name, kind):
    plant(checkpoint / name, kind)
    with pytest.raises(CheckpointError) as info:
        Tokenizer.from_pretrained(checkpoint)
    message = str(info.value)
    assert "\n" not in message and name in message
    assert "regular file" in message or "is larger than" in message
