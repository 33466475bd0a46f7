"""`python -m bench.serve_compare`: `lfm-chat serve` against vLLM's CPU build, one client for both.

    python -m bench.serve_compare [--clients 1,8,16,32] [--rounds 2] [--tokens 128] [--words 100]
                                  [--vllm-python PATH] [--quantize int8|w8a8|int4 [--vllm-bf16]]

Both servers load the same random bf16 checkpoint at the LFM2-350M shape (bench/checkpoint.py)
and answer the same client: every client sends one streamed ``/v1/completions`` request of a
``--words``-word prompt (100; its own words, so no prefix cache helps), greedy, ``ignore_eos``,
128 tokens out; a round's figure is the tokens all clients received over the round's wall time.
Each concurrency runs ``--rounds`` rounds per server, the servers alternating round by round; the
idle server is paused (SIGSTOP of its process group), so a busy-waiting thread of one cannot
slow the other. The read-bandwidth probe (bench/bandwidth.py) runs with both paused before each
concurrency and is printed beside its figures. The client runs on the same cores as the servers,
the same for both.

The prompts' words are common English ones (bench/checkpoint.py's PROMPT_VOCABULARY) that the
random checkpoint's tokenizer knows as LFM2's real one does, one token each: a 100-word prompt is
~113 tokens, about what LFM2-350M makes of it. The table's header gives the prompts' mean length in
tokens, counted with the checkpoint's tokenizer.json as both servers encode a completion's prompt
(BOS first).

vLLM runs from its own venv (``--vllm-python``; docs/SCALE_OUT.md says how to install it) with
both cores (``OMP_NUM_THREADS=2 VLLM_CPU_OMP_THREADS_BIND=0-1``). Where it is missing or cannot
start, the table says why and gives lfm-chat's figures alone. Run it on a quiet machine.

``--quantize`` quantizes both sides: lfm-chat's ``int8`` (weight-only) or ``w8a8`` against vLLM's
W8A8 int8, lfm-chat's ``int4`` against vLLM's W4A16 int4, vLLM reading a compressed-tensors copy of
the same bf16 weights (bench/vllm_quant.py says how each is quantized and where they differ);
``--vllm-bf16`` keeps vLLM in bf16. The table's headers name each side's scheme.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from tokenizers import Tokenizer

from bench.bandwidth import Bandwidth, measure_read_bandwidth
from bench.checkpoint import PROMPT_VOCABULARY, random_checkpoint
from bench.report import render_table
from bench.served import ServerDidNotStart, served_process
from bench.vllm_quant import VLLM_COUNTERPART, quantized_checkpoint
from model.quant import QUANTIZATIONS

MODEL_NAME = "bench"  # both servers' --served-model-name, so one request body fits both
PROMPT_WORDS = 100
NEW_TOKENS = 128
CLIENTS = (1, 8, 16, 32)
ROUNDS = 2
WARM_UP_TOKENS = 8
REPO = Path(__file__).resolve().parents[1]  # `python -m cli serve` runs from here
VLLM_PYTHON = Path("/work/vllm-venv/bin/python")
VLLM_MAX_MODEL_LEN = 4096  # the prompts need ~113 tokens; a short context keeps vLLM's KV space small
START_LIMIT_S = 900.0  # vLLM's CPU build compiles at start-up
MAX_LINE_CHARS = 1 << 20  # one server-sent event line; a longer one is a broken server, not a reply
# vLLM's log prefix, "(VllmWorker-0 pid=1) ERROR 11-29 02:31:48 [file.py:953] ", and an exception line
_LOG_PREFIX = re.compile(r"^\([^)]*\)\s+(?:ERROR|CRITICAL)\s+\S+\s+\S+\s+\[[^\]]*\]\s?")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): ")
# On the CPU backend this is the share of memory vLLM reserves (weights and KV cache), checked
# against what is free at start-up: its default 0.92 fails on a machine that runs anything else.
VLLM_MEMORY_FRACTION = 0.25


class BadStream(RuntimeError):
    """A server's reply was not the stream the client asked for; the message says how."""


def prompt(client: int, round_number: int, concurrency: int, words: int = PROMPT_WORDS) -> str:
    """``words`` words that differ from the first word on between clients, rounds and concurrencies:
    a prompt seen at an earlier concurrency would be read from the prefix cache of a server that kept it
    (vLLM did, for ~30% of its prompt blocks, before the concurrency was part of the prompt)."""
    chooser = random.Random(f"{concurrency}:{round_number}:{client}")
    first = f"c{concurrency}-client{client}-round{round_number}"
    return " ".join([first, *chooser.choices(PROMPT_VOCABULARY.split(), k=words - 1)])


