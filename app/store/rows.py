"""Rows read back from the conversation store, checked before the app uses them.

The file is outside this process: another program, a bad disk or an attacker with access to the
data dir may have written anything SQLite accepts (columns are loosely typed). Each value is
checked here, where it enters: a wrong type or shape falls back to the default, names and
settings strings lose their control sequences, and a huge text is cut with a marker. What was
repaired is collected as short phrases; the app shows them as one notice and the rest loads.

Message text and drafts keep their control characters: they are the user's and the model's words,
the prompt cache is keyed by them, and every widget that shows them strips controls already.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from app.backend.server_text import MODEL_ID_CHARS, server_text
from app.core.attachment import Attachment, AttachmentError, from_bytes
from app.core.conversation import ChatMessage, ChatSettings, PromptCache, Version
from app.core.sanitize import strip_control
from app.store.versions import VersionReader

if TYPE_CHECKING:
    from engine import ToolCall

MESSAGE_LIMIT_CHARS = 512 * 1024
"""The most of one saved message or draft that is loaded; a longer one (nothing lfm-chat writes:
a model's context holds far less) is cut with TRUNCATED, so a huge row cannot freeze a widget."""
NAME_LIMIT_CHARS = 1024  # a title or a conversation's name
JSON_LIMIT_CHARS = 64 * 1024 * 1024  # settings and prompt-cache JSON; the cache is only a speed-up
TRUNCATED = "\n\n[lfm-chat: the saved text was longer than {limit} characters and was cut here]"
ROLES = ("user", "assistant", "tool")
TOOL_NAME_CHARS = 128  # a saved tool name or call id (models and servers bound them far below)
TOOL_SERVERS = 64  # servers a pane may name in its settings
HELD_ATTACHMENTS = 64  # attachments held for one conversation's next message (each at most 1 MiB)


class RowChecker:
    """Turns raw column values into the app's types, noting each repair in `repairs`."""

    def __init__(self) -> None:
        self.repairs: list[str] = []

    def text(self, value: object, what: str, limit: int = NAME_LIMIT_CHARS, *, clean: bool = True) -> str:
        """A str (bytes decoded, anything else is ""), at most `limit` characters, controls stripped."""
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not isinstance(value, str):
            self.repairs.append(f"{what} is not text")
            return ""
        if len(value) > limit:
            self.repairs.append(f"{what} was cut to {limit} characters")
            value = value[:limit] + TRUNCATED.format(limit=limit)
        return strip_control(value) if clean else value

    def number(self, value: object, what: str, default: float = 0.0) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        self.repairs.append(f"{what} is not a number")
        return default

    def message(
        self, role: object, content: object, created_at: object, stopped: object, tool: object, what: str
    ) -> ChatMessage | None:
        """A message, or None (left out) for a role lfm-chat never writes; `stopped` is 1 or not;
        `tool` is `tool_json`'s text."""
        if role not in ROLES:
            self.repairs.append(f"{what} has an unknown role and was left out")
            return None
        text = self.text(content, what, MESSAGE_LIMIT_CHARS, clean=False)
        message = ChatMessage(
            str(role), text, self.number(created_at, f"{what}'s time"), stopped=stopped == 1
        )
        loaded = self._json(tool, f"{what}'s tool fields") if tool else {}
        if not isinstance(loaded, dict):
            if loaded is not None:  # None: _json noted why already
                self.repairs.append(f"{what}'s tool fields are damaged and were dropped")
            return message
        if role == "tool":
            message.tool_call_id = self._tool_text(loaded.get("id"), what)
            message.name = self._tool_text(loaded.get("name"), what)
        elif role == "assistant":
            message.tool_calls = self._calls(loaded.get("calls", []), what)
        return message

    def _tool_text(self, value: object, what: str) -> str:
        if isinstance(value, str) and len(value) <= TOOL_NAME_CHARS:
            return strip_control(value)
        self.repairs.append(f"{what}: a tool name or call id is damaged")
        return ""

    def _calls(self, raw: object, what: str) -> list[ToolCall]:
        """A reply's calls; a damaged one is dropped (noted), its siblings kept."""
        from engine import ToolCall  # not at import: the store opens before the loading screen draws

        calls = []
        for entry in raw if isinstance(raw, list) else [None]:
            fields = (
                [entry.get(key) for key in ("name", "arguments", "id")] if isinstance(entry, dict) else []
            )
            if (
                len(fields) == 3
                and all(isinstance(f, str) for f in fields)
                and len(fields[1]) <= MESSAGE_LIMIT_CHARS
            ):
                name, arguments, call_id = fields
                calls.append(ToolCall(self._tool_text(name, what), arguments, self._tool_text(call_id, what)))
            else:
                self.repairs.append(f"{what}: a tool call is damaged and was dropped")
        return calls

    def settings(self, raw: object, what: str) -> ChatSettings:
        """Known fields of the right type; the rest take their defaults."""
        loaded = self._json(raw, what)
        if not isinstance(loaded, dict):
            if loaded is not None:
                self.repairs.append(f"{what} is not an object")
            return ChatSettings()
        defaults = ChatSettings()
        kept: dict[str, Any] = {}
        for field in fields(ChatSettings):
            if field.name in loaded and loaded[field.name] is not None:
                value = self._setting(loaded[field.name], getattr(defaults, field.name))
                if value is None:
                    self.repairs.append(f"{what}: {field.name} has the wrong type")
                else:
                    kept[field.name] = value
        if "model" in kept and (model := server_text(kept["model"], MODEL_ID_CHARS)) != kept["model"]:
            self.repairs.append(f"{what}: the model id was cleaned")
            kept["model"] = model
        return ChatSettings(**kept)

    @staticmethod
    def _setting(value: object, default: object) -> object | None:
        """`value` as the default's type, or None if it is not one (a None default: a list of names)."""
        if default is None:
            names = value if isinstance(value, list) and len(value) <= TOOL_SERVERS else None
            if names is None or not all(isinstance(n, str) and len(n) <= TOOL_NAME_CHARS for n in names):
                return None
            return [strip_control(n) for n in names]
        if isinstance(value, bool) or isinstance(default, bool):
            return None
        if isinstance(default, str):
            return strip_control(value[:MESSAGE_LIMIT_CHARS]) if isinstance(value, str) else None
        if isinstance(default, tuple):  # names (ChatSettings.chosen): their users look up only known ones
            texts = isinstance(value, list) and all(isinstance(v, str) for v in value)
            return tuple(value) if texts else None  # type: ignore[arg-type]
        if isinstance(default, int):
            return value if isinstance(value, int) else None
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
        return None

    def message_row(self, row: tuple[object, ...], what: str) -> ChatMessage | None:
        """A message row: role, content, time, stopped, cut, its place among its versions, their JSON,
        its tool fields' JSON."""
        role, content, created_at, stopped, cut, version, versions, tool = row
        message = self.message(role, content, created_at, stopped, tool, what)
        if message is not None:
            reader = VersionReader(self, what)
            loaded = self._json(versions, f"{what}'s versions")
            message.cut = cut == 1
            message.versions = [] if loaded is None else reader.versions(loaded)
            message.version = reader.place(version, message.versions)
        return message

    def replaced(self, raw: object, what: str) -> Version | None:
        """What an edit or a regenerate set aside ("null": nothing)."""
        loaded = self._json(raw, what)
        return None if loaded is None else VersionReader(self, what).version(loaded)

    def prompt_cache(self, raw: object, what: str) -> PromptCache:
        """Entries of (text, [int ids]); a damaged cache is dropped: it only saves re-tokenizing."""
        loaded = self._json(raw, what)
        return PromptCache() if loaded is None else self.cache_entries(loaded, what)

    def cache_entries(self, loaded: object, what: str) -> PromptCache:
        """A prompt cache from its parsed JSON (a list of [text, ids])."""
        entries = []
        for entry in loaded if isinstance(loaded, list) else [None]:
            if not (
                isinstance(entry, list)
                and len(entry) == 2
                and isinstance(entry[0], str)
                and isinstance(entry[1], list)
                and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in entry[1])
            ):
                self.repairs.append(f"{what} is damaged and was dropped")
                return PromptCache()
            entries.append((entry[0], entry[1]))
        return PromptCache(entries)

    def attachments(self, raw: object, what: str) -> list[Attachment]:
        """[{"name", "text"}] held for the next message, cleaned as a file read now would be; a
        damaged entry is dropped (noted), and at most HELD_ATTACHMENTS are kept."""
        loaded = self._json(raw, what)
        entries = loaded if isinstance(loaded, list) else [] if loaded is None else [None]
        held = []
        for entry in entries[:HELD_ATTACHMENTS]:
            name, text = (entry.get("name"), entry.get("text")) if isinstance(entry, dict) else (None, None)
            if not (isinstance(name, str) and isinstance(text, str)):
                self.repairs.append(f"{what}: an entry is damaged and was dropped")
                continue
            try:
                held.append(from_bytes(name[:NAME_LIMIT_CHARS], text.encode("utf-8", "replace")))
            except AttachmentError as exc:
                self.repairs.append(f"{what}: {exc}")
        if len(entries) > HELD_ATTACHMENTS:
            self.repairs.append(f"{what}: only the first {HELD_ATTACHMENTS} were kept")
        return held

    def _json(self, raw: object, what: str) -> object:
        """The parsed JSON, or None (noted) if it is not text, too long, or not JSON."""
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        if not isinstance(raw, str) or len(raw) > JSON_LIMIT_CHARS:
            self.repairs.append(f"{what} is not JSON text of at most {JSON_LIMIT_CHARS} characters")
            return None
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            self.repairs.append(f"{what} is not valid JSON")
            return None


def repairs_notice(repairs: list[str], shown: int = 3) -> str:
    """One line for the user: what was repaired (the first few), and that the rest loaded."""
    more = f" and {len(repairs) - shown} more" if len(repairs) > shown else ""
    return (
        f"Some saved data was damaged and was repaired or left out ({'; '.join(repairs[:shown])}{more}); "
        "everything else loaded."
    )
