"""The render workers' life: warmed when a tokenizer loads, replaced when killed, ended with the process.

A worker is a real ``python -I`` child here; the tests look at it through the pool's ``pids()``
and /proc, as an operator would.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from model.errors import ChatTemplateError
from model.text import template_worker
from model.text.tokenizer import Tokenizer
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
CONVERSATION = [{"role": "user", "content": "12345678"}]

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads process states")


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[template_worker.WorkerPool]:
    """A pool of this test's own (the process's pool may hold workers other tests started)."""
    fresh = template_worker.WorkerPool()
    monkeypatch.setattr(template_worker, "POOL", fresh)
    yield fresh
    fresh.close()


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (ended, waiting to be reaped)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def _warming_up() -> bool:
    """A warm-up thread (WorkerPool.warm) is still starting a worker."""
    return any(thread.name == "chat-template-warm-up" for thread in threading.enumerate())


def test_a_worker_killed_from_outside_is_replaced_and_the_next_render_is_right(
    pool: template_worker.WorkerPool, tiny_ckpt: Path
) -> None:
    tokenizer = Tokenizer.from_pretrained(tiny_ckpt)
    expected = tokenizer.render_chat(CONVERSATION)
    [victim] = pool.pids()
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: not _running(victim), "the killed worker to end")
    assert tokenizer.render_chat(CONVERSATION) == expected
    [replacement] = pool.pids()
    assert replacement != victim and _running(replacement)


def test_loading_a_tokenizer_warms_a_worker_the_first_render_then_uses(
    pool: template_worker.WorkerPool, tiny_ckpt: Path
) -> None:
    """The ~1 s a worker takes to start is spent in the background while the model loads."""
    tokenizer = Tokenizer.from_pretrained(tiny_ckpt)
    wait_for(pool.pids, "a warm worker")
    warmed = pool.pids()
    assert tokenizer.render_chat(CONVERSATION)
    assert pool.pids() == warmed  # no process started for (or on the thread of) the first render


def test_a_render_at_once_after_loading_uses_the_worker_warming_up(
    pool: template_worker.WorkerPool, tiny_ckpt: Path
) -> None:
    assert Tokenizer.from_pretrained(tiny_ckpt).render_chat(CONVERSATION)
    assert len(pool.pids()) == 1  # not a second one started beside it


def test_loading_many_tokenizers_warms_one_worker(pool: template_worker.WorkerPool, tiny_ckpt: Path) -> None:
    for _ in range(5):
        Tokenizer.from_pretrained(tiny_ckpt)
    wait_for(lambda: not _warming_up(), "every warm-up started to end")  # a second one would show now
    assert len(pool.pids()) == 1


# Loads a tokenizer, renders, starts a render that loops for up to a minute in a daemon thread,
# prints the workers' pids and exits at once: the busy worker must end with it, not a minute later.
_EXITING_APP = """
import contextlib, sys, threading, time
from model.text import template_worker
from model.errors import ChatTemplateError
from model.text.chat_template import ChatTemplate
from model.errors import ChatTemplateError
from model.text.tokenizer import Tokenizer

tokenizer = Tokenizer.from_pretrained(sys.argv[1])
assert tokenizer.render_chat([{"role": "user", "content": "hi"}])
loop = ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")

def render_the_loop():
    with contextlib.suppress(ChatTemplateError):  # its worker is ended under it at exit
        loop.render([], time_limit=60.0)

threading.Thread(target=render_the_loop, daemon=True).start()
time.sleep(0.5)  # the loop runs in the worker the first render used
print(*template_worker.POOL.pids(), flush=True)
"""


def test_no_worker_outlives_the_process_that_started_it(tiny_ckpt: Path) -> None:
    app = subprocess.run(
        [sys.executable, "-c", _EXITING_APP, str(tiny_ckpt)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert app.returncode == 0, app.stderr
    workers = [int(pid) for pid in app.stdout.split()]
    assert workers
    assert not [pid for pid in workers if _running(pid)], "a template worker outlived its process"
    assert "Traceback" not in app.stderr, app.stderr


def test_out_of_descriptors_fails_that_render_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the descriptor limit a render is one clear error (a 400 in serve, not a raw OSError's 500),
    and the pool keeps using workers once descriptors are free again."""
    pool = template_worker.WorkerPool()
    real_pipe = template_worker.Pipe

    def no_descriptors() -> object:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(template_worker, "Pipe", no_descriptors)
    with pytest.raises(ChatTemplateError, match="Too many open files"):
        pool.render("{{ 'x' }}", {}, 2.0)
    monkeypatch.setattr(template_worker, "Pipe", real_pipe)
    try:
        assert pool.render("{{ 'x' }}", {}, 2.0) == "x"
        assert len(pool.pids()) == 1  # a worker process, not the in-process fallback
    finally:
        pool.close()
