"""lfm-chat against llama.cpp on the same CPU, the way the README's llama.cpp tables are measured.

    python -m bench.llamacpp_speed --llama-bin DIR --gguf-dir DIR [--quantize int4] [--rounds 3] [--dry-run]
    python -m bench.llamacpp_speed ... --depths 4096,16384,32768   also one stream deep into long contexts

Each round runs, back to back: ``llama-bench -p 128 -n 128 -t 2`` (pp128, tg128) and
``llama-batched-bench -npp 128 -ntg 128 -npl 8 -t 2`` (S_TG) on every GGUF asked for, then
``lfm-chat bench --engines ours --workloads single,batch8 --quantize Q --repeats 1`` in a fresh
process. The table gives each figure's median over the rounds with its range, and lfm-chat's
ratio to each llama.cpp format: 1-stream decode (tg128 / single decode), 8 streams aggregate
(S_TG / batch8 decode) and a 128-token prompt (pp128 / single prefill). Run it on a quiet
machine: every figure is a speed.

With ``--depths`` each round also runs ``llama-bench -p 0 -n 64 -d DEPTHS`` (decode at each depth)
and ``llama-bench -p DEPTHS -n 0`` (a prompt that long), against ``lfm-chat bench`` 's depth
workloads (4k, 16k, 32k and 64k tokens) (a prompt that long, then 64 tokens), in a second table.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.bandwidth import measure_read_bandwidth
from bench.report import render_table
from bench.workloads import DEPTHS
from model.quant import QUANTIZATIONS

FIGURES = ("decode, 1 stream (tok/s)", "decode, 8 streams, aggregate (tok/s)", "prompt of 128 tokens (tok/s)")


DEPTH_NEW_TOKENS = 64  # bench.workloads' depth workloads decode this many after their prompt


def depth_figures(depths: list[int]) -> list[str]:
    return [
        *(f"decode at {depth} tokens of context (tok/s)" for depth in depths),
        *(f"prompt of {depth} tokens (tok/s)" for depth in depths),
    ]


def llama_commands(binary_dir: Path, gguf: Path, threads: int) -> list[list[str]]:
    """llama-bench (3 repetitions, as /tmp/llama/bench.sh ran it) and llama-batched-bench on ``gguf``."""
    common = ["-m", str(gguf), "-t", str(threads)]
    bench = ["-p", "128", "-n", "128", "-r", "3", "-o", "jsonl"]
    batched = ["-c", "4096", "-npp", "128", "-ntg", "128", "-npl", "8", "--output-format", "jsonl"]
    return [
        [str(binary_dir / "llama-bench"), *common, *bench],
        [str(binary_dir / "llama-batched-bench"), *common, *batched],
    ]


def llama_depth_commands(binary_dir: Path, gguf: Path, threads: int, depths: list[int]) -> list[list[str]]:
    """Decode at each depth (`-d`), then a prompt of each depth's length: one repetition each."""
    common = [str(binary_dir / "llama-bench"), "-m", str(gguf), "-t", str(threads), "-r", "1", "-o", "jsonl"]
    listed = ",".join(map(str, depths))
    return [
        [*common, "-p", "0", "-n", str(DEPTH_NEW_TOKENS), "-d", listed],
        [*common, "-p", listed, "-n", "0"],
    ]


def ours_command(
    quantize: str, threads: int, out: Path, weights_12bit: bool = False, workloads: str = "single,batch8"
) -> list[str]:
    chosen = ["--engines", "ours", "--workloads", workloads, "--repeats", "1"]
    chosen += ["--weights-12bit", "on" if weights_12bit else "off"]
    return [
        sys.executable,
        "-m",
        "bench",
        *chosen,
        "--quantize",
        quantize,
        "--threads",
        str(threads),
        "--json",
        str(out),
    ]


def ours_depth_workloads(depths: list[int]) -> str:
    by_context = {context: name for name, context in DEPTHS.items()}
    return ",".join(by_context[depth] for depth in depths)


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


def llama_depth_figures(depth_jsonl: str, prompt_jsonl: str) -> dict[str, float]:
    """Decode rates by depth (tg64 @ dN) and prompt rates by length (ppN) from llama-bench."""
    figures = {}
    for record in _records(depth_jsonl):
        figures[f"decode at {record['n_depth']} tokens of context (tok/s)"] = record["avg_ts"]
    for record in _records(prompt_jsonl):
        figures[f"prompt of {record['n_prompt']} tokens (tok/s)"] = record["avg_ts"]
    return figures


def ours_figures(report: dict) -> dict[str, float]:
    """single's decode and prefill, batch8's decode, from `lfm-chat bench --json`."""
    medians = _medians(report)
    return {
        FIGURES[0]: medians["single", "decode"],
        FIGURES[1]: medians["batch8", "decode"],
        FIGURES[2]: medians["single", "prefill"],
    }


