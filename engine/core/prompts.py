"""A prompt as token ids, checked before it is queued so that nothing about it can fail a batched step."""

from __future__ import annotations

from collections.abc import Sequence

from engine.core.errors import PromptTooLong, RequestError
from model.text.tokenizer import Tokenizer

Prompt = str | Sequence[int]


def prompt_token_ids(prompt: Prompt, tokenizer: Tokenizer, vocab_size: int, max_model_len: int) -> list[int]:
    """Token ids of `prompt` (text or ids); RequestError if the model cannot take them (PromptTooLong
    if they do not fit the context).

    Text is range-checked too: a tokenizer may know more ids than the model's embedding has
    rows, and such an id would fail every request batched with this one.
    """
    ids = _encode(prompt, tokenizer) if isinstance(prompt, str) else _token_ids(prompt)
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise RequestError(f"prompt token id {bad} is outside the vocabulary [0, {vocab_size})")
    if not ids:
        raise RequestError("prompt is empty")
    if len(ids) + 1 > max_model_len:
        raise PromptTooLong(
            f"prompt is {len(ids)} tokens but the context holds {max_model_len} "
            f"(prompt plus at least one generated token)"
        )
    return ids


def _encode(text: str, tokenizer: Tokenizer) -> list[int]:
    """Token ids of prompt text; text that is not valid Unicode is the caller's error, not a crash."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RequestError(
            f"prompt text is not valid Unicode: an unpaired surrogate at character {exc.start}"
        ) from None
    return tokenizer.encode(text)


def _is_token_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_ids(prompt: object) -> list[int]:
    """A prompt given as ids. Bytes are a sequence of ints too, but never meant as token ids."""
    if isinstance(prompt, bytes | bytearray | memoryview):
        raise RequestError("prompt must be a string or a list of token ids, not bytes (decode it to text)")
    if not isinstance(prompt, Sequence) or not all(_is_token_id(t) for t in prompt):
        raise RequestError("prompt must be a string or a list of token ids")
    return list(prompt)
