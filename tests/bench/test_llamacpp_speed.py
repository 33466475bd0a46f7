"""bench/llamacpp_speed.py's arithmetic and parsing (the runs themselves need a quiet machine)."""

from __future__ import annotations

import contextlib
import io
import json

from bench.cli import main as bench_main
from bench.llamacpp_speed import FIGURES, llama_figures, ours_figures, summary
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


def test_our_figures_come_from_the_single_and_batch8_workloads(tmp_path):
    out = tmp_path / "ours.json"
    argv = ["--tiny", "--quick", "--engines", "ours", "--workloads", "single,batch8", "--repeats", "1"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert bench_main([*argv, "--threads", "1", "--json", str(out)]) == 0
    figures = ours_figures(json.loads(out.read_text()))
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
