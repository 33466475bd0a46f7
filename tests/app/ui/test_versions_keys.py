"""The keys of versions and cut replies in a pane: the status says a reply was cut and alt+g
continues it in the same reply; f5 keeps the old reply, "‹ 2/2 ›" labels the new one, and
alt+left / alt+right flip the transcript between them."""

from __future__ import annotations

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.ui.widgets.chat_pane import ChatPane
from app.ui.widgets.transcript import VersionLabel
from tests.app.pilot_helpers import MakeOptions, chat_screen, submit, wait_replied, wait_until

SETTINGS = ChatSettings(temperature=0.0, max_tokens=12)


def labels(pane: ChatPane) -> list[str]:
    """The version labels' text; a label is mounted before it is written (it names the keys)."""
    return [str(label.render()) for label in pane.transcript.query(VersionLabel)]


async def test_continue_and_flip_versions_with_keys(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=1, chat=SETTINGS))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await submit(pilot, pane, "Tell me a story about the sea.")
        await wait_replied(pilot, pane)
        assert pane.conversation.messages[-1].cut
        assert pane.status.describe().startswith("cut · alt+g continue · ")
        assert "+12 tok" in pane.status.describe()  # the reply's tokens, where its limit cut it
        cut = pane.conversation.messages[-1].content

        await pilot.press("alt+g")
        await wait_until(
            pilot, lambda: not pane.busy and pane.conversation.messages[-1].content != cut, "more"
        )
        continued = pane.conversation.messages[-1].content
        assert continued.startswith(cut) and len(pane.conversation.messages) == 2
        assert [r.source for r in pane.transcript.replies] == [continued]  # the same reply, grown

        await pilot.press("f5")
        await wait_until(
            pilot, lambda: not pane.busy and labels(pane) == ["‹ 2/2 › alt+left / alt+right"], "v2"
        )
        assert pane.conversation.messages[-1].content == cut  # greedy: the first 12 tokens again

        await pilot.press("alt+left")
        await wait_until(
            pilot, lambda: [r.source for r in pane.transcript.replies] == [continued], "version 1"
        )
        [label] = pane.transcript.query(VersionLabel)
        assert str(label.render()) == "‹ 1/2 › alt+left / alt+right"
        await pilot.press("alt+right")
        await wait_until(pilot, lambda: [r.source for r in pane.transcript.replies] == [cut], "version 2")


async def test_an_edited_message_is_labelled_and_flips_back_with_its_reply(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=1, chat=SETTINGS))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await submit(pilot, pane, "Hello")
        await wait_replied(pilot, pane)
        old_reply = pane.conversation.messages[-1].content
        await pilot.press("alt+e")
        await pilot.press(*" there", "enter")
        await wait_replied(pilot, pane)
        await wait_until(pilot, lambda: [t[:7] for t in labels(pane)] == ["‹ 2/2 ›"], "the label")
        [label] = pane.transcript.query(VersionLabel)
        assert pane.transcript.children.index(label) + 1 == pane.transcript.children.index(
            pane.transcript.messages[0]
        )

        await pilot.press("ctrl+up", "ctrl+up", "alt+left")  # the selected message: the edited one
        await wait_until(
            pilot, lambda: [m.content for m in pane.conversation.messages] == ["Hello", old_reply]
        )
        assert pane.transcript.selected_message() == 0  # still selected: alt+right walks back
        [label] = pane.transcript.query(VersionLabel)
        assert str(label.render()).startswith("‹ 1/2 ›")
