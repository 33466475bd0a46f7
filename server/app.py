"""The Starlette application: routes, the engine worker's lifetime, the API key, errors as JSON.

    POST /v1/chat/completions   server/completions.py
    POST /v1/completions        server/completions.py
    GET  /v1/models             the one model, with its context length (max_model_len, as vLLM adds)
    GET  /health                200 while the server runs
    GET  /metrics               Prometheus text (server/metrics.py)

As in vLLM, --api-key guards /v1/* only: health checks and metrics scrapers need no key.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine import Engine, EngineWorker
from server import metrics
from server.bridge import EngineBridge
from server.completions import Service, chat_completions, completions
from server.config import ServerConfig
from server.errors import ApiError

logger = logging.getLogger(__name__)

# Where Python's own BaseExceptions live (CancelledError, KeyboardInterrupt, exception groups...).
PYTHONS_OWN = ("builtins", "asyncio.exceptions", "concurrent.futures._base")


def create_app(engine: Engine, config: ServerConfig) -> Starlette:
    """An app serving `engine`; the engine's worker thread runs from startup to shutdown."""
    service = Service(engine, config)
    served = metrics.ServerMetrics()
    created = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        worker = EngineWorker(engine, name="lfm-serve-engine").start()
        slots = engine.config.max_num_seqs
        capacity, per_client = slots + config.max_waiting, config.per_client(slots)
        service.bridge = EngineBridge(worker, slots, capacity, per_client, served)
        try:
            yield
        finally:  # every stream still open gets its final event, then the thread ends
            await run_in_threadpool(worker.shutdown)
            service.bridge = None

    async def models(request: Request) -> Response:
        card = {
            "id": config.model_name,
            "object": "model",
            "created": created,
            "owned_by": "lfm-chat",
            "max_model_len": engine.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def prometheus(request: Request) -> Response:
        assert service.bridge is not None, "the lifespan starts the bridge"
        bridge = service.bridge
        text = metrics.render(bridge.worker.snapshot(), served, config.model_name, bridge.queued)
        return PlainTextResponse(text, media_type=metrics.CONTENT_TYPE)

    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]
    handlers = {ApiError: _api_error, HTTPException: _http_error, Exception: _internal_error}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    app.state.service = service
    if config.api_key is not None:
        app.add_middleware(RequireApiKey, key=config.api_key)
    app.add_middleware(NativeCrashes)
    return app


class NativeCrashes:
    """OpenAI's JSON 500 for a request whose handler raised a BaseException that Python did not
    define: pyo3's PanicException, which `tokenizers` raises when a checkpoint's pre-tokenizer regex
    makes it panic. Starlette's handlers catch Exception only, so uvicorn would log "Exception in ASGI
    application" and answer in plain text. Cancellation, exits and exception groups pass through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except BaseException as exc:
            if isinstance(exc, Exception) or type(exc).__module__ in PYTHONS_OWN or scope["type"] != "http":
                raise
            logger.error("%s %s crashed in native code", scope["method"], scope["path"], exc_info=exc)
            if not started:  # a stream already begun ends here, cut
                message = (
                    f"internal server error ({type(exc).__name__}: a native library crashed on this request)"
                )
                await ApiError(500, message).response()(scope, receive, send)


class RequireApiKey:
    """401 for /v1/* requests without `Authorization: Bearer KEY` (the key compared in constant time;
    the scheme in any case, as RFC 7235 has it)."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.expected = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            scheme, _, given = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
            bearer = scheme.lower() == b"bearer"
            if not (hmac.compare_digest(given.lstrip(b" "), self.expected) and bearer):
                error = ApiError(
                    401, "a valid API key is required: Authorization: Bearer KEY", code="invalid_api_key"
                )
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 / 405, in OpenAI's shape."""
    assert isinstance(exc, HTTPException)
    return ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}").response()


async def _internal_error(request: Request, exc: Exception) -> Response:
    """A bug: logged with its traceback here, one line to the client."""
    logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return ApiError(500, f"internal server error ({type(exc).__name__})").response()
