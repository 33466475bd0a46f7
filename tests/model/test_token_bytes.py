"""Each token's own bytes (model/text/token_bytes.py): joined token after token they are the text's
UTF-8 exactly, also where one token holds only part of a character, for byte-level BPE (LFM2's) and
for a byte-fallback vocabulary; special tokens are their names."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as BackendTokenizer
from tokenizers import decoders, models

from model.text.token_bytes import TokenBytes, byte_level_chars
from model.text.tokenizer import IM_END, Tokenizer

SPLIT = "héllo → 世界 🦀"  # characters the tiny vocabulary splits into byte tokens


def valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_the_byte_level_map_covers_every_byte_once() -> None:
    chars = byte_level_chars()
    assert sorted(chars.values()) == list(range(256)) and chars["A"] == ord("A") and chars["Ġ"] == ord(" ")


@pytest.fixture(scope="module")
def tokenizer(tiny_ckpt: Path) -> Tokenizer:
    return Tokenizer.from_pretrained(tiny_ckpt)


def test_tokens_that_split_a_character_give_their_own_bytes(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(SPLIT)
    partial = [i for i in ids if tokenizer.decode([i]) == "\ufffd"]
    assert partial, "the tiny vocabulary should split some character of the sample"
    assert all(not valid_utf8(tokenizer.token_bytes(i)) for i in partial)  # not U+FFFD's 3 bytes
    assert b"".join(tokenizer.token_bytes(i) for i in ids) == SPLIT.encode()
    im_end = tokenizer.token_to_id(IM_END)
    assert tokenizer.token_bytes(im_end) == IM_END.encode()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=40))
def test_joined_token_bytes_are_the_texts_utf8(tokenizer: Tokenizer, text: str) -> None:
    ids = tokenizer.encode(text)
    assert b"".join(tokenizer.token_bytes(i) for i in ids) == text.encode()


def test_byte_fallback_tokens_are_their_byte() -> None:
    vocab = {"<unk>": 0, **{f"<0x{byte:02X}>": 1 + byte for byte in range(256)}, "▁hi": 257, "é": 258}
    backend = BackendTokenizer(models.BPE(vocab, [], unk_token="<unk>", byte_fallback=True))
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    token_bytes = TokenBytes(backend, lambda i: backend.decode([i]))
    assert [token_bytes(1 + 0xE2), token_bytes(258), token_bytes(257)] == [b"\xe2", "é".encode(), b" hi"]
