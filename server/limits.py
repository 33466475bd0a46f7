"""The numbers that bound what one HTTP client can make `serve` hold or do: plain data, importable
without the serve extra (the command line shows them as flag defaults)."""

from __future__ import annotations

import resource
from dataclasses import dataclass

MAX_BODY_BYTES = 4 * 2**20  # a full 32k-token context is ~130 KB of text; JSON escaping can triple it
# Descriptors kept free for everything but client connections: the listening socket, the event
# loop's own, logging, the checkpoint files while they load. The process opens a few dozen at most.
FD_RESERVE = 128
# What one connection's reply may hold in the kernel's send buffer and again in asyncio's: past it the
# reply waits for the client to read, and a client that does not read stalls only its own connection.
SEND_BUFFER_BYTES = 64 * 2**10
# Bodies over INLINE_BODY_BYTES are parsed and checked on a thread, BODY_PARSERS at a time: Python's
# json holds the interpreter while it parses, so more threads would not parse faster, only make the
# event loop wait longer between its turns.
INLINE_BODY_BYTES = 64 * 2**10
BODY_PARSERS = 1
LINGER_S = 2.0  # a refused newcomer's 503 is left this long to be read before its socket closes


def per_client_share(max_num_seqs: int, max_waiting: int) -> int:
    """The requests one client may have running or waiting by default: the whole running batch and
    half of the waiting room (rounded up), so a lone client can still fill the batch and a flood
    leaves the other half of the queue to the other clients."""
    return max_num_seqs + (max_waiting + 1) // 2


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int = 256  # open at once; at most the descriptor limit less FD_RESERVE
    header_timeout: float = 10.0  # seconds from a request's first byte (or the connection) to its headers
    body_timeout: float = 30.0  # seconds from the headers to the end of the request body
    send_timeout: float = 30.0  # seconds a reply may wait on a client that reads none of it
    # seconds requests in flight may go on after SIGTERM before they are ended: under the 30 s
    # Kubernetes waits before it kills the process
    drain_timeout: float = 20.0


def connection_cap(wanted: int) -> int:
    """`wanted`, or fewer if the process may not open that many descriptors. Raises the soft
    RLIMIT_NOFILE towards the hard one first, as servers do: the default soft limit is often 1024.
    Past the limit every accept fails, and asyncio logs each failure with a traceback."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = wanted + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < needed:
        raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):  # macOS refuses more than OPEN_MAX; keep the soft limit
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - FD_RESERVE))
