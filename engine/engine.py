"""The synchronous engine: add requests, step, collect outputs.

One `step()` = drafts for the decoding requests (runner.py, as many as the scheduler allows) ->
schedule (scheduler.py) -> one forward + sample (runner.py) -> cache bookkeeping (scheduler.py)
-> tokens to text, stop checks, outputs (output.py) -> pacing of the next step.
docs/ARCHITECTURE.md walks through it. Not thread-safe: `engine.worker.EngineWorker` owns an
Engine on one thread and serialises everything else onto it.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path

from engine.build import EngineParts, load_parts, parts_for_model
from engine.config import EngineConfig
from engine.errors import RequestError
from engine.metrics import EngineMetrics, RequestMetrics, StepStats
from engine.output import RequestOutput
from engine.prompts import Prompt, prompt_token_ids
from engine.request import Request, RequestStatus
from engine.sampler import make_generator
from engine.sampling_params import SamplingParams
from engine.snapshot import EngineSnapshot, take_snapshot
from model.arch.lfm2 import Lfm2ForCausalLM
from model.arch.lfm2_config import Lfm2Config
from model.checkpoint.progress import Progress
from model.text.tokenizer import Tokenizer

logger = logging.getLogger(__name__)


class Engine:
    """Continuous batching over one LFM2 model, one KV/conv cache and one scheduler."""

    def __init__(
        self,
        model: Lfm2ForCausalLM,
        tokenizer: Tokenizer,
        config: EngineConfig | None = None,
        draft_model: Lfm2ForCausalLM | None = None,
    ):
        """``draft_model``: a smaller model with ``tokenizer``'s vocabulary that drafts for speculative
        decoding instead of the n-grams (``EngineConfig.draft_model`` names one for the engine to load)."""
        self._start(parts_for_model(model, tokenizer, config or EngineConfig(), draft_model))

    def _start(self, parts: EngineParts) -> None:
        """Run on the parts the load path built (engine/build.py), with no requests yet."""
        self.model_config: Lfm2Config = parts.model_config
        self.tokenizer = parts.tokenizer
        self.config = parts.config
        self.max_model_len: int = parts.config.max_model_len  # type: ignore[assignment]  # resolved
        self.block_manager = parts.block_manager
        self.scheduler = parts.scheduler
        self.pacer = parts.pacer
        self.runner = parts.runner
        self.outputs = parts.outputs
        self.kernel_fallback = parts.kernel_fallback  # why it runs on slower kernels (None: it doesn't)
        # prompt tokens the next step may add beside decodes; paced after every step (engine/pacing.py)
        self.prefill_cap = parts.config.max_prefill_with_decodes
        self.metrics = EngineMetrics(time.monotonic())
        self._requests: dict[str, Request] = {}
        self._arrivals = itertools.count()
        self._seeds = random.Random(self.config.seed)  # seeds of requests that bring none

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, config: EngineConfig | None = None, progress: Progress | None = None
    ) -> Engine:
        """Resolve a local directory or Hub repo id, load config, weights and tokenizer, size the cache.

        `progress(stage, fraction)` reports the stages to a UI (engine/build.py names them).
        """
        engine = cls.__new__(cls)  # __init__ would resolve the config against the model a second time
        engine._start(load_parts(name_or_path, config or EngineConfig(), progress))
        return engine

    def check_prompt(self, prompt: Prompt) -> list[int]:
        """The prompt's token ids if this engine can take it, else the RequestError add_request would
        raise (PromptTooLong where the context cannot hold it): for a caller that answers before it
        submits, as `serve` does. It reads only what never changes, so any thread may call it."""
        return prompt_token_ids(prompt, self.tokenizer, self.model_config.vocab_size, self.max_model_len)

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
        ids = prompt_token_ids(prompt, self.tokenizer, self.model_config.vocab_size, self.max_model_len)
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
        # Drafts are proposed here rather than at the end of the step that sampled (as vLLM does):
        # that step's tokens were handed out first, so a draft model's forwards (its catch-up on a
        # new prompt above all) never hold them back.
        self.runner.propose(self.scheduler.draft_allowances())
        scheduled = self.scheduler.schedule(self.prefill_cap)
        for request in scheduled.admitted:
            self._on_admitted(request, began)
        self.metrics.preemptions += len(scheduled.preempted)
        if not scheduled.chunks:
            return []
        sampling = [chunk for chunk in scheduled.chunks if chunk.want_logits]
        sampled = [chunk.request for chunk in sampling]
        generated = accepted = 0
        try:
            emitted = self.runner.run(scheduled.chunks)
            now = time.monotonic()
            for request, tokens in zip(sampled, emitted, strict=True):
                generated += self._append(request, tokens, now)
            verified = zip(sampling, emitted, strict=True)
            kept = {chunk.request: len(tokens) - 1 for chunk, tokens in verified if chunk.drafts}
            accepted = sum(kept.values())
            self.scheduler.update(scheduled, kept)
            for request in sampled:
                if request.is_finished:
                    self._retire(request, request.status)
            outputs = [self.outputs.output(request) for request in sampled]
        except Exception as exc:  # one bad batch must not take the engine (or other requests) down
            logger.exception("engine step failed")
            error = f"internal error in an engine step ({type(exc).__name__}: {exc})"
            outputs = [self._fail(chunk.request, error) for chunk in scheduled.chunks]
        now = time.monotonic()
        stats = StepStats(
            num_seqs=len(scheduled.chunks),
            decode_tokens=scheduled.num_decode_tokens,
            prefill_tokens=scheduled.num_prefill_tokens,
            generated_tokens=generated,
            step_time=now - began,
            drafts=sum(bool(chunk.drafts) for chunk in scheduled.chunks),
            draft_tokens=scheduled.num_draft_tokens,
            accepted_tokens=accepted,
        )
        self.metrics.record_step(stats, now)
        if self.pacer is not None:
            self.pacer.observe(stats.step_time, stats.decode_tokens, stats.prefill_tokens)
            self.prefill_cap = self.pacer.cap(*self.scheduler.demand())
        return outputs

    def generate(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams | None] | None = None,
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

    def _append(self, request: Request, tokens: list[int], now: float) -> int:
        """Record a chunk's emitted tokens in order, none past a stop or the length limit; how many."""
        for count, token in enumerate(tokens, 1):
            self.outputs.append(request, token, now)
            if request.is_finished:
                return count
        return len(tokens)

    def _retire(self, request: Request, status: RequestStatus) -> None:
        self.scheduler.finish(request, status)
        self.runner.release(request.request_id)
        self._requests.pop(request.request_id, None)
        request.metrics.finished_time = time.monotonic()

    def _fail(self, request: Request, error: str) -> RequestOutput:
        if not request.is_finished:
            request.error = error
            self._retire(request, RequestStatus.FINISHED_ERROR)
        return self.outputs.output(request)

    # ------------------------------------------------------------------ observing
    def snapshot(self) -> EngineSnapshot:
        """A frozen view for dashboards; its cost does not grow with the queue (engine/snapshot.py)."""
        return take_snapshot(time.monotonic(), self.metrics, self.scheduler, self.block_manager, self.config)
