"""The version tree kept as its shown path (app/core/versions.py): what regenerate, edit, a refusal and
the flip keys do to a conversation, without an engine."""

from __future__ import annotations

from app.core.conversation import ChatMessage, Conversation, PromptCache
from app.core.versions import (
    bring_back,
    flip,
    forget_ids,
    last_with_versions,
    place,
    set_aside,
    take_back,
    take_place,
)


def chat(*texts: str) -> Conversation:
    """User and assistant messages alternating, the first a user's."""
    roles = ("user", "assistant")
    return Conversation([ChatMessage(roles[i % 2], text) for i, text in enumerate(texts)])


def shown(conversation: Conversation) -> list[str]:
    return [m.content for m in conversation.messages]


def test_a_replaced_reply_becomes_a_version_and_flips_back_with_its_prompt_ids() -> None:
    conversation = chat("Q", "A1")
    conversation.prompt_cache = PromptCache([("Q A1", [1, 2])])
    set_aside(conversation, 1)
    assert shown(conversation) == ["Q"]
    conversation.prompt_cache = PromptCache([("Q A2", [1, 3])])
    take_place(conversation, ChatMessage("assistant", "A2"))
    assert place(conversation.messages[1]) == (2, 2) and conversation.replaced is None

    assert flip(conversation, 1, -1) and shown(conversation) == ["Q", "A1"]
    assert place(conversation.messages[1]) == (1, 2) and conversation.prompt_cache.ids == [1, 2]
    assert not flip(conversation, 1, -1)
    assert (
        flip(conversation, 1, 1)
        and shown(conversation) == ["Q", "A2"]
        and conversation.prompt_cache.ids == [1, 3]
    )


def test_an_edited_message_keeps_the_turns_that_followed_it_in_its_old_version() -> None:
    conversation = chat("Q1", "A1", "Q2", "A2")
    set_aside(conversation, 0)
    take_place(conversation, ChatMessage("user", "Q1 edited"))
    conversation.messages.append(ChatMessage("assistant", "B1"))
    assert last_with_versions(conversation) == 0
    assert flip(conversation, 0, -1) and shown(conversation) == ["Q1", "A1", "Q2", "A2"]
    assert flip(conversation, 0, 1) and shown(conversation) == ["Q1 edited", "B1"]


def test_a_third_version_from_an_older_one_shown_is_numbered_after_all_others() -> None:
    conversation = chat("Q", "A1")
    for reply in ("A2", "A3"):
        set_aside(conversation, 1)
        take_place(conversation, ChatMessage("assistant", reply))
    flip(conversation, 1, -1)
    flip(conversation, 1, -1)
    assert shown(conversation) == ["Q", "A1"]
    set_aside(conversation, 1)
    take_place(conversation, ChatMessage("assistant", "A4"))
    order = []
    while flip(conversation, 1, -1):
        pass
    while True:
        order.append(conversation.messages[1].content)
        if not flip(conversation, 1, 1):
            break
    assert order == ["A1", "A2", "A3", "A4"]


def test_nothing_in_its_place_brings_it_back_and_a_refused_edit_sets_it_aside_again() -> None:
    conversation = chat("Q", "A1")
    set_aside(conversation, 1)
    assert bring_back(conversation) and shown(conversation) == ["Q", "A1"] and conversation.replaced is None
    assert not bring_back(conversation)

    set_aside(conversation, 0)
    take_place(conversation, ChatMessage("user", "Q edited"))
    assert take_back(conversation).content == "Q edited" and conversation.messages == []
    assert bring_back(conversation) and shown(conversation) == ["Q", "A1"]


def test_an_edit_before_an_unsent_edit_keeps_both() -> None:
    conversation = chat("Q1", "A1", "Q2", "A2")
    set_aside(conversation, 2)  # alt+e, then alt+e again before sending
    set_aside(conversation, 0)
    take_place(conversation, ChatMessage("user", "Q1 edited"))
    assert flip(conversation, 0, -1) and shown(conversation) == ["Q1", "A1", "Q2", "A2"]


def test_another_model_forgets_the_ids_of_every_version() -> None:
    conversation = chat("Q", "A1")
    conversation.prompt_cache = PromptCache([("Q A1", [1, 2])])
    set_aside(conversation, 1)
    take_place(conversation, ChatMessage("assistant", "A2"))
    set_aside(conversation, 0)  # an edit not sent yet
    forget_ids(conversation)
    assert conversation.replaced is not None and conversation.replaced.prompt_cache.ids == []
    assert bring_back(conversation) and flip(conversation, 1, -1)
    assert shown(conversation) == ["Q", "A1"] and conversation.prompt_cache.ids == []
