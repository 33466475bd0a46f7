"""Output processing: streamed text deltas, stop strings, and how stop tokens and max_tokens end the text."""

from __future__ import annotations

import pytest

from engine.core.request import RequestStatus
from engine.loop.output import OutputProcessor
from model.text.tokenizer import Tokenizer

TEXT = "Hello! How are you today? I am fine, thank you. 🙂 The end."


@pytest.fixture(scope="module")
def tokenizer(tiny_ckpt) -> Tokenizer:
    return Tokenizer.from_pretrained(tiny_ckpt)


def feed(request, ids: list[int], tokenizer: Tokenizer) -> tuple[list[str], str]:
    """Append ids one by one as steps would; the text delta reported after each, and the final text."""
    outputs = OutputProcessor(tokenizer)
    outputs.add(request)
    deltas, out = [], None
    for token in ids:
        outputs.append(request, token, now=0.0)
        out = outputs.output(request)
        deltas.append(out.new_text)
        if request.is_finished:
            break
    return deltas, out.text


def make(new_request, **params):
    return new_request([20, 21], max_tokens=params.pop("max_tokens", 100), **params)


def test_streamed_deltas_add_up_to_the_decoded_text(new_request, tokenizer):
    ids = tokenizer.encode(TEXT)
    request = make(new_request)
    deltas, text = feed(request, ids, tokenizer)
    assert "".join(deltas) == TEXT == text
    assert not request.is_finished


@pytest.mark.parametrize("stop", ["you", "thank you.", "🙂", "!"])
def test_stop_string_cuts_the_text_before_it_and_never_streams_part_of_it(new_request, tokenizer, stop):
    request = make(new_request, stop=["zzz", stop])
    deltas, text = feed(request, tokenizer.encode(TEXT), tokenizer)
    expected = TEXT[: TEXT.index(stop)]
    assert request.status is RequestStatus.FINISHED_STOPPED
    assert text == expected and "".join(deltas) == expected


def test_stop_token_finishes_without_becoming_text(new_request, tokenizer):
    im_end = tokenizer.token_to_id("<|im_end|>")
    request = make(new_request, stop_ids={im_end})
    _, text = feed(request, [*tokenizer.encode("Hello"), im_end, *tokenizer.encode(" more")], tokenizer)
    assert request.status is RequestStatus.FINISHED_STOPPED
    assert text == "Hello" and request.output_token_ids[-1] == im_end


def test_max_tokens_finishes_with_length_and_flushes_a_split_character(new_request, tokenizer):
    ids = tokenizer.encode("ab🙂")
    assert len(tokenizer.encode("🙂")) > 1  # the emoji spans several byte tokens
    request = make(new_request, max_tokens=len(ids) - 1)
    deltas, text = feed(request, ids, tokenizer)
    assert request.status is RequestStatus.FINISHED_LENGTH
    assert "".join(deltas) == text == tokenizer.decode(ids[:-1])
    assert request.metrics.generated_tokens == len(ids) - 1


def test_the_final_output_forgets_the_request(new_request, tokenizer):
    """Text state lives only as long as the request: a long-running engine does not collect it."""
    outputs = OutputProcessor(tokenizer)
    request = make(new_request, max_tokens=1)
    outputs.add(request)
    outputs.append(request, tokenizer.encode("Hi")[0], now=0.0)
    assert outputs.output(request).finished and not outputs._texts
