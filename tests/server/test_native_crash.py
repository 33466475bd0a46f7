"""A checkpoint whose tokenizer panics (a pre-tokenizer regex that runs out of Oniguruma's retry
limit makes `tokenizers` raise pyo3's PanicException, a BaseException): that one request ends with
OpenAI's JSON 500 naming the crash, and the server goes on serving.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from engine import Engine, EngineConfig
from tests.server.conftest import ENGINE

CATASTROPHIC = "(?=(a+)+b)"  # on a long run of "a" with no "b": Oniguruma's retry limit, then a panic
HELLO = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def panicking_checkpoint(tiny_ckpt: Path, out: Path) -> Path:
    shutil.copytree(tiny_ckpt, out)
    path = out / "tokenizer.json"
    tokenizer = json.loads(path.read_text())
    split = {"type": "Split", "pattern": {"Regex": CATASTROPHIC}, "behavior": "Isolated", "invert": False}
    tokenizer["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, tokenizer["pre_tokenizer"]]}
    path.write_text(json.dumps(tokenizer))
    return out


def test_a_panicking_tokenizer_ends_that_request_with_a_json_500(
    tiny_ckpt: Path, tmp_path: Path, serve: Callable[..., Any]
) -> None:
    checkpoint = panicking_checkpoint(tiny_ckpt, tmp_path / "panics")
    engine = Engine.from_pretrained(checkpoint, EngineConfig(**ENGINE), progress=lambda stage, fraction: None)
    with serve(engine=engine) as url:
        for path, body in (
            ("/v1/completions", {"prompt": "a" * 3000, "max_tokens": 2}),
            (
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "a" * 3000}], "max_tokens": 2},
            ),
        ):
            response = httpx.post(f"{url}{path}", json=body)
            assert response.status_code == 500, response.text
            assert response.headers["content-type"] == "application/json"
            error = response.json()["error"]
            # model/text/tokenizer.py turns the panic into a TokenizerCrash where it is raised
            assert error["type"] == "server_error" and "TokenizerCrash" in error["message"]
        assert httpx.post(f"{url}/v1/chat/completions", json=HELLO).status_code == 200
