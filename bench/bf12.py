"""`python -m bench.bf12`: the 12-bit bf16 linears against the plain bf16 ones, same run, alternating.

Each figure is the time to multiply M activation rows through every linear of one LFM2-350M step
(16 layers and the head, ~354M weights, so they stream from memory as in decode), in the same
layer classes the model uses. The two forms are timed in alternation, round after round, so a busy
minute on a shared machine slows both alike: compare the ratio, not the milliseconds. The weights
are random with the spread of trained ones (normal, per-row scales), and the read bandwidth is
measured beside the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch import nn

from bench.bandwidth import measure_read_bandwidth
from bench.kernels import lfm2_350m_config, step_shapes
from model.native import kernels
from model.native.linears import NativeLinear
from model.quant.bf12 import Bf12Linear


def trained_like(n: int, k: int, generator: torch.Generator) -> nn.Linear:
    """A bf16 linear whose rows are normal with scales spread like a trained model's (0.005-0.08)."""
    linear = nn.Linear(k, n, bias=False, dtype=torch.bfloat16)
    scales = torch.exp(torch.empty(n, 1).uniform_(-5.3, -2.5, generator=generator))
    linear.weight.data = (torch.randn(n, k, generator=generator) * scales).to(torch.bfloat16)
    return linear


def step_seconds(layers: list[nn.Module], inputs: dict[int, torch.Tensor]) -> float:
    began = time.perf_counter()
    for layer in layers:
        layer(inputs[layer.in_features])
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bf12", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,4,8,16", help="comma-separated batch sizes")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds per batch size")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--isa", choices=list(kernels.ISAS), default=None, help="default: the widest this CPU runs"
    )
    args = parser.parse_args(argv)
    native = kernels.load(args.isa)
    if native is None:
        print("bench.bf12: the native kernels cannot run here (see the log above)", file=sys.stderr)
        return 1
    if args.threads:
        torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    linears = [trained_like(n, k, generator) for n, k in step_shapes(lfm2_350m_config())]
    forms = {
        "bf16": [NativeLinear(linear, native) for linear in linears],
        "bf16-12bit": [Bf12Linear(linear, native) for linear in linears],
    }
    del linears
    packed = sum(layer.in_12_bits for layer in forms["bf16-12bit"])
    stored = {
        name: sum(b.nbytes for layer in layers for b in layer.buffers()) for name, layers in forms.items()
    }
    print(f"native kernels: {native.ISA}, {torch.get_num_threads()} threads")
    total = len(forms["bf16-12bit"])
    print(
        f"12-bit: {packed} of {total} weights packed, {stored['bf16-12bit'] / 1e6:,.0f} MB "
        f"against {stored['bf16'] / 1e6:,.0f} MB"
    )
    print(f"read bandwidth before: {measure_read_bandwidth(torch.get_num_threads()).describe()}")
    print(f"{'rows':>5} {'bf16 ms':>9} {'GB/s':>6} {'12-bit ms':>10} {'GB/s':>6} {'bf16/12-bit':>12}")
    for rows in (int(r) for r in args.rows.split(",")):
        inputs = {
            width: torch.randn(rows, width, dtype=torch.bfloat16)
            for width in {k for _, k in step_shapes(lfm2_350m_config())}
        }
        times: dict[str, list[float]] = {name: [] for name in forms}
        for round_ in range(args.rounds + 1):  # the first round warms caches and thread pools
            for name, layers in forms.items():
                seconds = step_seconds(layers, inputs)
                if round_:
                    times[name].append(seconds)
        plain, small = (statistics.median(times[name]) for name in forms)
        print(
            f"{rows:>5} {plain * 1e3:>9.1f} {stored['bf16'] / plain / 1e9:>6.1f} {small * 1e3:>10.1f} "
            f"{stored['bf16-12bit'] / small / 1e9:>6.1f} {plain / small:>11.2f}x"
        )
    print(f"read bandwidth after: {measure_read_bandwidth(torch.get_num_threads()).describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
