"""What a proposer of drafts for speculative decoding does: prompt lookup over the request's own
tokens (ngram.py) or a smaller model (draft_model.py); how much each request may draft is
engine/core/drafting.py's policy."""

from __future__ import annotations

from typing import Protocol

from engine.core.request import Request


class Proposer(Protocol):
    """Drafts for a request's next step, run beside the forward (in the runner), never in the scheduler.

    A proposal for ``count`` tokens starts with the proposal for fewer: the scheduler trims the
    drafts to what its next step has room for, and that must leave the drafts a smaller request
    for drafts would have got."""

    def propose_for(self, request: Request, count: int) -> list[int]:
        """Up to ``count`` tokens to follow ``request.token_ids``; [] when there are none."""
        ...

    def release(self, request_id: str) -> None:
        """Forget a finished request (a no-op for one that never drafted)."""
        ...