def ours_depth_figures(report: dict) -> dict[str, float]:
    """Each depth workload's decode and prefill rates, from `lfm-chat bench --json`."""
    medians, figures = _medians(report), {}
    for name, context in DEPTHS.items():
        if (name, "decode") in medians:
            figures[f"decode at {context} tokens of context (tok/s)"] = medians[name, "decode"]
            figures[f"prompt of {context} tokens (tok/s)"] = medians[name, "prefill"]
    return figures


def _medians(report: dict) -> dict[tuple[str, str], float]:
    return {(w["name"], m["name"]): m["median"]["ours"] for w in report["workloads"] for m in w["metrics"]}


def _note(engine: str, figures: dict[str, float]) -> None:
    """Each run's figures as they come: a long run that fails later keeps what it measured."""
    print(f"{engine}: {json.dumps(figures)}", file=sys.stderr, flush=True)


def _records(jsonl: str) -> list[dict]:
    return [json.loads(line) for line in jsonl.splitlines() if line.strip().startswith("{")]


def _run(argv: list[str]) -> str:
    print("$ " + " ".join(argv), file=sys.stderr, flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def summary(
    rounds: dict[str, list[dict[str, float]]], ours: str, figures: tuple[str, ...] | list[str] = FIGURES
) -> tuple[list[str], list[list[str]]]:
    """Per figure: each engine's median (range) over the rounds, and lfm-chat's ratio to each format."""
    formats = [name for name in rounds if name != ours]
    headers = ["", *formats, ours, *(f"{ours} / {name}" for name in formats)]
    rows = []
    for figure in figures:
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


@dataclass(frozen=True, slots=True)
class Table:
    """One table of the run: its figures, the llama.cpp commands for a GGUF, lfm-chat's workloads,
    and how each side's output becomes figures."""

    figures: list[str]
    llama_commands: Callable[[Path], list[list[str]]]
    llama_figures: Callable[..., dict[str, float]]
    workloads: str
    ours_figures: Callable[[dict], dict[str, float]]


def _depths(text: str) -> list[int]:
    depths = [int(part) for part in text.split(",") if part.strip()]
    unknown = [depth for depth in depths if depth not in DEPTHS.values()]
    if unknown:
        raise argparse.ArgumentTypeError(f"depths are {', '.join(map(str, DEPTHS.values()))}, not {unknown}")
    return depths


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
    parser.add_argument(
        "--depths", type=_depths, default=[], help="long contexts too, e.g. 4096,16384,32768 (a second table)"
    )
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
    tables = [
        Table(
            list(FIGURES),
            lambda gguf: llama_commands(args.llama_bin, gguf, args.threads),
            llama_figures,
            "single,batch8",
            ours_figures,
        )
    ]
    if args.depths:
        tables.append(
            Table(
                depth_figures(args.depths),
                lambda gguf: llama_depth_commands(args.llama_bin, gguf, args.threads, args.depths),
                llama_depth_figures,
                ours_depth_workloads(args.depths),
                ours_depth_figures,
            )
        )
    bandwidths = []
    with tempfile.TemporaryDirectory(prefix="lfm-speed-") as scratch:
        out = Path(scratch) / "ours.json"
        if args.dry_run:
            for table in tables:
                for gguf in ggufs.values():
                    for command in table.llama_commands(gguf):  # type: ignore[arg-type]
                        print(" ".join(command))
                for twelve in runs.values():
                    print(" ".join(ours_command(args.quantize, args.threads, out, twelve, table.workloads)))
            return 0
        rounds: list[dict[str, list[dict[str, float]]]] = [
            {name: [] for name in [*(f"llama.cpp {s}" for s in ggufs), *runs]} for _ in tables
        ]
        for number in range(1, args.rounds + 1):
            bandwidths.append(measure_read_bandwidth(args.threads))
            print(f"round {number}: read bandwidth {bandwidths[-1].describe()}", file=sys.stderr, flush=True)
            for table, results in zip(tables, rounds, strict=True):
                for suffix, gguf in ggufs.items():
                    outputs = [_run(command) for command in table.llama_commands(gguf)]  # type: ignore[arg-type]
                    results[f"llama.cpp {suffix}"].append(table.llama_figures(*outputs))
                    _note(f"llama.cpp {suffix}", results[f"llama.cpp {suffix}"][-1])
                for name, twelve in runs.items():
                    _run(ours_command(args.quantize, args.threads, out, twelve, table.workloads))
                    results[name].append(table.ours_figures(json.loads(out.read_text())))
                    _note(name, results[name][-1])
    for table, results in zip(tables, rounds, strict=True):
        print(render_table(*summary(results, ours, table.figures), markdown=True))
        print()
    for number, bandwidth in enumerate(bandwidths, 1):
        print(f"round {number}: read bandwidth {bandwidth.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
