"""bench/llamacpp_quality.py's reading of llama-perplexity: its base file and its summary; and that
it steps aside without llama.cpp."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch

from bench.llamacpp_quality import KlBase, llama_figures, main


def _write_base(path, context: int, tokens: list[int], log_probs: list[np.ndarray]) -> None:
    """A base file as llama-perplexity's process_logits writes one: per position the scale and minimum
    (two floats) and 16-bit steps of the log-probabilities above the minimum (at most 16 below the top)."""
    vocab = log_probs[0].shape[-1]
    row = 2 * ((vocab + 1) // 2) + 4
    parts = [b"_logits_", np.array([context, vocab, len(tokens) // context], dtype=np.int32).tobytes()]
    parts.append(np.array(tokens, dtype=np.int32).tobytes())
    for chunk in log_probs:
        for values in chunk:
            top, low = values.max(), max(values.min(), values.max() - 16)
            scale = np.float32((top - low) / 65535)
            coded = np.zeros(row, dtype=np.uint16)
            coded[:4] = np.array([scale, low], dtype=np.float32).view(np.uint16)
            coded[4 : 4 + vocab] = np.where(values > low, np.rint((values - low) / scale), 0)
            parts.append(coded.tobytes())
    path.write_bytes(b"".join(parts))


def test_a_base_file_gives_back_its_tokens_and_log_probabilities(tmp_path):
    context, vocab = 8, 11
    tokens = list(range(100, 116))
    generator = torch.Generator().manual_seed(0)
    chunks = [torch.log_softmax(4 * torch.randn(3, vocab, generator=generator), -1).numpy() for _ in range(2)]
    chunks[1][0, 5] = -40.0  # more than 16 nats below the top: stored as "below the minimum"
    _write_base(tmp_path / "base", context, tokens, chunks)
    base = KlBase.read(tmp_path / "base")
    assert base.context == context and base.chunks == [tokens[:8], tokens[8:]]
    for i, expected in enumerate(chunks):
        expected = torch.from_numpy(expected).double()
        low = torch.maximum(expected.amin(-1), expected.amax(-1) - 16)[:, None]
        assert torch.allclose(base.log_probs(i), expected.maximum(low), atol=16 / 65535)


def test_the_summary_figures_are_read_from_llama_perplexity_output():
    output = """
====== KL divergence statistics ======
Mean    KLD:   0.081108 ±   0.001480
Maximum KLD:   0.121915
99.9%   KLD:   0.121512
99.0%   KLD:   0.109451
Median  KLD:   0.080234
====== Token probability statistics ======
Same top p: 11.290 ±  2.852 %
"""
    assert llama_figures(output) == pytest.approx(
        {"mean KL": 0.081108, "p99 KL": 0.109451, "top-1 agreement": 0.1129}
    )
    with pytest.raises(RuntimeError, match="printed no mean KL"):
        llama_figures("kl_divergence: 4.22 seconds per pass")


def test_without_llama_cpp_it_says_so_and_skips(tmp_path):
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert main(["--llama-bin", str(tmp_path), "--gguf-dir", str(tmp_path)]) == 0
    assert "llama-perplexity not found" in stderr.getvalue() and "skipped" in stderr.getvalue()
