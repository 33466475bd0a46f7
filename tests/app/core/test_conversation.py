"""Prompt building: turn N+1 extends the ids of turn N instead of re-tokenizing it."""

from __future__ import annotations

from pathlib import Path

from app.core.conversation import ChatMessage, ChatSettings, Conversation, PromptCache
from app.core.export import conversation_markdown, last_code_block
from model.text.tokenizer import Tokenizer


def test_next_prompt_reuses_generated_ids_when_the_render_extends_them(tiny_ckpt: Path) -> None:
    tokenizer = Tokenizer.from_pretrained(tiny_ckpt)
    chat = Conversation([ChatMessage("user", "Hello")], ChatSettings(system_prompt="Be kind."))
    cache = PromptCache()
    prompt = cache.build(tokenizer, chat.chat_messages())
    assert prompt == (
        tokenizer.render_chat(chat.chat_messages()),
        tokenizer.encode_chat(chat.chat_messages()),
    )

    # Generated ids that a re-tokenization of the same text would not produce (byte-level pieces).
    reply = "Hi there"
    generated = [*(tokenizer.encode(ch)[0] for ch in reply), tokenizer.token_to_id("<|im_end|>")]
    assert generated[:-1] != tokenizer.encode(reply)
    cache.remember(tokenizer, prompt, reply, generated)
    chat.messages += [ChatMessage("assistant", reply), ChatMessage("user", "And you?")]

    text, ids = cache.build(tokenizer, chat.chat_messages())
    assert text == tokenizer.render_chat(chat.chat_messages())
    assert ids[: len(prompt[1]) + len(generated)] == prompt[1] + generated
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_a_render_that_leaves_the_cache_part_way_keeps_the_ids_before_the_change(tiny_ckpt: Path) -> None:
    """An edited last message, or a template stripping past thinking, rewrites the chat part way: the
    generated ids before that point are kept (re-encoding would change them and miss the prefix cache)."""
    tokenizer = Tokenizer.from_pretrained(tiny_ckpt)
    chat = Conversation([ChatMessage("user", "Hello")])
    cache = PromptCache()
    prompt = cache.build(tokenizer, chat.chat_messages())
    reply = "Hi there"
    generated = [*(tokenizer.encode(ch)[0] for ch in reply), tokenizer.token_to_id("<|im_end|>")]
    cache.remember(tokenizer, prompt, reply, generated)
    chat.messages += [ChatMessage("assistant", reply), ChatMessage("user", "And you?")]
    cache.remember(tokenizer, cache.build(tokenizer, chat.chat_messages()), "Fine", tokenizer.encode("Fine"))

    chat.messages[-1] = ChatMessage("user", "How old are you?")  # ctrl+e: the last message edited
    text, ids = cache.build(tokenizer, chat.chat_messages())
    assert text == tokenizer.render_chat(chat.chat_messages())
    assert ids[: len(prompt[1]) + len(generated)] == prompt[1] + generated
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_a_changed_history_falls_back_to_encoding_the_whole_chat(tiny_ckpt: Path) -> None:
    tokenizer = Tokenizer.from_pretrained(tiny_ckpt)
    cache = PromptCache()
    first = [{"role": "user", "content": "Hello"}]
    cache.remember(tokenizer, cache.build(tokenizer, first), "Hi", tokenizer.encode("Hi"))
    edited = [{"role": "user", "content": "Goodbye"}]
    assert cache.build(tokenizer, edited)[1] == tokenizer.encode_chat(edited)


def test_title_export_and_code_blocks() -> None:
    chat = Conversation(
        [
            ChatMessage("user", "Write   a\nfunction"),
            ChatMessage("assistant", "Here:\n```py\nx = 1\n```\nand\n~~~\ny\n~~~"),
        ]
    )
    assert chat.title == "Write a function"
    markdown = conversation_markdown(chat)
    assert markdown.startswith("# Write a function") and "## Assistant" in markdown
    assert last_code_block(chat.messages[1].content) == "y\n"
    assert last_code_block("no code") is None


def test_dropping_the_last_reply_gives_back_the_exact_ids_of_its_prompt(tiny_ckpt: Path) -> None:
    """Regenerate and edit drop the last reply: the earlier replies are still sent as generated, even
    when their stored text (U+FFFD for split UTF-8) re-encodes to other ids."""
    tokenizer = Tokenizer.from_pretrained(tiny_ckpt)
    end = tokenizer.token_to_id("<|im_end|>")
    split_utf8 = tokenizer.encode("é")[:1] if len(tokenizer.encode("é")) > 1 else tokenizer.encode("é")
    chat = Conversation([ChatMessage("user", "Hello")])
    cache = PromptCache()
    first = cache.build(tokenizer, chat.chat_messages())
    generated = [*(tokenizer.encode(ch)[0] for ch in "Hi there"), *split_utf8, end]
    reply = "Hi there" + tokenizer.decode(split_utf8)  # what the pane stores
    cache.remember(tokenizer, first, reply, generated)
    chat.messages += [ChatMessage("assistant", reply), ChatMessage("user", "And you?")]
    second = cache.build(tokenizer, chat.chat_messages())
    assert second[1][: len(first[1]) + len(generated)] == first[1] + generated
    cache.remember(tokenizer, second, "Fine", [*tokenizer.encode("Fine"), end])
    assert cache.ids == second[1] + [*tokenizer.encode("Fine"), end]

    for _ in range(2):  # ctrl+r twice: the same prompt, id for id
        again = cache.build(tokenizer, chat.chat_messages())
        assert again == second
        cache.remember(tokenizer, again, "Other", tokenizer.encode("Other"))

    fork = cache.copy()
    cache.remember(tokenizer, second, "Mine", tokenizer.encode("Mine"))
    assert fork.ids == second[1] + tokenizer.encode("Other")  # a fork's cache is its own
