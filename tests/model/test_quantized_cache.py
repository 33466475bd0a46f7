"""The quantized-weights cache: a second load reads it instead of quantizing and computes the same
logits; a damaged, stale or unfitting file is detected, deleted and rebuilt, never used."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from model.checkpoint import quantized_cache
from model.checkpoint.loader import load_model
from model.checkpoint.quantized_cache import CacheKey
from model.quant.apply import QUANTIZED_LINEARS
from model.quant.int8 import Int8Linear
from tests.model.test_linears import logits

SCHEMES = list(QUANTIZED_LINEARS)
IDS = [5, 17, 40, 3, 99, 250, 12, 7, 64, 31]


def load(path: Path, scheme: str, cache: Path | None, dtype: str = "bfloat16") -> tuple[nn.Module, list[str]]:
    """The model and the stages its load reported, in order, each once."""
    stages: list[str] = []
    model = load_model(
        path, dtype, quantize=scheme, quantized_cache=cache, progress=lambda stage, _: stages.append(stage)
    )
    return model, list(dict.fromkeys(stages))


def quantized_now(stages: list[str]) -> bool:
    return any(stage.startswith("quantizing weights") for stage in stages)


def cache_file(cache: Path) -> Path:
    (path,) = cache.glob("*.safetensors")
    return path


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize(
    ("preset", "stored"),
    # a bf16 file with a tied head: embedding rows read from the file; fp32, untied, with biases:
    # the table is held in memory and the linears have biases
    [("default", torch.bfloat16), ("attn_first", torch.float32)],
)
def test_a_second_load_reads_the_cache_and_computes_the_same_logits(
    bf16_kernels, tiny_ckpt_factory, tmp_path, scheme, preset, stored
):
    path = tiny_ckpt_factory(preset, dtype=stored)
    first, first_stages = load(path, scheme, tmp_path)
    second, second_stages = load(path, scheme, tmp_path)
    assert quantized_now(first_stages) and f"saving the {scheme} weights for the next launch" in first_stages
    assert second_stages == [f"checking for cached {scheme} weights", f"loading cached {scheme} weights"]
    assert [type(m) for m in second.modules()] == [type(m) for m in first.modules()]
    assert torch.equal(logits(second, IDS), logits(first, IDS))
    assert not any(t.is_meta for t in [*second.parameters(), *second.buffers()])


def test_each_scheme_instruction_set_and_dtype_has_its_own_file(tiny_ckpt_factory, tmp_path):
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    for scheme in SCHEMES:
        load(path, scheme, tmp_path)
    load(path, SCHEMES[0], tmp_path, dtype="float32")  # no kernels: PyTorch's row-major layout
    names = sorted(p.name.split("-", 1)[1] for p in tmp_path.glob("*.safetensors"))
    assert len(names) == len(SCHEMES) + 1 and any(
        name.endswith("-torch-float32.safetensors") for name in names
    )


def _damage_flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) * 3 // 4] ^= 0x40
    path.write_bytes(bytes(data))


def _damage_truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _damage_header(path: Path) -> None:
    path.write_bytes(b"\xff" * 8 + path.read_bytes()[8:])


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_damage_flip, "checksum does not match"),
        (_damage_truncate, "corrupt or truncated"),
        (_damage_header, "corrupt or truncated"),
        (lambda path: path.write_bytes(b""), "corrupt or truncated"),
    ],
    ids=["flipped-bit", "truncated", "bad-header", "empty"],
)
def test_a_damaged_file_is_rebuilt_never_used(tiny_ckpt_factory, tmp_path, caplog, damage, reason):
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    fresh, _ = load(path, "int8", tmp_path)
    damage(cache_file(tmp_path))
    with caplog.at_level(logging.WARNING, logger="model.checkpoint.quantized_cache"):
        rebuilt, stages = load(path, "int8", tmp_path)
    assert quantized_now(stages)
    assert any(reason in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    assert torch.equal(logits(rebuilt, IDS), logits(fresh, IDS))
    assert not quantized_now(load(path, "int8", tmp_path)[1])  # the rebuilt file is whole again


def _rewrite(path: Path, change_metadata=None, change_tensors=None) -> None:
    """Rewrite a cache file with changed metadata or tensors, its checksum made to match the tensors."""
    with safe_open(str(path), "pt") as file:
        metadata = file.metadata()
        tensors = {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118 (safe_open has no iterator)
    if change_tensors is not None:
        change_tensors(tensors)
        metadata["crc32"] = quantized_cache.checksum(tensors, metadata["layers"])
    if change_metadata is not None:
        change_metadata(metadata)
    save_file(tensors, str(path), metadata=metadata)


@pytest.mark.parametrize("field", [f for f in CacheKey.__dataclass_fields__ if f != "checkpoint"])
def test_a_file_made_under_another_key_is_rebuilt(tiny_ckpt_factory, tmp_path, caplog, field):
    """Another format version, quantization source, kernel build, scheme, dtype or instruction set."""
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    load(path, "w8a8", tmp_path)
    _rewrite(cache_file(tmp_path), change_metadata=lambda metadata: metadata.update({field: "other"}))
    with caplog.at_level(logging.WARNING, logger="model.checkpoint.quantized_cache"):
        _, stages = load(path, "w8a8", tmp_path)
    assert quantized_now(stages)
    assert any("stale, made for other" in r.getMessage() for r in caplog.records)


def test_another_checkpoints_file_is_not_used(tiny_ckpt_factory, tmp_path, caplog):
    """Under its own name a new checkpoint misses; a file copied over its name is refused by its key."""
    one, other = (tiny_ckpt_factory("default", dtype=torch.bfloat16, seed=seed) for seed in (0, 1))
    load(one, "int8", tmp_path / "one")
    expected, stages = load(other, "int8", tmp_path / "other")
    assert quantized_now(stages)
    cache_file(tmp_path / "one").replace(cache_file(tmp_path / "other"))
    with caplog.at_level(logging.WARNING, logger="model.checkpoint.quantized_cache"):
        model, stages = load(other, "int8", tmp_path / "other")
    assert quantized_now(stages) and any(
        "stale, made for other checkpoint contents" in r.getMessage() for r in caplog.records
    )
    assert torch.equal(logits(model, IDS), logits(expected, IDS))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda t: t.update({"model.extra.weight": torch.zeros(2)}), "unexpected tensor model.extra.weight"),
        (lambda t: t.pop("model.embedding_norm.weight"), "lacks tensor model.embedding_norm.weight"),
        (
            lambda t: t.update({"model.embedding_norm.weight": torch.ones(3)}),
            "holds model.embedding_norm.weight as torch.float32 (3,)",
        ),
    ],
    ids=["extra", "missing", "misshaped"],
)
def test_a_file_that_does_not_fit_the_model_is_rebuilt(tiny_ckpt_factory, tmp_path, caplog, change, reason):
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    load(path, "int8", tmp_path)
    _rewrite(cache_file(tmp_path), change_tensors=change)
    with caplog.at_level(logging.WARNING, logger="model.checkpoint.quantized_cache"):
        _, stages = load(path, "int8", tmp_path)
    assert quantized_now(stages) and any(reason in r.getMessage() for r in caplog.records)


def test_two_launches_at_once_both_load_and_leave_a_whole_file(tiny_ckpt_factory, tmp_path):
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        import torch
        from model.checkpoint.loader import load_model
        torch.set_num_threads(1)
        load_model(Path({str(path)!r}), "bfloat16", quantize="int8", quantized_cache=Path({str(tmp_path)!r}))
        """
    )
    launches = [
        subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    for launch in launches:
        assert launch.wait(timeout=300) == 0, launch.stderr.read()
    assert not quantized_now(load(path, "int8", tmp_path)[1])
    assert not list(tmp_path.glob(".tmp-*"))


def test_the_cache_can_be_turned_off(tiny_ckpt_factory, tmp_path, monkeypatch):
    monkeypatch.setenv(quantized_cache.CACHE_ENV, "0")
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    _, stages = load(path, "int8", None)
    assert not any("cached" in stage for stage in stages) and quantized_now(stages)
    monkeypatch.setenv(quantized_cache.CACHE_ENV, str(tmp_path))
    assert quantized_cache.default_dir() == tmp_path


def test_a_layer_with_state_outside_its_buffers_is_refused_when_written(tmp_path):
    """Such state could not be restored: refuse it loudly rather than cache a layer that breaks later."""
    model = nn.Sequential(Int8Linear(nn.Linear(8, 4)))
    model[0].offsets = torch.zeros(4)  # a tensor kept as a plain attribute, not a buffer
    key = CacheKey(*(["x"] * 6))
    with pytest.raises(TypeError, match=r"Int8Linear\.offsets"):
        quantized_cache.write(tmp_path / "f.safetensors", key, model, "int8")
