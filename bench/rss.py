"""Peak RSS of one engine running one workload, measured in a fresh process.

Measured inside a subprocess that loads only that engine (the parent holds both models, so its
RSS says nothing about either), as the kernel's high-water mark `VmHWM` of /proc/self/status.
Not `ru_maxrss`: Linux carries that across fork + exec, so a child of a 1.5 GB parent would
report at least 1.5 GB. Two marks: after loading the model, and after running the workload.

    python -m bench.rss ENGINE WORKLOAD --model DIR --dtype D --threads N [--quick] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import torch

import bench
from bench.backends import load_backend, run_checked
from bench.sampling import SAMPLING
from bench.settings import RunSettings
from bench.workloads import PEAK_RSS_LOAD, PEAK_RSS_RUN, WORKLOADS, Workload
from model.quant import QUANTIZATIONS


def peak_rss_mib(status: Path = Path("/proc/self/status")) -> float:
    """This process's peak RSS; ru_maxrss where there is no /proc (macOS: a fresh spawn, in bytes)."""
    try:
        for line in status.read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**10  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def measure_in_subprocess(engine: str, workload: Workload, settings: RunSettings) -> dict[str, float | None]:
    """Run the child and return its figures; its stderr passes through so failures stay visible."""
    argv = [
        sys.executable,
        "-m",
        "bench.rss",
        engine,
        workload.name,
        "--model",
        str(settings.checkpoint),
        "--dtype",
        settings.dtype_of(engine),
        "--threads",
        str(settings.threads),
        "--seed",
        str(settings.seed),
        "--quantize",
        settings.quantize,
        "--sampling",
        settings.sampling,
    ]
    if settings.quick:
        argv.append("--quick")
    paths = [str(Path(bench.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the RSS subprocess for {engine}/{workload.name} exited with {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rss", description=__doc__.splitlines()[0])
    parser.add_argument("engine")
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--quantize", choices=QUANTIZATIONS, default="none")
    parser.add_argument("--sampling", choices=SAMPLING, default="greedy")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    settings = RunSettings(
        args.model,
        args.dtype,
        args.threads,
        args.quick,
        args.seed,
        quantize=args.quantize,
        sampling=args.sampling,
    )
    workload = WORKLOADS[args.workload]
    backend = load_backend(args.engine, settings)
    figures: dict[str, float | None] = {PEAK_RSS_LOAD: peak_rss_mib()}
    traces = run_checked(backend, workload.build(settings.build_context(workload, repetition=0)))
    figures |= workload.measure(traces)
    figures[PEAK_RSS_RUN] = peak_rss_mib()
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