def prompt_tokens(checkpoint: Path, clients: list[int], rounds: int, words: int) -> list[int]:
    """The length in tokens of every timed prompt, by ``checkpoint``'s tokenizer.json with its
    special tokens (BOS), as both servers encode a completion's prompt."""
    tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    texts = [
        prompt(i, number, count, words) for count in clients for number in range(rounds) for i in range(count)
    ]
    return [len(encoding.ids) for encoding in tokenizer.encode_batch(texts)]


class StreamTally:
    """Counts the completion tokens of one streamed reply from its server-sent event lines.

    The count is the final usage chunk's ``completion_tokens`` where the server sends one (both
    servers do when asked with ``stream_options.include_usage``), else one token per text chunk.
    """

    def __init__(self) -> None:
        self.chunks = 0
        self.usage_tokens: int | None = None
        self.done = False

    def feed(self, line: str) -> None:
        if len(line) > MAX_LINE_CHARS:
            raise BadStream(f"a server-sent event line of {len(line)} characters (at most {MAX_LINE_CHARS})")
        if not line.startswith("data:"):
            return  # blank separators, comments, event names
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            self.done = True
            return
        try:
            event = json.loads(data)
        except json.JSONDecodeError as error:
            raise BadStream(f"a server-sent event that is not JSON: {data[:200]!r}") from error
        if not isinstance(event, dict):
            raise BadStream(f"a server-sent event that is not a JSON object: {data[:200]!r}")
        if "error" in event:
            raise BadStream(f"the server sent an error mid-stream: {str(event['error'])[:300]}")
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
        choices = event.get("choices")
        if isinstance(choices, list) and any(isinstance(c, dict) and c.get("text") for c in choices):
            self.chunks += 1

    @property
    def tokens(self) -> int:
        if not self.done:
            raise BadStream("the stream ended before its data: [DONE] line")
        return self.usage_tokens if self.usage_tokens is not None else self.chunks


@dataclass(frozen=True, slots=True)
class Round:
    """One round: ``clients`` requests at once against one server."""

    server: str
    clients: int
    tokens: int
    seconds: float

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.seconds


async def stream_completion(client: httpx.AsyncClient, url: str, text: str, tokens: int) -> int:
    """The completion tokens one streamed request of ``tokens`` tokens received; BadStream when it
    got fewer (a server that stopped early would be timed on less work)."""
    body = {
        "model": MODEL_NAME,
        "prompt": text,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        if response.status_code != 200:
            said = (await response.aread())[:300].decode(errors="replace")
            raise BadStream(f"HTTP {response.status_code} from {url}: {said}")
        tally = StreamTally()
        async for line in response.aiter_lines():
            tally.feed(line)
    if tally.tokens != tokens:
        raise BadStream(f"a reply of {tally.tokens} tokens where {tokens} were asked with ignore_eos")
    return tally.tokens


async def run_round(
    url: str, server: str, clients: int, tokens: int, round_number: int, words: int = PROMPT_WORDS
) -> Round:
    """``clients`` concurrent streamed requests of ``words``-word prompts; the round lasts from the
    first send to the last [DONE]."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:
        began = time.perf_counter()
        received = await asyncio.gather(
            *(
                stream_completion(client, url, prompt(i, round_number, clients, words), tokens)
                for i in range(clients)
            )
        )
        seconds = time.perf_counter() - began
    return Round(server, clients, sum(received), seconds)


def vllm_checkpoint(checkpoint: Path) -> Path:
    """The checkpoint as vLLM reads it, beside the original: the same files linked, and a config
    with ``conv_dim`` and ``block_dim`` (vLLM's LFM2 reads them; LFM2's published configs give the
    hidden size for both)."""
    target = checkpoint.parent / f"{checkpoint.name}-vllm"
    target.mkdir(exist_ok=True)
    for source in checkpoint.iterdir():
        link = target / source.name
        if source.name != "config.json" and not link.exists():
            link.symlink_to(source.resolve())
    config = json.loads((checkpoint / "config.json").read_text())
    for field in ("conv_dim", "block_dim"):
        config.setdefault(field, config["hidden_size"])
    (target / "config.json").write_text(json.dumps(config, indent=2))
    return target


def vllm_unavailable(python: Path) -> str | None:
    """Why vLLM cannot run from ``python`` (one sentence and the error), or None when it imports."""
    if not python.exists():
        return f"no vLLM at {python}: install its CPU build into its own venv as docs/SCALE_OUT.md says"
    done = subprocess.run(
        [str(python), "-c", "import vllm"], capture_output=True, text=True, check=False, timeout=300
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        return f"vLLM does not import from {python}: {last[:300]}"
    return None


def failure(log: Path) -> str:
    """Why a server's start failed, from its log: the first exception line (vLLM's workers log the
    root cause before the API server's generic one), else the last line."""
    lines = [_LOG_PREFIX.sub("", line).strip() for line in log.read_text(errors="replace").splitlines()]
    lines = [line for line in lines if line]
    cause = next((line for line in lines if _EXCEPTION.match(line)), lines[-1] if lines else "")
    return cause[:300]


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """How to start one server for the comparison."""

    name: str
    command: Callable[[int], list[str]]
    env: dict[str, str]


def lfm_chat_spec(checkpoint: Path, max_num_seqs: int, quantize: str) -> ServerSpec:
    command = [sys.executable, "-m", "cli", "serve", "--model", str(checkpoint), "--dtype", "bfloat16"]
    command += [
        "--served-model-name",
        MODEL_NAME,
        "--max-num-seqs",
        str(max_num_seqs),
        "--quantize",
        quantize,
    ]
    name = "lfm-chat serve" + ("" if quantize == "none" else f" ({quantize})")
    return ServerSpec(name, lambda port: [*command, "--port", str(port)], {})


def vllm_spec(
    python: Path, checkpoint: Path, max_num_seqs: int, threads: int, scheme: str | None = None
) -> ServerSpec:
    """vLLM serving ``checkpoint``, already quantized in ``scheme`` when one is named (vLLM reads
    the scheme from its config.json; activations stay bf16 either way)."""
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint)]
    command += ["--dtype", "bfloat16", "--served-model-name", MODEL_NAME, "--max-num-seqs", str(max_num_seqs)]
    command += [
        "--max-model-len",
        str(VLLM_MAX_MODEL_LEN),
        "--gpu-memory-utilization",
        str(VLLM_MEMORY_FRACTION),
    ]
    # by default vLLM keeps one core for its API server; the comparison gives it all of them
    env = {"OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}"}
    name = "vLLM CPU" + ("" if scheme is None else f" ({scheme})")
    return ServerSpec(name, lambda port: [*command, "--host", "127.0.0.1", "--port", str(port)], env)


