"""SIGTERM to a real `lfm-chat serve --demo` with 20 requests in flight: it stops accepting, lets
them run for --drain-timeout, then ends each one properly (a stream with a final chunk and
`data: [DONE]`, a whole reply with a JSON 503 in OpenAI's shape), and logs no traceback.

Streams are read raw (httpx) so the test sees the last lines as sent; whole replies go through the
`openai` SDK, retries off, as a client of a shutting-down server would see them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai

from bench.served import free_port, wait_until_healthy
from tests.server.helpers import scrape
from tests.server.test_cli import ROOT
from tests.waiting import HANG_GUARD, wait_for

STREAMS = WHOLE = 10
PROMPT = [{"role": "user", "content": "tell me everything"}]
MOST = 300  # tokens: 20 such requests on 4 slots are still running when the signal comes


class Serve:
    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.process, self.url, self.log = process, url, log

    def admitted(self) -> float:
        """Requests running, waiting or finished."""
        metrics = scrape(self.url)
        finished = sum(
            value for name, value in metrics.items() if name.startswith("vllm:request_success_total")
        )
        return metrics["vllm:num_requests_running"] + metrics["vllm:num_requests_waiting"] + finished


@contextlib.contextmanager
def demo_server(tmp_path: Path, drain_timeout: int) -> Iterator[Serve]:
    port, log = free_port(), tmp_path / "serve.log"
    argv = ["--demo", "--port", str(port), "--drain-timeout", str(drain_timeout), "--max-num-seqs", "4"]
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", *argv],
            cwd=ROOT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, url, "lfm-chat serve --demo", HANG_GUARD)
        yield Serve(process, url, log)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(HANG_GUARD)


def read_stream(url: str, max_tokens: int, lines: list[list[str]]) -> None:
    body = {"messages": PROMPT, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=HANG_GUARD) as response:
        assert response.status_code == 200
        lines.append([line for line in response.iter_lines() if line])


def ask_whole(url: str, max_tokens: int, outcomes: list[object]) -> None:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=HANG_GUARD) as client:
        try:
            outcomes.append(
                client.chat.completions.create(
                    model="lfm-chat-demo",
                    messages=PROMPT,
                    max_tokens=max_tokens,
                    extra_body={"ignore_eos": True},
                )
            )
        except openai.APIStatusError as exc:
            outcomes.append(exc)


def load_then_terminate(serve: Serve, max_tokens: int) -> tuple[list[list[str]], list[object]]:
    """20 requests in flight, then SIGTERM; every client's outcome once the process has exited."""
    streams: list[list[str]] = []
    wholes: list[object] = []
    threads = [
        threading.Thread(target=read_stream, args=(serve.url, max_tokens, streams)) for _ in range(STREAMS)
    ]
    threads += [
        threading.Thread(target=ask_whole, args=(serve.url, max_tokens, wholes)) for _ in range(WHOLE)
    ]
    for thread in threads:
        thread.start()
    wait_for(lambda: serve.admitted() == STREAMS + WHOLE, "all 20 requests to be admitted")
    serve.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(HANG_GUARD)
    serve.process.wait(HANG_GUARD)
    assert serve.process.returncode in (0, -signal.SIGTERM)
    assert len(streams) == STREAMS and len(wholes) == WHOLE, "a client got no answer"
    log = serve.log.read_text(errors="replace")
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    return streams, wholes


def final_reason(lines: list[str]) -> str:
    """The stream's last finish_reason; it must end with `data: [DONE]` right after its chunks."""
    assert lines[-1] == "data: [DONE]", lines[-3:]
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    reasons = [
        choice["finish_reason"] for chunk in chunks for choice in chunk["choices"] if choice["finish_reason"]
    ]
    assert len(reasons) == 1, lines[-3:]
    return reasons[0]


def test_sigterm_past_the_drain_timeout_ends_each_request_with_its_final_event(tmp_path: Path) -> None:
    with demo_server(tmp_path, drain_timeout=1) as serve:
        streams, wholes = load_then_terminate(serve, max_tokens=4000)
    assert [final_reason(lines) for lines in streams] == ["abort"] * STREAMS
    for outcome in wholes:
        assert isinstance(outcome, openai.APIStatusError), outcome
        assert outcome.status_code == 503
        assert outcome.response.headers["content-type"] == "application/json"
        assert "shutting down" in outcome.response.json()["error"]["message"]


def test_sigterm_within_the_drain_timeout_lets_every_request_finish(tmp_path: Path) -> None:
    with demo_server(tmp_path, drain_timeout=3600) as serve:
        streams, wholes = load_then_terminate(serve, max_tokens=MOST)
    assert [final_reason(lines) for lines in streams] == ["length"] * STREAMS
    for outcome in wholes:
        assert isinstance(outcome, openai.types.chat.ChatCompletion), outcome
        assert outcome.choices[0].finish_reason == "length"
        assert outcome.usage is not None and outcome.usage.completion_tokens == MOST
