"""Prompt building: turn N+1 extends the ids of turn N instead of re-tokenizing it."""

from __future__ import annotations

from pathlib import Path

from app.conversation import ChatMessage, ChatSettings, Conversation, PromptCache
from app.export import conversation_markdown, last_code_block
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
