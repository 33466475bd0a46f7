"""Message versions in the store: each message row holds its hidden versions as one JSON column
(each version its messages, nested the same way, and its prompt ids), and a conversation the path an
edit or a regenerate set aside.

The shown path stays plain rows, so History, search and titles read it as before. What comes back
from the file is untrusted: read here through the row checker (texts cut, roles checked, numbers
finite), bounded in nesting and in the messages it may hold; a damaged version is left out, noted.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from app.core.conversation import ChatMessage, PromptCache, Version
from app.store.tool_fields import tool_json

MAX_DEPTH = 64  # versions inside versions; lfm-chat nests one level per position with versions
MAX_HIDDEN_MESSAGES = 100_000  # in all the hidden versions of one message row


def versions_json(versions: list[Version]) -> str:
    return json.dumps([_version(v) for v in versions])


def replaced_json(replaced: Version | None) -> str:
    return json.dumps(None if replaced is None else _version(replaced))


def _version(version: Version) -> dict[str, Any]:
    return {"messages": [_message(m) for m in version.messages], "prompt_cache": version.prompt_cache.entries}


def _message(m: ChatMessage) -> dict[str, Any]:
    return {
        "role": m.role,
        "content": m.content,
        "created_at": m.created_at,
        "stopped": m.stopped,
        "cut": m.cut,
        "version": m.version,
        "versions": [_version(v) for v in m.versions],
        "tool": tool_json(m),
    }


class Checker(Protocol):
    """What the reader asks of the store's row checker (app/store/rows.py, which uses this reader)."""

    repairs: list[str]

    def message(
        self, role: object, content: object, created_at: object, stopped: object, tool: object, what: str
    ) -> ChatMessage | None: ...

    def cache_entries(self, loaded: object, what: str) -> PromptCache: ...


class VersionReader:
    """Versions parsed from JSON, checked as the rows are; repairs go to the checker's list."""

    def __init__(self, check: Checker, what: str) -> None:
        self.check = check
        self.what = what
        self.left = MAX_HIDDEN_MESSAGES
        self.damaged = False

    def versions(self, loaded: object, depth: int = 0) -> list[Version]:
        if not isinstance(loaded, list) or depth > MAX_DEPTH:
            self._damaged()
            return []
        return [v for entry in loaded if (v := self.version(entry, depth)) is not None]

    def version(self, loaded: object, depth: int = 0) -> Version | None:
        """A version with at least one message, or None (noted)."""
        entries = loaded.get("messages") if isinstance(loaded, dict) else None
        if not isinstance(loaded, dict) or not isinstance(entries, list) or not entries:
            self._damaged()
            return None
        messages = [m for entry in entries if (m := self.message(entry, depth)) is not None]
        if not messages:
            return None
        cache = self.check.cache_entries(loaded.get("prompt_cache"), f"{self.what}'s versions")
        return Version(messages, cache)

    def message(self, loaded: object, depth: int) -> ChatMessage | None:
        if self.left <= 0 or not isinstance(loaded, dict):
            self._damaged()
            return None
        self.left -= 1
        message = self.check.message(
            loaded.get("role"),
            loaded.get("content"),
            loaded.get("created_at"),
            int(loaded.get("stopped") is True),
            loaded.get("tool", ""),
            f"{self.what}'s versions",
        )
        if message is None:
            return None
        message.cut = loaded.get("cut") is True
        message.versions = self.versions(loaded.get("versions", []), depth + 1)
        message.version = self.place(loaded.get("version", 0), message.versions)
        return message

    def place(self, version: object, versions: list[Version]) -> int:
        """The shown one's place among its versions; the newest when it is not one (some were left out)."""
        if isinstance(version, int) and not isinstance(version, bool) and 0 <= version <= len(versions):
            return version
        self._damaged()
        return len(versions)

    def _damaged(self) -> None:
        if not self.damaged:
            self.damaged = True
            self.check.repairs.append(f"{self.what}'s versions are damaged: some were left out")
