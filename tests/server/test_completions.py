"""The generation endpoints over real HTTP: the engine's greedy text, streamed or not, and usage."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from engine import Engine, SamplingParams
from tests.server.conftest import MODEL
from tests.server.helpers import scrape

MESSAGES = [
    {"role": "system", "content": "You are a terse assistant who answers in one short line."},
    {"role": "user", "content": "Name three colours of the rainbow and one animal that is green."},
]
GREEDY = {"temperature": 0, "max_tokens": 24}


def events(response: httpx.Response) -> list[dict | str]:
    """The SSE payloads of a stream: JSON objects, then the literal "[DONE]"."""
    payloads: list[dict | str] = []
    for line in response.iter_lines():
        if line:
            assert line.startswith("data: "), line
            data = line.removeprefix("data: ")
            payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads


def expected_chat(reference: Engine, max_tokens: int = 24) -> tuple[str, str | None]:
    ids = reference.tokenizer.encode_chat(MESSAGES)
    out = reference.generate([ids], SamplingParams(temperature=0.0, max_tokens=max_tokens))[0]
    return out.text, out.finish_reason


def test_chat_completion_is_the_engines_greedy_reply(server: str, reference: Engine) -> None:
    response = httpx.post(
        f"{server}/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES, **GREEDY}
    )
    assert response.status_code == 200
    body = response.json()
    text, finish_reason = expected_chat(reference)
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert body["choices"][0]["message"] == {"role": "assistant", "content": text}
    assert body["choices"][0]["finish_reason"] == finish_reason
    prompt_tokens = len(reference.tokenizer.encode_chat(MESSAGES))
    assert body["usage"]["prompt_tokens"] == prompt_tokens
    assert body["usage"]["total_tokens"] == prompt_tokens + body["usage"]["completion_tokens"]


def test_streamed_chunks_add_up_to_the_same_reply(server: str, reference: Engine) -> None:
    request = {"messages": MESSAGES, "stream": True, **GREEDY}
    with httpx.stream("POST", f"{server}/v1/chat/completions", json=request) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        payloads = events(response)
    assert payloads[-1] == "[DONE]"
    chunks = payloads[:-1]
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    expected_text, finish_reason = expected_chat(reference)
    assert text == expected_text
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == finish_reason
    assert len({c["id"] for c in chunks}) == 1


def test_include_usage_reports_prefix_cache_hits_on_a_repeated_prompt(server: str) -> None:
    request = {"messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}, **GREEDY}
    usages = []
    for _ in range(2):
        with httpx.stream("POST", f"{server}/v1/chat/completions", json=request) as response:
            payloads = events(response)
        *chunks, last, done = payloads
        assert done == "[DONE]"
        assert all(c["usage"] is None for c in chunks)
        assert last["choices"] == []
        usages.append(last["usage"])
    first, second = usages
    assert first["prompt_tokens"] == second["prompt_tokens"] > 32  # two full blocks at least
    assert second["prompt_tokens_details"]["cached_tokens"] > 0
    assert second["completion_tokens"] == first["completion_tokens"]


def test_completions_take_raw_text_and_token_ids(server: str, reference: Engine, tiny_ckpt: Path) -> None:
    """A text prompt is what transformers' tokenizer(prompt) makes of it, BOS first, as vLLM encodes it."""
    transformers = pytest.importorskip("transformers")
    prompt = "The quick brown fox"
    ids = transformers.AutoTokenizer.from_pretrained(tiny_ckpt)(prompt)["input_ids"]
    assert ids[0] == reference.tokenizer.bos_token_id
    expected = reference.generate([ids], SamplingParams(temperature=0.0, max_tokens=16))[0].text
    for given in (prompt, ids):
        body = httpx.post(
            f"{server}/v1/completions", json={"prompt": given, "temperature": 0, "max_tokens": 16}
        ).json()
        assert body["object"] == "text_completion"
        assert body["choices"][0]["text"] == expected
        assert body["usage"]["prompt_tokens"] == len(ids)
    request = {"prompt": prompt, "temperature": 0, "max_tokens": 16, "stream": True}
    with httpx.stream("POST", f"{server}/v1/completions", json=request) as response:
        chunks = events(response)[:-1]
    assert "".join(c["choices"][0]["text"] for c in chunks) == expected


def test_stop_strings_and_seeds_reach_the_engine(server: str, reference: Engine) -> None:
    ids = reference.tokenizer.encode_chat(MESSAGES)
    sampled = {"temperature": 1.0, "top_k": 20, "top_p": 0.9, "min_p": 0.05, "seed": 7, "max_tokens": 20}
    sampled |= {"repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": 0.5}
    expected = reference.generate([ids], SamplingParams(**sampled))[0].text
    body = httpx.post(f"{server}/v1/chat/completions", json={"messages": MESSAGES, **sampled}).json()
    assert body["choices"][0]["message"]["content"] == expected
    stop = expected_chat(reference)[0][3:6]
    body = httpx.post(
        f"{server}/v1/chat/completions", json={"messages": MESSAGES, "stop": stop, **GREEDY}
    ).json()
    assert body["choices"][0]["finish_reason"] == "stop"
    assert stop not in body["choices"][0]["message"]["content"]


def test_models_health_and_metrics(server: str, reference: Engine) -> None:
    models = httpx.get(f"{server}/v1/models").json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert models["data"][0]["max_model_len"] == reference.max_model_len
    assert httpx.get(f"{server}/health").status_code == 200
    metrics = scrape(server)
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
        'vllm:request_success_total{finished_reason="stop"}',
        "lfm_chat:max_num_seqs",
        "lfm_chat:kv_blocks_total",
    ):
        assert name in metrics, name
    assert metrics["lfm_chat:max_num_seqs"] == reference.config.max_num_seqs


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_a_generation_moves_the_token_counters(server: str, path: str) -> None:
    before = scrape(server)
    body = {"messages": MESSAGES} if "chat" in path else {"prompt": "Once upon a time"}
    reply = httpx.post(
        f"{server}{path}", json={**body, "temperature": 0, "max_tokens": 5, "ignore_eos": True}
    )
    after = scrape(server)
    usage = reply.json()["usage"]
    assert usage["completion_tokens"] == 5
    gained = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    assert gained == 5
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == usage["prompt_tokens"]
    assert (
        after["vllm:time_to_first_token_seconds_count"]
        == before["vllm:time_to_first_token_seconds_count"] + 1
    )
