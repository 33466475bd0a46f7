"""`lfm-chat bench` / `python -m bench`: this engine vs transformers on named workloads, in one run.

lfm-chat bench                                   all workloads, 350M-shape random weights, 3 repeats
lfm-chat bench --workloads single,chats8 --markdown
lfm-chat bench --shape lfm3-1.7b --workloads single,batch8   LFM3-1.7B-shape random weights
lfm-chat bench --shape lfm2-8b-a1b --quantize int8           LFM2-8B-A1B-shape random weights (17 GB)
lfm-chat bench --quick                           QUICK_WORKLOADS once each at short lengths (about a minute)
lfm-chat bench --tiny --quick                    a smoke run in seconds
lfm-chat bench --workloads quality               each --quantize scheme's KL divergence from bf16
lfm-chat bench --engines ours --workloads depth4k,depth16k,depth32k   one stream deep into long contexts
lfm-chat bench --engines ours --shape lfm3-1.7b --workloads depth64k  LFM3 past its sliding window
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from bench import ours, quality
from bench.backends import ENGINES
from bench.bandwidth import measure_read_bandwidth
from bench.checkpoint import DEFAULT_SHAPE, SHAPES, random_checkpoint, tiny_checkpoint
from bench.machine import describe
from bench.progress import Progress
from bench.report import json_report, machine_line, text_report
from bench.runner import count_runs, run_benchmark
from bench.sampling import SAMPLING
from bench.sampling import describe as describe_sampling
from bench.settings import RunSettings
from bench.workloads import WORKLOADS, Workload
from engine.core.config import resolve_dtype
from model.checkpoint.hub import resolve_checkpoint
from model.errors import CheckpointError, ModelNotAvailableError
from model.native import kernels
from model.quant import QUANTIZATIONS
from model.quant.apply import QUANTIZED_LINEARS

# --quick's default: the in-process workloads that stay short at quick sizes, once each (8 runs
# with both engines). Left out: rss (a fresh process per engine, each loading the model),
# long_prompt, mixed32 and poisson (transformers' slowest at quick sizes: one generate per request).
QUICK_WORKLOADS = ("single", "chats8", "batch8", "mixed16")
REPEATS = {False: 3, True: 1}  # by --quick, unless --repeats says otherwise
INTERRUPTED = 130  # the shell's exit status for Ctrl+C


def _names(allowed: list[str] | tuple[str, ...], what: str) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated subset of `allowed`, in the order given."""

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; choose from {', '.join(allowed)}")
        return list(dict.fromkeys(names))

    return parse


def native_isa() -> str:
    """The instruction set our engine's kernels run on here, or why they don't."""
    module = kernels.load()
    return module.ISA if module is not None else f"none ({kernels.unavailable_reason() or 'turned off'})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lfm-chat bench",
        description="Benchmark this engine against transformers on the same workloads, in one run.",
        epilog="workloads: "
        + "; ".join(f"{w.name}: {w.title}" for w in WORKLOADS.values())
        + f"; {quality.NAME} (on request, ours only): {quality.TITLE}",
    )
    model = parser.add_mutually_exclusive_group()
    model.add_argument(
        "--model",
        metavar="PATH_OR_ID",
        help="checkpoint (default: random weights at --shape's shape, generated once into the cache)",
    )
    model.add_argument("--tiny", action="store_true", help="a tiny random checkpoint (smoke tests)")
    parser.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default=DEFAULT_SHAPE,
        help="without --model: whose shape the random weights have (with --tiny: whose architecture)",
    )
    parser.add_argument(
        "--workloads",
        type=_names([*WORKLOADS, quality.NAME], "workloads"),
        default=None,
        help=f"comma-separated (default: every speed workload, with --quick {','.join(QUICK_WORKLOADS)}; "
        f"{','.join(n for n, w in WORKLOADS.items() if not w.by_default)} and {quality.NAME} on request)",
    )
    parser.add_argument(
        "--engines",
        type=_names(ENGINES, "engines"),
        default=list(ENGINES),
        help="comma-separated (default: ours,transformers)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=f"repetitions per workload and engine (default: {REPEATS[False]}, with --quick {REPEATS[True]})",
    )
    parser.add_argument(
        "--dtype",
        choices=["auto", "bfloat16", "float32"],
        default="auto",
        help="for both engines; auto = bf16 where the native kernels run (AVX-512 or AVX2)",
    )
    parser.add_argument(
        "--hf-dtype",
        choices=["bfloat16", "float32"],
        default=None,
        help="transformers' dtype, where it should differ from --dtype (float32: its fastest on AVX2)",
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        default="none",
        help="our engine's linears (int8 = weight-only, w8a8 = int8 activations too, int4 = 4-bit weights); "
        f"transformers: --dtype; {quality.NAME}: the one scheme to compare (default: every one)",
    )
    parser.add_argument(
        "--weights-12bit",
        choices=["on", "off"],
        default="off",
        help="our engine's bf16 linears stored in 12 bits, the same logits (model/quant/bf12.py)",
    )
    parser.add_argument(
        "--sampling",
        choices=SAMPLING,
        default="greedy",
        help="both engines: greedy (the argmax, as most tables) or chat (the app's default sampling)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument(
        "--quick", action="store_true", help="short lengths, fewer workloads and runs: a first look"
    )
    parser.add_argument(
        "--poisson-rate",
        type=float,
        default=None,
        metavar="REQ_PER_S",
        help="Poisson arrival rate (default: from the first engine's warm-up step time)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random prompts")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write every figure as JSON")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown (README)")
    return parser


