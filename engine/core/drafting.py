"""How much each request drafts for speculative decoding, whichever proposer drafts.

Drafts come from a `Proposer` (engine/speculative/proposer.py): prompt lookup over the request's
own tokens (speculative/ngram.py) or a smaller model (speculative/draft_model.py). Before each step
the engine asks the scheduler how many drafts each decoding request may take
(`Scheduler.draft_allowances`), the runner's proposer fills `Request.spec_token_ids` up to that,
and `schedule` trims them to the step's budget and blocks. The policy here is the same whichever
proposer drafts:

Draft length: a request starts with FIRST_DRAFT_TOKENS; a draft accepted whole doubles the next
one (up to MAX_DRAFT_TOKENS: a long quote is copied many tokens a step), a rejected one makes the
next one accepted + 1 long, so a request whose drafts are often wrong wastes few rows.

A step's drafts share STEP_ROWS less its decodes, oldest request first, and a step with
DISABLE_BY_BATCH_SIZE decodes or more drafts nothing: on one stream a draft is nearly free, on a
busy batch it would displace compute the decodes need.

Auto-off: a draft that is rejected still costs its rows in the forward, and where extra rows are
compute (int4's integer loop: a second row costs half a step) a few wasted verifies cost more
than speculation can win back on a context that never repeats. So a request's acceptance is
judged every WINDOW_STEPS verify steps: under MIN_ACCEPTANCE of the drafted tokens accepted, it
pauses drafting for PAUSE_TOKENS generated tokens, doubling with each window in a row that did
not pay (up to MAX_PAUSE_TOKENS), and back to PAUSE_TOKENS after one that did.
"""

from __future__ import annotations

from dataclasses import dataclass

# drafted tokens per request per step: 1 + 15 rows is the longest chunk the native kernels verify
# as single-query rows (model/native/accelerate.py's ROW_QUERY_LIMIT), so a verify stays one call
MAX_DRAFT_TOKENS = 15
# rows of a step (decodes + drafts) up to which a verify costs little more than a decode: the weights
# are read once for every row, so a memory-bound step has room; past it the rows are compute, and
# a busy batch drafts less (16 streams decoding draft nothing)
STEP_ROWS = 16
# decoding requests from which a step drafts nothing (vLLM's speculative_disable_by_batch_size): on
# 2 cores 8 decodes already make a step compute-bound, and drafts beside them cost more than they
# save even at half acceptance (docs/PERFORMANCE.md, 2026-11-27)
DISABLE_BY_BATCH_SIZE = 4
FIRST_DRAFT_TOKENS = 2  # a request's first draft length, before its drafts have shown how they fare
WINDOW_STEPS = 4  # verify steps counted before a request's acceptance is judged
MIN_ACCEPTANCE = 0.3  # below this share accepted, drafting costs more rows than it saves steps
PAUSE_TOKENS = 64  # generated tokens a request decodes plainly after its drafts stopped paying
MAX_PAUSE_TOKENS = 1024  # the longest pause, after several windows in a row that did not pay


def draft_rows(decodes: int) -> int:
    """Drafted tokens a step with `decodes` decoding requests may verify in all."""
    return 0 if decodes >= DISABLE_BY_BATCH_SIZE else max(0, STEP_ROWS - decodes)


@dataclass(slots=True)
class DraftState:
    """One request's drafting policy: its next draft's length and its recent acceptance."""

    window_steps: int = 0
    window_drafted: int = 0
    window_accepted: int = 0
    paused_until: int = 0  # no drafts before the request has generated this many tokens
    pause: int = PAUSE_TOKENS  # the next pause's length
    length: int = FIRST_DRAFT_TOKENS  # the next draft's length (the module docstring says how it moves)

    def allowance(self, generated: int, limit: int) -> int:
        """Tokens this request may draft now: ``limit`` cut to its draft length, 0 while paused."""
        return 0 if generated < self.paused_until else max(0, min(limit, self.length))

    def record(self, drafted: int, accepted: int, generated: int) -> None:
        """Count a verify step (``drafted`` >= 1), set the next draft's length, and pause drafting
        when the last window's acceptance did not pay."""
        whole = accepted == drafted
        self.length = min(MAX_DRAFT_TOKENS, 2 * self.length) if whole else accepted + 1
        self.window_steps += 1
        self.window_drafted += drafted
        self.window_accepted += accepted
        if self.window_steps < WINDOW_STEPS:
            return
        if self.window_accepted < MIN_ACCEPTANCE * self.window_drafted:
            self.paused_until = generated + self.pause
            self.pause = min(MAX_PAUSE_TOKENS, 2 * self.pause)
        else:
            self.pause = PAUSE_TOKENS
        self.window_steps = self.window_drafted = self.window_accepted = 0
