"""n samples of one prompt (``Engine.add_request(..., n=...)``): the prompt is read once.

The request of branch 0 computes the prompt like any other; branches 1..n-1 wait beside it, in no
queue. In the step that computes the prompt's last token, the engine forks them
(``BlockManager.fork``): each shares the prompt's full KV blocks by reference count, gets a copy
of the partly filled last block and of the conv-state row, and draws its first token, with its own
generator, from the very logits row branch 0 drew from. From then on a branch is an ordinary
running request: it decodes, can be preempted (and recomputed), and aborting it frees only its
own blocks. A branch that finds no free conv slot or block at the fork waits in the queue instead
and resumes from the prefix cache. If branch 0 ends before its prompt is computed (aborted),
the next waiting branch takes its place.

Seeds follow vLLM's parallel sampling: branch i of a request seeded s is seeded s + i.
"""

from __future__ import annotations

MAX_N = 64  # branches one request may ask for; each holds a running slot once forked
_SEED_LIMIT = 2**64


def branch_id(request_id: str, index: int) -> str:
    """Branch ``index``'s request id: the request's own for branch 0, ``"<id>/<index>"`` after."""
    return request_id if index == 0 else f"{request_id}/{index}"


def branch_seed(seed: int | None, index: int) -> int | None:
    """Branch ``index``'s seed: the request's plus ``index`` (wrapping at 2**64), None when unseeded."""
    return None if seed is None else (seed + index) % _SEED_LIMIT
