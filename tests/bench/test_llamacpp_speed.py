"""bench/llamacpp_speed.py's arithmetic and parsing (the runs themselves need a quiet machine)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from bench.cli import main as bench_main
from bench.llamacpp_speed import (
    FIGURES,
    depth_figures,
    llama_depth_figures,
    llama_figures,
    ours_depth_figures,
    ours_figures,
    summary,
)
from bench.llamacpp_speed import main as speed_main

DECODE, BATCH, PROMPT = FIGURES


def test_llama_figures_come_from_tg128_pp128_and_eight_sequences():
    bench = "\n".join(
        [
            "ggml: some log line",
            json.dumps({"n_prompt": 128, "n_gen": 0, "avg_ts": 150.5}),
            json.dumps({"n_prompt": 0, "n_gen": 128, "avg_ts": 40.25}),
        ]
    )
    batched = json.dumps({"pl": 8, "speed_tg": 120.0, "speed_pp": 140.0})
    assert llama_figures(bench, batched) == {DECODE: 40.25, PROMPT: 150.5, BATCH: 120.0}


def run_ours(tmp_path: Path, workloads: str) -> dict:
    """`lfm-chat bench` on the tiny checkpoint, our engine only, as llamacpp_speed runs it; its JSON."""
    out = tmp_path / "ours.json"
    argv = ["--tiny", "--quick", "--engines", "ours", "--workloads", workloads, "--repeats", "1"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert bench_main([*argv, "--threads", "1", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_our_figures_come_from_the_single_and_batch8_workloads(tmp_path):
    figures = ours_figures(run_ours(tmp_path, "single,batch8"))
    assert figures.keys() == set(FIGURES) and all(value > 0 for value in figures.values())


def test_the_summary_gives_medians_ranges_and_ratios():
    rounds = {
        "llama.cpp q4_0": [{DECODE: 10.0}, {DECODE: 30.0}, {DECODE: 20.0}],
        "lfm-chat int4": [{DECODE: 25.0}, {DECODE: 22.0}, {DECODE: 30.0}],
    }
    headers, rows = summary(rounds, "lfm-chat int4")
    assert headers == ["", "llama.cpp q4_0", "lfm-chat int4", "lfm-chat int4 / llama.cpp q4_0"]
    assert rows[0] == [DECODE, "20.0 (10.0-30.0)", "25.0 (22.0-30.0)", "1.25x"]
    assert rows[1] == [BATCH, "n/a", "n/a", "n/a"]


def test_bf16_runs_ours_plain_and_in_12_bits_and_compares_the_12bit_run(tmp_path):
    (tmp_path / "m-bf16.gguf").write_bytes(b"")
    out = io.StringIO()
    argv = [
        "--llama-bin",
        str(tmp_path),
        "--gguf-dir",
        str(tmp_path),
        "--formats",
        "bf16",
        "--quantize",
        "none",
    ]
    with contextlib.redirect_stdout(out):
        assert speed_main([*argv, "--dry-run"]) == 0
    ours = [line for line in out.getvalue().splitlines() if "-m bench" in line]
    assert [line.split("--weights-12bit ")[1].split()[0] for line in ours] == ["off", "on"]
    rounds = {"lfm-chat bf16-plain": [{DECODE: 20.0}], "lfm-chat bf16-12bit": [{DECODE: 25.0}]}
    headers, rows = summary(rounds, "lfm-chat bf16-12bit")
    assert headers[-1] == "lfm-chat bf16-12bit / lfm-chat bf16-plain" and rows[0][-1] == "1.25x"


def test_our_engine_runs_in_12_bits_when_asked(tmp_path):
    out = tmp_path / "ours.json"
    argv = ["--tiny", "--quick", "--engines", "ours", "--workloads", "single", "--repeats", "1"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert bench_main([*argv, "--threads", "1", "--weights-12bit", "on", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["engine"]["weights 12-bit"] == "on"


def test_long_context_figures_come_from_llama_benchs_depth_and_prompt_records():
    decode = "\n".join(
        json.dumps({"n_prompt": 0, "n_gen": 64, "n_depth": depth, "avg_ts": rate})
        for depth, rate in ((4096, 30.0), (16384, 12.5))
    )
    prompt = json.dumps({"n_prompt": 4096, "n_gen": 0, "n_depth": 0, "avg_ts": 900.0})
    assert llama_depth_figures(decode, prompt) == {
        "decode at 4096 tokens of context (tok/s)": 30.0,
        "decode at 16384 tokens of context (tok/s)": 12.5,
        "prompt of 4096 tokens (tok/s)": 900.0,
    }


def test_our_long_context_figures_come_from_the_depth_workloads(tmp_path):
    figures = ours_depth_figures(run_ours(tmp_path, "depth4k"))
    assert set(figures) == set(depth_figures([4096])) and all(value > 0 for value in figures.values())


def test_depths_add_a_second_table_of_llama_bench_runs_and_our_depth_workloads(tmp_path):
    (tmp_path / "m-bf16.gguf").write_bytes(b"")
    out = io.StringIO()
    argv = ["--llama-bin", str(tmp_path), "--gguf-dir", str(tmp_path), "--formats", "bf16"]
    with contextlib.redirect_stdout(out):
        assert speed_main([*argv, "--depths", "4096,32768", "--dry-run"]) == 0
    lines = out.getvalue().splitlines()
    assert any("-p 0 -n 64 -d 4096,32768" in line for line in lines)
    assert any("-p 4096,32768 -n 0" in line for line in lines)
    assert any("--workloads depth4k,depth32k" in line for line in lines)
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        speed_main([*argv, "--depths", "5000", "--dry-run"])  # no workload of that depth
