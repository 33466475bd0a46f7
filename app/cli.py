"""`lfm-chat`: parse the command line, then run the app (or `lfm-chat bench ...`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app import __version__
from app.conversation import ChatSettings
from app.options import DATA_DIR_ENV, MAX_PANES, AppOptions
from engine import EngineConfig, SamplingParamsError
from model.hub import DEFAULT_MODEL
from model.loader import QUANTIZATIONS

DEMO_KV_CACHE_MB = 64


def build_parser() -> argparse.ArgumentParser:
    defaults = ChatSettings()
    parser = argparse.ArgumentParser(
        prog="lfm-chat",
        description="Several chat panes streaming at once from one LFM2 engine with continuous batching.",
        epilog='Keys can be remapped by binding id in DATA_DIR/keymap.json, e.g. {"new_pane": "ctrl+t"}; '
        "the ids are listed in the command palette (ctrl+p). Benchmarks: lfm-chat bench --help",
    )
    parser.add_argument("--version", action="version", version=f"lfm-chat {__version__}")
    model = parser.add_argument_group("model")
    model.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        metavar="ID_OR_PATH",
        help=f"Hub repo id or local checkpoint directory (default: {DEFAULT_MODEL})",
    )
    model.add_argument(
        "--demo",
        action="store_true",
        help="run on a tiny random checkpoint (no download; replies are gibberish)",
    )
    model.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    model.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="weights and cache dtype (default: auto = bf16 where the CPU/GPU has it)",
    )
    model.add_argument(
        "--quantize",
        default="none",
        choices=list(QUANTIZATIONS),
        help="int8 weights: int8 = weight-only (closest to bf16); w8a8 = int8 activations too (fastest)",
    )
    engine = parser.add_argument_group("engine")
    engine.add_argument("--max-num-seqs", type=int, default=8, help="requests batched per step (default: 8)")
    engine.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=256,
        help="token budget per step, decode + prefill chunks (default: 256)",
    )
    chat = parser.add_argument_group("chat")
    chat.add_argument("--panes", type=int, default=2, help=f"panes to open, 1-{MAX_PANES} (default: 2)")
    chat.add_argument("--system", default="", metavar="TEXT", help="system prompt for new panes")
    chat.add_argument("--temperature", type=float, default=defaults.temperature)
    chat.add_argument("--top-p", type=float, default=defaults.top_p)
    chat.add_argument("--max-tokens", type=int, default=defaults.max_tokens, help="new tokens per reply")
    chat.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"where conversations are saved (default: ${DATA_DIR_ENV} or the user data dir)",
    )
    return parser


def options_from_args(args: argparse.Namespace) -> AppOptions:
    """Validated options; ValueError (incl. SamplingParamsError) names the bad flag's value."""
    if not 1 <= args.panes <= MAX_PANES:
        raise ValueError(f"--panes must be between 1 and {MAX_PANES}, got {args.panes}")
    chat = ChatSettings(
        system_prompt=args.system,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=args.max_tokens,
    )
    chat.sampling_params()
    engine = EngineConfig(
        device=args.device,
        dtype=args.dtype,
        quantize=args.quantize,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
    )
    if args.demo:  # a toy model: bf16 only adds casts, and the default 1 GB of KV would be ~200k blocks
        engine.kv_cache_memory_mb = DEMO_KV_CACHE_MB
        if args.dtype == "auto":
            engine.dtype = "float32"
    options = AppOptions(model=args.model, demo=args.demo, panes=args.panes, engine=engine, chat=chat)
    if args.data_dir is not None:
        options.data_dir = args.data_dir
    return options


def run_bench(argv: list[str]) -> int:
    """`lfm-chat bench ...` belongs to bench/; imported only when asked for (it pulls in transformers)."""
    try:
        from bench.cli import main as bench_main
    except ModuleNotFoundError as exc:
        if exc.name not in ("bench", "bench.cli"):
            raise
        print(
            "lfm-chat bench: the benchmarks are not available in this install (no bench.cli).",
            file=sys.stderr,
        )
        return 1
    return bench_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        return run_bench(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options = options_from_args(args)
    except (ValueError, SamplingParamsError) as exc:
        parser.error(str(exc))
    from app.app import LfmChatApp  # Textual is imported only when a UI will run

    app = LfmChatApp(options)
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
