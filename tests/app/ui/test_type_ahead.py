"""Text typed while the model loads: pastes are cleaned and bounded where they enter."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from textual import events

from app.ui.paste import PASTE_LIMIT_BYTES
from app.ui.type_ahead import TypeAhead

CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="\x1b\x9b\x9c\x90[]P^_\\;0:m\x07\x00\r\n\ta") | st.text(), max_size=5))
def test_pasted_text_keeps_no_control_characters(pastes: list[str]) -> None:
    typed = TypeAhead()
    for text in pastes:
        typed.paste(events.Paste(text))
    assert not CONTROLS.search(typed.text)


def test_a_paste_past_the_box_limit_is_refused_with_a_sentence_and_what_was_typed_stays() -> None:
    typed = TypeAhead()
    typed.paste(events.Paste("kept "))
    refusal = typed.paste(events.Paste("x" * PASTE_LIMIT_BYTES))
    assert refusal is not None and "larger than 256 KiB" in refusal  # the box's own sentence
    assert typed.text == "kept "
    fill = "é" * ((PASTE_LIMIT_BYTES - 5) // 2)  # two bytes each: what still fits
    typed.paste(events.Paste(fill))
    assert typed.text == "kept " + fill and len(typed.text.encode()) <= PASTE_LIMIT_BYTES