def pause(process: subprocess.Popen[Any]) -> None:
    """Stop ``process``'s whole group: a server and the workers it started."""
    os.killpg(process.pid, signal.SIGSTOP)


@contextlib.contextmanager
def resumed(process: subprocess.Popen[Any]) -> Iterator[None]:
    """``process``'s group running for the block, paused again after it."""
    os.killpg(process.pid, signal.SIGCONT)
    try:
        yield
    finally:
        pause(process)


@contextlib.contextmanager
def started(spec: ServerSpec, log: Path) -> Iterator[tuple[str, subprocess.Popen[Any]]]:
    """``spec``'s server in a process group of its own, its output in ``log``; (URL, process).
    On exit it is resumed first, so a paused server can take the stop signal."""
    with (
        log.open("wb") as out,
        served_process(
            spec.command,
            spec.name,
            START_LIMIT_S,
            cwd=REPO,
            env={**os.environ, **spec.env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ) as running,
    ):
        try:
            yield running
        finally:
            os.killpg(running[1].pid, signal.SIGCONT)


def compare(
    servers: dict[str, tuple[str, subprocess.Popen[Any]]],
    clients: list[int],
    rounds: int,
    tokens: int,
    threads: int,
    words: int = PROMPT_WORDS,
) -> tuple[list[Round], dict[int, Bandwidth]]:
    """Every concurrency: the probe, then rounds alternating the servers. The servers come paused
    and each runs during its own rounds only."""
    results: list[Round] = []
    bandwidths: dict[int, Bandwidth] = {}
    for count in clients:
        bandwidths[count] = measure_read_bandwidth(threads)
        for number in range(rounds):
            for name in list(servers) if number % 2 == 0 else list(reversed(servers)):
                url, process = servers[name]
                with resumed(process):
                    results.append(asyncio.run(run_round(url, name, count, tokens, number, words)))
                said = f"{count} clients, round {number + 1}, {name}: {results[-1].tok_per_s:.1f} tok/s"
                print(said, file=sys.stderr, flush=True)
    return results, bandwidths


def summary(
    results: list[Round], names: list[str], bandwidths: dict[int, Bandwidth], missing: str | None
) -> tuple[list[str], list[list[str]]]:
    """Per concurrency: each server's median tok/s (every round's figure after it), the ratio of
    the first server to the second, and the bandwidth probe of that concurrency."""
    headers = ["clients", *(f"{name} (tok/s)" for name in names)]
    if len(names) == 2:
        headers.append(f"{names[0]} / {names[1]}")
    headers.append("read bandwidth")
    rows = []
    for count, bandwidth in bandwidths.items():
        medians = {}
        row = [str(count)]
        for name in names:
            rates = [r.tok_per_s for r in results if r.server == name and r.clients == count]
            medians[name] = statistics.median(rates) if rates else None
            each = ", ".join(f"{rate:.1f}" for rate in rates)
            row.append(f"{medians[name]:.1f} ({each})" if rates else "n/a")
        if len(names) == 2:
            first, second = (medians[name] for name in names)
            row.append(f"{first / second:.2f}x" if first and second else "n/a")
        row.append(f"{bandwidth.gb_per_s:.1f} GB/s")
        rows.append(row)
    if missing:
        rows.append(["vLLM skipped", missing])
    return headers, rows


def _exit_on_signal(signum: int, _frame: object) -> None:
    """A run stopped with `kill` leaves no server behind, the paused one included: raising here
    runs the ExitStack's exits, which resume and stop both."""
    raise SystemExit(128 + signum)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, ``clients`` as a list of numbers; every count positive."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.serve_compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--clients", default=",".join(map(str, CLIENTS)), help="concurrencies, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per server and concurrency")
    parser.add_argument("--tokens", type=int, default=NEW_TOKENS, help="tokens out per request")
    parser.add_argument("--words", type=int, default=PROMPT_WORDS, help="words per prompt")
    parser.add_argument("--threads", type=int, default=2, help="vLLM's threads and the probe's")
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        default="none",
        help="lfm-chat's weights; vLLM gets its counterpart: w8a8 for int8 and w8a8, w4a16 for int4",
    )
    parser.add_argument("--vllm-bf16", action="store_true", help="vLLM in bf16 whatever --quantize says")
    parser.add_argument("--checkpoint", type=Path, help="default: the random LFM2-350M-shape checkpoint")
    parser.add_argument("--vllm-python", type=Path, default=VLLM_PYTHON, help="the python of vLLM's venv")
    parser.add_argument("--no-vllm", action="store_true", help="lfm-chat serve alone")
    parser.add_argument("--logs", type=Path, default=Path("."), help="where the servers' logs go")
    args = parser.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",")]
    if min(args.clients) < 1 or args.rounds < 1 or args.tokens < 1 or args.words < 1:
        parser.error("--clients, --rounds, --tokens and --words take positive numbers")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    clients = args.clients
    checkpoint = args.checkpoint or random_checkpoint()
    lengths = prompt_tokens(checkpoint, clients, args.rounds, args.words)
    said = f"{args.words}-word prompts of {statistics.mean(lengths):.1f} tokens on average"
    print(f"{said} ({max(lengths)} at most), by {checkpoint.name}'s tokenizer", file=sys.stderr, flush=True)
    if not args.no_vllm and max(lengths) + args.tokens > VLLM_MAX_MODEL_LEN:
        raise SystemExit(
            f"{max(lengths)} prompt tokens and {args.tokens} out exceed vLLM's {VLLM_MAX_MODEL_LEN}"
        )
    specs = [lfm_chat_spec(checkpoint, max(clients), args.quantize)]
    missing = "--no-vllm" if args.no_vllm else vllm_unavailable(args.vllm_python)
    if missing is None:
        scheme = None if args.vllm_bf16 else VLLM_COUNTERPART.get(args.quantize)
        vllm_weights = vllm_checkpoint(checkpoint)
        if scheme is not None:
            vllm_weights = quantized_checkpoint(vllm_weights, scheme)
        specs.append(vllm_spec(args.vllm_python, vllm_weights, max(clients), args.threads, scheme))
    args.logs.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    with contextlib.ExitStack() as stack:
        servers = {}
        for spec in specs:
            log = args.logs / f"serve_compare-{spec.name.split()[0]}.log"
            try:
                servers[spec.name] = stack.enter_context(started(spec, log))
            except ServerDidNotStart as error:
                if spec.name == specs[0].name:
                    raise
                missing = f"{error} {failure(log)} (its log: {log})"
                continue
            # untimed: the first requests pay for compilation and allocation on either server
            url = servers[spec.name][0]
            asyncio.run(run_round(url, spec.name, max(clients), WARM_UP_TOKENS, -1, args.words))
            pause(servers[spec.name][1])
        results, bandwidths = compare(servers, clients, args.rounds, args.tokens, args.threads, args.words)
    names = list(servers)
    print(
        f"{args.tokens} tokens out per request, {said}, ignore_eos, streamed; "
        f"output tok/s of each round over {args.rounds} rounds; {checkpoint.name}"
    )
    print(render_table(*summary(results, names, bandwidths, missing), markdown=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
