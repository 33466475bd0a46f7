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

from engine.core.config import EngineConfig
from engine.core.errors import RequestError
from engine.core.events import TokenLogprob
from engine.core.logit_bias import LogitBias
from engine.core.metrics import EngineMetrics, RequestMetrics, StepStats
from engine.core.prompts import Prompt, prompt_token_ids
from engine.core.request import Request, RequestStatus
from engine.core.sampling_params import SamplingParams, SamplingParamsError
from engine.core.schedule import SchedulerOutput
from engine.core.structure import RequestGrammar, Structure, StructureError
from engine.kv.block_manager import BranchCopies
from engine.loop.branches import MAX_N, branch_id, branch_seed
from engine.loop.build import EngineParts, load_parts, parts_for_model
from engine.loop.output import RequestOutput
from engine.loop.snapshot import EngineSnapshot, take_snapshot
from engine.sample.sampler import make_generator
from engine.structured.compiler import GrammarCompiler, check_structure
from model.arch.lfm2 import Lfm2ForCausalLM
from model.arch.lfm2_config import Lfm2Config
from model.checkpoint.progress import Progress
from model.text.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

GRAMMAR_POLL_SECONDS = 0.05  # an idle step's wait for llguidance's tokenizer build, before it looks again


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
        """Run on the parts the load path built (engine/loop/build.py), with no requests yet."""
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
        self.packed_12bit = parts.packed_12bit  # linears holding their bf16 weights in 12 bits
        # prompt tokens the next step may add beside decodes; paced after every step (engine/loop/pacing.py)
        self.prefill_cap = parts.config.max_prefill_with_decodes
        self.metrics = EngineMetrics(time.monotonic())
        self._requests: dict[str, Request] = {}
        self._arrivals = itertools.count()
        self._seeds = random.Random(self.config.seed)  # seeds of requests that bring none
        self.grammars = GrammarCompiler(parts.tokenizer, parts.model_config.vocab_size)  # for structures
        # step() also reports requests that moved without sampling (set by a caller that streams
        # where each request stands, as the worker does): see `step`
        self.report_progress = False
        # constrained requests (with their branches) held until llguidance's tokenizer is built
        self._awaiting_grammar: list[Request] = []

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, config: EngineConfig | None = None, progress: Progress | None = None
    ) -> Engine:
        """Resolve a local directory or Hub repo id, load config, weights and tokenizer, size the cache.

        `progress(stage, fraction)` reports the stages to a UI (engine/loop/build.py names them).
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
        n: int = 1,
    ) -> str:
        """Queue a request; bad input raises RequestError / SamplingParamsError / StructureError (a
        structure llguidance cannot compile) and changes nothing.

        ``n`` > 1 samples the prompt n times (engine/loop/branches.py): the prompt is computed once and n
        branches continue from its cache state, each drawing from its own generator (seeded
        params.seed, seed + 1, ... when a seed is given). Branch i's outputs carry index i and the
        request id ``branch_id(request_id, i)`` (the id itself for branch 0); each aborts alone.
        """
        if params is not None and not isinstance(params, SamplingParams):
            raise RequestError(f"params must be a SamplingParams, got {type(params).__name__}")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N:
            raise RequestError(f"n must be an int in [1, {MAX_N}], got {n!r}")
        # A private, re-validated copy: a caller mutating its object later cannot reach the request.
        params = SamplingParams() if params is None else dataclasses.replace(params)
        ids = prompt_token_ids(prompt, self.tokenizer, self.model_config.vocab_size, self.max_model_len)
        self.check_params(params)
        if params.structure is not None:  # refused (StructureError) before anything is queued
            self._check_structure(params.structure)
        arrival = next(self._arrivals)
        request_id = f"req-{arrival}" if request_id is None else request_id
        taken = next((i for i in (branch_id(request_id, k) for k in range(n)) if i in self._requests), None)
        if taken is not None:
            raise RequestError(f"request id {taken!r} is already in use")
        bias = LogitBias.of(params.logit_bias, self.config.device)
        requests = [self._new_request(request_id, ids, params, tag, bias, arrival)]
        for index in range(1, n):
            seed = branch_seed(params.seed, index)
            branch_params = params if seed is None else dataclasses.replace(params, seed=seed)
            branch = self._new_request(request_id, ids, branch_params, tag, bias, next(self._arrivals), index)
            requests.append(branch)
        requests[0].branches = requests[1:]
        for request in requests:
            self.outputs.add(request)
            self._requests[request.request_id] = request
        self._enqueue(requests[0])
        return request_id

    def _check_structure(self, structure: Structure) -> None:
        """Compile ``structure`` now (and cache it) if llguidance's tokenizer is built; until then
        check it without one, so the step never waits for the build (the full compile comes when
        the request leaves `_awaiting_grammar`)."""
        if self.grammars.ready():
            self.grammars.grammar(structure)
        else:
            check_structure(structure)

    def _enqueue(self, request: Request) -> None:
        """To the scheduler; a constrained request whose grammar awaits the tokenizer build waits here."""
        if request.params.structure is not None and request.grammar is None:
            self._awaiting_grammar.append(request)
        else:
            self.scheduler.add(request)

    def _admit_awaiting_grammar(self) -> list[RequestOutput]:
        """Once llguidance's tokenizer is built, compile the waiting requests' grammars and schedule
        them; the outputs of those whose structure then fails to compile."""
        if not self._awaiting_grammar or not self.grammars.ready():
            return []
        awaiting, self._awaiting_grammar = self._awaiting_grammar, []
        failed = []
        for head in awaiting:
            family = [head, *head.branches]
            try:
                for request in family:
                    request.grammar = self.grammars.grammar(request.params.structure)  # type: ignore[arg-type]
            except StructureError as exc:
                head.branches = []
                failed += [self._fail(request, str(exc)) for request in family]
                continue
            self.scheduler.add(head)
        return failed

    def stop_token_ids(self, params: SamplingParams) -> frozenset[int]:
        """The tokens that end a request with ``params``: its own, and unless it ignores EOS the model's."""
        stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids |= self.tokenizer.stop_token_ids
        if params.structure is not None:  # the token its grammar allows once complete ends it ("stop")
            stop_ids.add(self.grammars.eos_token_id)
        return frozenset(stop_ids)

    def check_params(self, params: SamplingParams) -> None:
        """What SamplingParams cannot check alone: its token ids are in this model's vocabulary.
        Raises SamplingParamsError naming the field (add_request does too)."""
        vocab = self.model_config.vocab_size
        bad = next((token for token in params.logit_bias if token >= vocab), None)
        if bad is not None:
            raise SamplingParamsError(
                f"SamplingParams.logit_bias has token id {bad}, outside the vocabulary [0, {vocab})"
            )

    def _new_request(
        self,
        request_id: str,
        ids: list[int],
        params: SamplingParams,
        tag: object,
        bias: LogitBias | None,
        arrival: int,
        index: int = 0,
    ) -> Request:
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        return Request(
            request_id=branch_id(request_id, index),
            prompt_token_ids=ids,
            params=params,
            arrival=arrival,
            max_tokens=min(params.max_tokens, self.max_model_len - len(ids)),
            stop_token_ids=self.stop_token_ids(params),
            generator=make_generator(seed, self.config.device),
            metrics=RequestMetrics(arrival_time=time.monotonic(), prompt_tokens=len(ids)),
            tag=tag,
            logit_bias=bias,
            index=index,
            grammar=self._grammar_now(params),
        )

    def _grammar_now(self, params: SamplingParams) -> RequestGrammar | None:
        """A new request's grammar; None if it is unconstrained or waits for the tokenizer build."""
        if params.structure is None or not self.grammars.ready():
            return None
        return self.grammars.grammar(params.structure)

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
        return self.scheduler.has_unfinished() or bool(self._awaiting_grammar)

    # ------------------------------------------------------------------ stepping
    def step(self) -> list[RequestOutput]:
        """Run one scheduled batch; outputs of requests that produced tokens or finished.

        With `report_progress` (a caller that shows where each request stands, as the worker's
        streams do), also an output with no new tokens for each request whose prompt advanced
        without sampling or which was preempted, carrying its phase and prefill progress.
        """
        began = time.monotonic()
        # Drafts are proposed here rather than at the end of the step that sampled (as vLLM does):
        # that step's tokens were handed out first, so a draft model's forwards (its catch-up on a
        # new prompt above all) never hold them back.
        self.runner.propose(self.scheduler.draft_allowances())
        refused = self._admit_awaiting_grammar()
        scheduled = self.scheduler.schedule(self.prefill_cap)
        for request in scheduled.admitted:
            self._on_admitted(request, began)
        self.metrics.preemptions += len(scheduled.preempted)
        if not scheduled.chunks:
            if self._awaiting_grammar and not refused:  # nothing else to run: wait for the build, not spin
                self.grammars.wait_ready(GRAMMAR_POLL_SECONDS)
            return refused + (self._progress(scheduled) if self.report_progress else [])
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
            for request in [request for request in sampled if request.branches]:
                forked = self._fork(request, now)
                generated += len(forked)
                sampled += forked
            for request in sampled:
                if request.is_finished:
                    self._retire(request, request.status)
            outputs = [self.outputs.output(request) for request in sampled]
        except Exception as exc:  # one bad batch must not take the engine (or other requests) down
            logger.exception("engine step failed")
            error = f"internal error in an engine step ({type(exc).__name__}: {exc})"
            outputs = [self._fail(chunk.request, error) for chunk in scheduled.chunks]
        outputs = refused + outputs
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
        return (outputs + self._progress(scheduled)) if self.report_progress else outputs

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

    def _append(self, request: Request, tokens: list[int], now: float, rows_of: Request | None = None) -> int:
        """Record a chunk's emitted tokens in order, none past a stop or the length limit; how many.

        Their logprobs, for a request that asks, come from the rows ``rows_of`` sampled from in the
        latest step: the request's own, or for a branch's first token, those of its prompt's request.
        """
        top = request.params.logprobs
        logprobs: list[TokenLogprob | None] = [None] * len(tokens)
        if top is not None:
            logprobs[:] = self.runner.token_logprobs(rows_of or request, tokens, top)
        for count, (token, logprob) in enumerate(zip(tokens, logprobs, strict=True), 1):
            self.outputs.append(request, token, now, logprob)
            if request.is_finished:
                return count
        return len(tokens)

    def _fork(self, request: Request, now: float) -> list[Request]:
        """Start the branches waiting for ``request``'s prompt, which the step just computed: each
        takes its cache state (engine/loop/branches.py) and samples its first token from the same logits.
        A branch that finds no free slot or block waits in the queue instead, like a new request
        (the prefix cache then serves it the prompt's full blocks)."""
        started = []
        for branch in [branch for branch in request.branches if not branch.is_finished]:
            copies = self.block_manager.fork(request, branch)
            if copies is None:
                self.scheduler.add(branch)
                continue
            self._copy_cache(copies)
            branch.num_computed_tokens = request.num_computed_tokens
            branch.metrics.first_scheduled_time = request.metrics.first_scheduled_time
            branch.metrics.cached_prompt_tokens = branch.num_prompt_tokens  # none of it was computed again
            self.scheduler.add_running(branch)
            started.append(branch)
        request.branches = []
        if started:
            tokens = self.runner.sample_branches(request, started)
            for branch, token in zip(started, tokens, strict=True):
                self._append(branch, [token], now, rows_of=request)
        return started

    def _copy_cache(self, copies: BranchCopies) -> None:
        cache = self.runner.cache
        cache.copy_conv_row(*copies.conv_row)
        if copies.block is not None:
            cache.copy_block(*copies.block)
        if copies.sliding_block is not None:
            cache.copy_sliding_block(*copies.sliding_block)

    def _retire(self, request: Request, status: RequestStatus) -> None:
        self.scheduler.finish(request, status)
        self.runner.release(request.request_id)
        self._requests.pop(request.request_id, None)
        if request in self._awaiting_grammar:
            self._awaiting_grammar.remove(request)
        request.metrics.finished_time = time.monotonic()
        heirs = [branch for branch in request.branches if not branch.is_finished]
        request.branches = []
        if heirs:  # it ended before computing the prompt its branches wait for: the next one will
            heirs[0].branches = heirs[1:]
            self._enqueue(heirs[0])

    def _progress(self, scheduled: SchedulerOutput) -> list[RequestOutput]:
        """Outputs (no new tokens) of the requests that moved in a step without sampling: a prompt
        chunk computed, or preempted back to the queue."""
        moved = [chunk.request for chunk in scheduled.chunks if not chunk.want_logits]
        live = [request for request in moved if not request.is_finished]
        return [self.outputs.output(request) for request in live + scheduled.preempted]

    def _fail(self, request: Request, error: str) -> RequestOutput:
        if not request.is_finished:
            request.error = error
            self._retire(request, RequestStatus.FINISHED_ERROR)
        return self.outputs.output(request)

    # ------------------------------------------------------------------ observing
    def snapshot(self) -> EngineSnapshot:
        """A frozen view for dashboards; its cost does not grow with the queue (engine/loop/snapshot.py)."""
        return take_snapshot(time.monotonic(), self.metrics, self.scheduler, self.block_manager, self.config)
