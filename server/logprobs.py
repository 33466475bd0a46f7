"""The engine's token logprobs in OpenAI's two shapes: chat's ``logprobs.content`` entries and the
legacy completions' parallel lists.

    chat         {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
    completions  {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}],
                  "text_offset": [...]}

A token's text is its own decoding (special tokens by name): a token that is part of a character
decodes to U+FFFD, as vLLM shows it. Its ``bytes`` are the token's own (model/text/token_bytes.py),
as OpenAI documents them, so a client joining them rebuilds the reply's text: vLLM sends U+FFFD's
three bytes instead, and a joined split character comes out as replacement characters. JSON has
no -inf, so a token the model rules out entirely is reported at FLOOR, as vLLM does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from engine import TokenLogprob

FLOOR = -9999.0


class LogprobShapes:
    """Formats logprobs for one tokenizer; each token's text is decoded once (at most the vocabulary)."""

    def __init__(self, decode: Callable[[int], str], token_bytes: Callable[[int], bytes]) -> None:
        """``decode``: one token id's text; ``token_bytes``: its own bytes (the tokenizer caches them)."""
        self._decode = decode
        self._token_bytes = token_bytes
        self._texts: dict[int, str] = {}

    def text(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self._decode(token_id)
        return text

    def _entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = self.text(token_id)
        return {"token": text, "logprob": max(logprob, FLOOR), "bytes": list(self._token_bytes(token_id))}

    def chat(self, entries: Sequence[TokenLogprob]) -> dict[str, Any]:
        """Chat's ``choices[i].logprobs`` for these tokens."""
        content = []
        for entry in entries:
            top = [self._entry(token, logprob) for token, logprob in entry.top]
            content.append({**self._entry(entry.token_id, entry.logprob), "top_logprobs": top})
        return {"content": content}

    def completion(self, entries: Sequence[TokenLogprob], offset: int) -> tuple[dict[str, Any], int]:
        """The completions endpoint's ``choices[i].logprobs`` for these tokens, the first starting at
        character ``offset`` of the choice's text; and the offset after the last."""
        tokens, offsets = [], []
        for entry in entries:
            tokens.append(self.text(entry.token_id))
            offsets.append(offset)
            offset += len(tokens[-1])
        shaped = {
            "tokens": tokens,
            "token_logprobs": [max(entry.logprob, FLOOR) for entry in entries],
            "top_logprobs": [self._top(entry.top) for entry in entries],
            "text_offset": offsets,
        }
        return shaped, offset

    def _top(self, top: Iterable[tuple[int, float]]) -> dict[str, float]:
        return {self.text(token): max(logprob, FLOOR) for token, logprob in top}
