"""One conversation on screen: transcript, status line, input, and the request it has in flight.

Tokens reach a pane by its fixed id: the engine thread posts `ChatPane.Streamed` to the chat
screen, which hands it to the pane with that id. Focus never decides where tokens go.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownStream

from app.conversation import ChatMessage, ChatSettings, Conversation
from app.export import conversation_markdown, export_name, last_code_block, write_text
from app.keys import key
from app.sanitize import strip_control
from app.screens.settings import SettingsScreen
from app.widgets.pane_status import PaneStatus
from app.widgets.prompt_input import PromptInput
from app.widgets.transcript import Transcript
from engine import Engine, EngineWorker, RequestSnapshot, StreamHandle, TokenEvent

# Snapshot phases as the status line names them.
PHASE_STATES = {"waiting": "queued", "preempted": "preempted", "prefill": "prefill", "decode": "decoding"}


@dataclass(frozen=True, slots=True)
class PaneContext:
    """What all panes share: the engine (tokenizer and context length only), its worker, a files dir."""

    engine: Engine
    worker: EngineWorker
    files_dir: Path


@dataclass(slots=True)
class Turn:
    """The request in flight: its prompt, what came back, and what of it is on screen."""

    handle: StreamHandle
    prompt: tuple[str, list[int]]
    reply: Markdown
    stream: MarkdownStream
    raw: str = ""
    ids: list[int] = field(default_factory=list)
    shown: str = ""


class ChatPane(Vertical):
    """A chat with the shared engine. Actions act on this pane only (Esc stops only this one)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        key("escape", "stop", "Stop", "Stop this pane's reply"),
        key("ctrl+r", "regenerate", "Regen", "Regenerate the last reply"),
        key("ctrl+s", "settings", "Settings", "Settings: system prompt and sampling of this pane"),
        key("ctrl+e", "edit_last", "Edit", "Edit the last message and send it again", show=False),
        key("ctrl+y", "copy_reply", "Copy", "Copy the last reply (also saved to a file)", show=False),
        key("ctrl+b", "copy_code", "Copy code", "Copy the last code block of the last reply", show=False),
        key("ctrl+o", "export", "Export", "Export this conversation to a Markdown file", show=False),
        key("ctrl+l", "clear", "Clear", "Clear: a new conversation in this pane (old one kept)", show=False),
    ]

    @dataclass
    class Streamed(Message):
        """A token event for the pane `pane_id`; posted from the engine thread."""

        pane_id: str
        event: TokenEvent

    @dataclass
    class Changed(Message):
        """The conversation changed in a way worth saving (turn ended, cleared, new settings)."""

        pane: ChatPane

    def __init__(self, conversation: Conversation, context: PaneContext, *, id: str) -> None:
        super().__init__(id=id)
        self.conversation = conversation
        self.context = context
        self.label = id.removeprefix("pane-")
        self.turn: Turn | None = None
        self.context_used = 0
        # Kept as attributes, not queried: engine events may still arrive while the pane is torn down.
        self.transcript = Transcript(*Transcript.widgets_for(conversation.messages))
        self.status = PaneStatus()
        self.prompt_input = PromptInput()

    def compose(self) -> ComposeResult:
        yield self.transcript
        yield self.status
        yield self.prompt_input

    def on_mount(self) -> None:
        self._measure_context()

    @property
    def busy(self) -> bool:
        return self.turn is not None

    def focus_input(self) -> None:
        self.prompt_input.focus()

    # ------------------------------------------------------------------ sending
    async def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        message.stop()
        await self.send(message.text)

    async def send(self, text: str) -> None:
        """Add a user message and start the reply; refused (text kept) while a reply streams."""
        if self.busy:
            self.notify("This pane is still replying: Esc stops it.", severity="warning")
            return
        self.prompt_input.clear()
        self.conversation.messages.append(ChatMessage("user", text))
        await self.transcript.add_user(text)
        self._update_title()
        await self._start_turn()

    async def _start_turn(self) -> None:
        engine = self.context.engine
        prompt = self.conversation.prompt_cache.build(engine.tokenizer, self.conversation.chat_messages())
        room = engine.max_model_len - len(prompt[1])
        if room < 1:
            await self._refuse_last(
                f"This message would not fit: the conversation needs {len(prompt[1])} tokens and the "
                f"model's context is {engine.max_model_len}. Shorten it, or clear the pane (ctrl+l)."
            )
            return
        params = self.conversation.settings.sampling_params(min(self.conversation.settings.max_tokens, room))
        reply = await self.transcript.add_reply()
        router, pane_id = self.screen, self.id or ""

        def forward(event: TokenEvent) -> None:  # engine thread: post only, never block
            router.post_message(ChatPane.Streamed(pane_id, event))

        handle = self.context.worker.submit(prompt[1], params, tag=pane_id, on_event=forward)
        self.turn = Turn(handle, prompt, reply, Markdown.get_stream(reply))
        self.context_used = len(prompt[1])
        self.status.show("queued")
        self._update_title()

    async def _refuse_last(self, notice: str) -> None:
        """Take back the last user message (into the input, if empty) and explain why."""
        message = self.conversation.messages.pop()
        if not self.prompt_input.text:
            self.prompt_input.text = message.content
        await self.transcript.show(self.conversation.messages)
        await self.transcript.add_notice(notice)
        self.status.show("error")

    # ------------------------------------------------------------------ streaming
    async def apply(self, event: TokenEvent) -> None:
        """Show one event of the current request; events of an older request are ignored."""
        turn = self.turn
        if turn is None or event.request_id != turn.handle.request_id:
            return
        turn.raw += event.text
        turn.ids.extend(event.token_ids)
        clean = strip_control(turn.raw)
        if clean.startswith(turn.shown):
            await turn.stream.write(clean[len(turn.shown) :])
        else:  # a control sequence completed across deltas: redraw the reply instead of appending
            await turn.stream.stop()
            await turn.reply.update(clean)
            turn.stream = Markdown.get_stream(turn.reply)
        turn.shown = clean
        self.context_used = len(turn.prompt[1]) + len(turn.ids)
        if event.finished:
            await self._finish(turn, event)
        elif self.status.state != "stopping":
            self.status.show("decoding", event.metrics)
        self._update_title()

    def apply_snapshot(self, request: RequestSnapshot) -> None:
        """Queue and prefill progress, which token events cannot tell (no tokens yet)."""
        turn = self.turn
        if turn is None or request.request_id != turn.handle.request_id or turn.ids:
            return
        if self.status.state != "stopping":
            self.status.show(
                PHASE_STATES.get(request.phase, request.phase),
                prefill=(request.computed_prompt_tokens, request.prompt_tokens),
            )

    async def _finish(self, turn: Turn, event: TokenEvent) -> None:
        self.turn = None
        await turn.stream.stop()
        if event.finish_reason == "error":
            await self._refuse_last(f"The engine refused this request: {event.error}")
            return
        if turn.shown:
            self.conversation.messages.append(ChatMessage("assistant", turn.shown))
            tokenizer = self.context.engine.tokenizer
            self.conversation.prompt_cache.remember(tokenizer, turn.prompt, turn.shown, turn.ids)
        else:
            await turn.reply.remove()
        self.status.show("stopped" if event.finish_reason == "abort" else "idle", event.metrics)
        self.post_message(self.Changed(self))

    # ------------------------------------------------------------------ actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Grey out what cannot run now, so the footer tells the truth."""
        if action == "stop":
            return True if self.busy else None
        if action in ("regenerate", "edit_last", "clear"):
            return None if self.busy else True
        return True

    def action_stop(self) -> None:
        if self.turn is not None:
            self.turn.handle.cancel()
            self.status.show("stopping")

    async def action_regenerate(self) -> None:
        messages = self.conversation.messages
        if self.busy or not messages:
            return
        if messages[-1].role == "assistant":
            messages.pop()
        await self.transcript.show(messages)
        await self._start_turn()

    async def action_edit_last(self) -> None:
        messages = self.conversation.messages
        last_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
        if self.busy or last_user is None:
            return
        self.prompt_input.text = messages[last_user].content
        del messages[last_user:]
        await self.transcript.show(messages)
        self._measure_context()
        self.prompt_input.focus()
        self.prompt_input.move_cursor(self.prompt_input.document.end)

    async def action_clear(self) -> None:
        if self.busy:
            return
        self.conversation = Conversation(settings=replace(self.conversation.settings))
        await self.transcript.show([])
        self._measure_context()
        self.status.show("idle")
        self.post_message(self.Changed(self))

    def action_settings(self) -> None:
        def apply(settings: ChatSettings | None) -> None:
            if settings is not None:
                self.conversation.settings = settings
                self._measure_context()
                self.post_message(self.Changed(self))

        self.app.push_screen(SettingsScreen(self.conversation.settings, self.label), apply)

    def action_copy_reply(self) -> None:
        self._copy(self.conversation.last_reply, "the last reply", "Nothing to copy yet.")

    def action_copy_code(self) -> None:
        code = last_code_block(self.conversation.last_reply or "")
        self._copy(code, "the last code block", "No code block in the last reply.")

    def action_export(self) -> None:
        path = write_text(
            self.context.files_dir / "exports",
            export_name(self.conversation),
            conversation_markdown(self.conversation),
        )
        self.notify(f"Exported to {path}", title="Export")

    # ------------------------------------------------------------------ helpers
    def _copy(self, text: str | None, what: str, missing: str) -> None:
        """OSC 52 cannot report success, so the text is always saved to a file as well."""
        if not text:
            self.notify(missing, severity="warning")
            return
        self.app.copy_to_clipboard(text)
        path = write_text(self.context.files_dir, "clipboard.txt", text)
        self.notify(f"Copied {what} (if your terminal allows OSC 52); also saved to {path}", title="Copy")

    def _measure_context(self) -> None:
        """Tokens the conversation fills now, so the meter is right before the next send."""
        chat, tokenizer = self.conversation, self.context.engine.tokenizer
        ids = chat.prompt_cache.build(tokenizer, chat.chat_messages())[1] if chat.messages else []
        self.context_used = len(ids)
        self._update_title()

    def _update_title(self) -> None:
        self.border_title = f"{self.label} · {self.conversation.title or 'new chat'}"
        self.border_subtitle = f"ctx {self.context_used}/{self.context.engine.max_model_len}"
