"""`python -m bench.speculation`: decode speed with n-gram speculation on and off, by acceptance.

On the chained checkpoint (bench/chain_checkpoint.py) each request's prompt is a quote of the
cycle, then the quote's first tokens again, so the reply continues the quote and the drafter
proposes what the quote said next. Swapping a share of the quote's tokens sets the acceptance:

    intact      every draft is right (acceptance near 100%)
    p=0.02      a swap every ~50 tokens (~90%)
    p=0.25      a swap every ~4 tokens (~50%)
    alternate   every other token swapped: drafts are proposed and all rejected (0%), the worst
                case, until a request's drafting pauses itself (engine/core/drafting.py)

Both modes run on one loaded model, alternating, and must produce identical greedy tokens; the
table gives decode tok/s (after every request's first token), the measured acceptance and the
ratio on/off.

`--draft-agreement 1,0.9,0.5,0` measures a draft model instead of the n-grams: a small chained
model (bench/chain_checkpoint.py's DRAFT_SHAPE) that names the cycle's next token after that
share of the tokens, on intact quotes.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass

from bench.chain_checkpoint import chain_checkpoint, draft_chain_checkpoint
from bench.checkpoint import random_checkpoint
from bench.progress import Progress
from engine import Engine, EngineConfig, SamplingParams
from model.checkpoint.loader import load_model
from model.text.tokenizer import Tokenizer

PATTERNS = {"alternate": None, "p=0.25": 0.25, "p=0.02": 0.02, "intact": 0.0}
QUOTE = 192  # tokens quoted from the cycle, then its first REPEAT tokens again
REPEAT = 64
NEW_TOKENS = 128


@dataclass
class Result:
    tok_s: float
    drafted: int
    accepted: int
    tokens: list[list[int]]


def prompts(cycle: list[int], pattern: float | None, streams: int, seed: int) -> list[list[int]]:
    """One prompt per stream, each quoting its own stretch of the cycle."""
    rng = random.Random(seed)
    out = []
    for s in range(streams):
        start = (s * 4 * QUOTE) % (len(cycle) - QUOTE)
        quote = cycle[start : start + QUOTE]
        shown = [
            rng.choice(cycle) if (i % 2 if pattern is None else rng.random() < pattern) else token
            for i, token in enumerate(quote)
        ]
        out.append(shown + quote[:REPEAT])
    return out


def run(engine: Engine, batch: list[list[int]]) -> Result:
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    ids = [engine.add_request(prompt, params) for prompt in batch]
    tokens: dict[str, list[int]] = {i: [] for i in ids}
    first_done: float | None = None
    while engine.has_unfinished():
        for output in engine.step():
            tokens[output.request_id].extend(output.new_token_ids)
        if first_done is None and all(tokens.values()):
            first_done, counted = time.perf_counter(), sum(map(len, tokens.values()))
    elapsed = time.perf_counter() - first_done
    metrics = engine.metrics
    decoded = sum(map(len, tokens.values())) - counted
    return Result(
        decoded / elapsed, metrics.spec_draft_tokens, metrics.spec_accepted_tokens, list(tokens.values())
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speculation", description=__doc__.splitlines()[0])
    parser.add_argument("--quantize", default="none", choices=["none", "int8", "w8a8", "int4"])
    parser.add_argument("--streams", default="1,8", help="comma-separated request counts")
    parser.add_argument("--patterns", default=",".join(PATTERNS), help=f"of {', '.join(PATTERNS)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--draft-agreement",
        help="comma-separated shares (0-1) of tokens after which a draft model names the next one "
        "right: measure that drafter instead of the n-grams",
    )
    args = parser.parse_args(argv)
    streams = [int(n) for n in args.streams.split(",")]
    agreements = None if args.draft_agreement is None else [float(a) for a in args.draft_agreement.split(",")]
    cases = args.patterns.split(",") if agreements is None else [f"draft {a:g}" for a in agreements]
    progress = Progress(len(streams) * len(cases) * args.repeats * 2)
    with progress.stage("the chained checkpoint (written once)"):
        checkpoint, cycle = chain_checkpoint(random_checkpoint(note=progress.note))
    with progress.stage("loading the model"):
        model = load_model(checkpoint, "bfloat16", quantize=args.quantize)
        tokenizer = Tokenizer.from_pretrained(checkpoint)
    drafts = {}
    for agreement, case in zip(agreements or [], cases, strict=False):
        with progress.stage(f"the {case} model (written once)"):
            path = draft_chain_checkpoint(checkpoint, cycle, agreement)
            drafts[case] = load_model(path, "bfloat16", quantize=args.quantize)
    mode = "ngram" if agreements is None else "draft model"
    print(f"| streams | acceptance (case) | off tok/s | {mode} tok/s | {mode} / off |")
    print("| --- | --- | --- | --- | --- |")
    for n in streams:
        for case in cases:
            batch = prompts(cycle, PATTERNS.get(case, 0.0), n, seed=n)
            figures: dict[str, list[Result]] = {"off": [], "on": []}
            for _ in range(args.repeats):
                for name in figures:  # alternating, so drift in the machine hits both alike
                    progress.note(f"{n} stream(s), {case}, speculation {name}")
                    speculative = "off" if name == "off" else "ngram"
                    config = EngineConfig(dtype="bfloat16", quantize=args.quantize, speculative=speculative)
                    draft = drafts.get(case) if name == "on" else None
                    figures[name].append(run(Engine(model, tokenizer, config, draft), batch))
            if figures["off"][0].tokens != figures["on"][0].tokens:
                print(f"bench: {n} streams, {case}: the tokens differ with speculation on", file=sys.stderr)
                return 1
            off, on = (statistics.median(r.tok_s for r in figures[m]) for m in ("off", "on"))
            last = figures["on"][-1]
            share = f"{last.accepted / last.drafted:.0%}" if last.drafted else "none drafted"
            print(f"| {n} | {share} ({case}) | {off:.1f} | {on:.1f} | {on / off:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
