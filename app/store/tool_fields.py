"""A message's tool fields as the store writes them: one JSON column beside its text (read back,
checked, by the row checker)."""

from __future__ import annotations

import json

from app.core.conversation import ChatMessage


def tool_json(message: ChatMessage) -> str:
    """A message's tool fields as saved: a reply's calls, or the call a tool message answers; "" for
    the rest."""
    if message.role == "tool":
        return json.dumps({"id": message.tool_call_id, "name": message.name})
    if message.tool_calls:
        calls = [{"name": c.name, "arguments": c.arguments, "id": c.id} for c in message.tool_calls]
        return json.dumps({"calls": calls})
    return ""
