"""The quality workload: its KL and top-1 figures against a direct computation, and the run end to end."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch
import torch.nn.functional as F
import transformers

from bench import quality
from bench.cli import main
from bench.progress import Progress
from model.checkpoint import quantized_cache
from model.quant.apply import QUANTIZED_LINEARS
from model.text.tokenizer import Tokenizer


def test_chunks_start_with_bos_like_llama_perplexity():
    stream = list(range(100, 130))
    chunks = quality.chunks_of(stream, context=8, count=3, bos=1)
    assert chunks == [[1, *range(101, 108)], [1, *range(109, 116)], [1, *range(117, 124)]]
    with pytest.raises(ValueError, match="need 32 tokens"):
        quality.chunks_of(stream, context=8, count=4, bos=1)


def test_the_figures_match_a_direct_computation(tiny_ckpt, tmp_path, monkeypatch):
    """The scored positions' log-probabilities are transformers' (same chunk, same positions); KL(p || q),
    its 99th percentile and top-1 agreement are what torch's own kl_div and argmax give."""
    monkeypatch.setenv(quantized_cache.CACHE_ENV, str(tmp_path))
    tokenizer = Tokenizer.from_pretrained(tiny_ckpt)
    stream = quality.random_stream(quality.plain_ids(tokenizer), 96, seed=3)
    chunks = quality.chunks_of(stream, 48, 2, tokenizer.bos_token_id)
    result = quality.run_quality(tiny_ckpt, "float32", ["int8"], chunks, Progress(2, io.StringIO()))

    hf = transformers.Lfm2ForCausalLM.from_pretrained(tiny_ckpt, dtype=torch.float32).eval()
    references = quality.log_probs_over(tiny_ckpt, "float32", "none", chunks)
    quantized = quality.log_probs_over(tiny_ckpt, "float32", "int8", chunks)
    kl, same = [], []
    for chunk, p, q in zip(chunks, references, quantized, strict=True):
        with torch.no_grad():
            logits = hf(torch.tensor([chunk])).logits[0, len(chunk) // 2 : len(chunk) - 1]
        assert torch.allclose(p, F.log_softmax(logits, dim=-1), atol=1e-4)
        kl.append(F.kl_div(q.double(), p.double(), log_target=True, reduction="none").sum(-1))
        same.append(p.argmax(-1) == q.argmax(-1))
    kl_all = torch.cat(kl)
    figures = result.schemes["int8"]
    assert result.positions == kl_all.numel() == 2 * (48 - 1 - 24)
    assert figures["mean KL"] == pytest.approx(kl_all.mean().item(), rel=1e-9)
    assert figures["p99 KL"] == pytest.approx(torch.quantile(kl_all, 0.99).item(), rel=1e-9)
    assert figures["top-1 agreement"] == torch.cat(same).double().mean().item()
    assert 0 < figures["mean KL"] < result.peakedness["entropy"] < result.peakedness["uniform entropy"]


def test_the_workload_runs_end_to_end_and_prints_a_row_per_scheme(tmp_path):
    out = tmp_path / "results.json"
    argv = ["--tiny", "--quick", "--threads", "1", "--workloads", "quality", "--json", str(out)]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        assert main([*argv, "--markdown"]) == 0
    text = stdout.getvalue()
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert set(QUANTIZED_LINEARS) <= rows.keys()
    assert "mean entropy" in text and "reproduce: lfm-chat bench --tiny --quick" in text
    measured = json.loads(out.read_text())["quality"]
    context, count = quality.SIZES[True]
    assert measured["positions"] == count * (context - 1 - context // 2)
    for scheme in QUANTIZED_LINEARS:
        figures = measured["schemes"][scheme]
        assert 0 < figures["mean KL"] <= figures["p99 KL"] and 0 <= figures["top-1 agreement"] <= 1
