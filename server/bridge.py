"""Admission between the handlers and the engine's worker: a fair share for every client.

A request (each of its n choices counting one) is admitted unless the server already holds
`capacity` of them (max_num_seqs + --max-waiting: 503) or its client holds `per_client` (429), so
one client's flood leaves room for the others. The engine itself gets at most `slots` choices
(max_num_seqs) at once; the others wait here, one queue per client, and a slot that frees goes to
the waiting client with the fewest requests in the engine (in turn among equals). A second client's
request thus runs at the next free slot, not after a flood queued before it, and the engine's own
queue, which is first come first served, stays short.

A client is its address (`client_of`), not its API key: `serve` has one key, which every client
shares, and a key it does not check could be made up anew for each request.

Events reach the loop through the engine's one asyncio adapter (engine/worker/event_stream.py). A
request counts from admission to its last choice's final event (which arrives even when nobody reads the
stream any more: a cancelled request still ends with an "abort" event), or until it is cancelled
before it reached the engine.
"""

from __future__ import annotations

import ipaddress
from collections import Counter, deque
from collections.abc import AsyncIterator

from engine import EngineWorker, EventStream, SamplingParams, TokenEvent
from server.metrics import ServerMetrics


class Overloaded(Exception):
    """The server already holds `capacity` requests."""


class OverShare(Exception):
    """The request's client already holds its share (`per_client`)."""


def client_of(peer: tuple[str, int] | None) -> str:
    """Who a connection belongs to, for the per-client share: its IP address; an IPv6 address's /64
    network, which is what one host or home line gets (as rate limiters count them)."""
    if peer is None:  # a Unix socket: one local client
        return "local"
    try:
        address = ipaddress.ip_address(peer[0])
    except ValueError:
        return peer[0]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class Admitted:
    """An admitted request: iterate its events (they begin once the bridge passes it to the engine);
    `cancel` aborts it, or takes it out of its client's queue if it has not reached the engine."""

    def __init__(
        self, bridge: EngineBridge, client: str, prompt_ids: list[int], params: SamplingParams, n: int
    ) -> None:
        self.bridge = bridge
        self.client = client
        self.prompt_ids = prompt_ids
        self.params = params
        self.n = n
        self.events = EventStream(n, observe=self._observe)
        self.queued = True
        self.ended = 0  # choices whose final event arrived

    def __aiter__(self) -> AsyncIterator[TokenEvent]:
        return aiter(self.events)

    def cancel(self) -> None:
        if self.queued:
            self.bridge.withdraw(self)
        self.events.cancel()

    def start(self, worker: EngineWorker) -> None:
        """Into the engine (as EngineWorker.stream does)."""
        self.queued = False
        self.events.handle = worker.submit(self.prompt_ids, self.params, on_event=self.events.put, n=self.n)

    def _observe(self, event: TokenEvent) -> None:  # on the loop, for every event of this request
        self.bridge.metrics.observe(event)
        if event.finished:
            self.ended += 1
            self.bridge.finished(self)


class EngineBridge:
    """Admits requests, queues them per client and passes them to the worker; used on the loop only."""

    def __init__(
        self, worker: EngineWorker, slots: int, capacity: int, per_client: int, metrics: ServerMetrics
    ) -> None:
        self.worker = worker
        self.slots = slots  # choices in the engine at once: its running batch
        self.capacity = capacity  # choices admitted (in the engine or queued here) before 503
        self.per_client = per_client  # choices one client may have admitted before 429
        self.metrics = metrics
        self.held: Counter[str] = Counter()  # client -> choices admitted
        self.running: Counter[str] = Counter()  # client -> choices in the engine
        self.turns: dict[str, deque[Admitted]] = {}  # clients with queued requests, in turn order
        self.admitted: set[Admitted] = set()

    @property
    def in_flight(self) -> int:
        return self.held.total()

    @property
    def queued(self) -> int:
        """Choices admitted but not yet passed to the engine."""
        return self.held.total() - self.running.total()

    def submit(
        self, prompt_ids: list[int], params: SamplingParams, n: int = 1, client: str = "local"
    ) -> Admitted:
        """Admit a request of ``n`` choices from `client`; Overloaded or OverShare if it does not fit.
        Call on the event loop."""
        if self.in_flight + n > self.capacity:
            raise Overloaded
        if self.held[client] + n > self.per_client:
            raise OverShare
        self.held[client] += n
        request = Admitted(self, client, prompt_ids, params, n)
        self.admitted.add(request)
        self.turns.setdefault(client, deque()).append(request)
        self._start_next()
        return request

    def withdraw(self, request: Admitted) -> None:
        """A queued request whose client left: it frees its place without reaching the engine."""
        queue = self.turns[request.client]
        queue.remove(request)
        if not queue:
            del self.turns[request.client]
        request.queued = False
        self.admitted.discard(request)
        self._release(request.client, request.n, running=False)
        self.metrics.finished["abort"] += request.n  # as the engine counts a request aborted while waiting

    def finished(self, request: Admitted) -> None:
        """One of `request`'s choices ended in the engine."""
        if request.ended == request.n:
            self.admitted.discard(request)
        self._release(request.client, 1, running=True)
        self._start_next()

    def abort_all(self) -> None:
        """End every admitted request now (the server is shutting down): the queued ones go to the
        engine too, so that each choice of each request gets its final "abort" event and every
        handler ends its reply as it would any other."""
        for queue in self.turns.values():
            for request in queue:
                self.running[request.client] += request.n
                request.start(self.worker)
        self.turns.clear()
        for request in self.admitted:
            assert request.events.handle is not None, "every admitted request is in the engine now"
            request.events.handle.cancel()

    def _release(self, client: str, n: int, running: bool) -> None:
        self.held[client] -= n
        if self.held[client] <= 0:
            del self.held[client]
        if running:
            self.running[client] -= n
            if self.running[client] <= 0:
                del self.running[client]

    def _start_next(self) -> None:
        """Fill the engine's free slots: each goes to the queued client with the fewest choices in the
        engine, the earliest in turn among equals, who then goes to the back of the turn."""
        while self.turns:
            client = min(self.turns, key=lambda name: self.running[name])
            queue = self.turns[client]
            request = queue[0]
            in_engine = self.running.total()
            if in_engine and in_engine + request.n > self.slots:
                return
            queue.popleft()
            del self.turns[client]
            if queue:
                self.turns[client] = queue
            self.running[client] += request.n
            request.start(self.worker)
