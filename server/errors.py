"""Errors a client sees: an HTTP status and OpenAI's error object, never a stack trace.

OpenAI's clients (and ours, app/) read `error.message` and branch on the status, so every refusal
in server/ is an ApiError raised where the problem is found and turned into JSON in one place.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

# OpenAI's `error.type` for each status we send.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable",
}


MAX_MESSAGE_CHARS = 500  # messages quote what the client sent, which may be a megabyte long


def _one_short_line(message: str) -> str:
    """The message on one line and cut to MAX_MESSAGE_CHARS, the cut marked."""
    line = " ".join(message.split())
    return line if len(line) <= MAX_MESSAGE_CHARS else line[: MAX_MESSAGE_CHARS - 1] + "…"


class ApiError(Exception):
    """A request the server refuses: `status` and a one-line `message` naming the field (`param`)."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        message = _one_short_line(message)
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""
    kind = _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
