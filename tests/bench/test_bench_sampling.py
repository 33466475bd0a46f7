"""`lfm-chat bench --sampling chat`: both engines sample with the app's defaults, and the report says so."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch

from bench.backends import load_backend
from bench.cli import main
from bench.settings import RunSettings
from bench.workloads import WORKLOADS


@pytest.mark.subprocess  # the RSS workload runs in a fresh process (bench/rss.py)
def test_a_chat_sampling_run_measures_both_engines_and_names_the_settings(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    argv = ["--tiny", "--quick", "--repeats", "1", "--threads", "1", "--workloads", "single,rss"]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main([*argv, "--sampling", "chat", "--json", str(out)]) == 0
    text = stdout.getvalue()
    assert "sampling, both engines: chat: the app's defaults (temperature 0.3, min_p 0.15" in text
    assert f"reproduce: lfm-chat bench {' '.join(argv)} --sampling chat" in text
    for workload in json.loads(out.read_text())["workloads"]:
        for metric in workload["metrics"]:
            assert len(metric["runs"]["ours"]) == len(metric["runs"]["transformers"]) == 1, metric["name"]


def test_chat_sampling_draws_tokens_where_greedy_takes_the_argmax(tiny_ckpt: Path) -> None:
    def tokens(sampling: str) -> list[list[int]]:
        settings = RunSettings(tiny_ckpt, "float32", threads=1, quick=True, sampling=sampling)
        scenario = WORKLOADS["single"].build(settings.build_context(WORKLOADS["single"], repetition=0))
        return [trace.output for trace in load_backend("ours", settings).run(scenario)]

    torch.manual_seed(0)
    greedy = tokens("greedy")
    assert tokens("greedy") == greedy  # the argmax: the same every time
    assert tokens("chat") != greedy
