"""One conversation on screen: transcript, status line, input, and the request it has in flight.

Tokens reach a pane by the pane object itself: the backend's thread puts events in the pane's
inbox, which wakes the pane. Focus never decides where tokens go.

What is saved when: the user's message before its request is submitted, the reply so far
every `PARTIAL_SAVE_SECONDS` while it streams, the finished turn, and the draft a moment after
typing stops. A crash therefore loses at most the last seconds of a reply and of a draft.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.timer import Timer
from textual.widgets import TextArea

from app.attachment import Attachment, AttachmentError, file_command, from_text, read_file, with_attachments
from app.backend.base import Prompt, StreamEvent
from app.conversation import ChatMessage, ChatSettings, Conversation
from app.export import last_code_block
from app.keys import PANE_KEYS, key_named
from app.pane_attachments import PaneAttachments, measure
from app.pane_context import PaneContext
from app.reply_parts import answer_text
from app.sanitize import for_display, strip_control
from app.screens.attach import AttachScreen
from app.screens.settings import SettingsScreen
from app.share import copy_out, export_out
from app.turn import Turn
from app.widgets.pane_status import PaneStatus
from app.widgets.prompt_input import PromptInput
from app.widgets.reply import Reply
from app.widgets.token_inbox import TokenInbox
from app.widgets.transcript import Transcript, copy_text

if TYPE_CHECKING:
    from engine import RequestSnapshot

# Snapshot phases as the status line names them.
PHASE_STATES = {"waiting": "queued", "preempted": "preempted", "prefill": "prefill", "decode": "decoding"}
PARTIAL_SAVE_SECONDS = 1.0
DRAFT_SAVE_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class PreparedTurn:
    """A turn ready to submit: its prompt, its token allowance, and the reply widget it streams into."""

    prompt: Prompt
    max_tokens: int
    reply: Reply


class ChatPane(Vertical):
    """A chat with the shared backend. Actions act on this pane only (Esc stops only this one)."""

    BINDINGS: ClassVar[list[BindingType]] = PANE_KEYS

    class Woken(Message):
        """Token events are waiting in the pane's inbox (posted from the backend's thread)."""

    @dataclass
    class Forked(Message):
        """A fork of this pane's conversation, for the screen to open beside it."""

        pane: ChatPane
        conversation: Conversation

    @dataclass
    class Broadcast(Message):
        """A message typed in this pane, for the screen to send to the marked panes (else all)."""

        pane: ChatPane
        text: str

    @dataclass
    class ModelWanted(Message):
        """The user asked to switch model from this pane (the app decides: one engine, or a server)."""

        pane: ChatPane

    def __init__(self, conversation: Conversation, context: PaneContext, *, id: str) -> None:
        super().__init__(id=id)
        self.conversation = conversation
        self.context = context
        self.label = id.removeprefix("pane-")
        self.marked = False  # a target of broadcasts
        self.turn: Turn | None = None
        self._starting = False  # the prompt is rendering off the UI thread; not sendable meanwhile
        self._finishing = False  # a finished reply's transcript is being settled; likewise
        self.context_used: int | None = 0
        self.context_estimated = False  # context_used is the client's guess (a server counts)
        self.attachments = PaneAttachments.holding(conversation.attachments)  # for the next message
        self.inbox = TokenInbox(lambda: self.post_message(self.Woken()))
        self._draft_timer: Timer | None = None
        self._frame_timer: Timer | None = None  # the next frame, while the pacer says wait
        self._drawn_at = 0.0
        # Kept as attributes, not queried: backend events may still arrive while the pane is torn down.
        self.transcript = Transcript(conversation.messages)
        self.status = PaneStatus()
        self.prompt_input = PromptInput(self._sent_texts, self._refusal, context.pacer.key_pressed)

    def compose(self) -> ComposeResult:
        yield self.transcript
        yield self.status
        yield self.prompt_input

    async def on_mount(self) -> None:
        self.prompt_input.restore(strip_control(self.conversation.draft))
        self.show_model()
        await self.measure_context()
        await self._count_restored_attachments()

    @property
    def busy(self) -> bool:
        return self.turn is not None or self._starting or self._finishing

    @property
    def empty(self) -> bool:
        """Nothing to lose by showing another conversation here: no messages, nothing typed."""
        return not self.busy and not self.conversation.messages and not self.prompt_input.text.strip()

    async def open_conversation(self, conversation: Conversation) -> None:
        """Show `conversation` here instead of the current one (which stays saved as it is). What is
        typed in the box stays unless `conversation` brings a draft of its own."""
        self.conversation = conversation
        await self.transcript.show(conversation.messages)
        if conversation.draft:
            self.prompt_input.restore(strip_control(conversation.draft))
        if conversation.attachments:
            self.attachments = PaneAttachments.holding(conversation.attachments)
        self._held_changed()
        self.status.reset()
        await self.measure_context()
        await self._count_restored_attachments()
        self._persist()

    def focus_input(self) -> None:
        self.prompt_input.focus()

    def relabel(self, label: str, force: bool = False) -> None:
        """Panes are numbered by position: closing pane 2 of 3 makes pane 3 the new 2."""
        if force or label != self.label:
            self.label = label
            self._update_title()

    def _sent_texts(self) -> list[str]:
        return [strip_control(m.content) for m in self.conversation.messages if m.role == "user"]

    def _refusal(self) -> str | None:
        return "This pane is still replying: Esc stops it." if self.busy else None

    # ------------------------------------------------------------------ sending
    async def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        message.stop()
        path = file_command(message.text)
        if path is None:
            await self.send(message.text)
        elif not path:
            dropped = self.attachments.take()
            self.notify("Attachments dropped." if dropped else "Nothing is attached.", severity="warning")
            self._held_changed()
            self._persist()
        elif not await self.attach_file(path):
            self.prompt_input.give_back(message.text)  # to fix the path

    async def on_prompt_input_paste_offered(self, message: PromptInput.PasteOffered) -> None:
        message.stop()
        await self.attach(from_text("pasted text", message.text))

    async def attach_file(self, path: str) -> bool:
        """Read the file off the UI thread (a slow disk must not freeze it) and attach it."""
        try:
            attachment = await asyncio.to_thread(read_file, path)
        except AttachmentError as exc:
            self.notify(str(exc), severity="warning", timeout=10, markup=False)
            return False
        return await self.attach(attachment)

    async def attach(self, attachment: Attachment) -> bool:
        """Count it against the context left and hold it for the next message, or say why not."""
        backend, held = self.context.backend, self.attachments.attachments
        measured = await asyncio.to_thread(measure, backend, self.conversation, held, attachment)
        limit = backend.max_model_len
        if (refusal := self.attachments.add(attachment, measured, limit)) is not None:
            self.notify(refusal, severity="warning", timeout=10, markup=False)
            return False
        self.notify(self.attachments.notice(limit, measured), timeout=10, markup=False)
        self._held_changed()
        self._persist()
        return True

    async def send(self, text: str) -> None:
        """Add a user message, save it, and start the reply; refused (text given back) while busy."""
        if await self.take_message(text):
            await self._start_turn()

    async def take_message(self, text: str) -> bool:
        """Add a user message and save it; False (text given back) while busy."""
        if self.busy:  # a second Enter got in before the first turn started
            self.prompt_input.give_back(text)
            self.notify("This pane is still replying: Esc stops it.", severity="warning")
            return False
        text = with_attachments(text, self.attachments.take())
        self._held_changed()
        self.conversation.messages.append(ChatMessage("user", text))
        self.conversation.draft = self.prompt_input.text
        self._persist()
        await self.transcript.add_user(text)
        self._update_title()
        return True

    async def _start_turn(self) -> None:
        if (prepared := await self.prepare_turn()) is not None:
            self.start_turn(prepared)

    async def prepare_turn(self) -> PreparedTurn | None:
        """Everything before the request: the prompt built and checked against the context, and the
        empty reply that will show it; None (with a notice) if it cannot be sent. The pane stays busy
        until `start_turn`, so no second message slips in meanwhile."""
        self._starting = True
        prepared = None
        try:
            prepared = await self._prepare()
        finally:
            self._starting = prepared is not None
        return prepared

    async def _prepare(self) -> PreparedTurn | None:
        prompt = await self._build_prompt()
        if prompt is None:
            return None
        settings, limit, used = self.conversation.settings, self.context.backend.max_model_len, prompt.tokens
        room = settings.max_tokens if limit is None or used is None else limit - used
        if room < 1:
            await self._refuse_last(
                f"This message would not fit: the conversation needs {used} tokens and the "
                f"model's context is {limit}. Shorten it, or clear the pane "
                f"({key_named(self.app, PANE_KEYS, 'clear')})."
            )
            return None
        return PreparedTurn(prompt, min(settings.max_tokens, room), await self.transcript.add_reply())

    def start_turn(self, prepared: PreparedTurn) -> None:
        """Submit a prepared turn. Not async: a broadcast submits all its panes' turns without
        yielding, so they reach the engine together and run in one batch."""
        self._starting = False
        settings = self.conversation.settings
        handle = self.context.backend.submit(
            prepared.prompt, settings, prepared.max_tokens, self.id, self.inbox.put
        )
        self.turn = Turn(handle, prepared.prompt, prepared.reply)
        self.context_used, self.context_estimated = prepared.prompt.count
        self.status.show("queued")
        self._update_title()

    async def _build_prompt(self) -> Prompt | None:
        """Render and tokenize off the UI thread (a Hub template can be slow or raise); a template
        error takes the message back and says why."""
        try:
            return await asyncio.to_thread(self.context.backend.prepare, self.conversation)
        except ValueError as exc:  # the tokenizer's ChatTemplateError: a raising or runaway template
            await self._refuse_last(f"The model's chat template refused this conversation: {exc}")
            return None

    async def _refuse_last(self, notice: str) -> None:
        """Take back the last user message (into the input) and explain why."""
        self._take_back_last()
        await self._explain_refusal(notice)

    def _take_back_last(self) -> None:
        message = self.conversation.messages.pop()
        self.prompt_input.give_back(message.content)
        self.conversation.draft = self.prompt_input.text
        self._persist()
        self.status.show("error")

    async def _explain_refusal(self, notice: str) -> None:
        await self.transcript.show(self.conversation.messages)
        await self.transcript.add_notice(notice)

    # ------------------------------------------------------------------ streaming
    def on_chat_pane_woken(self, message: Woken) -> None:
        """Draw what arrived at the frame the pacer gives (app/widgets/frame_pacer.py): the inbox
        wakes the pane only when it was empty, so nothing arriving meanwhile is missed."""
        message.stop()
        if self._frame_timer is None:
            self._frame_timer = self.set_timer(
                self.context.pacer.until_frame(self._drawn_at), self._draw_frame
            )

    async def _draw_frame(self) -> None:
        """Draw, unless keys arrived since the frame was planned: then wait for the typing to pause."""
        if (hold := self.context.pacer.hold(self._drawn_at)) > 0:
            self._frame_timer = self.set_timer(hold, self._draw_frame)
            return
        self._frame_timer = None
        self._drawn_at = time.monotonic()
        await self.apply(self.inbox.take())

    async def apply(self, events: list[StreamEvent]) -> None:
        """Show the events of the current request, drawn once; events of older requests are ignored."""
        turn = self.turn
        if turn is None or not (mine := turn.take(events)):
            return
        for notice in (e.notice for e in mine if e.notice):
            await self.transcript.add_notice(notice, before=turn.reply)
        await turn.reply.update(turn.raw)
        if turn is not self.turn:  # settled while it drew (a model switch, a close): its status is set
            return
        last = mine[-1]
        self.context_used, self.context_estimated = turn.context_used(last)
        if last.finished:
            await self._finish(turn, last)
        else:
            if self.status.state != "stopping":
                self.status.show("decoding", last.metrics)
            if time.monotonic() - turn.saved_at >= PARTIAL_SAVE_SECONDS:
                turn.saved_at = time.monotonic()
                self._persist(turn.reply.source)
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

    async def _finish(self, turn: Turn, event: StreamEvent) -> None:
        """The conversation, the status and the save change before the first await, so a quit
        meanwhile loses nothing; the pane stays busy until the transcript is settled, so a message
        sent meanwhile cannot land above this reply or have its status overwritten."""
        self.turn = None
        self._finishing = True
        try:
            if event.finish_reason == "error" and not turn.reply.source:
                self._take_back_last()
                await turn.reply.finish()
                await self._explain_refusal(f"This request was refused: {event.error}")
                return
            turn.keep(self.conversation, self.context.backend, stopped=event.finish_reason == "abort")
            self.status.show(
                {"abort": "stopped", "error": "error"}.get(event.finish_reason or "", "idle"), event.metrics
            )
            self._persist()
            await turn.reply.finish()
            if event.finish_reason == "error":  # a connection lost mid-reply: what came is kept
                await self.transcript.add_notice(f"The reply above is incomplete: {event.error}")
            if not turn.reply.source:
                await turn.reply.remove()
        finally:
            self._finishing = False

    async def settle(self) -> None:
        """For a pane going away or a quit: stop the request now, keep what it streamed and the
        draft, and save. The turn is detached first, so its final (abort) event is ignored."""
        turn, self.turn = self.turn, None
        if turn is not None:
            turn.handle.cancel()
            await turn.reply.finish()
            turn.keep(self.conversation, self.context.backend, stopped=True)
        self.conversation.draft = self.prompt_input.text
        self._persist()

    async def stop_for_switch(self) -> None:
        """The model is being switched: a reply in flight ends here, kept as far as it got and
        marked stopped (settle saves it)."""
        was_busy = self.turn is not None
        await self.settle()
        if was_busy:
            self.status.show("stopped")
            await self.transcript.add_notice("The reply above was stopped to switch the model.")

    @property
    def model(self) -> str:
        """The model this pane's requests ask for."""
        backend = self.context.backend
        return (backend.per_pane_model and self.conversation.settings.model) or backend.model_name

    def show_model(self) -> None:
        """The status line names the pane's model where panes may differ (a server)."""
        self.status.model = self.model if self.context.backend.per_pane_model else ""
        self.status.show(self.status.state)

    def use_model(self, model_id: str) -> None:
        """On a server: this pane's next requests ask for `model_id`; saved with the conversation."""
        self.conversation.settings.model = model_id
        self.show_model()
        self._persist()

    # ------------------------------------------------------------------ saving
    def _persist(self, partial_reply: str = "") -> None:
        self.context.persist(self.conversation, partial_reply)

    def _held_changed(self) -> None:
        """The conversation keeps what the pane holds, so a quit or crash keeps it like the draft."""
        self.conversation.attachments = self.attachments.attachments
        self._update_title()

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        """Save the draft once typing pauses, so a crash does not take it either."""
        if event.text_area is not self.prompt_input:
            return
        if self._draft_timer is not None:
            self._draft_timer.stop()
        self._draft_timer = self.set_timer(DRAFT_SAVE_SECONDS, self._save_draft)

    def _save_draft(self) -> None:
        if self.prompt_input.text != self.conversation.draft:
            self.conversation.draft = self.prompt_input.text
            self._persist(self.turn.reply.source if self.turn else "")

    # ------------------------------------------------------------------ actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Grey out what cannot run now, so the footer tells the truth."""
        if action == "stop":
            return True if self.busy or self.transcript.selected else None
        if action in ("regenerate", "edit_last", "clear"):
            return None if self.busy else True
        return True

    def action_stop(self) -> None:
        if self.turn is not None:
            self.turn.handle.cancel()
            self.status.show("stopping")
        else:
            self.transcript.select(None)

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
        self.prompt_input.text = strip_control(messages[last_user].content)
        del messages[last_user:]
        await self.transcript.show(messages)
        await self.measure_context()
        self.prompt_input.focus()
        self.prompt_input.move_cursor(self.prompt_input.document.end)

    async def action_clear(self) -> None:
        if not self.busy:
            await self.open_conversation(Conversation(settings=replace(self.conversation.settings)))

    def action_settings(self) -> None:
        async def apply(settings: ChatSettings | None) -> None:
            if settings is not None:  # the form does not edit the model: it stays
                self.conversation.settings = replace(settings, model=self.conversation.settings.model)
                await self.measure_context()  # also retitles: the preset may now be "custom"
                self._persist()

        self.app.push_screen(SettingsScreen(self.conversation.settings, self.label), apply)

    def action_attach_file(self) -> None:
        async def attach(path: str | None) -> None:
            if path:
                await self.attach_file(path)

        self.app.push_screen(AttachScreen(self.label), attach)

    def action_fork(self) -> None:
        """Fork through the selected message, else the whole chat. A fork never ends on a user
        message: that message goes to the fork's input instead, to be sent (or edited) there."""
        messages = self.conversation.messages
        selected = self.transcript.selected_message()
        end = len(messages) if selected is None else min(selected + 1, len(messages))
        draft = ""
        if end and messages[end - 1].role == "user":
            end, draft = end - 1, messages[end - 1].content
        if not end and not draft:
            self.notify("Nothing to fork yet: send a message first.", severity="warning")
            return
        self.transcript.select(None)
        self.post_message(self.Forked(self, self.conversation.fork(end, strip_control(draft))))

    def action_mark(self) -> None:
        self.marked = not self.marked
        self.set_class(self.marked, "-marked")
        self._update_title()

    def action_broadcast(self) -> None:
        if text := self.prompt_input.take():
            self.post_message(self.Broadcast(self, text))
        else:
            self.notify("Type the message to broadcast in this pane's input first.", severity="warning")

    def action_pick_model(self) -> None:
        self.post_message(self.ModelWanted(self))

    def action_toggle_thinking(self) -> None:
        if not any(reply.has_thinking for reply in self.transcript.replies):
            self.notify("No thinking to show: no reply in this pane has any.", severity="warning")
            return
        self.transcript.set_thinking_shown(not self.transcript.show_thinking)

    def action_select(self, step: int) -> None:
        if self.transcript.move_selection(step) is None:
            self.notify("Nothing to select yet.", severity="warning")

    def action_page(self, pages: int) -> None:
        self.transcript.page(pages)

    def action_jump(self, to_end: int) -> None:
        self.transcript.jump(bool(to_end))

    def action_copy(self) -> None:
        selected = self.transcript.selected
        files_dir = self.context.files_dir
        if selected is not None:
            copy_out(self, files_dir, copy_text(selected), "the selection", "The selection is empty.")
        else:
            reply = answer_text(self.conversation.last_reply or "")
            copy_out(self, files_dir, reply, "the last reply", "Nothing to copy yet.")

    def action_copy_code(self) -> None:
        code = last_code_block(answer_text(self.conversation.last_reply or ""))
        missing = "No code block in the last reply."
        copy_out(self, self.context.files_dir, code, "the last code block", missing)

    def action_export(self) -> None:
        export_out(self, self.context.files_dir, self.conversation, self.context.backend.model_name)

    # ------------------------------------------------------------------ helpers
    async def measure_context(self) -> None:
        """Tokens the conversation fills now (system prompt included), so the meter is right before
        the next send; '?' when the template cannot render it."""
        chat = self.conversation
        if not chat.messages and not chat.settings.system_prompt:
            self.context_used, self.context_estimated = 0, False
        else:
            try:
                prompt = await asyncio.to_thread(self.context.backend.prepare, chat)
            except ValueError:
                self.context_used = None
            else:
                self.context_used, self.context_estimated = prompt.count
        self._update_title()

    async def _count_restored_attachments(self) -> None:
        """Count attachments restored with a conversation as they were counted when attached, so the
        border shows their tokens again. Dropped if the held list changes meanwhile."""
        held = list(self.attachments.held)
        counted: list[tuple[Attachment, int | None]] = []
        for attachment, tokens in held:
            if tokens is None:
                before = [a for a, _ in counted]
                measured = await asyncio.to_thread(
                    measure, self.context.backend, self.conversation, before, attachment
                )
                tokens = None if measured is None else measured.tokens
            counted.append((attachment, tokens))
        if self.attachments.held == held and counted != held:
            self.attachments.held = counted
            self._update_title()

    def _update_title(self) -> None:
        """Plain text, never markup: the title is the user's own first message."""
        mark = "● " if self.marked else ""
        title = for_display(self.conversation.title) or "new chat"
        self.border_title = Content(f"{mark}{self.label} · {title}")
        used = "?" if self.context_used is None else f"{'~' * self.context_estimated}{self.context_used}"
        limit = self.context.backend.max_model_len or "?"
        preset = self.conversation.settings.preset
        held = self.attachments.summary()
        self.border_subtitle = Content(
            f"ctx {used}/{limit}" + (f" · {preset}" if preset else "") + (f" · {held}" if held else "")
        )
