"""The tool loop of a pane's session: a finished reply's calls asked about, run and answered, and
the model let go on, one tool step at a time (docs/ARCHITECTURE.md, "The tool loop").

A mixin of `PaneSession` (app/session/pane_session.py), apart so the session's turn lifecycle and
this loop each read as one thing; it uses the session's conversation, view, context and turn calls.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from app.core.conversation import ChatMessage, Conversation
from app.session.tools import (
    ANSWERS,
    CALL_TIMEOUT,
    CANCELLED,
    LEFT_OPEN,
    NOT_RUN,
    RESULT_CHARS,
    Approval,
    PaneTools,
    arguments_of,
    calls_in,
    denied_text,
    parse_answer,
    result_text,
)
from app.session.turn import Turn
from app.session.view import PaneView, ToolCallView

if TYPE_CHECKING:
    from app.session.context import SessionContext
    from engine import TokenEvent, ToolCall

ASKING = "asking you"  # a call waits for the user's answer
RUNNING_TOOL = "waiting on tool"
TOOL_WAITS = {ASKING: "you", RUNNING_TOOL: "tool"}  # these states, as the dashboard's phase column says them


class ToolLoop:
    """The session's tool steps: what `PaneSession` provides, and the loop over it."""

    conversation: Conversation
    view: PaneView
    context: SessionContext
    tools: PaneTools
    tool_step: int
    tool_task: asyncio.Task[None] | None
    asking: ToolCall | None
    _answer: asyncio.Future[Approval] | None

    def _calls_made(self, turn: Turn, event: TokenEvent) -> list[ToolCall]:
        """The calls of a reply that ended by itself in a pane offering tools, kept with the reply."""
        if event.finish_reason != "stop" or not turn.prompt.tools or not turn.text:
            return []
        reply = self.conversation.messages[-1]
        reply.tool_calls = calls_in(reply.content)
        return reply.tool_calls

    async def _run_tools(self, calls: list[ToolCall]) -> None:
        """Ask about each call, run it, send its result back, and let the model go on: one tool step.
        Esc cancels the call running or asked about and ends the turn; every call gets a result, so
        the conversation stays one a template (or a server) accepts."""
        answered: set[str] = set()
        shown = len(calls)
        try:
            if self.tool_step >= self.tools.step_limit:
                for call in calls:
                    text = NOT_RUN.format(limit=self.tools.step_limit)
                    self._add_result(call, text, answered)
                    (await self.view.add_tool_call(call)).show_result(text, True)
                await self.view.add_notice(
                    f"This turn reached its limit of {self.tools.step_limit} tool steps: its last calls "
                    "were not run. Send a message to let the model go on."
                )
                self._show("idle")
                return
            self.tool_step += 1
            self.view.show_tool_step(self.tool_step, self.tools.step_limit)
            for index, call in enumerate(calls):
                shown = index + 1  # calls on screen: the one running shows its own cancel
                self._add_result(call, await self._run_call(call), answered)
            if (prepared := await self.prepare_turn()) is not None:
                self.start_turn(prepared)
        except asyncio.CancelledError:
            for call in calls:
                self._add_result(call, CANCELLED, answered)
            self._show("stopped")
            for call in calls[shown:]:  # calls after the cancelled one: shown as cancelled too
                (await self.view.add_tool_call(call)).show_result(CANCELLED, True)
        finally:
            self.tool_task = None
            self.view.changed()

    async def _run_call(self, call: ToolCall) -> str:
        """One call asked about (unless always allowed here) and run: the text for the model."""
        view = await self.view.add_tool_call(call)  # a cancel here leaves no call on screen to mark
        try:
            if call.name not in self.tools.always:
                approval = await self._ask(call, view)
                if approval.decision == "always":
                    self.tools.always.add(call.name)
                if approval.decision == "deny":
                    text = denied_text(approval.reason)
                    view.show_result(text, True)
                    return text
            toolbox = self.context.toolbox
            if toolbox is None:  # the tools were offered, so this is a toolbox closed since
                text = "Error: no MCP servers are running."
                view.show_result(text, True)
                return text
            view.show_status("running…")
            self._show(RUNNING_TOOL)
            result = await toolbox.call(
                call.name, arguments_of(call), timeout=CALL_TIMEOUT, max_chars=RESULT_CHARS
            )
        except asyncio.CancelledError:
            view.show_result(CANCELLED, True)
            raise
        text = result_text(result)
        view.show_result(text, result.is_error)
        return text

    async def _ask(self, call: ToolCall, view: ToolCallView) -> Approval:
        """Wait for the user's answer (typed, or a key: see `answer`); the pane has no request meanwhile."""
        self.asking = call
        self._answer = asyncio.get_running_loop().create_future()
        view.show_status(
            f"Run it? {ANSWERS.format(name=call.name)}, then Enter; or the keys "
            f"{self.view.key_name('allow_tool')} / {self.view.key_name('always_allow_tool')} / "
            f"{self.view.key_name('deny_tool')}. Esc stops the turn."
        )
        self._show(ASKING)
        try:
            return await self._answer
        finally:
            self.asking, self._answer = None, None

    def answer(self, approval: Approval) -> bool:
        """The user's answer to the call waiting for one; False when none waits."""
        if self._answer is None or self._answer.done():
            return False
        self._answer.set_result(approval)
        return True

    def _take_answer(self, text: str) -> None:
        if (approval := parse_answer(text)) is None or not self.answer(approval):
            self.view.give_back(text)
            name = self.asking.name if self.asking else "this tool"
            self.view.notify(f"Answer the tool call first: {ANSWERS.format(name=name)}.", markup=False)

    def _add_result(self, call: ToolCall, text: str, answered: set[str]) -> None:
        """A call's result as a `tool` message, saved at once (a crash keeps it); once per call."""
        if call.id in answered:
            return
        answered.add(call.id)
        self.conversation.messages.append(ChatMessage("tool", text, tool_call_id=call.id, name=call.name))
        self.save()

    def _close_left_calls(self) -> bool:
        """Calls of the last reply that have no result (lfm-chat was killed while one was asked
        about or ran, or a fork ends at them) get one, saved: a server refuses a conversation with
        a call left open, and the template would show the model a call that never came back. True
        when some did."""
        messages = self.conversation.messages
        last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role != "tool"), None)
        if last is None or self.tool_task is not None:
            return False
        answered = {m.tool_call_id for m in messages[last + 1 :]}
        left = [call for call in messages[last].tool_calls if call.id not in answered]
        for call in left:
            self._add_result(call, LEFT_OPEN, answered)
        return bool(left)

    def _new_tool_steps(self) -> None:
        """A message from the user starts a turn with all its tool steps again."""
        self.tool_step = 0
        self.view.show_tool_step(0, self.tools.step_limit)
