"""`lfm-chat`: parse the command line, check it against this machine, run the app (or bench, download, serve).

Every mistake is one line that names the flag and says what to do, before the UI starts: exit
code 2 for a value that is wrong anywhere, 1 for one this machine cannot honour (a missing
checkpoint, no CUDA, an unusable data dir). Nothing here imports torch, which takes seconds:
the loading screen is drawn first, and the loader thread imports it (tests/app/test_cli.py).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from app import __version__
from app.conversation import ChatSettings
from app.options import DATA_DIR_ENV, MAX_PANES, AppOptions
from app.store import Store
from app.store_errors import StoreError
from engine import DEFAULT_MODEL, SAMPLING_OFF, SamplingParams, SamplingParamsError, is_repo_id

DEMO_KV_CACHE_MB = 64
# engine.config's ENGINE_DTYPES and model.loader's QUANTIZATIONS, which import torch; a test keeps them equal
DTYPES = ("auto", "float32", "bfloat16")
QUANTIZATIONS = ("none", "int8", "w8a8", "int4")
DEVICE = re.compile(r"cpu|cuda(:\d+)?")


class UsageError(Exception):
    """A flag's value is wrong on any machine: exit code 2."""


class SetupError(Exception):
    """The flags are fine but this machine cannot do what they ask: exit code 1."""


class Parser(argparse.ArgumentParser):
    """argparse, with an error on one line: its own puts the whole usage, longer than the error, above it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def whole_number(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type for a count; argparse puts the flag in front: "argument --panes: must be ..."."""
    allowed = f"a whole number >= {low}" if high is None else f"a whole number from {low} to {high}"

    def parse(text: str) -> int:
        value = int(text) if text.strip().isdecimal() else None
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {allowed}, not {text!r}")
        return value

    return parse


def device_name(text: str) -> str:
    if not DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda or cuda:N, not {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    defaults = ChatSettings()
    parser = Parser(
        prog="lfm-chat",
        description="Several chat panes streaming at once from one LFM2 engine with continuous batching.",
        epilog='Keys can be remapped by binding id in DATA_DIR/keymap.json, e.g. {"new_pane": "f2"}; '
        "the ids are listed in the command palette (ctrl+p). Benchmarks: lfm-chat bench --help. "
        "Offline use: lfm-chat download --help. An OpenAI-compatible server: lfm-chat serve --help",
    )
    parser.add_argument("--version", action="version", version=f"lfm-chat {__version__}")
    add_engine_flags(parser)
    chat = parser.add_argument_group("chat")
    chat.add_argument(
        "--panes",
        type=whole_number(1, MAX_PANES),
        default=2,
        help=f"panes to open, 1-{MAX_PANES} (default: 2)",
    )
    chat.add_argument("--system", default="", metavar="TEXT", help="system prompt for new panes")
    add_sampling_flags(parser)
    add_server_flags(parser)
    chat.add_argument(
        "--max-tokens", type=whole_number(1), default=defaults.max_tokens, help="new tokens per reply"
    )
    chat.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"where conversations are saved (default: ${DATA_DIR_ENV} or the user data dir)",
    )
    return parser


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """The model and engine groups; `lfm-chat serve` (server/cli.py) takes the same ones."""
    model = parser.add_argument_group("model")
    model.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        metavar="ID_OR_PATH",
        help=f"Hub repo id or local checkpoint directory (default: {DEFAULT_MODEL})",
    )
    model.add_argument(
        "--revision",
        metavar="R",
        help="branch, tag or commit of a Hub --model (default: main); `lfm-chat download` fetches one ahead",
    )
    model.add_argument(
        "--demo",
        action="store_true",
        help="run on a tiny random checkpoint (no download; replies are gibberish)",
    )
    model.add_argument("--device", default="cpu", type=device_name, help="cpu, cuda or cuda:N (default: cpu)")
    model.add_argument(
        "--dtype",
        default="auto",
        choices=DTYPES,
        help="weights and cache dtype (default: auto = bf16 where the CPU/GPU has it)",
    )
    model.add_argument(
        "--quantize",
        default="none",
        choices=QUANTIZATIONS,
        help="CPU linears: int8 = int8 weights (closest to bf16); w8a8 = int8 activations too; "
        "int4 = 4-bit weights (fastest decode, least exact)",
    )
    engine = parser.add_argument_group("engine")
    engine.add_argument(
        "--max-num-seqs", type=whole_number(1), default=8, help="requests batched per step (default: 8)"
    )
    engine.add_argument(
        "--max-num-batched-tokens",
        type=whole_number(1),
        default=256,
        help="token budget per step, decode + prefill chunks (default: 256)",
    )


def add_sampling_flags(parser: argparse.ArgumentParser) -> None:
    """The sampling group: what a reply samples with unless a request says otherwise."""
    sampling = parser.add_argument_group(
        "sampling",
        "Each defaults to the model card's recommendation for the checkpoint (LFM2: temperature 0.3, "
        "min-p 0.15, repetition penalty 1.05; LFM2.5: temperature 0.1, top-k 50, top-p 0.1, repetition "
        "penalty 1.05); a flag given here replaces that one value.",
    )
    add = sampling.add_argument
    add("--temperature", type=float, metavar="T", help="0 = greedy")
    add("--top-k", type=int, metavar="K", help="sample from the K likeliest tokens (0 = off)")
    add("--top-p", type=float, metavar="P", help="nucleus sampling (1 = off)")
    add("--min-p", type=float, metavar="P", help="drop tokens below P x the top token's chance (0 = off)")
    add("--repetition-penalty", type=float, metavar="R", help="penalise tokens already in the chat (1 = off)")


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    """--server: the panes talk to an OpenAI-compatible server instead of a local engine."""
    server = parser.add_argument_group(
        "server",
        "Chat with a model served elsewhere (vLLM, SGLang, llama-server, lfm-chat serve): no local model "
        "is loaded; --model then names one of the server's models (default: the first it lists).",
    )
    server.add_argument(
        "--server", metavar="URL", help="an OpenAI-compatible server, e.g. http://gpu-box:8000"
    )
    server.add_argument("--api-key", metavar="KEY", help="the server's API key (sent as a bearer token)")


