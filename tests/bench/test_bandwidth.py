"""The decode limit comes from the loaded weights of the run's scheme, not from a guess per dtype."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench import bandwidth
from bench.bandwidth import Bandwidth, decode_limit, measure_read_bandwidth
from bench.checkpoint import tiny_checkpoint
from model.checkpoint.loader import load_model


def test_the_probe_reads_its_buffer_and_leaves_torch_threads_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bandwidth, "PROBE_BYTES", 16 * 2**20)
    before = torch.get_num_threads()
    measured = measure_read_bandwidth(1)
    assert measured.gb_per_s > 0 and measured.probe_bytes == 16 * 2**20 and measured.threads == 1
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("quantize", ["int8", "int4"])
def test_a_quantized_step_reads_fewer_bytes_so_its_limit_is_higher(tmp_path: Path, quantize: str) -> None:
    checkpoint = tiny_checkpoint(tmp_path / "tiny")
    probe = Bandwidth(gb_per_s=10.0, threads=1, probe_bytes=1)
    full = decode_limit(load_model(checkpoint, "float32"), "float32", probe)
    small = decode_limit(load_model(checkpoint, "float32", quantize=quantize), f"float32 + {quantize}", probe)
    assert small.step_bytes < full.step_bytes / 2
    assert full.tok_per_s == pytest.approx(10e9 / full.step_bytes)
    assert small.tok_per_s > 2 * full.tok_per_s
