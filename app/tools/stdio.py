"""The stdio transport, our own rather than the SDK's `stdio_client`, for what a hostile server does
to it: the SDK's reader joins a long line piece by piece (a 50 MB result took over a minute and
then every later reply waited behind it) and has no bound on a line. This one:

- reads stdout in 64 KB chunks and scans each byte once for the newline;
- refuses a message longer than MAX_MESSAGE_BYTES (it is skipped and reported, not buffered);
- gives the session a line that is not JSON-RPC as an Exception item, as the SDK's transports do;
- starts the server under the guard (guard.py), the leader of its own process group, and on exit
  closes its stdin, waits a moment, then kills the whole group: nothing is left running.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from mcp import types
from mcp.shared.message import SessionMessage

from app.tools.config import StdioServer
from app.tools.stderr_tail import StderrTail

MAX_MESSAGE_BYTES = 128 * 2**20  # a result may be big (it is cut later), not unbounded
READ_BYTES = 64 * 2**10
EXIT_GRACE = 2.0  # seconds for a server to exit by itself once its stdin closes
GUARD = Path(__file__).with_name("guard.py")
INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")


class MessageTooLong(ValueError):
    """The server sent one message longer than MAX_MESSAGE_BYTES."""


def guarded_command(config: StdioServer) -> list[str]:
    """The server's command line under the guard, which ends its group if lfm-chat dies."""
    return [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), config.command, *config.args]


def server_environment(config: StdioServer) -> dict[str, str]:
    """Only the basics of lfm-chat's environment (no API keys of its own), then the file's `env`."""
    inherited = {k: v for k in INHERITED_ENV if (v := os.environ.get(k)) is not None}
    return {**inherited, **config.env}


@asynccontextmanager
async def stdio_transport(config: StdioServer, stderr: StderrTail) -> AsyncIterator[tuple[Any, Any]]:
    """(read stream, write stream) of SessionMessages to a server started for the duration."""
    process = await anyio.open_process(
        guarded_command(config),
        stdin=-1,
        stdout=-1,
        stderr=stderr.writer,
        cwd=config.cwd,
        env=server_environment(config),
        start_new_session=True,
    )
    stderr.spawned()
    to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_read_stdout, process, to_session)
            group.start_soon(_write_stdin, process, from_session)
            try:
                yield read, write
            finally:
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
            for stream in (read, write, to_session, from_session):
                await stream.aclose()


async def _read_stdout(process: Process, to_session: Any) -> None:
    assert process.stdout is not None
    pending = bytearray()
    skipping = False  # inside a message that is too long: drop bytes up to its newline
    async with to_session:
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            while True:
                chunk = await process.stdout.receive(READ_BYTES)
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    if not skipping:
                        pending += chunk[start:end]
                        await to_session.send(_parse(pending))
                    pending.clear()
                    skipping, start = False, end + 1
                if not skipping:
                    pending += chunk[start:]
                    if len(pending) > MAX_MESSAGE_BYTES:
                        pending.clear()
                        skipping = True
                        await to_session.send(
                            MessageTooLong(f"a message is longer than {MAX_MESSAGE_BYTES // 2**20} MB")
                        )


def _parse(line: bytearray) -> SessionMessage | Exception:
    """The message on one line. Parsed by the json module, then validated as Python objects: pydantic's
    JSON mode tries each kind of message on the raw text and held a 50 MB result about ten times."""
    try:
        message = json.loads(line)
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(message, by_name=False))
    except RecursionError:
        return ValueError("a message nested too deeply")
    except ValueError as exc:  # not JSON, or not JSON-RPC
        return exc


async def _write_stdin(process: Process, from_session: Any) -> None:
    assert process.stdin is not None
    async with from_session:
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for message in from_session:
                line = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await process.stdin.send(line.encode())


async def _stop(process: Process) -> None:
    """Close stdin (a server's cue to exit), wait EXIT_GRACE, then kill the whole group."""
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()  # type: ignore[union-attr]
    with anyio.move_on_after(EXIT_GRACE):
        await process.wait()
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
    await process.aclose()
