"""lfm-chat against llama.cpp on the same CPU, the way the README's llama.cpp tables are measured.

    python -m bench.llamacpp_speed --llama-bin DIR --gguf-dir DIR [--quantize int4] [--rounds 3] [--dry-run]

Each round runs, back to back: ``llama-bench -p 128 -n 128 -t 2`` (pp128, tg128) and
``llama-batched-bench -npp 128 -ntg 128 -npl 8 -t 2`` (S_TG) on every GGUF asked for, then
``lfm-chat bench --engines ours --workloads single,batch8 --quantize Q --repeats 1`` in a fresh
process. The table gives each figure's median over the rounds with its range, and lfm-chat's
ratio to each llama.cpp format: 1-stream decode (tg128 / single decode), 8 streams aggregate
(S_TG / batch8 decode) and a 128-token prompt (pp128 / single prefill). Run it on a quiet
machine: every figure is a speed.

With ``--quantize none`` lfm-chat runs twice a round, plain bf16 weights then 12-bit ones
(model/quant/bf12.py, the same logits), and the ratios are the 12-bit run's, to plain bf16 too.
Each round measures the read bandwidth first; the rounds' figures are printed under the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.bandwidth import measure_read_bandwidth
from bench.report import render_table
from model.quant import QUANTIZATIONS

FIGURES = ("decode, 1 stream (tok/s)", "decode, 8 streams, aggregate (tok/s)", "prompt of 128 tokens (tok/s)")


def llama_commands(binary_dir: Path, gguf: Path, threads: int) -> list[list[str]]:
    """llama-bench (3 repetitions, as /tmp/llama/bench.sh ran it) and llama-batched-bench on ``gguf``."""
    common = ["-m", str(gguf), "-t", str(threads)]
    bench = ["-p", "128", "-n", "128", "-r", "3", "-o", "jsonl"]
    batched = ["-c", "4096", "-npp", "128", "-ntg", "128", "-npl", "8", "--output-format", "jsonl"]
    return [
        [str(binary_dir / "llama-bench"), *common, *bench],
        [str(binary_dir / "llama-batched-bench"), *common, *batched],
    ]


def ours_command(quantize: str, threads: int, out: Path, weights_12bit: bool = False) -> list[str]:
    workloads = ["--engines", "ours", "--workloads", "single,batch8", "--repeats", "1"]
    workloads += ["--weights-12bit", "on" if weights_12bit else "off"]
    return [
        sys.executable,
        "-m",
        "bench",
        *workloads,
        "--quantize",
        quantize,
        "--threads",
        str(threads),
        "--json",
        str(out),
    ]


def llama_figures(bench_jsonl: str, batched_jsonl: str) -> dict[str, float]:
    """tg128 and pp128 from llama-bench, S_TG at 8 sequences from llama-batched-bench."""
    figures = {}
    for record in _records(bench_jsonl):
        name = FIGURES[2] if record["n_prompt"] else FIGURES[0]
        figures[name] = record["avg_ts"]
    for record in _records(batched_jsonl):
        if record["pl"] == 8:
            figures[FIGURES[1]] = record["speed_tg"]
    return figures


def ours_figures(report: dict) -> dict[str, float]:
    """single's decode and prefill, batch8's decode, from `lfm-chat bench --json`."""
    medians = {(w["name"], m["name"]): m["median"]["ours"] for w in report["workloads"] for m in w["metrics"]}
    return {
        FIGURES[0]: medians["single", "decode"],
        FIGURES[1]: medians["batch8", "decode"],
        FIGURES[2]: medians["single", "prefill"],
    }


def _records(jsonl: str) -> list[dict]:
    return [json.loads(line) for line in jsonl.splitlines() if line.strip().startswith("{")]


def _run(argv: list[str]) -> str:
    print("$ " + " ".join(argv), file=sys.stderr, flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def summary(rounds: dict[str, list[dict[str, float]]], ours: str) -> tuple[list[str], list[list[str]]]:
    """Per figure: each engine's median (range) over the rounds, and lfm-chat's ratio to each format."""
    formats = [name for name in rounds if name != ours]
    headers = ["", *formats, ours, *(f"{ours} / {name}" for name in formats)]
    rows = []
    for figure in FIGURES:
        values = {name: [r[figure] for r in runs if figure in r] for name, runs in rounds.items()}
        medians = {name: statistics.median(v) if v else None for name, v in values.items()}
        row = [figure]
        for name in [*formats, ours]:
            v = values[name]
            row.append(f"{medians[name]:.1f} ({min(v):.1f}-{max(v):.1f})" if v else "n/a")
        for name in formats:
            ratio = medians[ours] / medians[name] if medians[ours] and medians[name] else None
            row.append(f"{ratio:.2f}x" if ratio else "n/a")
        rows.append(row)
    return headers, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.llamacpp_speed", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--llama-bin", type=Path, required=True, help="llama.cpp's build/bin")
    parser.add_argument("--gguf-dir", type=Path, required=True)
    parser.add_argument(
        "--formats", default="q4_0,q4_k_m", help="GGUF suffixes (*-SUFFIX.gguf), comma-separated"
    )
    parser.add_argument("--quantize", choices=QUANTIZATIONS, default="int4", help="lfm-chat's weights")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dry-run", action="store_true", help="print the commands of one round")
    args = parser.parse_args(argv)
    ggufs = {
        suffix: next(iter(sorted(args.gguf_dir.glob(f"*-{suffix}.gguf"))), None)
        for suffix in args.formats.split(",")
    }
    missing = [suffix for suffix, path in ggufs.items() if path is None]
    if missing:
        parser.error(f"no *-{missing[0]}.gguf in {args.gguf_dir}")
    # each lfm-chat run: its name and whether its weights are 12-bit; the last is the one compared
    runs = {f"lfm-chat {args.quantize}": False}
    if args.quantize == "none":
        runs = {"lfm-chat bf16-plain": False, "lfm-chat bf16-12bit": True}
    ours = list(runs)[-1]
    bandwidths = []
    with tempfile.TemporaryDirectory(prefix="lfm-speed-") as scratch:
        out = Path(scratch) / "ours.json"
        if args.dry_run:
            for gguf in ggufs.values():
                for command in llama_commands(args.llama_bin, gguf, args.threads):
                    print(" ".join(command))
            for twelve in runs.values():
                print(" ".join(ours_command(args.quantize, args.threads, out, twelve)))
            return 0
        rounds: dict[str, list[dict[str, float]]] = {f"llama.cpp {s}": [] for s in ggufs} | {
            n: [] for n in runs
        }
        for _ in range(args.rounds):
            bandwidths.append(measure_read_bandwidth(args.threads))
            for suffix, gguf in ggufs.items():
                outputs = [_run(command) for command in llama_commands(args.llama_bin, gguf, args.threads)]
                rounds[f"llama.cpp {suffix}"].append(llama_figures(*outputs))
            for name, twelve in runs.items():
                _run(ours_command(args.quantize, args.threads, out, twelve))
                rounds[name].append(ours_figures(json.loads(out.read_text())))
    print(render_table(*summary(rounds, ours), markdown=True))
    for number, bandwidth in enumerate(bandwidths, 1):
        print(f"round {number}: read bandwidth {bandwidth.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
