"""`python -m bench.structured`: decode speed of the same requests constrained and unconstrained.

Each stream asks for a JSON list of records (SCHEMA: names, integers, enums, nested arrays, at least
MIN_RECORDS of them, so no reply completes within NEW_TOKENS and every run decodes the same count).
Both modes run on one loaded model, alternating; the table gives decode tok/s (after every request's
first token), the ratio, and per constrained token the time the steps spent applying the masks and
the time llguidance spent computing them; the load average before and after says how busy the
machine was.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.checkpoint import random_checkpoint, tiny_checkpoint
from bench.progress import Progress
from engine import Engine, EngineConfig, SamplingParams, Structure
from model.checkpoint.loader import load_model
from model.text.tokenizer import Tokenizer

NEW_TOKENS = 128
PROMPT_TOKENS = 64
MIN_RECORDS = 200
SCHEMA = {
    "type": "object",
    "properties": {
        "records": {
            "type": "array",
            "minItems": MIN_RECORDS,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 16},
                    "score": {"type": "integer", "minimum": 0, "maximum": 1000},
                    "kind": {"enum": ["person", "place", "thing"]},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
                },
                "required": ["name", "score", "kind", "tags"],
            },
        }
    },
    "required": ["records"],
}

MODES = {"plain": None, "constrained": Structure("json_schema", SCHEMA)}


@dataclass
class Result:
    tok_s: float
    decoded: int
    mask_seconds: float
    compute_seconds: float


def run(engine: Engine, streams: int, structure: Structure | None) -> Result:
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, structure=structure)
    prompts = [[20 + (s * 7 + i) % 400 for i in range(PROMPT_TOKENS)] for s in range(streams)]
    ids = [engine.add_request(prompt, params) for prompt in prompts]
    tokens: dict[str, int] = dict.fromkeys(ids, 0)
    first_done = None
    while engine.has_unfinished():
        for output in engine.step():
            tokens[output.request_id] += len(output.new_token_ids)
        if first_done is None and all(tokens.values()):
            first_done, counted = time.perf_counter(), sum(tokens.values())
            masks = engine.runner.masks
            masked, computed = masks.mask_seconds, masks.compute_seconds
    elapsed = time.perf_counter() - first_done
    decoded = sum(tokens.values()) - counted
    masks = engine.runner.masks
    return Result(decoded / elapsed, decoded, masks.mask_seconds - masked, masks.compute_seconds - computed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.structured", description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="1,8", help="comma-separated request counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="a tiny random checkpoint (a smoke run)")
    args = parser.parse_args(argv)
    streams = [int(n) for n in args.streams.split(",")]
    progress = Progress(len(streams) * args.repeats * 2)
    with progress.stage("the checkpoint"):
        checkpoint = (
            tiny_checkpoint(Path(tempfile.mkdtemp(prefix="bench-structured-")))
            if args.tiny
            else random_checkpoint(note=progress.note)
        )
    with progress.stage("loading the model"):
        model = load_model(checkpoint, "bfloat16")
        tokenizer = Tokenizer.from_pretrained(checkpoint)
    # one engine per mode, as a server keeps one: its compiled grammar and llguidance's lexer states
    # persist between requests, so a first warm-up run pays for building them
    engines = {
        name: Engine(model, tokenizer, EngineConfig(dtype="bfloat16", speculative="off")) for name in MODES
    }
    with progress.stage("a warm-up run of each mode"):
        for name, engine in engines.items():
            run(engine, max(streams), MODES[name])
    print(f"load average before: {load_average()}")
    print("| streams | plain tok/s | constrained tok/s | ratio | masks applied | masks computed |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in streams:
        figures: dict[str, list[Result]] = {name: [] for name in MODES}
        for _ in range(args.repeats):
            for name in figures:  # alternating, so drift in the machine hits both alike
                progress.note(f"{n} stream(s), {name}")
                figures[name].append(run(engines[name], n, MODES[name]))
        plain, constrained = (statistics.median(r.tok_s for r in figures[m]) for m in figures)
        last = figures["constrained"][-1]
        wait, compute = (
            seconds / last.decoded * 1e6 for seconds in (last.mask_seconds, last.compute_seconds)
        )
        ratio = constrained / plain
        print(
            f"| {n} | {plain:.1f} | {constrained:.1f} | {ratio:.2f}x | {wait:.0f} µs/token "
            f"| {compute:.0f} µs/token |"
        )
    print(f"load average after: {load_average()} (the machine's other work shares its cores)")
    return 0


def load_average() -> str:
    return ", ".join(f"{load:.2f}" for load in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
