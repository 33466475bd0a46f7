"""Server fixtures: `lfm-chat serve`'s app on the tiny checkpoint, over real HTTP on an ephemeral port.

``make_engine(**EngineConfig fields)``  a float32, single-threaded engine on the session's tiny checkpoint
``serve(engine=None, **ServerConfig fields)``  context manager: uvicorn in a thread -> base URL
``server``      one server for the session (model "tiny", no API key), shared by the HTTP tests
``reference``   another engine, same checkpoint and config: what a request should get (batch invariance)

The server runs in this process so a test can read its engine's figures, but everything a test
checks goes through HTTP, as a client would see it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import Engine, EngineConfig
from server.app import create_app
from server.config import ServerConfig
from tests.asgi_server import serving

ENGINE = {
    "dtype": "float32",
    "num_kv_blocks": 512,
    "block_size": 16,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 128,
    "num_threads": 1,
}
MODEL = "tiny"


@pytest.fixture(scope="session")
def make_engine(tiny_ckpt: Path) -> Callable[..., Engine]:
    def make(**overrides: Any) -> Engine:
        config = EngineConfig(**{**ENGINE, **overrides})
        return Engine.from_pretrained(tiny_ckpt, config, progress=lambda stage, fraction: None)

    return make


@pytest.fixture(scope="session")
def serve(make_engine: Callable[..., Engine]) -> Callable[..., contextlib.AbstractContextManager[str]]:
    @contextlib.contextmanager
    def run(engine: Engine | None = None, **config: Any) -> Iterator[str]:
        app = create_app(engine or make_engine(), ServerConfig(**{"model_name": MODEL, **config}))
        with serving(app) as url:
            yield url

    return run


@pytest.fixture(scope="session")
def server(serve: Callable[..., contextlib.AbstractContextManager[str]]) -> Iterator[str]:
    with serve() as url:
        yield url


@pytest.fixture(scope="session")
def reference(make_engine: Callable[..., Engine]) -> Engine:
    return make_engine()
