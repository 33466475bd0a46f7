"""An OpenAI-compatible server as a backend (vLLM, SGLang, llama-server, lfm-chat serve).

Requests run on one asyncio loop on a thread of the backend's own, so the UI thread never
waits on the network and a cancel is a task cancel (the stream is closed, the server sees the
disconnect and frees the request). Nothing is tokenized here: the server renders the chat
template, and token counts come from its usage figures.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx

from app.backend.base import OnEvent, Prompt
from app.backend.chat_stream import ChatStream, chat_body
from app.backend.http_errors import ServerError, server_message
from app.backend.server_metrics import HISTORY, ClientStream, MetricsPoller, ServerSnapshot
from app.backend.server_text import MODEL_ID_CHARS, server_text
from app.backend.smoothing import RATE_SMOOTHING_SECONDS, Smoothed
from app.backend.unpack import IDENTITY, BodyRefused, BodyTooLarge, unpacked
from app.core.conversation import SAMPLING_FIELDS, ChatSettings, Conversation
from app.core.reply_parts import without_thinking

if TYPE_CHECKING:
    from engine import Structure

TIMEOUT = httpx.Timeout(10.0, read=300.0)  # a long prefill on a busy server sends nothing for a while
MODELS_BYTES = 4 * 1024 * 1024  # GET /v1/models: a listing larger than this is refused
MODELS_NAMED = 20  # a refused --model lists this many of the server's ids
MAX_CONTEXT = 1 << 31  # a max_model_len above this is not a context length
CHARS_PER_TOKEN = 4  # this client's guess at a prompt's tokens (English, BPE), shown as "~N"


class RemoteStream:
    """A request in flight on the loop; cancel closes its connection."""

    def __init__(self, request_id: str, future: Future[None]) -> None:
        self.request_id = request_id
        self._future = future

    def cancel(self) -> None:
        self._future.cancel()  # thread-safe: cancels the task on the loop


def sampling_fields(settings: ChatSettings, max_tokens: int) -> dict[str, Any]:
    """The fields the user chose, the rest left to the server's defaults for its model; of settings
    that chose every field (saved before, or made for a local model), OpenAI's fields always and the
    extensions only when they do something (fewer to be refused)."""
    chosen = [name for name in SAMPLING_FIELDS if name in settings.chosen]
    values = {name: getattr(settings, name) for name in chosen} | {"max_tokens": max_tokens}
    if settings.chosen != SAMPLING_FIELDS:
        return {name: values[name] for name in chosen}
    off = {"top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
    return {name: value for name, value in values.items() if off.get(name) != value}


def model_ids(listing: Any, url: str) -> list[dict[str, Any]]:
    """The entries of GET /v1/models with a text id, the id cleaned: it is shown in the title."""
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        raise ServerError(
            f"{url} does not answer as an OpenAI-compatible server: GET /v1/models is not an object "
            'with a "data" list.'
        )
    entries = [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    cleaned = [entry | {"id": server_text(entry["id"], MODEL_ID_CHARS)} for entry in entries]
    return [entry for entry in cleaned if entry["id"]]


def pick_model(listing: Any, wanted: str | None, url: str) -> dict[str, Any]:
    """The entry of GET /v1/models for `wanted`, or the first one when no name was asked for."""
    models = model_ids(listing, url)
    if not models and wanted is not None:  # e.g. transformers serve lists only its Hub cache
        return {"id": wanted}
    if not models:
        raise ServerError(f"The server at {url} serves no models (GET /v1/models listed none).")
    if wanted is None:
        return models[0]
    for entry in models:
        if entry["id"] == wanted:
            return entry
    names = ", ".join(m["id"] for m in models[:MODELS_NAMED])
    more = f" and {len(models) - MODELS_NAMED} more" if len(models) > MODELS_NAMED else ""
    raise ServerError(
        f"The server at {url} does not serve {wanted}; it serves: {names}{more}. Pick one with --model."
    )


def context_length(model: dict[str, Any]) -> int | None:
    """The model's context length as the server gives it (vLLM: max_model_len, llama-server:
    meta.n_ctx_train); None, shown as "context ?", when it gives none or no sensible number."""
    meta = model.get("meta")
    length = model.get("max_model_len") or (meta.get("n_ctx_train") if isinstance(meta, dict) else None)
    if isinstance(length, float) and math.isfinite(length) and length.is_integer():
        length = int(length)
    if isinstance(length, int) and not isinstance(length, bool) and 0 < length <= MAX_CONTEXT:
        return length
    return None


def fetch_models(url: str, api_key: str | None) -> Any:
    """GET /v1/models, with every failure said as what to check."""
    headers = IDENTITY | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with httpx.stream("GET", f"{url}/v1/models", headers=headers, timeout=10.0) as response:
            body = read_capped(response, MODELS_BYTES, url)
    except BodyRefused as exc:
        raise ServerError(f"The server at {url} answered GET /v1/models oddly: {exc}.") from None
    except httpx.HTTPError as exc:
        raise ServerError(
            f"Cannot reach the server at {url} ({server_text(exc)}). Is it running, and is --server right?"
        ) from None
    if response.status_code in (401, 403):
        raise ServerError(
            f"The server at {url} refused {'the API key' if api_key else 'to answer without an API key'} "
            f"({response.status_code}): pass the right one with --api-key."
        )
    if response.status_code != 200:
        raise ServerError(
            f"{url} does not answer as an OpenAI-compatible server: GET /v1/models gave "
            f"{response.status_code} ({server_message(body.decode('utf-8', 'replace'))})."
        )
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise ServerError(
            f"{url} does not answer as an OpenAI-compatible server: /v1/models is not JSON."
        ) from None


def read_capped(response: httpx.Response, cap: int, url: str) -> bytes:
    """The listing's body, never held past `cap` bytes unpacked (a server could send gigabytes, or
    a gzip bomb)."""
    try:
        return b"".join(unpacked(response, cap, "its listing"))
    except BodyTooLarge:
        raise ServerError(f"The server at {url} answered GET /v1/models with over {cap >> 20} MiB.") from None


def client_stream(tag: str, stream: ChatStream) -> ClientStream:
    """What this client knows of one of its streams."""
    m = stream.metrics
    started = stream.first is not None
    max_tokens = stream.body.get("max_tokens")
    return ClientStream(
        tag=tag,
        started=started,
        tokens=m.generated_tokens,
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
        tokens_per_s=(m.tokens_per_s or 0.0) if started else 0.0,
    )


class RemoteBackend:
    """Streams chat completions from `url`; polls its metrics for the dashboard."""

    def __init__(self, url: str, api_key: str | None, model: dict[str, Any], poll_interval: float = 0.25):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.model_name = str(model["id"])  # the default: what a pane without a model of its own asks for
        self.per_pane_model = True
        self.server_sampling = True
        self.max_model_len = context_length(model)
        context = f"context {self.max_model_len}" if self.max_model_len else "context ?"
        self.title = f"lfm-chat · {self.model_name} · server {self.url} · {context}"
        self.warning: str | None = None
        self.architecture: str | None = None  # a server does not say
        self.poll_interval = poll_interval
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="lfm-remote", daemon=True).start()
        headers = IDENTITY | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
        self._client = self._call(self._make_client(headers))
        self._streams: dict[str, tuple[str, ChatStream]] = {}  # request id -> (tag, stream): client figures
        self._snapshot: ServerSnapshot | None = None
        self._history: list[float] = []
        self._closing = False
        self._poller = asyncio.run_coroutine_threadsafe(self._poll(), self._loop)

    @classmethod
    def connect(
        cls, url: str, api_key: str | None, model: str | None, poll_interval: float = 0.25
    ) -> RemoteBackend:
        """Blocking: asks the server which models it serves. ServerError says what to fix."""
        url = url.rstrip("/")
        return cls(url, api_key, pick_model(fetch_models(url, api_key), model, url), poll_interval)

    async def _make_client(self, headers: dict[str, str]) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=TIMEOUT)

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def prepare(
        self,
        conversation: Conversation,
        tools: list[dict[str, Any]] | None = None,
        continue_last: bool = False,
    ) -> Prompt:
        """Only the server can count tokens; until its usage figures come, the pane shows a guess."""
        messages = conversation.chat_messages(openai=True)
        past = len(messages) - 1 if continue_last else len(messages)  # a reply continued keeps its thinking
        messages = [
            m | {"content": without_thinking(m["content"])}
            if m["role"] == "assistant" and m["content"] and i < past
            else m
            for i, m in enumerate(messages)
        ]
        characters = sum(len(m["content"] or "") for m in messages)
        guess = -(-characters // CHARS_PER_TOKEN)
        return Prompt(messages, estimated_tokens=guess, tools=tools, continues=continue_last)

    def submit(
        self,
        prompt: Prompt,
        settings: ChatSettings,
        max_tokens: int,
        tag: str,
        on_event: OnEvent,
        structure: Structure | None = None,
    ) -> RemoteStream:
        request_id = f"chat-{uuid.uuid4().hex[:12]}"
        model = settings.model or self.model_name  # a pane may ask for a model of its own
        body = chat_body(model, prompt.messages, sampling_fields(settings, max_tokens))
        if prompt.tools:
            body["tools"] = prompt.tools
            body["tool_choice"] = prompt.tool_choice
        if prompt.continues:  # vLLM's and SGLang's way; a server that refuses them says so (a 400)
            body |= {"continue_final_message": True, "add_generation_prompt": False}
        if structure is not None:  # OpenAI's structured outputs; -p --json-schema makes json_schema ones only
            schema = {"name": "reply", "schema": structure.value, "strict": True}
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        stream = ChatStream(self._client, request_id, body, on_event, tag)

        async def run() -> None:
            self._streams[request_id] = (tag, stream)
            try:
                await stream.run()
            finally:
                del self._streams[request_id]

        return RemoteStream(request_id, asyncio.run_coroutine_threadsafe(run(), self._loop))

    def list_models(self) -> list[dict[str, Any]]:
        """Blocking: the server's models now (GET /v1/models, ids cleaned). ServerError says why not."""
        return model_ids(fetch_models(self.url, self.api_key), self.url)

    def remember(self, conversation: Conversation, prompt: Prompt, reply: str, ids: list[int]) -> None:
        """Nothing to keep: the server's own prefix cache matches on the text it renders."""

    def snapshot(self) -> ServerSnapshot | None:
        return self._snapshot

    async def _poll(self) -> None:
        """The server's figures (or none) plus this client's, every `poll_interval` seconds; the
        rate smoothed, whichever side it comes from."""
        poller = MetricsPoller(self._client)
        rate = Smoothed(RATE_SMOOTHING_SECONDS, time.monotonic())
        while not self._closing:  # not only the cancel: 3.11's wait_for can swallow one
            snap = await poller.poll() or ServerSnapshot("")
            streams = tuple(client_stream(tag, stream) for tag, stream in list(self._streams.values()))
            reading = snap.tokens_per_s if poller.counts_tokens else sum(s.tokens_per_s for s in streams)
            smoothed = rate.update(reading, time.monotonic())
            self._history = [*self._history, smoothed][-HISTORY:]
            self._snapshot = replace(
                snap, tokens_per_s=smoothed, streams=streams, throughput_history=tuple(self._history)
            )
            await asyncio.sleep(self.poll_interval)

    def close(self) -> None:
        """Cancel every stream (each gets its "abort" event), close the client, stop the loop."""

        async def shut() -> None:
            self._closing = True
            self._poller.cancel()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._client.aclose()
            await self._loop.shutdown_asyncgens()

        try:
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=5.0)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