def _checkpoint(args: argparse.Namespace, scratch: Path, progress: Progress) -> Path:
    if args.tiny:
        return tiny_checkpoint(scratch / "tiny", args.shape)
    if args.model:
        return resolve_checkpoint(args.model)
    return random_checkpoint(args.shape, note=progress.note)


def _quality_schemes(args: argparse.Namespace) -> list[str]:
    """The schemes the quality workload compares: --quantize's, else every one; none if not asked."""
    if quality.NAME not in args.workloads:
        return []
    return [args.quantize] if args.quantize != "none" else list(QUANTIZED_LINEARS)


def parse(argv: list[str]) -> argparse.Namespace:
    """The arguments, with --workloads and --repeats defaulted by --quick."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.workloads is None:
        default = [name for name, workload in WORKLOADS.items() if workload.by_default]
        args.workloads = list(QUICK_WORKLOADS) if args.quick else default
    if args.repeats is None:
        args.repeats = REPEATS[args.quick]
    if args.repeats < 1 or (args.threads is not None and args.threads < 1):
        parser.error("--repeats and --threads must be at least 1")
    return args


def planned_runs(args: argparse.Namespace) -> tuple[list[Workload], list[str], int]:
    """The speed workloads, the quality schemes, and how many runs they make together."""
    workloads = [WORKLOADS[name] for name in args.workloads if name in WORKLOADS]
    schemes = _quality_schemes(args)
    quality_runs = 1 + len(schemes) if schemes else 0
    return workloads, schemes, count_runs(workloads, args.engines, args.repeats) + quality_runs


def _dtype_and_kernels(requested: str, progress: Progress) -> tuple[str, str]:
    """The dtype "auto" resolves to and the kernels' ISA; the first call builds the kernels (a minute)."""
    if not kernels.runnable_isas():
        return resolve_dtype(requested, "cpu"), native_isa()
    with progress.stage("preparing CPU kernels (built once: about a minute the first time)"):
        return resolve_dtype(requested, "cpu"), native_isa()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    workloads, schemes, total = planned_runs(args)
    if workloads and "transformers" in args.engines and importlib.util.find_spec("transformers") is None:
        print(
            "lfm-chat bench: the transformers baseline is not installed; "
            "`pip install -e '.[bench]'` (bin/test installs it too), or run with --engines ours",
            file=sys.stderr,
        )
        return 1
    progress = Progress(total)
    progress.note(f"{total} runs planned: {', '.join(args.workloads)} x {', '.join(args.engines)}")
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        dtype, isa = _dtype_and_kernels(args.dtype, progress)
        with progress.stage("measuring the memory bandwidth"):
            bandwidth = measure_read_bandwidth(threads)
        progress.note(f"memory bandwidth: {bandwidth.describe()}")
    except KeyboardInterrupt:
        progress.note("interrupted before any run finished")
        return INTERRUPTED
    with tempfile.TemporaryDirectory(prefix="lfm-bench-") as scratch:
        try:
            with progress.stage("locating the checkpoint"):
                checkpoint = _checkpoint(args, Path(scratch), progress)
        except (CheckpointError, ModelNotAvailableError) as exc:
            print(f"lfm-chat bench: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            progress.note("interrupted before any run finished")
            return INTERRUPTED
        settings = RunSettings(
            checkpoint,
            dtype,
            threads,
            args.quick,
            args.seed,
            args.poisson_rate,
            quantize=args.quantize,
            hf_dtype=args.hf_dtype,
            sampling=args.sampling,
            weights_12bit=args.weights_12bit == "on",
        )
        dtypes = dtype if args.hf_dtype is None else f"{dtype} (transformers: {args.hf_dtype})"
        machine = describe(threads, dtypes)
        run = run_benchmark(workloads, args.engines, settings, args.repeats, progress, bandwidth)
        settings, results, complete = run.settings, run.results, run.complete
        measured = None
        if schemes and complete:
            try:
                chunks = quality.default_chunks(checkpoint, args.quick, args.seed)
                measured = quality.run_quality(checkpoint, dtype, schemes, chunks, progress)
            except KeyboardInterrupt:
                complete = False
    context = {
        "machine": machine,
        "settings": {
            "model": f"tiny random {args.shape}-architecture checkpoint"
            if args.tiny
            else str(args.model or checkpoint),
            "quick": args.quick,
            "repeats": args.repeats,
            "seed": args.seed,
            "poisson_rate": settings.poisson_rate,
            "sampling": describe_sampling(args.sampling),
        },
        "engine": {
            **ours.describe(),
            "quantize": args.quantize,
            "weights 12-bit": args.weights_12bit,
            "native kernels": isa,
        },
        "command": shlex.join(["lfm-chat", "bench", *argv]),
        "bandwidth": {
            "GB/s": bandwidth.gb_per_s,
            "threads": bandwidth.threads,
            "probe bytes": bandwidth.probe_bytes,
            "described": bandwidth.describe(),
        },
        "decode limit": None
        if run.limit is None
        else {
            "scheme": run.limit.scheme,
            "step bytes": run.limit.step_bytes,
            "tok/s": run.limit.tok_per_s,
            "described": run.limit.describe(),
        },
    }
    reports = [text_report(results, args.engines, context, markdown=args.markdown)] if results else []
    if not complete:
        finished = f"{progress.finished} of {total}"
        reports.insert(0, f"lfm-chat bench: interrupted; the {finished} runs that finished:")
    if measured is not None:
        reports.append(quality.quality_report(measured, args.markdown))
        if not workloads:
            reports.append(f"machine: {machine_line(machine)}\nreproduce: {context['command']}")
    print("\n\n".join(reports))
    if args.json:
        report = json_report(results, args.engines, context)
        if measured is not None:
            report[quality.NAME] = dataclasses.asdict(measured)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if complete else INTERRUPTED
