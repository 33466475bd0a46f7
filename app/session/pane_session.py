"""One pane's conversation and the request it has in flight, in plain Python (no Textual).

The whole turn lifecycle lives here: a message is taken and saved, its prompt prepared and
checked against the context, the request submitted to the Backend, its events applied as they
arrive, and the turn finished (or settled, when the pane goes away) with the reply kept and saved.
Retries, edits, forks and attachments change the conversation here too. The view
(app/session/view.py) is told what changed and draws it; a test drives a session with no screen.

Events reach the session by the session itself: the backend's thread puts them in its inbox, which
wakes the view, which applies them at its next frame. Focus never decides where tokens go. They are
the request's one feed: its tokens, and before the first of them its phase (queued, prefill with
its progress, preempted), which the engine's worker sends as events of their own.

What is saved when: the user's message before its request is submitted, the reply so far every
`PARTIAL_SAVE_SECONDS` while it streams, the finished turn, and the draft when the view hands it
over. A crash therefore loses at most the last seconds of a reply and of a draft.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from app.backend.base import Backend, Prompt
from app.core.attachment import Attachment, AttachmentError, file_command, read_file, with_attachments
from app.core.conversation import ChatMessage, ChatSettings, Conversation
from app.core.sanitize import strip_control
from app.core.versions import (
    bring_back,
    flip,
    forget_ids,
    last_with_versions,
    set_aside,
    take_back,
    take_place,
)
from app.session.attachments import PaneAttachments
from app.session.context import SessionContext
from app.session.inbox import TokenInbox
from app.session.tool_loop import ToolLoop
from app.session.tools import Approval, PaneTools
from app.session.turn import PreparedTurn, Turn
from app.session.view import PaneView

if TYPE_CHECKING:
    from engine import RequestMetrics, TokenEvent, ToolCall

# The phases before a request's first token (TokenEvent.phase), as the status line names them.
PHASE_STATES = {"waiting": "queued", "preempted": "preempted", "prefill": "prefill"}
FINISHED_STATES = {"abort": "stopped", "error": "error", "length": "cut"}  # others leave it idle
PARTIAL_SAVE_SECONDS = 1.0
STILL_REPLYING = "This pane is still replying: Esc stops it."
FORK_MID_REPLY = "This pane is still replying: fork once the reply ends, or Esc stops it to fork what came."


@dataclass(frozen=True, slots=True)
class Fork:
    """What a fork takes into its new pane: the conversation, and the tools the user let this pane
    run without asking (its choice of servers is in the conversation's settings)."""

    conversation: Conversation
    tools: PaneTools


class PaneSession(ToolLoop):
    """A conversation with the shared backend; everything here acts on this conversation only."""

    def __init__(
        self,
        conversation: Conversation,
        context: SessionContext,
        view: PaneView,
        tag: str,
        tools: PaneTools | None = None,
    ) -> None:
        self.conversation = conversation
        self.tag = tag  # what the backend's snapshots (the dashboard's rows) name this session's requests by
        self.context = context
        self.view = view
        self.attachments = PaneAttachments.holding(conversation.attachments)  # for the next message
        self.inbox = TokenInbox(view.wake)
        self.turn: Turn | None = None
        self.state = "idle"  # what the status line says the request is doing
        self._starting = False  # the prompt is rendering off the view's thread; not sendable meanwhile
        self._finishing = False  # a finished reply is being settled on screen; likewise
        self.context_used: int | None = 0
        self.context_estimated = False  # context_used is the client's guess (a server counts)
        self.tools = tools or PaneTools()  # a fork's come from its parent
        self.tool_step = 0  # rounds of calls run in this turn
        self.tool_task: asyncio.Task[None] | None = None  # the calls of a reply, and the reply after
        self.asking: ToolCall | None = None  # the call waiting for the user's answer
        self._answer: asyncio.Future[Approval] | None = None
        # the last message taken: as typed, and its attachments, for a refusal to give back as they were
        self._sent: tuple[ChatMessage, str, list[Attachment]] | None = None

    @property
    def backend(self) -> Backend:
        return self.context.backend

    @property
    def busy(self) -> bool:
        return self.turn is not None or self._starting or self._finishing or self.tool_task is not None

    @property
    def empty(self) -> bool:
        """Nothing to lose by showing another conversation here: no messages, nothing typed."""
        return not self.busy and not self.conversation.messages and not self.view.draft.strip()

    @property
    def model(self) -> str:
        """The model this pane's requests ask for."""
        return (self.backend.per_pane_model and self.conversation.settings.model) or self.backend.model_name

    def sent_texts(self) -> list[str]:
        """The user's messages, oldest first (the input box recalls them)."""
        return [strip_control(m.content) for m in self.conversation.messages if m.role == "user"]

    def save(self, partial_reply: str = "") -> None:
        """Save the conversation (with the reply streaming so far, if given); never raises."""
        extends = self.turn is not None and self.turn.prompt.continues
        self.context.saving.save(self.conversation, partial_reply, extends)

    # ------------------------------------------------------------------ opening
    async def start(self) -> None:
        """Once the view shows the conversation: the context it fills, and its restored attachments."""
        if self.conversation.messages and self.conversation.messages[-1].cut:
            self._show("cut")  # a restored reply cut at its token limit can still be continued
        if self._close_left_calls():
            await self.view.show_messages(self.conversation.messages)
        await self.measure_context()
        if await self.attachments.count_restored(self.backend, self.conversation):
            self.view.changed()

    async def open(self, conversation: Conversation) -> None:
        """Show `conversation` here instead of the current one (which stays saved as it is). What is
        typed in the box stays unless `conversation` brings a draft of its own."""
        self.conversation = conversation
        if conversation.attachments:
            self.attachments = PaneAttachments.holding(conversation.attachments)
        self.state = "idle"
        await self.view.show_conversation(conversation)
        self._held_changed()
        await self.start()
        self.save()

    async def clear(self) -> None:
        """A new, empty conversation here with the same settings."""
        if not self.busy:
            await self.open(Conversation(settings=replace(self.conversation.settings)))

    # ------------------------------------------------------------------ attachments
    async def attach_file(self, path: str) -> bool:
        """Read the file off the view's thread (a slow disk must not freeze it) and attach it."""
        try:
            attachment = await asyncio.to_thread(read_file, path)
        except AttachmentError as exc:
            self.view.notify(str(exc), severity="warning", timeout=10, markup=False)
            return False
        return await self.attach(attachment)

    async def attach(self, attachment: Attachment) -> bool:
        """Count it against the context left and hold it for the next message, or say why not."""
        held, said = await self.attachments.offer(self.backend, self.conversation, attachment)
        if not held:
            self.view.notify(said, severity="warning", timeout=10, markup=False)
            return False
        self.view.notify(said, timeout=10, markup=False)
        self._held_changed()
        self.save()
        return True

    def hand_over(self) -> list[Attachment]:
        """The attachments held here, taken for a broadcast to carry to every pane."""
        if not self.attachments.held:
            return []
        taken = self.attachments.take()
        self._held_changed()
        self.save()
        return taken

    def hold_again(self, attachments: list[Attachment]) -> None:
        """Attachments of a message that did not go, held again ahead of any attached since."""
        self.attachments = PaneAttachments.holding([*attachments, *self.attachments.attachments])
        self._held_changed()
        self.save()

    def _held_changed(self) -> None:
        """The conversation keeps what the pane holds, so a quit or crash keeps it like the draft."""
        self.conversation.attachments = self.attachments.attachments
        self.view.changed()

    # ------------------------------------------------------------------ sending
    async def submit_text(self, text: str) -> None:
        """What the user entered: a message to send, `/file PATH` (attach) or `/file` (drop), or
        the answer to a tool call that waits for one."""
        if self.asking is not None:
            self._take_answer(text)
            return
        path = file_command(text)
        if path is None:
            await self.send(text)
        elif not path:
            dropped = self.attachments.take()
            notice = "Attachments dropped." if dropped else "Nothing is attached."
            self.view.notify(notice, severity="warning", markup=False)
            self._held_changed()
            self.save()
        elif not await self.attach_file(path):
            self.view.give_back(text)  # to fix the path

    async def send(self, text: str) -> None:
        """Add a user message, save it, and start the reply; refused (text given back) while busy."""
        if await self.take_message(text):
            await self._start_turn()

    async def take_message(self, text: str, carried: list[Attachment] | None = None) -> bool:
        """Add a user message (with `carried`, a broadcast's attachments, and those held here) and
        save it; False (text given back) while busy."""
        if self.busy:  # a second Enter got in before the first turn started
            self.view.give_back(text)
            self.view.notify(STILL_REPLYING, severity="warning", markup=False)
            return False
        attached = [*(carried or []), *self.attachments.take()]
        message = ChatMessage("user", with_attachments(text, attached))
        self._sent = (message, text, attached)
        self._held_changed()
        self._new_tool_steps()
        take_place(self.conversation, message)
        self.conversation.draft = self.view.draft
        self.save()
        await self.view.add_user(message.content)
        self._show_place(len(self.conversation.messages) - 1)
        self.view.changed()
        return True

    async def _start_turn(self, continue_last: bool = False) -> None:
        if (prepared := await self.prepare_turn(continue_last)) is not None:
            self.start_turn(prepared)

    async def prepare_turn(self, continue_last: bool = False) -> PreparedTurn | None:
        """Everything before the request: the prompt built and checked against the context, and the
        empty reply that will show it (`continue_last`: the last reply, which the request extends);
        None (with a notice) if it cannot be sent. The session stays busy until `start_turn`, so no
        second message slips in meanwhile."""
        self._starting = True
        prepared = None
        try:
            prepared = await self._prepare(continue_last)
        finally:
            self._starting = prepared is not None
        return prepared

    async def _prepare(self, continue_last: bool) -> PreparedTurn | None:
        prompt = await self._build_prompt(continue_last)
        if prompt is None:
            return None
        settings, limit, used = self.conversation.settings, self.backend.max_model_len, prompt.tokens
        room = settings.max_tokens if limit is None or used is None else limit - used
        if room < 1 and continue_last:
            await self.view.add_notice(
                f"This reply cannot go on: it fills the model's context ({limit} tokens). "
                f"Clear the pane ({self.view.key_name('clear')}) or ask again with less."
            )
            return None
        if room < 1:
            await self._refuse_last(
                f"This message would not fit: the conversation needs {used} tokens and the "
                f"model's context is {limit}. Shorten it, or clear the pane ({self.view.key_name('clear')})."
            )
            return None
        if continue_last:
            base = self.conversation.messages[-1].content
            return PreparedTurn(prompt, min(settings.max_tokens, room), await self.view.reopen_reply(), base)
        return PreparedTurn(prompt, min(settings.max_tokens, room), await self.view.open_reply())

    def start_turn(self, prepared: PreparedTurn) -> None:
        """Submit a prepared turn. Not async: a broadcast submits all its panes' turns without
        yielding, so they reach the engine together and run in one batch."""
        self._starting = False
        settings, prompt = self.conversation.settings, prepared.prompt
        handle = self.backend.submit(prompt, settings, prepared.max_tokens, self.tag, self.inbox.put)
        forced_call = prompt.tool_choice == "required"
        self.turn = Turn(handle, prompt, prepared.reply, prepared.base, forced_call=forced_call)
        self.context_used, self.context_estimated = prepared.prompt.count
        self._show("queued")
        self.view.changed()

    async def _build_prompt(self, continue_last: bool) -> Prompt | None:
        """Render and tokenize off the view's thread (a Hub template can be slow or raise); a
        template error takes the message back (a continued reply stays) and says why."""
        toolbox, settings = self.context.toolbox, self.conversation.settings
        if self.tools.starting(toolbox, settings):
            self._show("starting tools")
        specs = await self.tools.offered(toolbox, settings)  # starts the servers not running yet
        self.view.changed()  # the border counts the tools now known
        tools = [spec.as_openai() for spec in specs] or None
        try:
            prompt = await asyncio.to_thread(self.backend.prepare, self.conversation, tools, continue_last)
        except ValueError as exc:  # the tokenizer's ChatTemplateError: a raising or runaway template
            notice = f"The model's chat template refused this conversation: {exc}"
            await (self.view.add_notice(notice) if continue_last else self._refuse_last(notice))
            return None
        return prompt if tools is None else replace(prompt, tool_choice=self.tools.choice)

    async def _refuse_last(self, notice: str) -> None:
        """Take back the last user message (into the input) and explain why."""
        self._take_back_last()
        await self._explain_refusal(notice)

    def _take_back_last(self) -> None:
        """The last user message goes back as it was given: its text into the box, its attachments
        held again (not pasted into the box as text: a big file there makes every key slow). A
        regenerate's question stays, with the reply it would have replaced shown again; after a
        tool's result there is none to take."""
        messages = self.conversation.messages
        if not bring_back(self.conversation) and messages and messages[-1].role == "user":
            message = take_back(self.conversation)
            sent = self._sent if self._sent is not None and self._sent[0] is message else None
            self.view.give_back(message.content if sent is None else sent[1])
            if sent is not None and sent[2]:
                self.hold_again(sent[2])
            self.conversation.draft = self.view.draft
        self.save()
        self._show("error")

    async def _explain_refusal(self, notice: str) -> None:
        await self.view.show_messages(self.conversation.messages)
        await self.view.add_notice(notice)

    # ------------------------------------------------------------------ streaming
    async def apply(self, events: list[TokenEvent]) -> None:
        """Show the events of the current request, drawn once; events of older requests are ignored."""
        turn = self.turn
        if turn is None or not (mine := turn.take(events)):
            return
        if all(e.phase in PHASE_STATES for e in mine):  # progress news only: nothing to draw or save
            self._show_progress(turn, mine[-1])
            return
        for notice in (e.notice for e in mine if e.notice):
            await self.view.add_notice(notice, before=turn.reply)
        await turn.reply.update(turn.base + turn.shown)
        if turn is not self.turn:  # settled while it drew (a model switch, a close): its state is set
            return
        last = mine[-1]
        self.context_used, self.context_estimated = turn.context_used(last)
        if last.finished:
            await self._finish(turn, last)
        else:
            if self.state != "stopping":
                self._show("decoding", last.metrics)
            if time.monotonic() - turn.saved_at >= PARTIAL_SAVE_SECONDS:
                turn.saved_at = time.monotonic()
                self.save(turn.text)
        self.view.changed()

    def _show_progress(self, turn: Turn, event: TokenEvent) -> None:
        """Queue and prefill progress, shown until the first token: from then on the reply's own
        figures are (a preemption later, and the prefill that recomputes it, change nothing shown)."""
        if not turn.ids and self.state != "stopping":
            self._show(PHASE_STATES[event.phase], prefill=(event.prompt_done, event.metrics.prompt_tokens))

    async def _finish(self, turn: Turn, event: TokenEvent) -> None:
        """The conversation, the state and the save change before the first await, so a quit
        meanwhile loses nothing; the session stays busy until the view has settled the reply, so a
        message sent meanwhile cannot land above this reply or have its status overwritten."""
        self.turn = None
        self._finishing = True
        try:
            continued = turn.prompt.continues
            if event.finish_reason == "error" and not turn.added and continued:
                self._show("cut", event.metrics)
                await turn.reply.finish()
                await self.view.add_notice(f"The reply above cannot be continued: {event.error}")
                return
            if event.finish_reason == "error" and not turn.added:
                self._take_back_last()
                await turn.reply.finish()
                await self._explain_refusal(f"This request was refused: {event.error}")
                return
            turn.keep(self.conversation, self.backend, event.finish_reason)
            calls = self._calls_made(turn, event)
            nothing = not turn.added
            brought_back = nothing and not continued and bring_back(self.conversation)
            state = "cut" if nothing and continued else FINISHED_STATES.get(event.finish_reason or "", "idle")
            self._show(state, event.metrics)  # a continue that brought nothing leaves the reply cut
            self.save()
            await turn.reply.finish()
            if event.finish_reason == "error":  # a connection lost mid-reply: what came is kept
                await self.view.add_notice(f"The reply above is incomplete: {event.error}")
            if brought_back:  # a regenerate that gave nothing: the reply it would replace is back
                await self.view.show_messages(self.conversation.messages)
            elif not turn.text:
                await turn.reply.remove()
            elif not continued:
                self._show_place(len(self.conversation.messages) - 1)
            if calls:
                self.tool_task = asyncio.create_task(self._run_tools(calls))
        finally:
            self._finishing = False

    def stop(self) -> bool:
        """Esc: cancel the request in flight (its final event finishes the turn), or the tool call
        running or waiting for an answer (the turn ends there); False if there is neither."""
        if self.turn is not None:
            self.turn.handle.cancel()
        elif self.tool_task is not None:
            self.tool_task.cancel()
        else:
            return False
        self._show("stopping")
        return True

    async def settle(self) -> None:
        """For a pane going away or a quit: stop the request now, keep what it streamed and the
        draft, and save. The turn is detached first, so its final (abort) event is ignored."""
        turn, self.turn = self.turn, None
        if turn is not None:
            turn.handle.cancel()
            await turn.reply.finish()
            turn.keep(self.conversation, self.backend, "abort")
            if not turn.prompt.continues:
                bring_back(self.conversation)  # a regenerate that gave nothing: the old reply stays
        if (task := self.tool_task) is not None:  # its calls get their "cancelled" results
            task.cancel()
            await asyncio.wait([task])
        self.conversation.draft = self.view.draft
        self.save()

    async def stop_for_switch(self) -> None:
        """The model is being switched: a reply in flight ends here, kept as far as it got and
        marked stopped (settle saves it)."""
        was_busy = self.turn is not None
        await self.settle()
        if was_busy:
            self._show("stopped")
            await self.view.add_notice("The reply above was stopped to switch the model.")

    def _show(
        self, state: str, metrics: RequestMetrics | None = None, prefill: tuple[int, int] | None = None
    ) -> None:
        self.state = state
        self.view.show_state(state, metrics, prefill)

    # ------------------------------------------------------------------ retries and forks
    def _refused_while_busy(self, what: str) -> bool:
        """While a reply is coming the chat cannot change under it: say so (a key that did nothing
        looks broken) and how to go on."""
        if self.busy:
            self.view.notify(
                f"The reply is still coming: stop it ({self.view.key_name('stop')}) first, then {what}.",
                severity="warning",
                markup=False,
            )
        return self.busy

    async def regenerate(self) -> None:
        """Ask again: the last reply (if the conversation ends with one) is set aside and a new one
        streams in its place; the old one stays a version of it (or comes back if none comes)."""
        messages = self.conversation.messages
        if self._refused_while_busy("regenerate") or not messages:
            return
        if messages[-1].role == "assistant":
            set_aside(self.conversation, len(messages) - 1)
        self._new_tool_steps()
        await self.view.show_messages(messages)
        await self._start_turn()

    async def edit_last(self) -> str | None:
        """Set the last user message and everything after it aside (the message sent next takes its
        place, the old one stays a version of it); its text (for the input box), or None when there
        is none or the pane is busy."""
        messages = self.conversation.messages
        last_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
        if self._refused_while_busy("edit") or last_user is None:
            return None
        text = strip_control(messages[last_user].content)
        set_aside(self.conversation, last_user)
        self.save()
        await self.view.show_messages(messages)
        await self.measure_context()
        return text

    async def flip_version(self, index: int | None, step: int) -> int | None:
        """Show the previous (-1) or next (+1) version of message `index` (None: the last message
        that has versions), with the messages that followed it; the next prompt is built from what is
        shown. The index flipped, or None (with a notice) when there is no version that way."""
        if self._refused_while_busy("flip versions"):
            return None
        chat = self.conversation
        at = last_with_versions(chat) if index is None or not chat.messages[index].versions else index
        if at is None or not flip(chat, at, step):
            said = "No other version" if at is None else f"No {'older' if step < 0 else 'newer'} version"
            self.view.notify(
                f"{said}: regenerate ({self.view.key_name('regenerate')}) or edit "
                f"({self.view.key_name('edit_last')}) keeps the one replaced as a version.",
                severity="warning",
                markup=False,
            )
            return None
        self.save()
        await self.view.show_messages(chat.messages)
        self._show("cut" if chat.messages[-1].cut else "idle")
        await self.measure_context()
        return at

    async def continue_reply(self) -> None:
        """Extend a reply cut at its token limit: the prompt is the conversation with that reply as it
        is (no end of turn), whose ids the engine has cached, and the new tokens append to it."""
        messages = self.conversation.messages
        if self._refused_while_busy("continue"):
            return
        if not messages or not messages[-1].cut:
            self.view.notify(
                "Nothing to continue: only a reply cut at its token limit can go on.",
                severity="warning",
                markup=False,
            )
            return
        await self._start_turn(continue_last=True)

    def _show_place(self, index: int) -> None:
        """The view shows which version message `index` is, if it has others."""
        if (message := self.conversation.messages[index]).versions:
            self.view.show_version(index, message)

    def fork(self, selected: int | None) -> Fork | None:
        """A fork through message `selected`, else the whole chat; None (with a notice) if there is
        nothing to fork. A fork never ends on a user message: that message becomes the fork's draft,
        to be sent (or edited) there. The whole chat is not forked mid-reply: the fork would keep
        half an answer as if it were whole (Esc first keeps it, marked stopped, and forks with it).
        The fork runs the tools this pane always runs, as this pane would."""
        messages = self.conversation.messages
        if selected is None and self.busy:
            self.view.notify(FORK_MID_REPLY, severity="warning", markup=False)
            return None
        end = len(messages) if selected is None else min(selected + 1, len(messages))
        draft = ""
        if end and messages[end - 1].role == "user":
            end, draft = end - 1, messages[end - 1].content
        if not end and not draft:
            self.view.notify("Nothing to fork yet: send a message first.", severity="warning", markup=False)
            return None
        return Fork(self.conversation.fork(end, strip_control(draft)), self.tools.forked())

    # ------------------------------------------------------------------ settings and draft
    async def use_settings(self, settings: ChatSettings) -> None:
        """New sampling and system prompt from the form (which does not edit the model: it stays)."""
        self.conversation.settings = replace(settings, model=self.conversation.settings.model)
        await self.measure_context()  # also retitles: the preset may now be "custom"
        self.save()

    def use_model(self, model_id: str) -> None:
        """On a server: this pane's next requests ask for `model_id`; saved with the conversation."""
        self.conversation.settings.model = model_id
        self.save()

    def save_draft(self) -> None:
        """Typing paused: keep the draft (and the reply streaming so far) if the draft changed."""
        if (draft := self.view.draft) != self.conversation.draft:
            self.conversation.draft = draft
            self.save(self.turn.text if self.turn else "")

    async def model_switched(self) -> None:
        """The conversation goes on with another local model: the ids it kept for the prefix cache
        are the old tokenizer's, so they go (those of its versions too), and the context it fills
        is measured again."""
        forget_ids(self.conversation)
        await self.measure_context()

    # ------------------------------------------------------------------ context
    async def measure_context(self) -> None:
        """Tokens the conversation fills now (system prompt included), so the meter is right before
        the next send; None when the template cannot render it."""
        chat = self.conversation
        if not chat.messages and not chat.settings.system_prompt:
            self.context_used, self.context_estimated = 0, False
        else:
            try:
                prompt = await asyncio.to_thread(self.backend.prepare, chat)
            except ValueError:
                self.context_used = None
            else:
                self.context_used, self.context_estimated = prompt.count
        self.view.changed()