def server_url(url: str) -> str:
    """The base URL, without a trailing / or /v1 (the client adds /v1/... itself)."""
    if not re.match(r"https?://[^/\s]+", url):
        raise UsageError(
            f"--server must be an http:// or https:// URL, like http://127.0.0.1:8000, not {url!r}"
        )
    return re.sub(r"/(v1/?)?$", "", url.rstrip("/") + "/")


def options_from_args(args: argparse.Namespace) -> AppOptions:
    """Validated options; UsageError names the bad flag.

    The engine flags are checked here rather than by EngineConfig, whose module imports torch.
    """
    if args.max_num_batched_tokens < args.max_num_seqs:
        raise UsageError(
            f"--max-num-batched-tokens ({args.max_num_batched_tokens}) must be at least --max-num-seqs "
            f"({args.max_num_seqs}), so every running request can decode in each step; raise the one "
            "or lower the other"
        )
    if args.revision is not None and (args.demo or Path(args.model).expanduser().exists()):
        what = "--demo" if args.demo else f"--model {args.model}, a local path"
        raise UsageError(f"--revision picks a version of a Hub repo, not of {what}; drop one of them")
    flags = {name: getattr(args, name) for name in SAMPLING_OFF if getattr(args, name) is not None}
    try:
        SamplingParams(**flags)
    except SamplingParamsError as exc:
        raise UsageError(in_flag_terms(str(exc))) from None
    engine = {
        "device": args.device,
        "dtype": args.dtype,
        "quantize": args.quantize,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
    }
    if args.demo:  # a toy model: bf16 only adds casts, and the default 1 GB of KV would be ~200k blocks
        engine["kv_cache_memory_mb"] = DEMO_KV_CACHE_MB
        if args.dtype == "auto":
            engine["dtype"] = "float32"
    options = AppOptions(
        model=args.model,
        revision=args.revision,
        demo=args.demo,
        panes=args.panes,
        engine=engine,
        sampling_flags=flags,
    )
    card = options.sampling_defaults()
    chat = {**card.values, "preset": card.name, "system_prompt": args.system, "max_tokens": args.max_tokens}
    options.chat = ChatSettings.from_dict(chat)  # the fields ChatSettings has; all are in sampling_defaults()
    if args.data_dir is not None:
        options.data_dir = args.data_dir
    if args.server is not None:
        if args.demo or args.revision is not None:
            raise UsageError(
                f"--{'demo' if args.demo else 'revision'} is for a local model; --server uses the server's"
            )
        options.server, options.api_key = server_url(args.server), args.api_key
    elif args.api_key is not None:
        raise UsageError("--api-key goes with --server URL")
    return options


def in_flag_terms(message: str) -> str:
    """ "SamplingParams.top_p must be ..." -> "--top-p must be ...": the user typed flags, not fields."""
    return re.sub(r"SamplingParams\.(\w+)", lambda field: "--" + field[1].replace("_", "-"), message)


def check_model(model: str) -> None:
    """A --model path that is no checkpoint fails now, not after the UI has been loading for seconds.

    Mirrors model.hub.resolve_checkpoint: a local directory wins; anything else must be a Hub id.
    """
    path = Path(model).expanduser()
    what_to_give = f"give an LFM2 checkpoint directory or a Hub id like {DEFAULT_MODEL}, or try --demo"
    if path.is_dir() and not (path / "config.json").is_file():
        raise SetupError(f"--model {model}: that directory has no config.json; {what_to_give}")
    if path.exists() and not path.is_dir():
        raise SetupError(f"--model {model}: that is a file, not a directory; {what_to_give}")
    if not path.exists() and not is_repo_id(model):
        raise SetupError(f"--model {model}: no such directory; {what_to_give}")


def check_device(device: str) -> None:
    """Without this torch fails deep in the load with "Torch not compiled with CUDA enabled".

    It imports torch, so only a launch on CUDA waits for that before the first frame.
    """
    if device == "cpu":
        return
    import torch

    if not torch.backends.cuda.is_built():
        raise SetupError(
            f"--device {device}: this PyTorch build has no CUDA; "
            "use --device cpu or install a CUDA build of torch"
        )
    count = torch.cuda.device_count()
    if int(device.partition(":")[2] or 0) >= count:
        raise SetupError(
            f"--device {device}: PyTorch sees {count} CUDA device(s) here; use --device cpu, "
            f"another cuda:N, or check the driver and CUDA_VISIBLE_DEVICES"
        )


def open_store(options: AppOptions) -> Store:
    """An unusable --data-dir, or one another lfm-chat holds, is found before the UI starts.

    StoreError's message already says which directory and what to do.
    """
    try:
        return Store(options.store_path)
    except StoreError as exc:
        raise SetupError(str(exc)) from None


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
    if argv[:1] == ["download"]:
        from app.download import main as download_main

        return download_main(argv[1:])
    if argv[:1] == ["serve"]:
        from server.cli import main as serve_main

        return serve_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options = options_from_args(args)
    except UsageError as exc:
        parser.error(str(exc))
    try:
        if options.server is None:
            if not options.demo:
                check_model(options.model)
            check_device(args.device)
        store = open_store(options)
    except SetupError as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    from app.app import LfmChatApp  # Textual is imported only when a UI will run

    app = LfmChatApp(options, store)
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
