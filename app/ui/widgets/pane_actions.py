"""A chat pane's key actions that only forward to its session or its transcript: retries, edits,
stop, selection, scrolling, copies, exports and the forms (settings, attach).

Kept apart from `ChatPane` (app/ui/widgets/chat_pane.py) so the pane reads as the view it is.
"""

from __future__ import annotations

from textual.widget import Widget

from app.core.conversation import ChatSettings
from app.core.export import last_code_block
from app.core.reply_parts import answer_text
from app.session import PaneSession
from app.session.tools import Approval
from app.ui.pane_context import PaneContext
from app.ui.screens.attach import AttachScreen
from app.ui.screens.settings import SettingsScreen
from app.ui.share import copy_out, export_out
from app.ui.widgets.prompt_input import PromptInput
from app.ui.widgets.transcript import Transcript, copy_text


class PaneActions(Widget):
    """The actions of PANE_KEYS a ChatPane runs by forwarding them; the pane provides the parts."""

    session: PaneSession
    context: PaneContext
    transcript: Transcript
    prompt_input: PromptInput
    label: str

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Grey out what cannot run now, so the footer tells the truth."""
        busy = self.session.busy
        if action == "stop":
            return True if busy or self.transcript.selected else None
        if action in ("regenerate", "edit_last", "clear", "flip", "continue_reply"):
            return None if busy else True
        return True

    def action_stop(self) -> None:
        if not self.session.stop():
            self.transcript.select(None)

    def action_allow_tool(self) -> None:
        self._answer_tool(Approval("once"))

    def action_always_allow_tool(self) -> None:
        self._answer_tool(Approval("always"))

    def action_deny_tool(self) -> None:
        """The reason is what the input box holds, taken out of it (the model is told)."""
        if self.session.asking is not None:
            self._answer_tool(Approval("deny", " ".join(self.prompt_input.take().split())))
        else:
            self._answer_tool(Approval("deny"))

    def _answer_tool(self, approval: Approval) -> None:
        if not self.session.answer(approval):
            self.notify("No tool call is waiting for an answer in this pane.", severity="warning")

    async def action_regenerate(self) -> None:
        await self.session.regenerate()

    async def action_edit_last(self) -> None:
        if (text := await self.session.edit_last()) is not None:
            self.prompt_input.restore(text)  # undoable: ctrl+z gives back a draft it replaced
            self.prompt_input.focus()

    async def action_flip(self, step: int) -> None:
        """The selected message's versions, else the last message's that has some; the selection
        stays on the message flipped, so the keys walk through its versions."""
        selected = self.transcript.selected_message()
        at = await self.session.flip_version(selected, step)
        if at is not None and selected is not None:
            self.transcript.select_message(at)

    async def action_continue_reply(self) -> None:
        await self.session.continue_reply()

    async def action_clear(self) -> None:
        await self.session.clear()

    def action_settings(self) -> None:
        async def apply(settings: ChatSettings | None) -> None:
            if settings is not None:
                await self.session.use_settings(settings)

        toolbox = self.session.context.toolbox
        servers = [state.name for state in toolbox.servers()] if toolbox is not None else []
        server = self.session.backend.server_sampling
        settings = self.session.conversation.settings
        self.app.push_screen(SettingsScreen(settings, self.label, servers, server), apply)

    def action_attach_file(self) -> None:
        async def attach(path: str | None) -> None:
            if path:
                await self.session.attach_file(path)

        self.app.push_screen(AttachScreen(self.label), attach)

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
            reply = answer_text(self.session.conversation.last_reply or "")
            copy_out(self, files_dir, reply, "the last reply", "Nothing to copy yet.")

    def action_copy_code(self) -> None:
        code = last_code_block(answer_text(self.session.conversation.last_reply or ""))
        missing = "No code block in the last reply."
        copy_out(self, self.context.files_dir, code, "the last code block", missing)

    def action_export(self) -> None:
        session = self.session
        export_out(self, self.context.files_dir, session.conversation, session.model)
