"""Runs one stdio MCP server and takes its whole process group down when lfm-chat dies, even by
kill -9, which gives lfm-chat no chance to stop anything.

lfm-chat starts `python -I -S guard.py LFM_PID COMMAND ARGS...` as the leader of a new process
group; the guard starts the server in that group and waits. It ends the group with SIGKILL when
lfm-chat is gone (Linux tells it at once through PR_SET_PDEATHSIG; elsewhere it sees its parent
change within a second) or when it is told to stop, and otherwise exits with the server's own
status. Standard library only, and nothing imported from lfm-chat: it starts in a few ms.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
POLL_SECONDS = 1.0
CANNOT_START = 127  # what shells report for a command that cannot run


def end_group(*_: object) -> None:
    os.killpg(0, signal.SIGKILL)  # the guard is in the group too: this is its last act


def main(argv: list[str]) -> int:
    lfm_chat, command = int(argv[0]), argv[1:]
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, end_group)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != lfm_chat:  # lfm-chat died before the prctl took hold
        end_group()
    try:
        server = subprocess.Popen(command)
    except OSError as exc:
        print(f"cannot start {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return CANNOT_START
    # The server holds the pipes now; the guard's copies would keep them open after it exits.
    os.close(0)
    os.close(1)
    while True:
        try:
            return server.wait(timeout=POLL_SECONDS)
        except subprocess.TimeoutExpired:
            if os.getppid() != lfm_chat:
                end_group()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
