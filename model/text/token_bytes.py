"""Each token's own bytes, which decoding one token alone cannot give.

A token that holds part of a UTF-8 character (a byte-level BPE piece that splits one, or a
byte-fallback token such as ``<0xE2>``) decodes alone to U+FFFD; its bytes are what a client joins,
token after token, to rebuild the text (OpenAI's logprob ``bytes``). They come from the vocabulary
entry itself, read as the tokenizer's decoder reads it:

    ByteLevel decoder      each character of the entry stands for one byte (GPT-2's byte-to-character map)
    ByteFallback decoder   an entry ``<0xNN>`` is the byte NN
    added tokens, others   the decoded text's UTF-8 (exact: such entries hold whole characters)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from tokenizers import Tokenizer as BackendTokenizer

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def byte_level_chars() -> dict[str, int]:
    """GPT-2's map from the character standing for a byte in a byte-level vocabulary to that byte:
    printable Latin-1 bytes stand for themselves, the others for the characters from U+0100 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = {chr(byte): byte for byte in printable}
    others = (byte for byte in range(256) if byte not in chars.values())
    chars.update({chr(0x100 + index): byte for index, byte in enumerate(others)})
    return chars


class TokenBytes:
    """The bytes of one tokenizer's tokens, each worked out once when first asked for."""

    def __init__(self, backend: BackendTokenizer, decode: Callable[[int], str]) -> None:
        """``decode``: one token id's text (the fallback for tokens no decoder rule covers)."""
        self._backend = backend
        self._decode = decode
        self._added = frozenset(backend.get_added_tokens_decoder())
        decoders = set(_decoder_types(json.loads(backend.to_str()).get("decoder")))
        self._byte_level = byte_level_chars() if "ByteLevel" in decoders else None
        self._byte_fallback = "ByteFallback" in decoders
        self._cache: dict[int, bytes] = {}

    def __call__(self, token_id: int) -> bytes:
        found = self._cache.get(token_id)
        if found is None:
            found = self._cache[token_id] = self._bytes_of(token_id)
        return found

    def _bytes_of(self, token_id: int) -> bytes:
        entry = None if token_id in self._added else self._backend.id_to_token(token_id)
        if entry is not None:
            if self._byte_fallback and (match := _BYTE_FALLBACK.fullmatch(entry)):
                return bytes([int(match.group(1), 16)])
            if self._byte_level is not None and all(char in self._byte_level for char in entry):
                return bytes(self._byte_level[char] for char in entry)
        return self._decode(token_id).encode("utf-8")


def _decoder_types(decoder: Any) -> Iterator[str]:
    """The types of a serialised decoder and of those a Sequence decoder holds."""
    if isinstance(decoder, dict):
        yield str(decoder.get("type"))
        for inner in decoder.get("decoders") or ():
            yield from _decoder_types(inner)
