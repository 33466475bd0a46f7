"""A conversation as the app keeps it, and how its next prompt reuses the ids of the last turn.

Why reuse ids: a reply's generated ids are often not what re-tokenizing its text gives, so
re-encoding the whole chat every turn would change earlier tokens and miss the engine's prefix
cache. Keeping the exact ids the engine saw, with the text they stand for, makes turn N+1
prefill only its new tokens.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Protocol

from app.core.attachment import Attachment
from app.core.reply_parts import answer_text
from app.core.sanitize import strip_control
from engine import SamplingParams

if TYPE_CHECKING:
    from engine import ToolCall

TITLE_CHARS = 48
# The settings a reply samples with; on a server, those the user set are sent and only those.
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "max_tokens")


class ChatTokenizer(Protocol):
    """The part of `model.text.tokenizer.Tokenizer` a prompt needs."""

    stop_token_ids: frozenset[int]

    def render_chat(
        self, messages: Sequence[dict[str, str]], *, tools: Sequence[dict[str, Any]] | None = None
    ) -> str: ...
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...


@dataclass(slots=True)
class ChatSettings:
    """Per-conversation system prompt and sampling; defaults follow LFM2's model card.

    `preset` names where the sampling came from ("LFM2.5 card defaults", "custom"), for the pane's
    border; the CLI sets it from the checkpoint's card (model/text/model_cards.py). `model` is a
    server's model id (a pane may use its own); the local engine runs one model for all panes.
    `chosen`: the sampling fields the user set (flags, ctrl+s). A server is sent only these, the
    rest are its model's own defaults (vLLM reads the model's generation_config.json); the local
    engine runs every value. All of them by default: settings saved before, or made locally.
    """

    system_prompt: str = ""
    temperature: float = 0.3
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.15
    repetition_penalty: float = 1.05
    max_tokens: int = 512
    preset: str = ""
    model: str = ""  # on a server, the model this conversation asks for; "" = the server's default
    tool_servers: list[str] | None = None  # the MCP servers whose tools this pane offers; None: all
    chosen: tuple[str, ...] = SAMPLING_FIELDS

    def sampling_params(self, max_tokens: int | None = None) -> SamplingParams:
        """Engine parameters; raises SamplingParamsError naming a bad field."""
        return SamplingParams(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            max_tokens=self.max_tokens if max_tokens is None else max_tokens,
        )

    def offers(self, server: str) -> bool:
        return self.tool_servers is None or server in self.tool_servers

    def in_force(self, server: bool) -> str:
        """What the pane's border names as the sampling: the preset, or on a server its defaults and
        the values the user set over them."""
        if not server or self.chosen == SAMPLING_FIELDS:
            return self.preset
        values = ", ".join(f"{name} {getattr(self, name)}" for name in SAMPLING_FIELDS if name in self.chosen)
        return "server defaults" + (f" + {values}" if values else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ChatSettings:
        """Unknown keys (from a newer version) are ignored rather than fatal."""
        names = {f.name for f in fields(cls)}
        known = {k: v for k, v in raw.items() if k in names}
        if "chosen" in known:
            known["chosen"] = tuple(known["chosen"])
        return cls(**known)


@dataclass(slots=True)
class ChatMessage:
    """A message on the conversation's shown path. Regenerate and edit keep what they replace as
    `versions`: the other versions of this message, each with the messages that followed it. A reply
    that called tools keeps its calls (their ids tie each `tool` message to its call: a server wants
    them); a `tool` message is one call's result, named after the tool."""

    role: str  # "user" | "assistant" | "tool"
    content: str
    created_at: float = field(default_factory=time.time)
    stopped: bool = False  # a reply the user stopped (Esc): exports mark it
    cut: bool = False  # a reply that reached its token limit: continue extends it
    versions: list[Version] = field(default_factory=list)  # the other versions, oldest first
    version: int = 0  # this one's place among all of them: "2/3" is version 1 of 2 others + this
    tool_calls: list[ToolCall] = field(default_factory=list)  # an assistant's calls, as parsed
    tool_call_id: str = ""  # a tool message: the call it answers
    name: str = ""  # a tool message: the tool that ran

    def template_form(self) -> dict[str, str]:
        """The message as a chat template reads it. A reply's calls are in its text already (the
        model's own markers), so they are not listed twice."""
        if self.role == "tool":
            return {
                "role": "tool",
                "content": self.content,
                "tool_call_id": self.tool_call_id,
                "name": self.name,
            }
        return {"role": self.role, "content": self.content}

    def openai_form(self) -> dict[str, Any]:
        """The message as OpenAI's chat API takes it: a reply's calls as `tool_calls` beside its text
        without the call block, a tool message with the id of the call it answers."""
        if self.role == "tool":
            return {"role": "tool", "content": self.content, "tool_call_id": self.tool_call_id}
        if not self.tool_calls:
            return {"role": self.role, "content": self.content}
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in self.tool_calls
        ]
        return {"role": self.role, "content": answer_text(self.content) or None, "tool_calls": calls}


