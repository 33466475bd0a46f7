"""An OpenAI-compatible server's error statuses, said in the user's terms."""

from __future__ import annotations

import json


class ServerError(Exception):
    """The server cannot be used as asked (unreachable, wrong key, no such model): one paragraph."""


def server_message(body: str) -> str:
    """The error object's message (OpenAI: {"error": {"message": ...}}), else the body's start."""
    try:
        error = json.loads(body).get("error", body)
    except (ValueError, AttributeError):
        return body.strip()[:200]
    message = error.get("message", error) if isinstance(error, dict) else error
    return str(message)[:200]


def status_problem(status: int, body: str, url: str) -> str:
    said = server_message(body)
    if status in (401, 403):
        return f"the server at {url} refused the API key ({status}): pass the right one with --api-key"
    if status == 404:
        return f"the server at {url} has no such model or endpoint (404): {said}"
    if status in (429, 503):
        return f"the server at {url} is overloaded ({status}) and still was after retrying: {said}"
    return f"the server said {status}: {said}"
