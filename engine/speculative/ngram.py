"""Prompt-lookup (n-gram) drafts for speculative decoding: a `Proposer` with no second model.

A reply often repeats its own context (code being edited, a quoted passage, a list's pattern,
a small model's loop). The proposer looks for the longest recent suffix of the request's tokens
(prompt + reply so far) earlier in that history and proposes the tokens that followed it there;
the engine verifies them in the next step (engine/speculative/acceptance.py).

    tokens   ... a b c x y ... a b c |      suffix "a b c" seen before, ending at e
    draft                              x y ...   = what followed it (a periodic run continues
                                                   through the draft itself, so a loop of
                                                   period 1 still drafts MAX_DRAFT_TOKENS)

Each request's index maps each n-gram (n = 1..MAX_NGRAM) to where it last ended, updated as
tokens arrive, so a lookup costs a few dict operations whatever the context. Nothing is drafted
when no n-gram matches: a request whose context never repeats costs its steps nothing but those
lookups. How many tokens a request drafts is engine/core/drafting.py's policy, not this module's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.request import Request

MAX_NGRAM = 3  # the longest suffix looked up (longer matches predict better, and are tried first)
MIN_NGRAM = 1  # the shortest suffix that may draft


@dataclass(slots=True)
class NgramIndex:
    """Where each n-gram of a token history last ended (end = index just past its last token)."""

    last_end: dict[tuple[int, ...], int] = field(default_factory=dict)
    indexed: int = 0  # n-grams ending at 1..indexed are in last_end

    def lookup(self, tokens: list[int]) -> int | None:
        """The end of the latest earlier occurrence of the longest suffix of ``tokens`` (MAX_NGRAM
        down to MIN_NGRAM), or None. Indexes every n-gram ending before the current end first."""
        for end in range(self.indexed + 1, len(tokens)):
            for n in range(MIN_NGRAM, min(MAX_NGRAM, end) + 1):
                self.last_end[tuple(tokens[end - n : end])] = end
        self.indexed = max(self.indexed, len(tokens) - 1)
        for n in range(min(MAX_NGRAM, len(tokens)), MIN_NGRAM - 1, -1):
            found = self.last_end.get(tuple(tokens[len(tokens) - n :]))
            if found is not None:
                return found
        return None

    def draft(self, tokens: list[int], count: int) -> list[int]:
        """Up to ``count`` tokens that followed the suffix of ``tokens`` earlier; [] if none matches.

        ``tokens`` only grows from one call to the next (the index remembers what it has read)."""
        if count <= 0:
            return []
        end = self.lookup(tokens)
        if end is None:
            return []
        drafts: list[int] = []
        for k in range(count):  # tokens[end + k], reading on into the draft for a periodic run
            at = end + k
            drafts.append(tokens[at] if at < len(tokens) else drafts[at - len(tokens)])
        return drafts


class NgramProposer:
    """Drafts each request from its own history; keeps one index per request until it finishes."""

    def __init__(self) -> None:
        self._indexes: dict[str, NgramIndex] = {}

    def propose_for(self, request: Request, count: int) -> list[int]:
        if count <= 0:  # paused or no room: no index is built for a request that never drafts
            return []
        index = self._indexes.setdefault(request.request_id, NgramIndex())
        return index.draft(request.token_ids, count)

    def release(self, request_id: str) -> None:
        self._indexes.pop(request_id, None)
