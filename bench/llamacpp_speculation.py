"""`python -m bench.llamacpp_speculation`: llama.cpp's n-gram speculation on bench.speculation's prompts.

    python -m bench.llamacpp_speculation --llama-bin DIR --gguf CHAIN.gguf [--spec-type ngram-simple]
    python -m bench.llamacpp_speculation --llama-bin DIR --gguf CHAIN.gguf --draft DRAFT.gguf [--draft ...]

CHAIN.gguf is the chained checkpoint (bench/chain_checkpoint.py) converted to GGUF as
docs/PERFORMANCE.md says. One `llama-server` without speculation and one with `--spec-type`
answer the same prompts as bench.speculation (one stream, greedy, 128 tokens, the prompt as token
ids, no prompt cache); the table gives the decode tok/s the server reports (its `timings`), the
acceptance it reports, and the ratio. Servers alternate, so drift hits both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
from pathlib import Path

import httpx

from bench.chain_checkpoint import chain_checkpoint
from bench.checkpoint import random_checkpoint
from bench.served import served
from bench.speculation import NEW_TOKENS, PATTERNS, prompts


def llama_server(
    binary_dir: Path, gguf: Path, threads: int, spec: list[str]
) -> contextlib.AbstractContextManager[str]:
    """A llama-server on a free port (killed after); its URL once /health answers."""
    command = [str(binary_dir / "llama-server"), "-m", str(gguf), "-t", str(threads), "-c", "4096"]
    return served(
        lambda port: [*command, "--port", str(port), "-np", "1", *spec],
        f"llama-server ({' '.join(command)})",
        120,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def complete(url: str, prompt: list[int]) -> tuple[float, int, int, list[int]]:
    """(decode tok/s, drafted, accepted, tokens) of one greedy completion of `prompt`."""
    body = {
        "prompt": prompt,
        "n_predict": NEW_TOKENS,
        "temperature": 0,
        "cache_prompt": False,
        "return_tokens": True,
        "ignore_eos": True,
    }
    answer = httpx.post(f"{url}/completion", json=body, timeout=600).json()
    timings = answer["timings"]
    drafted, accepted = timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)
    return timings["predicted_per_second"], drafted, accepted, answer.get("tokens", [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.llamacpp_speculation", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--llama-bin", type=Path, required=True, help="llama.cpp's build/bin")
    parser.add_argument("--gguf", type=Path, required=True, help="the chained checkpoint as GGUF")
    parser.add_argument("--spec-type", default="ngram-simple")
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument(
        "--draft",
        type=Path,
        action="append",
        help="a draft chain (bench/chain_checkpoint.py's draft_chain_checkpoint) as GGUF: measure "
        "llama.cpp's draft model (--spec-type draft-simple) on intact quotes instead; repeatable",
    )
    parser.add_argument(
        "--draft-n-max", type=int, help="llama.cpp's --spec-draft-n-max (default: its own, 3)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    _, cycle = chain_checkpoint(random_checkpoint())
    mode = "draft model" if args.draft else args.spec_type
    print(f"| acceptance (case) | off tok/s | {mode} tok/s | ratio |")
    print("| --- | --- | --- | --- |")
    with llama_server(args.llama_bin, args.gguf, args.threads, []) as off_url:
        if args.draft:
            [prompt] = prompts(cycle, 0.0, streams=1, seed=1)
            for gguf in args.draft:
                spec = ["--spec-type", "draft-simple", "-md", str(gguf)]
                if args.draft_n_max is not None:
                    spec += ["--spec-draft-n-max", str(args.draft_n_max)]
                with llama_server(args.llama_bin, args.gguf, args.threads, spec) as on_url:
                    print(compared(gguf.stem, off_url, on_url, prompt, args.repeats), flush=True)
            return 0
        spec = ["--spec-type", args.spec_type]
        with llama_server(args.llama_bin, args.gguf, args.threads, spec) as on_url:
            for pattern in args.patterns.split(","):
                [prompt] = prompts(cycle, PATTERNS[pattern], streams=1, seed=1)
                print(compared(pattern, off_url, on_url, prompt, args.repeats), flush=True)
    return 0


def compared(case: str, off_url: str, on_url: str, prompt: list[int], repeats: int) -> str:
    """One table row: the two servers alternating on `prompt`, medians, the acceptance reported last."""
    off, on = [], []
    for _ in range(repeats):
        off.append(complete(off_url, prompt))
        on.append(complete(on_url, prompt))
    drafted, accepted = on[-1][1], on[-1][2]
    share = f"{accepted / drafted:.0%}" if drafted else "none drafted"
    rate_off, rate_on = (statistics.median(r[0] for r in runs) for runs in (off, on))
    same = "" if off[0][3] == on[0][3] else " (tokens differ)"
    return f"| {share} ({case}){same} | {rate_off:.1f} | {rate_on:.1f} | {rate_on / rate_off:.2f}x |"


if __name__ == "__main__":
    sys.exit(main())
