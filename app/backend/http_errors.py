"""An OpenAI-compatible server's error statuses, said in the user's terms."""

from __future__ import annotations

import json

from app.backend.server_text import server_text


class ServerError(Exception):
    """The server cannot be used as asked (unreachable, wrong key, no such model): one paragraph."""


def server_message(body: str) -> str:
    """The error object's message (OpenAI: {"error": {"message": ...}}), else the body's start;
    cleaned, since it is shown."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return server_text(body)
    error = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
    message = error.get("message", error) if isinstance(error, dict) else error
    return server_text(message)


def status_problem(status: int, body: str, url: str) -> str:
    said = server_message(body)
    if status in (401, 403):
        return f"the server at {url} refused the API key ({status}): pass the right one with --api-key"
    if status == 404:
        return f"the server at {url} has no such model or endpoint (404): {said}"
    if status in (429, 503):
        return f"the server at {url} is overloaded ({status}) and still was after retrying: {said}"
    return f"the server said {status}: {said}"
