"""The synchronous engine: add requests, step, collect outputs.

One `step()` = schedule -> one forward + sample (runner) -> cache bookkeeping (scheduler) ->
tokens to text, stop checks, outputs (output processor). Not thread-safe: `engine.worker.EngineWorker` owns an
Engine on one thread and serialises everything else onto it.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.errors import RequestError
from engine.metrics import (
    SNAPSHOT_REQUESTS,
    EngineMetrics,
    EngineSnapshot,
    RequestMetrics,
    RequestSnapshot,
    StepStats,
)
from engine.output import OutputProcessor, RequestOutput
from engine.pacing import PrefillPacer
from engine.request import Request, RequestStatus
from engine.runner import ModelRunner
from engine.sampler import make_generator
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from model import kernels as native_kernels
from model.cache import HybridCache
from model.config import Lfm2Config
from model.hub import resolve_checkpoint
from model.lfm2 import Lfm2ForCausalLM
from model.loader import load_model
from model.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

Progress = Callable[[str, "float | None"], None]
Prompt = str | Sequence[int]


class Engine:
    """Continuous batching over one LFM2 model, one KV/conv cache and one scheduler."""

    def __init__(self, model: Lfm2ForCausalLM, tokenizer: Tokenizer, config: EngineConfig | None = None):
        self.model_config: Lfm2Config = model.config
        self.config = (config or EngineConfig()).resolve(self.model_config, model_dtype=model.dtype)
        if model.dtype != self.config.torch_dtype:
            # Casting a loaded model would break its packed and quantized layers: load it right instead.
            raise ValueError(
                f"the model was loaded as {model.dtype} but the engine is set to {self.config.dtype}; "
                "load it with that dtype, or leave EngineConfig.dtype as auto"
            )
        self.tokenizer = tokenizer
        self.max_model_len: int = self.config.max_model_len
        self.block_manager = BlockManager(
            self.config.num_kv_blocks,
            self.config.block_size,
            self.config.max_num_seqs,
            self.config.enable_prefix_caching,
        )
        cache = HybridCache(
            self.model_config,
            num_blocks=self.config.num_kv_blocks,
            block_size=self.config.block_size,
            num_conv_rows=self.block_manager.conv_rows.num_rows,
            dtype=self.config.torch_dtype,
            device=self.config.device,
        )
        self.scheduler = Scheduler(
            self.block_manager, self.config.max_num_seqs, self.config.max_num_batched_tokens
        )
        self.pacer = (
            None
            if self.config.max_decode_slowdown is None
            else PrefillPacer(
                max_slowdown=self.config.max_decode_slowdown,
                initial_cap=self.config.max_prefill_with_decodes,
                floor=min(8, self.config.max_prefill_with_decodes),
                ceiling=self.config.max_num_batched_tokens,
            )
        )
        self.runner = ModelRunner(model, cache, self.config.device)
        self.outputs = OutputProcessor(tokenizer)
        # why this engine runs on PyTorch's slower kernels, for the UI to say (None: it doesn't)
        wanted = native_kernels.wanted_for(self.config.torch_dtype, self.config.device)
        self.kernel_fallback = native_kernels.unavailable_reason() if wanted else None
        # prompt tokens the next step may add beside decodes; paced after every step (engine/pacing.py)
        self.prefill_cap = self.config.max_prefill_with_decodes
        self.metrics = EngineMetrics(time.monotonic())
        self._requests: dict[str, Request] = {}
        self._arrivals = itertools.count()
        self._seeds = random.Random(self.config.seed)  # seeds of requests that bring none

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, config: EngineConfig | None = None, progress: Progress | None = None
    ) -> Engine:
        """Resolve a local directory or Hub repo id, load config, weights and tokenizer, size the cache.

        `progress(stage, fraction)` reports the stages to a UI; without it the Hub download
        shows its own progress bars.
        """
        report = progress or (lambda stage, fraction: None)
        report("locating checkpoint", None)
        path = resolve_checkpoint(str(name_or_path), progress=progress is None)
        model_config = Lfm2Config.from_pretrained(path)
        config = config or EngineConfig()
        if config.device == "cpu" and config.dtype != "float32" and native_kernels.runnable_isas():
            # built here, before "auto" asks whether bf16 runs fast on this CPU
            report("preparing CPU kernels (built once: about a minute the first time)", None)
            native_kernels.load()
        resolved = config.resolve(model_config)
        if resolved.num_threads is not None:
            torch.set_num_threads(resolved.num_threads)
        report("loading weights", 0.0)
        model = load_model(
            path,
            resolved.dtype,
            resolved.device,
            progress=lambda done, total: report("loading weights", done / total if total else None),
            quantize=resolved.quantize,
        )
        tokenizer = Tokenizer.from_pretrained(path, extra_stop_ids=model_config.eos_token_id)
        report("allocating cache", None)
        return cls(model, tokenizer, resolved)

    # ------------------------------------------------------------------ requests
    def add_request(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        request_id: str | None = None,
        tag: object = None,
    ) -> str:
        """Queue a request; bad input raises RequestError / SamplingParamsError and changes nothing."""
        if params is not None and not isinstance(params, SamplingParams):
            raise RequestError(f"params must be a SamplingParams, got {type(params).__name__}")
        # A private, re-validated copy: a caller mutating its object later cannot reach the request.
        params = SamplingParams() if params is None else dataclasses.replace(params)
        ids = self._prompt_ids(prompt)
        arrival = next(self._arrivals)
        request_id = f"req-{arrival}" if request_id is None else request_id
        if request_id in self._requests:
            raise RequestError(f"request id {request_id!r} is already in use")
        stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids |= self.tokenizer.stop_token_ids
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        request = Request(
            request_id=request_id,
            prompt_token_ids=ids,
            params=params,
            arrival=arrival,
            max_tokens=min(params.max_tokens, self.max_model_len - len(ids)),
            stop_token_ids=frozenset(stop_ids),
            generator=make_generator(seed, self.config.device),
            metrics=RequestMetrics(arrival_time=time.monotonic(), prompt_tokens=len(ids)),
            tag=tag,
        )
        self.outputs.add(request)
        self._requests[request_id] = request
        self.scheduler.add(request)
        return request_id

    def _prompt_ids(self, prompt: Prompt) -> list[int]:
        """The prompt as token ids, checked here so that nothing about it can fail a batched step.

        Text is range-checked too: a tokenizer may know more ids than the model's embedding has
        rows, and such an id would fail every request batched with this one.
        """
        ids = self._encode(prompt) if isinstance(prompt, str) else _token_ids(prompt)
        vocab = self.model_config.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestError(f"prompt token id {bad} is outside the vocabulary [0, {vocab})")
        if not ids:
            raise RequestError("prompt is empty")
        if len(ids) + 1 > self.max_model_len:
            raise RequestError(
                f"prompt is {len(ids)} tokens but the context holds {self.max_model_len} "
                f"(prompt plus at least one generated token)"
            )
        return ids

    def _encode(self, text: str) -> list[int]:
        """Token ids of prompt text; text that is not valid Unicode is the caller's error, not a crash."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RequestError(
                f"prompt text is not valid Unicode: an unpaired surrogate at character {exc.start}"
            ) from None
        return self.tokenizer.encode(text)

    def abort(self, request_id: str) -> RequestOutput | None:
        """Stop a request now and free its blocks; returns its final output (None if unknown/finished)."""
        request = self._requests.get(request_id)
        if request is None:
            return None
        self._retire(request, RequestStatus.FINISHED_ABORTED)
        return self.outputs.output(request)

    def fail_all(self, error: str) -> list[RequestOutput]:
        """Finish every request with `error`: the last resort when the engine itself misbehaved."""
        return [self._fail(request, error) for request in list(self._requests.values())]

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ------------------------------------------------------------------ stepping
    def step(self) -> list[RequestOutput]:
        """Run one scheduled batch; outputs of requests that produced tokens or finished."""
        began = time.monotonic()
        scheduled = self.scheduler.schedule(self.prefill_cap)
        for request in scheduled.admitted:
            self._on_admitted(request, began)
        self.metrics.preemptions += len(scheduled.preempted)
        if not scheduled.chunks:
            return []
        sampled = [chunk.request for chunk in scheduled.chunks if chunk.want_logits]
        try:
            tokens = self.runner.run(scheduled.chunks)
            self.scheduler.update(scheduled)
            now = time.monotonic()
            for request, token in zip(sampled, tokens, strict=True):
                self.outputs.append(request, token, now)
                if request.is_finished:
                    self._retire(request, request.status)
            outputs = [self.outputs.output(request) for request in sampled]
        except Exception as exc:  # one bad batch must not take the engine (or other requests) down
            logger.exception("engine step failed")
            error = f"internal error in an engine step ({type(exc).__name__}: {exc})"
            outputs = [self._fail(chunk.request, error) for chunk in scheduled.chunks]
            tokens = []
        now = time.monotonic()
        stats = StepStats(
            num_seqs=len(scheduled.chunks),
            decode_tokens=scheduled.num_decode_tokens,
            prefill_tokens=scheduled.num_prefill_tokens,
            generated_tokens=len(tokens),
            step_time=now - began,
        )
        self.metrics.record_step(stats, now)
        if self.pacer is not None:
            self.pacer.observe(stats.step_time, stats.decode_tokens, stats.prefill_tokens)
            self.prefill_cap = self.pacer.cap(*self.scheduler.demand())
        return outputs

    def generate(
        self, prompts: Sequence[Prompt], params: SamplingParams | Sequence[SamplingParams] | None = None
    ) -> list[RequestOutput]:
        """Run `prompts` to completion (with anything else queued); final outputs in prompt order."""
        if params is None or isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        ids: list[str] = []
        try:
            for prompt, sampling in zip(prompts, params, strict=True):
                ids.append(self.add_request(prompt, sampling))
        except Exception:
            for request_id in ids:
                self.abort(request_id)
            raise
        finals: dict[str, RequestOutput] = {}
        while len(finals) < len(ids):
            finals.update((out.request_id, out) for out in self.step() if out.finished)
        return [finals[request_id] for request_id in ids]

    # ------------------------------------------------------------------ bookkeeping
    def _on_admitted(self, request: Request, now: float) -> None:
        """First admission only: queue time and the prompt tokens the prefix cache served."""
        if request.metrics.first_scheduled_time is not None:
            return
        request.metrics.first_scheduled_time = now
        cached = min(request.num_computed_tokens, request.num_prompt_tokens)
        request.metrics.cached_prompt_tokens = cached
        self.metrics.record_admission(request.num_prompt_tokens, cached)

    def _retire(self, request: Request, status: RequestStatus) -> None:
        self.scheduler.finish(request, status)
        self._requests.pop(request.request_id, None)
        request.metrics.finished_time = time.monotonic()

    def _fail(self, request: Request, error: str) -> RequestOutput:
        if not request.is_finished:
            request.error = error
            self._retire(request, RequestStatus.FINISHED_ERROR)
        return self.outputs.output(request)

    # ------------------------------------------------------------------ observing
    def snapshot(self) -> EngineSnapshot:
        """A frozen view for dashboards, built after every step at a cost that does not grow with the queue.

        Counts are exact; `requests` lists only the first SNAPSHOT_REQUESTS live ones (running,
        then waiting, oldest first), which is more than a dashboard's table shows.
        """
        now = time.monotonic()
        step = self.metrics.last_step
        manager = self.block_manager
        scheduler = self.scheduler
        live = itertools.islice(itertools.chain(scheduler.running, scheduler.waiting), SNAPSHOT_REQUESTS)
        return EngineSnapshot(
            time=now,
            steps=self.metrics.steps,
            running=len(scheduler.running),
            waiting=len(scheduler.waiting),
            max_num_seqs=self.config.max_num_seqs,
            step_tokens=step.tokens,
            step_decode_tokens=step.decode_tokens,
            step_prefill_tokens=step.prefill_tokens,
            token_budget=self.config.max_num_batched_tokens,
            step_time=step.step_time,
            kv_blocks_used=manager.num_used_blocks,
            kv_blocks_cached=manager.num_cached_blocks,
            kv_blocks_total=manager.num_blocks,
            prefix_hit_rate=self.metrics.prefix_hit_rate,
            cached_prompt_tokens=self.metrics.cached_prompt_tokens,
            prompt_tokens=self.metrics.prompt_tokens,
            preemptions=self.metrics.preemptions,
            tokens_per_s=self.metrics.throughput.rate(now),
            throughput_history=self.metrics.throughput.history(now),
            requests=tuple(_request_snapshot(request) for request in live),
        )


def _is_token_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_ids(prompt: object) -> list[int]:
    """A prompt given as ids. Bytes are a sequence of ints too, but never meant as token ids."""
    if isinstance(prompt, bytes | bytearray | memoryview):
        raise RequestError("prompt must be a string or a list of token ids, not bytes (decode it to text)")
    if not isinstance(prompt, Sequence) or not all(_is_token_id(t) for t in prompt):
        raise RequestError("prompt must be a string or a list of token ids")
    return list(prompt)


def _request_snapshot(request: Request) -> RequestSnapshot:
    return RequestSnapshot(
        request_id=request.request_id,
        tag=request.tag,
        phase=request.phase,
        prompt_tokens=request.num_prompt_tokens,
        computed_prompt_tokens=min(request.num_computed_tokens, request.num_prompt_tokens),
        cached_prompt_tokens=request.metrics.cached_prompt_tokens,
        generated_tokens=request.num_output_tokens,
        max_tokens=request.max_tokens,
        tokens_per_s=request.metrics.tokens_per_s,
        ttft=request.metrics.ttft,
    )
