"""The flags and checks every `lfm-chat` command that runs a model shares: model, engine, sampling.

Every mistake is one line that names the flag and says what to do, before anything loads: exit
code 2 for a value that is wrong anywhere (UsageError), 1 for one this machine cannot honour
(SetupError: a missing checkpoint, no CUDA). Nothing here imports torch, which takes seconds.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from engine import (
    DEFAULT_MODEL,
    DEFAULT_SPECULATIVE,
    DTYPES,
    QUANTIZATIONS,
    SAMPLING_OFF,
    SPECULATIVE,
    WEIGHTS_12BIT,
    ModelSource,
    SamplingParams,
    SamplingParamsError,
    Structure,
    is_repo_id,
)

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


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """The model and engine groups, which the chat and `serve` both take."""
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
    model.add_argument(
        "--weights-12bit",
        default="auto",
        choices=WEIGHTS_12BIT,
        help="CPU bf16 linears stored in 12 bits, the same logits bit for bit (default: auto = where "
        "this CPU's kernels measured faster with them)",
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
    engine.add_argument(
        "--speculative",
        default=DEFAULT_SPECULATIVE,
        choices=SPECULATIVE,
        help="ngram = draft from the conversation itself and verify the drafts in the batch "
        "(same tokens, fewer steps when replies repeat their context); off = one token per step "
        f"(default: {DEFAULT_SPECULATIVE})",
    )
    engine.add_argument(
        "--draft-model",
        metavar="ID_OR_PATH",
        help="a smaller model with the same tokenizer that drafts instead of the conversation's "
        "n-grams (e.g. LiquidAI/LFM2-350M for LFM2-2.6B): the same tokens, fewer steps where it "
        "guesses right; needs --speculative ngram",
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


# a schema file bigger than this cannot be a Structure (engine/core/structure.py caps its text)
SCHEMA_FILE_LIMIT = 2**20


def json_schema_structure(value: str) -> Structure:
    """``--json-schema FILE|JSON``: the schema inline (it starts with "{") or in a file, as a checked
    Structure; UsageError in one sentence for a missing file, bad JSON or a schema that cannot compile."""
    from engine import check_structure  # llguidance loads only when a schema is given

    text = value
    if not value.lstrip().startswith("{"):
        path = Path(value)
        try:
            with path.open("rb") as file:
                raw = file.read(SCHEMA_FILE_LIMIT + 1)
        except OSError as exc:
            raise UsageError(f"--json-schema {value}: cannot read it ({exc.strerror or exc})") from None
        if len(raw) > SCHEMA_FILE_LIMIT:
            raise UsageError(f"--json-schema {value}: the file is over {SCHEMA_FILE_LIMIT // 2**10} KiB")
        text = raw.decode("utf-8", errors="replace")
    try:
        structure = Structure("json_schema", json.loads(text))
        check_structure(structure)
    except (ValueError, RecursionError) as exc:  # json's errors and StructureError are ValueErrors
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else exc
        raise UsageError(f"--json-schema: {reason}") from None
    return structure


def in_flag_terms(message: str) -> str:
    """ "SamplingParams.top_p must be ..." -> "--top-p must be ...": the user typed flags, not fields."""
    return re.sub(r"SamplingParams\.(\w+)", lambda field: "--" + field[1].replace("_", "-"), message)


def check_model(model: str, flag: str = "--model") -> None:
    """A --model (or ``flag``) path that is no checkpoint fails now, not after the UI has been
    loading for seconds.

    Mirrors model.hub.resolve_checkpoint: a local directory wins; anything else must be a Hub id.
    """
    path = Path(model).expanduser()
    what_to_give = f"give a checkpoint directory or a Hub id like {DEFAULT_MODEL}"
    if flag == "--model":
        what_to_give += ", or try --demo"
    if path.is_dir() and not (path / "config.json").is_file():
        raise SetupError(f"{flag} {model}: that directory has no config.json; {what_to_give}")
    if path.exists() and not path.is_dir():
        raise SetupError(f"{flag} {model}: that is a file, not a directory; {what_to_give}")
    if not path.exists() and not is_repo_id(model):
        raise SetupError(f"{flag} {model}: no such directory; {what_to_give}")


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


@dataclass(frozen=True, slots=True)
class ModelFlags:
    """What the model, engine and sampling flags ask for, validated."""

    source: ModelSource
    engine: dict[str, Any]  # EngineConfig's keyword arguments (building one imports torch)
    sampling: dict[str, float | int]  # SamplingParams field -> value, for the flags given

    def check_machine(self) -> None:
        check_machine(self.source, self.engine["device"], self.engine.get("draft_model"))


def check_machine(source: ModelSource, device: str, draft_model: str | None = None) -> None:
    """SetupError when this machine cannot honour the flags: no such checkpoint, no such device."""
    if not source.demo:
        check_model(source.model)
    if draft_model is not None:
        check_model(draft_model, "--draft-model")
    check_device(device)


def model_flags(args: argparse.Namespace) -> ModelFlags:
    """The flags of `add_engine_flags` and `add_sampling_flags`; UsageError names the bad flag.

    The engine flags are checked here rather than by EngineConfig, whose module imports torch.
    """
    if args.max_num_batched_tokens < args.max_num_seqs:
        raise UsageError(
            f"--max-num-batched-tokens ({args.max_num_batched_tokens}) must be at least --max-num-seqs "
            f"({args.max_num_seqs}), so every running request can decode in each step; raise the one "
            "or lower the other"
        )
    if args.demo and args.model != DEFAULT_MODEL:
        raise UsageError(f"--demo runs a tiny random checkpoint, not --model {args.model}; drop one of them")
    if args.revision is not None and (args.demo or Path(args.model).expanduser().exists()):
        what = "--demo" if args.demo else f"--model {args.model}, a local path"
        raise UsageError(f"--revision picks a version of a Hub repo, not of {what}; drop one of them")
    if args.draft_model is not None and args.speculative == "off":
        raise UsageError("--draft-model drafts for speculative decoding; drop it or --speculative off")
    sampling = {name: getattr(args, name) for name in SAMPLING_OFF if getattr(args, name) is not None}
    try:
        SamplingParams(**sampling)
    except SamplingParamsError as exc:
        raise UsageError(in_flag_terms(str(exc))) from None
    engine = {
        "device": args.device,
        "dtype": args.dtype,
        "quantize": args.quantize,
        "weights_12bit": args.weights_12bit,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "speculative": args.speculative,
        "draft_model": args.draft_model,
    }
    return ModelFlags(ModelSource(args.model, args.revision, args.demo), engine, sampling)
