"""No MCP server outlives lfm-chat: not after aclose, not after a kill -9 of the process that
started it (the guard, app/tools/guard.py, takes the server's process group down)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.tools.toolbox import ToolBox
from tests.app.tools.conftest import SERVERS, stdio_server
from tests.waiting import wait_for

pytestmark = pytest.mark.subprocess
ROOT = Path(__file__).resolve().parents[3]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def group_members(pgid: int) -> list[int]:
    """The live processes of a process group (the guard's: the server and anything it started)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


async def test_aclose_leaves_nothing_running() -> None:
    box = ToolBox([stdio_server("calc", "calc")])
    await box.tools()
    server = int((await box.call("pid", {}, timeout=60, max_chars=20)).text)
    guard = int(Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[1])  # its parent
    assert os.getpgid(server) == guard  # the guard leads the server's group
    await box.aclose()
    assert not alive(server) and group_members(guard) == []


def mcp_file(tmp_path: Path, kind: str, env: dict[str, str] | None = None) -> Path:
    """An mcp.json with one test server of this kind."""
    path = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": [str(SERVERS), kind], "env": env or {}}
    path.write_text(json.dumps({"mcpServers": {kind: server}}))
    return path


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_kill_9_of_lfm_chat_leaves_nothing_running(tiny_ckpt: Path, tmp_path: Path) -> None:
    """`lfm-chat -p` runs a tool that never answers and is killed with SIGKILL: no cleanup of its
    own runs, yet the server's whole group goes."""
    pid_file = tmp_path / "server.pid"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LFM_CHAT_DATA_DIR": str(tmp_path),
    }
    argv = [
        "--model",
        str(tiny_ckpt),
        "-p",
        "Sleep.",
        "--mcp",
        str(mcp_file(tmp_path, "sleeper", {"SLEEPER_PID_FILE": str(pid_file)})),
    ]
    lfm_chat = subprocess.Popen(
        [sys.executable, "-m", "cli", *argv, "--yes", "--tool-choice", "required", "--max-tokens", "32"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        server = int(wait_for(lambda: pid_file.is_file() and pid_file.read_text(), "the tool to start"))
        guard = os.getpgid(server)
        assert group_members(guard)  # the guard and the server run
        lfm_chat.send_signal(signal.SIGKILL)
        lfm_chat.wait()
        wait_for(lambda: group_members(guard) == [], "the MCP server's group to end")
        assert not alive(server)
    finally:
        lfm_chat.kill()
        lfm_chat.wait()
