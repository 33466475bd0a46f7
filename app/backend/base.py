"""What a backend is to the app: submit a conversation, stream events, cancel, snapshot, close.

Events reach the app on the backend's own thread through `on_event`, exactly as the engine's
worker delivers them: the engine's TokenEvent, which the remote backend builds from a server's
stream (with what a server can tell: text, usage figures, no token ids and no prefill progress),
so a pane's inbox works unchanged for either backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from app.core.conversation import ChatSettings, Conversation

if TYPE_CHECKING:
    from app.backend.server_metrics import ServerSnapshot
    from engine import EngineSnapshot, Structure, TokenEvent


OnEvent = Callable[["TokenEvent"], None]


@dataclass(frozen=True, slots=True)
class Prompt:
    """A conversation ready to submit: its messages, and where the backend tokenizes on our side
    (local) the rendered text and the exact ids; `ids` is None when only the server can count."""

    messages: list[dict[str, str]]
    text: str = ""
    ids: list[int] | None = field(default=None)
    estimated_tokens: int | None = None  # without ids: the client's guess, never used to refuse
    tools: list[dict[str, Any]] | None = None  # the functions offered, in OpenAI's shape
    continues: bool = False  # the last message is a reply cut short, which the model extends
    tool_choice: str = "auto"  # "required": the reply must call one (locally a structure forces it)

    @property
    def tokens(self) -> int | None:
        return None if self.ids is None else len(self.ids)

    @property
    def count(self) -> tuple[int | None, bool]:
        """(tokens, estimated): the exact count when the ids are known, else the guess."""
        return (len(self.ids), False) if self.ids is not None else (self.estimated_tokens, True)


class Stream(Protocol):
    """A submitted request: cancel ends it with a final "abort" event (or none, once finished)."""

    @property
    def request_id(self) -> str: ...
    def cancel(self) -> None: ...


class Backend(Protocol):
    """What generates. `max_model_len` None: unknown (a server that does not say)."""

    model_name: str
    title: str  # the chat screen's title bar
    architecture: str | None  # what the model is, for the dashboard ("LFM2-MoE · 4/32 experts per token")
    max_model_len: int | None
    warning: str | None  # shown once when the chat screen opens (e.g. slow kernels)
    per_pane_model: bool  # a pane's settings.model picks its model (a server's); else model_name for all
    server_sampling: bool  # only the sampling a user chose is sent; the rest is the server's own

    def prepare(
        self,
        conversation: Conversation,
        tools: list[dict[str, Any]] | None = None,
        continue_last: bool = False,
    ) -> Prompt:
        """Blocking (a Hub chat template can be slow): call off the UI thread. ValueError: the
        template refused the conversation. ``tools``: the functions the reply may call (OpenAI's
        ``{"type": "function", "function": {...}}``), listed by the template or sent as ``tools``.
        ``continue_last``: the prompt ends with the last reply as it is, for the model to extend."""
        ...

    def submit(
        self,
        prompt: Prompt,
        settings: ChatSettings,
        max_tokens: int,
        tag: str,
        on_event: OnEvent,
        structure: Structure | None = None,
    ) -> Stream:
        """Never blocks, never raises for a bad request: that is one final "error" event. ``structure``:
        what the reply must match (a JSON schema for `lfm-chat -p --json-schema`)."""
        ...

    def remember(self, conversation: Conversation, prompt: Prompt, reply: str, ids: list[int]) -> None:
        """A turn ended with `reply` shown: keep what lets the next prompt reuse this one's ids."""
        ...

    def snapshot(self) -> EngineSnapshot | ServerSnapshot | None:
        """The latest dashboard figures (cheap, any thread): an EngineSnapshot or a ServerSnapshot."""
        ...

    def close(self) -> None:
        """Stop everything in flight (each stream gets its final event) and release the backend."""
        ...
