"""This engine as a benchmark backend: the model is loaded once, each run gets a fresh Engine.

A fresh Engine per run keeps runs independent: no prefix-cache hits carried over from an
earlier repetition, no cache left fragmented by an earlier workload. Its KV pool is sized to
the run's total context, so no run is slowed by preemption and peak RSS reflects what the
workload needs rather than a default pool size.

The driver calls `Engine.step()` itself (no worker thread), admitting requests as their
arrival comes due, and timestamps every token when its step returns.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from bench.sampling import engine_params
from bench.scenario import RequestTrace, Scenario, Traces, full_prompt, trigger_time
from engine import Engine, EngineConfig
from engine.core.config import DEFAULT_MAX_MODEL_LEN
from model.arch.registry import load_config
from model.checkpoint.loader import load_model
from model.text.tokenizer import Tokenizer

MAX_NUM_SEQS = 32
MAX_NUM_BATCHED_TOKENS = 256
BLOCK_SIZE = 16


class OursBackend:
    """`run(scenario)` on lfm-chat's engine."""

    name = "ours"

    def __init__(
        self,
        checkpoint: Path,
        dtype: str,
        quantize: str = "none",
        sampling: str = "greedy",
        weights_12bit: bool = False,
    ) -> None:
        config = load_config(checkpoint)
        self.model = load_model(
            checkpoint, dtype, quantize=quantize, config=config, weights_12bit=weights_12bit
        )
        self.tokenizer = Tokenizer.from_pretrained(checkpoint, extra_stop_ids=config.eos_token_id)
        self.dtype = dtype
        self.quantize = quantize
        self.sampling = sampling
        self.weights_12bit = weights_12bit

    def engine_config(self, num_kv_blocks: int | None = None, longest: int = 0) -> EngineConfig:
        """The settings every run uses (reported with the results); a scenario whose ``longest`` context
        passes the engine's default limit (the depth workloads: 32k tokens and their reply) raises it."""
        return EngineConfig(
            max_model_len=longest if longest > DEFAULT_MAX_MODEL_LEN else None,
            dtype=self.dtype,
            max_num_seqs=MAX_NUM_SEQS,
            max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
            block_size=BLOCK_SIZE,
            num_kv_blocks=num_kv_blocks,
            quantize=self.quantize,
            weights_12bit="on" if self.weights_12bit else "off",
        )

    def run(self, scenario: Scenario) -> list[RequestTrace]:
        lengths = scenario.context_lengths()
        blocks = sum(math.ceil(n / BLOCK_SIZE) + 1 for n in lengths)
        config = self.engine_config(num_kv_blocks=blocks, longest=max(lengths))
        engine = Engine(self.model, self.tokenizer, config)
        return _drive(engine, scenario, self.sampling)


def _drive(engine: Engine, scenario: Scenario, sampling: str) -> list[RequestTrace]:
    """Admit requests when due, step while anything runs, sleep only when idle until the next arrival."""
    specs = scenario.requests
    traces: Traces = [None] * len(specs)
    index_of: dict[str, int] = {}
    pending = list(range(len(specs)))
    start = time.perf_counter()
    while pending or engine.has_unfinished():
        now = time.perf_counter() - start
        for i in list(pending):
            arrival = specs[i].arrival_s if specs[i].after is None else trigger_time(specs[i], traces)
            if arrival is None or arrival > now:
                continue
            pending.remove(i)
            traces[i] = RequestTrace(arrival=arrival, prompt=full_prompt(specs[i], traces))
            params = engine_params(sampling, specs[i].max_new_tokens)
            index_of[engine.add_request(traces[i].prompt, params)] = i
        if not engine.has_unfinished():
            due = [specs[i].arrival_s for i in pending if specs[i].after is None]
            time.sleep(max(0.0, min(due) - now))
            continue
        outputs = engine.step()
        stamp = time.perf_counter() - start
        for out in outputs:
            if out.finish_reason == "error":
                raise RuntimeError(f"the engine failed a benchmark request: {out.error}")
            trace = traces[index_of[out.request_id]]
            trace.token_times.extend([stamp] * len(out.new_token_ids))
            trace.output.extend(out.new_token_ids)
    return traces


def describe() -> dict[str, object]:
    """The engine settings behind every figure, for the report."""
    return {
        "max_num_seqs": MAX_NUM_SEQS,
        "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
        "block_size": BLOCK_SIZE,
        "prefix_caching": True,
        "kv_pool": "sized to each run's total context",
    }