@dataclass(slots=True)
class PromptCache:
    """The ids the engine last computed for a conversation, as a chain of (text, ids) segments.

    Segments alternate: template text as it was encoded, then a reply as the ids the model
    generated, keyed by its text as stored (sanitized for display). Joined, the texts are the last
    prompt and reply, and the ids exactly what the engine saw. A chain, not one entry per turn: a
    regenerate, an edit or a fork that drops the last reply still matches every segment before it
    whole, so earlier replies are sent as generated, never re-encoded from their text.
    """

    entries: list[tuple[str, list[int]]] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        """The last prompt and reply, as the engine saw them."""
        return [token for _, ids in self.entries for token in ids]

    def copy(self) -> PromptCache:
        """An independent cache (a fork's): segments are replaced, never changed in place."""
        return PromptCache(list(self.entries))

    def build(
        self,
        tokenizer: ChatTokenizer,
        messages: Sequence[dict[str, str]],
        tools: Sequence[dict[str, Any]] | None = None,
        continue_last: bool = False,
    ) -> tuple[str, list[int]]:
        """(prompt text, prompt ids): the ids of every segment the render repeats whole, then of the
        first one it leaves, those that decode to a prefix of what the render kept of it, then the rest
        encoded. A render that leaves a segment part way is an edited message, or a template that
        strips past thinking from the previous reply. ``tools`` (OpenAI's function schemas) are listed
        by the template. `continue_last`: the last message is a reply cut at its token limit, appended
        as it is (no end of turn) for the model to extend: its ids are the last segment's, so nothing
        before the new tokens is read again."""
        rendered = messages[:-1] if continue_last else messages
        text = tokenizer.render_chat(rendered, tools=tools) if tools else tokenizer.render_chat(rendered)
        if continue_last:
            text += messages[-1]["content"]
        ids: list[int] = []
        at = 0
        for segment_text, segment_ids in self.entries:
            if text.startswith(segment_text, at):
                ids += segment_ids
                at += len(segment_text)
                continue
            if shared := _shared_start(segment_text, text[at:]):
                count, covered = _ids_within(tokenizer, segment_ids, text[at : at + shared])
                ids += segment_ids[:count]
                at += covered
            break
        return text, ids + (tokenizer.encode(text[at:]) if at < len(text) else [])

    def remember(
        self, tokenizer: ChatTokenizer, prompt: tuple[str, list[int]], reply: str, ids: list[int]
    ) -> None:
        """Record a finished turn: the segments its prompt repeated, the rest of the prompt as one
        segment, and the reply as the ids generated (stop included) keyed by the stored text."""
        text, prompt_ids = prompt
        kept: list[tuple[str, list[int]]] = []
        at = count = 0
        for segment_text, segment_ids in self.entries:
            end = count + len(segment_ids)
            if not (text.startswith(segment_text, at) and prompt_ids[count:end] == segment_ids):
                break
            kept.append((segment_text, segment_ids))
            at, count = at + len(segment_text), end
        if at < len(text) or count < len(prompt_ids):
            kept.append((text[at:], prompt_ids[count:]))
        if ids and ids[-1] in tokenizer.stop_token_ids:
            reply += tokenizer.decode(ids[-1:], skip_special_tokens=False)
        self.entries = [*kept, (reply, list(ids))]


@dataclass(slots=True)
class Version:
    """A version of a message that is not shown: it and the messages that followed it, and the ids
    the engine last saw for that path, so showing it again sends them and hits the prefix cache."""

    messages: list[ChatMessage]
    prompt_cache: PromptCache = field(default_factory=PromptCache)


def _shared_start(a: str, b: str) -> int:
    """Length of the longest common prefix of a and b (binary search: slices compare in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _ids_within(tokenizer: ChatTokenizer, ids: list[int], text: str) -> tuple[int, int]:
    """(n, length): the most leading ids whose decoded text is a prefix of `text`, and that text's length.

    Binary search: a cut inside a multi-byte character decodes to U+FFFD and is not a prefix, which
    may stop the search a token early; the result is still exact, only a token less is reused.
    """
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if text.startswith(tokenizer.decode(ids[:mid], skip_special_tokens=False)):
            lo = mid
        else:
            hi = mid - 1
    return lo, len(tokenizer.decode(ids[:lo], skip_special_tokens=False))


@dataclass(slots=True)
class Conversation:
    """What is persisted: messages, settings, timestamps, the user's name for it, the unsent draft
    and the attachments held for it, and the prompt ids the engine last saw (so a relaunch neither
    re-tokenizes nor misses the prefix cache). `id` is None until first saved."""

    messages: list[ChatMessage] = field(default_factory=list)
    settings: ChatSettings = field(default_factory=ChatSettings)
    id: int | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    name: str = ""  # set by rename in History; otherwise the title is the first message
    draft: str = ""
    prompt_cache: PromptCache = field(default_factory=PromptCache)
    attachments: list[Attachment] = field(default_factory=list)  # held for the next message
    replaced: Version | None = None  # set aside by a regenerate or an edit: see app/core/versions.py

    @property
    def title(self) -> str:
        """One line of plain text (no controls): the name, or the start of the first user message."""
        first = self.name or next((m.content for m in self.messages if m.role == "user"), "")
        line = " ".join(strip_control(first).split())
        return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"

    @property
    def last_reply(self) -> str | None:
        return next((m.content for m in reversed(self.messages) if m.role == "assistant"), None)

    def fork(self, end: int, draft: str = "") -> Conversation:
        """A new conversation with the first `end` messages, the same settings and the ids the engine
        saw (so its first turn is served from the prefix cache), named after this one."""
        servers = self.settings.tool_servers  # a list of its own: choosing servers there leaves these
        return Conversation(
            [replace(m, tool_calls=list(m.tool_calls)) for m in self.messages[:end]],
            replace(self.settings, tool_servers=None if servers is None else list(servers)),
            name=f"fork of {self.title or 'new chat'}",
            draft=draft,
            prompt_cache=self.prompt_cache.copy(),
        )

    def chat_messages(self, openai: bool = False) -> list[dict[str, Any]]:
        """The messages in chat-template form (`openai`: in OpenAI's API form), system prompt first
        when there is one."""
        chat = [m.openai_form() if openai else m.template_form() for m in self.messages]
        system = self.settings.system_prompt
        return [{"role": "system", "content": system}, *chat] if system else chat
