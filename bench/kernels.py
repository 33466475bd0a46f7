"""`python -m bench.kernels`: the native linear kernels against PyTorch's, per scheme and batch size.

Each figure is the time to multiply M activation rows through every linear of one LFM2-350M
step (16 layers and the head, ~354M weights, so the weights stream from memory as in decode),
through the same layer classes the model uses: model/native/kernels' loops vs the torch fallbacks.
GB/s is the native layers' stored bytes (weights, scales) read per step over its time.

`--against ISA` times two builds of the native kernels instead (--isa's and ISA's, both loaded in
this process), alternating which goes first over `--rounds` rounds, so a busy host's swings fall
on both: e.g. `--isa avx512f --against avx2` (how many times faster avx512f is).
`--against-checkout DIR` times this checkout's build against another checkout's (a worktree at an
earlier commit), the same instruction set, the same way: what a change to the kernels bought.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from bench.checkpoint import LFM2_350M_SHAPE
from bench.progress import Progress
from model.arch.lfm2_config import ATTENTION, Lfm2Config
from model.native import kernels
from model.native.linears import NativeLinear, torch_bf16_linear
from model.quant.int4 import Int4Linear
from model.quant.int8 import Int8Linear, W8A8Linear

SCHEMES: dict[str, tuple[Callable[..., nn.Module], Callable[..., nn.Module]]] = {
    # scheme: (native layer, PyTorch layer)
    "bf16": (NativeLinear, lambda linear, _: torch_bf16_linear(linear)),
    "int8": (Int8Linear, lambda linear, _: Int8Linear(linear)),
    "w8a8": (W8A8Linear, lambda linear, _: W8A8Linear(linear)),
    "int4": (Int4Linear, lambda linear, _: Int4Linear(linear)),
}


def step_shapes(config: Lfm2Config) -> list[tuple[int, int]]:
    """(out, in) of every linear one forward step runs, head included."""
    h, f = config.hidden_size, config.ffn_dim
    qkv = (config.num_attention_heads + 2 * config.num_key_value_heads) * config.head_dim
    shapes = []
    for kind in config.layer_types:
        shapes += [(qkv, h), (h, h)] if kind == ATTENTION else [(3 * h, h), (h, h)]
        shapes += [(2 * f, h), (h, f)]
    return [*shapes, (config.vocab_size, h)]


def lfm2_350m_config() -> Lfm2Config:
    """The benchmark checkpoint's config (its shape fields, without the writer's weight scale)."""
    return Lfm2Config(**{k: v for k, v in LFM2_350M_SHAPE.items() if k != "weight_std"})


def time_step(layers: list[nn.Module], rows: int, repeats: int) -> float:
    """Median seconds for `rows` activation rows through every layer."""
    widths = {layer.in_features for layer in layers}
    inputs = {width: torch.randn(rows, width, dtype=torch.bfloat16) for width in widths}
    times = []
    for _ in range(repeats + 1):  # the first pass warms caches and thread pools
        began = time.perf_counter()
        for layer in layers:
            layer(inputs[layer.in_features])
        times.append(time.perf_counter() - began)
    return statistics.median(times[1:])


def checkout_build(checkout: Path, isa: str | None) -> ModuleType | None:
    """Another checkout's kernels for ``isa``, built from its own sources and headers by its own
    build.py (its digest differs wherever a source does, so both builds load in this process)."""
    build_file = checkout / "model" / "native" / "kernels" / "build.py"
    spec = importlib.util.spec_from_file_location("lfm_chat_other_kernel_build", build_file)
    if isa is None or spec is None or spec.loader is None or not build_file.is_file():
        print(f"bench.kernels: no kernel sources at {build_file}", file=sys.stderr)
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built, why = module.build(isa)
    if built is None:
        print(f"bench.kernels: {checkout}'s kernels did not build: {why}", file=sys.stderr)
    return built


def compare_builds(
    pair: tuple[ModuleType, ModuleType],
    schemes: list[str],
    rows: list[int],
    rounds: int,
    repeats: int,
    names: tuple[str, str] | None = None,
) -> None:
    """Print each scheme's step time per build and row count, medians over rounds that alternate
    which build goes first, and how many times faster the first build is (each round's too).
    ``names`` head the two columns (default: the builds' instruction sets)."""
    shapes = step_shapes(lfm2_350m_config())
    first, second = (f"{name} ms" for name in names or (build.ISA for build in pair))
    print(f"{'scheme':6} {'rows':>5} {first:>12} {second:>12} faster  per round")
    for scheme in schemes:
        plain = [nn.Linear(k, n, bias=False, dtype=torch.bfloat16) for n, k in shapes]
        layers = [[SCHEMES[scheme][0](linear, build) for linear in plain] for build in pair]
        del plain
        times: dict[tuple[int, int], list[float]] = {(b, m): [] for b in (0, 1) for m in rows}
        for round_ in range(rounds):
            for m in rows:
                for b in (0, 1) if round_ % 2 == 0 else (1, 0):
                    times[b, m].append(time_step(layers[b], m, repeats))
        for m in rows:
            a, b = statistics.median(times[0, m]), statistics.median(times[1, m])
            each = " ".join(f"{y / x:.2f}" for x, y in zip(times[0, m], times[1, m], strict=True))
            print(f"{scheme:6} {m:>5} {a * 1e3:>12.1f} {b * 1e3:>12.1f} {b / a:>5.2f}x  {each}")
        del layers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,8,32,256", help="comma-separated batch sizes")
    parser.add_argument("--schemes", default=",".join(SCHEMES), help="comma-separated: " + ",".join(SCHEMES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--isa", choices=list(kernels.ISAS), default=None, help="default: the widest this CPU runs"
    )
    parser.add_argument(
        "--against", choices=list(kernels.ISAS), default=None, help="time --isa's build against this one's"
    )
    parser.add_argument(
        "--against-checkout",
        type=Path,
        default=None,
        metavar="DIR",
        help="time this checkout's kernels against DIR's (another checkout of lfm-chat)",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="with --against or --against-checkout: rounds of alternation"
    )
    args = parser.parse_args(argv)
    native = kernels.load(args.isa)
    if args.against_checkout is not None:
        other = checkout_build(args.against_checkout, native.ISA if native else None)
    else:
        other = kernels.load(args.against) if args.against else None
    if native is None or ((args.against or args.against_checkout) and other is None):
        print("bench.kernels: the native kernels cannot run here (see the log above)", file=sys.stderr)
        return 1
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [int(r) for r in args.rows.split(",")]
    schemes = args.schemes.split(",")
    if other is not None:
        print(f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f} before")
        names = ("this", "other") if args.against_checkout else None
        compare_builds((native, other), schemes, rows, args.rounds, args.repeats, names)
        print(f"load average {os.getloadavg()[0]:.1f} after")
        return 0
    shapes = step_shapes(lfm2_350m_config())
    progress = Progress(len(schemes) * len(rows) * 2)
    print(f"native kernels: {native.ISA}")
    print(f"{'scheme':6} {'rows':>5} {'native ms':>10} {'GB/s':>6} {'torch ms':>10} {'torch/native':>13}")
    for scheme in schemes:
        make_native, make_torch = SCHEMES[scheme]
        results = {}
        for label, make in (("native", make_native), ("torch", make_torch)):
            progress.note(f"building {scheme} {label} layers")
            layers = [make(nn.Linear(k, n, bias=False, dtype=torch.bfloat16), native) for n, k in shapes]
            if label == "native":
                stored = sum(b.numel() * b.element_size() for layer in layers for b in layer.buffers())
            for m in rows:
                with progress.run(f"{scheme} {label} {m} rows"):
                    results[label, m] = time_step(layers, m, args.repeats)
            del layers
        for m in rows:
            a, b = results["native", m], results["torch", m]
            rate = stored / a / 1e9
            print(f"{scheme:6} {m:>5} {a * 1e3:>10.1f} {rate:>6.1f} {b * 1e3:>10.1f} {b / a:>12.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
