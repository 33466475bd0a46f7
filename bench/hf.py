"""The transformers baseline: `generate` of the checkpoint's class (`Lfm2ForCausalLM`, `Lfm3ForCausalLM`),
greedy or sampled as our engine is (bench/sampling.py), fixed length, one static batch per group.

transformers' continuous batching refuses LFM2 (its hybrid conv cache), so the baseline runs
each workload the way a `generate` user would: a left-padded static batch where the workload
is a batch, one request after another where requests arrive over time. A group starts when
its requests have arrived; a request whose trigger lies inside its own group (a staggered
chat in a static batch) counts as arriving when the group starts.

Tokens are timestamped by a streamer, which `generate` calls once per step.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import transformers
from transformers.generation.streamers import BaseStreamer

from bench.sampling import generate_kwargs
from bench.scenario import RequestSpec, RequestTrace, Scenario, Traces, full_prompt, trigger_time
from model.checkpoint.loader import parse_dtype

PAD_ID = 0


class _StepClock(BaseStreamer):
    """Records when each generated step's tokens came out (the first `put` is the prompt)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        if self._seen_prompt:
            self.times.append(time.perf_counter())
        self._seen_prompt = True

    def end(self) -> None:
        pass


class TransformersBackend:
    """`run(scenario)` on transformers' reference implementation."""

    name = "transformers"

    def __init__(self, checkpoint: Path, dtype: str, sampling: str = "greedy") -> None:
        # generate's per-call advice and the loading bar would drown the progress lines
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            checkpoint, dtype=parse_dtype(dtype)
        ).eval()
        self.eos_token_id = self.model.generation_config.eos_token_id
        self.sampling = generate_kwargs(sampling)

    def run(self, scenario: Scenario) -> list[RequestTrace]:
        specs = scenario.requests
        traces: Traces = [None] * len(specs)
        start = time.perf_counter()
        for group in scenario.hf_groups:
            due = max((specs[i].arrival_s for i in group if specs[i].after is None), default=0.0)
            time.sleep(max(0.0, due - (time.perf_counter() - start)))
            group_start = time.perf_counter() - start
            for i in group:
                arrival = _arrival(specs[i], traces, group_start)
                traces[i] = RequestTrace(arrival, full_prompt(specs[i], traces))
            self._generate([traces[i] for i in group], [specs[i] for i in group], start)
        return traces

    def _generate(self, traces: list[RequestTrace], specs: list[RequestSpec], start: float) -> None:
        """One left-padded `generate` call; fills each trace's token times and output."""
        width = max(len(t.prompt) for t in traces)
        input_ids = torch.tensor([[PAD_ID] * (width - len(t.prompt)) + t.prompt for t in traces])
        attention_mask = torch.tensor([[0] * (width - len(t.prompt)) + [1] * len(t.prompt) for t in traces])
        new_tokens = max(spec.max_new_tokens for spec in specs)
        clock = _StepClock()
        output = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            **self.sampling,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            eos_token_id=self.eos_token_id,
            pad_token_id=PAD_ID,
            streamer=clock,
        )
        stamps = [t - start for t in clock.times]
        for row, (trace, spec) in enumerate(zip(traces, specs, strict=True)):
            trace.token_times = stamps[: spec.max_new_tokens]
            trace.output = output[row, width : width + spec.max_new_tokens].tolist()


def _arrival(spec: RequestSpec, traces: Traces, group_start: float) -> float:
    if spec.after is None:
        return spec.arrival_s
    triggered = trigger_time(spec, traces)
    return group_start if triggered is None else min(triggered, group_start)
