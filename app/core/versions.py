"""Versions of a message: a regenerate or an edit sets the shown path aside instead of deleting it,
the message that takes its place gets it as a sibling, and flipping shows another version (with the
messages that followed it) in place of the shown one.

A conversation is a tree kept as its shown path: each message on it holds its hidden siblings
(`ChatMessage.versions`), each sibling the path that followed it. The next prompt is built from the
shown path, and each version keeps the prompt ids the engine last saw for it, so a version shown
again is sent as it was generated and served from the prefix cache.
"""

from __future__ import annotations

from dataclasses import replace

from app.core.conversation import ChatMessage, Conversation, PromptCache, Version


def set_aside(conversation: Conversation, at: int) -> None:
    """Take the messages from `at` off the shown path; the message added next at `at` gets them as
    its versions (`take_place`), or they come back if none is (`bring_back`). Anything set aside
    before and not replaced (an edit not sent) is set aside with them, after them."""
    bring_back(conversation)
    messages = conversation.messages
    conversation.replaced = Version(messages[at:], conversation.prompt_cache.copy())
    del messages[at:]


def take_place(conversation: Conversation, message: ChatMessage) -> None:
    """Add `message` at the end of the shown path; what was set aside there becomes its versions,
    and it is the newest."""
    if (old := conversation.replaced) is not None:
        conversation.replaced = None
        head, *rest = old.messages
        others = [
            *head.versions[: head.version],
            _hidden(head, rest, old.prompt_cache),
            *head.versions[head.version :],
        ]
        message.versions, message.version = others, len(others)
    conversation.messages.append(message)


def bring_back(conversation: Conversation) -> bool:
    """Nothing took the place of what was set aside (a regenerate stopped or refused before any
    text, or an edit not sent when another is made): it is shown again. False if nothing was."""
    if (old := conversation.replaced) is None:
        return False
    conversation.replaced = None
    conversation.messages += old.messages
    conversation.prompt_cache = old.prompt_cache
    return True


def take_back(conversation: Conversation) -> ChatMessage:
    """Remove the last message (a refused one); the versions it took the place of are set aside
    again, for the message sent instead."""
    message = conversation.messages.pop()
    if message.versions:
        *older, newest = message.versions
        head, *rest = newest.messages
        conversation.replaced = Version(
            [replace(head, versions=older, version=len(older)), *rest], newest.prompt_cache
        )
    return message


def flip(conversation: Conversation, at: int, step: int) -> bool:
    """Show the version `step` away (-1 older, +1 newer) of message `at`, with the messages that
    followed it, in place of the shown one; False if there is none that way."""
    messages = conversation.messages
    head = messages[at]
    index = head.version + step
    if not head.versions or not 0 <= index <= len(head.versions):
        return False
    shown = _hidden(head, messages[at + 1 :], conversation.prompt_cache)
    ordered = [*head.versions[: head.version], shown, *head.versions[head.version :]]
    chosen = ordered.pop(index)
    first, *rest = chosen.messages
    # Copies: a fork shares hidden versions with its parent, and a shown message may be extended.
    messages[at:] = [replace(first, versions=ordered, version=index), *(replace(m) for m in rest)]
    conversation.prompt_cache = chosen.prompt_cache.copy()
    return True


def forget_ids(conversation: Conversation) -> None:
    """Drop the prompt ids kept with every version (another model's tokenizer made them)."""
    conversation.prompt_cache = PromptCache()
    paths = [*([conversation.replaced] if conversation.replaced else []), Version(conversation.messages)]
    while paths:
        path = paths.pop()
        path.prompt_cache = PromptCache()
        paths += [version for message in path.messages for version in message.versions]


def place(message: ChatMessage) -> tuple[int, int] | None:
    """(shown version, of how many), counted from 1, for a message that has versions; else None."""
    return (message.version + 1, len(message.versions) + 1) if message.versions else None


def last_with_versions(conversation: Conversation) -> int | None:
    """The index of the last message on the shown path that has versions (what the keys flip when
    nothing is selected)."""
    messages = conversation.messages
    return next((i for i in range(len(messages) - 1, -1, -1) if messages[i].versions), None)


def _hidden(head: ChatMessage, rest: list[ChatMessage], prompt_cache: PromptCache) -> Version:
    """`head` and `rest` as a hidden version: its siblings stay with the one shown."""
    return Version([replace(head, versions=[], version=0), *rest], prompt_cache)
