"""`lfm-chat serve` on a checkpoint whose chat template is a bomb: the server stays a server.

A template is the checkpoint's code and runs for every chat request, so each bomb here goes off on
every request. What matters is what the rest of the server does meanwhile: /health and /v1/models
answer within ``ANSWER_BOUND`` all along, the bomb's request ends as a 400 whose message names the
template file within a hang bound, the server and its render workers stay within ``RSS_BOUND`` of
where they started, and SIGTERM still stops it all. The server is a real `lfm-chat serve` process
(its own GIL, its own memory), as a user runs it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.test_cli import ROOT, free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads RSS from /proc")

HANG_BOUND = 20.0  # seconds; unbounded, the power bomb runs for minutes and holds the server's GIL
ANSWER_BOUND = 10.0  # seconds /health and /v1/models may take while a bomb renders (unbounded: minutes)
RSS_BOUND = 300 * 2**20  # bytes the server and its children together may grow by
START_BOUND = 120.0  # seconds `lfm-chat serve` may take to load the tiny checkpoint on a busy machine
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

BOMBS = {
    "power": "{% set n = messages|length %}{{ (10*n)**(10**8) }}",
    "repeat": "{{ 'a'*(3000000000*(messages|length)) }}",
    "nested-loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
}


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the server's template workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # it ended while we looked
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _rss(pid: int) -> int:
    """VmRSS of ``pid`` in bytes; 0 once it has ended (a zombie has none)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _family_rss(pid: int) -> int:
    return _rss(pid) + sum(_rss(child) for child in _children(pid))


@pytest.fixture(params=list(BOMBS))
def bomb_server(
    request: pytest.FixtureRequest, tiny_ckpt: Path, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    """`lfm-chat serve` on a copy of the tiny checkpoint with the bomb as its chat_template.jinja."""
    ckpt = Path(shutil.copytree(tiny_ckpt, tmp_path / "ckpt"))
    template = ckpt / "chat_template.jinja"
    template.write_text(BOMBS[request.param], encoding="utf-8")
    port = free_port()
    argv = ["--model", str(ckpt), "--dtype", "float32", "--port", str(port), "--served-model-name", "tiny"]
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", *argv],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_healthy(process, url)
        yield process, url, template
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def _wait_until_healthy(process: subprocess.Popen[str], url: str) -> None:
    deadline = time.monotonic() + START_BOUND
    while True:
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "lfm-chat serve did not come up"
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)


def _post_in_thread(url: str) -> tuple[threading.Thread, list[httpx.Response | BaseException]]:
    """A chat request in a daemon thread (one that never returns must not keep the run alive)."""
    outcome: list[httpx.Response | BaseException] = []

    def post() -> None:
        try:
            outcome.append(httpx.post(f"{url}/v1/chat/completions", json=CHAT, timeout=HANG_BOUND + 10))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread, outcome


def _answers_quickly(url: str, path: str) -> None:
    started = time.monotonic()
    response = httpx.get(f"{url}{path}", timeout=ANSWER_BOUND + 1)
    took = time.monotonic() - started
    assert response.status_code == 200, (path, response.text)
    assert took < ANSWER_BOUND, f"{path} took {took:.1f} s while a bomb rendered"


def _bomb_request(url: str, pid: int, rss_before: int) -> httpx.Response:
    """Send the bomb; until it is answered, /health and /v1/models must answer and memory stay put."""
    started = time.monotonic()
    thread, outcome = _post_in_thread(url)
    while thread.is_alive() and time.monotonic() - started < HANG_BOUND:
        _answers_quickly(url, "/health")
        _answers_quickly(url, "/v1/models")
        assert _family_rss(pid) - rss_before < RSS_BOUND
        time.sleep(0.1)
    thread.join(1)
    assert not thread.is_alive(), f"the bomb's request still runs after {HANG_BOUND:g} s"
    [response] = outcome
    assert isinstance(response, httpx.Response), response
    return response


def test_a_template_bomb_is_a_400_naming_the_template_while_the_server_keeps_answering(
    bomb_server: tuple[subprocess.Popen[str], str, Path],
) -> None:
    process, url, template = bomb_server
    rss_before = _family_rss(process.pid)
    for _ in range(2):  # the second request proves a killed worker is replaced, not a dead end
        response = _bomb_request(url, process.pid, rss_before)
        assert response.status_code == 400, response.text
        message = response.json()["error"]["message"]
        assert "chat template" in message and str(template) in message and "\n" not in message
    _answers_quickly(url, "/health")
    assert _family_rss(process.pid) - rss_before < RSS_BOUND
    workers = _children(process.pid)
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    # uvicorn re-raises the signal after its graceful shutdown ("Finished server process")
    assert process.returncode in (0, -signal.SIGTERM), process.communicate()[1]
    # a worker still starting when the server closed its pool ends at its first read (EOF); one
    # left running would be there for good
    wait_for(lambda: not [pid for pid in workers if _rss(pid)], "the template workers to end with the server")
