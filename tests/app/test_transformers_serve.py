"""The remote backend against a server we did not write: `transformers serve` on the tiny checkpoint.

It streams chat completions on CPU and refuses the sampling fields it does not know (top_k, min_p,
repetition_penalty): the reply must still come, and the pane must be told which were dropped.
Its text is not compared with our engine's: on the random tiny model the reply is mostly split
UTF-8 sequences, which its streamer emits differently (the first characters agree).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.backend.remote import RemoteBackend
from app.core.conversation import ChatSettings
from bench.served import served
from tests.app.backend.test_remote_backend import run, text

pytest.importorskip("fastapi", reason="transformers serve needs transformers[serving]")
pytestmark = pytest.mark.subprocess  # `transformers serve`, started by bench/served.py
SETTINGS = ChatSettings(temperature=0.0, top_k=5, min_p=0.1, repetition_penalty=1.0, max_tokens=24)
START_LIMIT = 180.0  # seconds: it imports torch and transformers in a fresh process


@pytest.fixture(scope="module")
def transformers_serve(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("hf-home")
    (home / "hub").mkdir()  # its /v1/models fails without a Hub cache directory
    command = [str(Path(sys.executable).parent / "transformers"), "serve", str(tiny_ckpt)]
    command += ["--host", "127.0.0.1", "--device", "cpu", "--dtype", "float32"]
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    pipes = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    with served(
        lambda port: [*command, "--port", str(port)], "transformers serve", START_LIMIT, **pipes
    ) as u:
        yield u


def test_the_refused_fields_are_reported_and_the_reply_still_comes(
    transformers_serve: str, tiny_ckpt: Path
) -> None:
    backend = RemoteBackend.connect(transformers_serve, None, str(tiny_ckpt))
    try:
        events = run(backend, SETTINGS)
    finally:
        backend.close()
    notices = [e.notice for e in events if e.notice]
    assert len(notices) == 1 and "top_k" in notices[0] and "min_p" in notices[0], notices
    assert events[-1].finished and events[-1].finish_reason in ("stop", "length")
    assert text(events) and events[-1].metrics is not None and events[-1].metrics.generated_tokens > 0
