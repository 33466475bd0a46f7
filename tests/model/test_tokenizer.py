"""Tokenizer: chat rendering identical to transformers, stop ids, specials, streaming detokenization."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from tokenizers import Tokenizer as BackendTokenizer

from model.errors import ChatTemplateError, CheckpointError
from model.text.tokenizer import REPLY_MARKUP, IncrementalDetokenizer, Tokenizer

CONVERSATION = [
    {"role": "system", "content": "You are terse. Answer in one line."},
    {"role": "user", "content": "Name a prime 🙂"},
    {"role": "assistant", "content": "7 — 素数"},
    {"role": "user", "content": "And one above 10?"},
]
# Multibyte text the tiny tokenizer has rarely or never seen, so its bytes spread over several tokens.
MULTIBYTE = "Hi 🙂 你好 🦀 日本 ✨ naïve 🚀!"


def _copy(ckpt: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(ckpt, tmp_path / "ckpt"))


def _edit_tokenizer_config(ckpt: Path, **changes: object) -> None:
    path = ckpt / "tokenizer_config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def _assert_matches_transformers(ckpt: Path) -> None:
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoTokenizer.from_pretrained(ckpt)
    ours = Tokenizer.from_pretrained(ckpt)
    for messages, gen in [(CONVERSATION, True), (CONVERSATION, False), (CONVERSATION[1:2], True)]:
        text = reference.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False)
        ids = reference.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        assert ours.render_chat(messages, add_generation_prompt=gen) == text
        assert ours.encode_chat(messages, add_generation_prompt=gen) == list(ids)


def test_lfm2_template_matches_transformers(tiny_ckpt: Path) -> None:
    _assert_matches_transformers(tiny_ckpt)


def test_named_template_list_picks_default(tiny_ckpt: Path, tmp_path: Path) -> None:
    ckpt = _copy(tiny_ckpt, tmp_path)
    lfm2 = json.loads((ckpt / "tokenizer_config.json").read_text())["chat_template"]
    templates = [
        {"name": "tool_use", "template": "{{ raise_exception('wrong template') }}"},
        {"name": "default", "template": lfm2},
    ]
    _edit_tokenizer_config(ckpt, chat_template=templates)
    _assert_matches_transformers(ckpt)


def test_chat_template_jinja_file_wins(tiny_ckpt: Path, tmp_path: Path) -> None:
    """Newer Hub repos ship chat_template.jinja; block tags on their own lines exercise trim/lstrip_blocks."""
    ckpt = _copy(tiny_ckpt, tmp_path)
    (ckpt / "chat_template.jinja").write_text(
        "{{ bos_token }}\n"
        "{% for m in messages %}\n"
        "    {% if m.role == 'system' %}\n"
        "[sys] {{ m.content | upper }}\n"
        "    {% else %}\n"
        "<|im_start|>{{ m.role }} {{ m.content }}<|im_end|>\n"
        "    {% endif %}\n"
        "{% endfor %}\n"
        "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
    )
    _assert_matches_transformers(ckpt)
    assert "[sys] YOU ARE TERSE" in Tokenizer.from_pretrained(ckpt).render_chat(CONVERSATION)


def test_lfm2_chatml_format_and_single_bos(tiny_ckpt: Path) -> None:
    tok = Tokenizer.from_pretrained(tiny_ckpt)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    expected = (
        "<|startoftext|><|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert tok.render_chat(messages) == expected
    ids = tok.encode_chat(messages)
    assert ids[0] == tok.bos_token_id == tok.token_to_id("<|startoftext|>")
    assert ids.count(tok.bos_token_id) == 1


def test_missing_template_falls_back_to_lfm2_chatml(tiny_ckpt: Path, tmp_path: Path) -> None:
    ckpt = _copy(tiny_ckpt, tmp_path)
    _edit_tokenizer_config(ckpt, chat_template=None)
    assert Tokenizer.from_pretrained(ckpt).render_chat(CONVERSATION) == Tokenizer.from_pretrained(
        tiny_ckpt
    ).render_chat(CONVERSATION)


def _with_template(tiny_ckpt: Path, tmp_path: Path, template: str) -> Tokenizer:
    ckpt = _copy(tiny_ckpt, tmp_path)
    _edit_tokenizer_config(ckpt, chat_template=template)
    return Tokenizer.from_pretrained(ckpt)


def test_template_raise_exception_is_a_chat_template_error_with_its_message(
    tiny_ckpt: Path, tmp_path: Path
) -> None:
    tok = _with_template(tiny_ckpt, tmp_path, "{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ChatTemplateError) as info:
        tok.render_chat(CONVERSATION)
    assert str(info.value) == "roles must alternate" and isinstance(info.value, ValueError)


# Issue 17's freezing template: 10^10 loop steps, hours of work without a time limit.
NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


@pytest.mark.slow
def test_a_runaway_template_stops_at_the_default_limit(tiny_ckpt: Path, tmp_path: Path) -> None:
    tok = _with_template(tiny_ckpt, tmp_path, NESTED_LOOPS)
    with pytest.raises(ChatTemplateError, match="the chat template took longer than 2 s"):
        tok.render_chat(CONVERSATION)
    with pytest.raises(ChatTemplateError, match=r"took longer than 0\.1 s"):
        tok.encode_chat(CONVERSATION, time_limit=0.1)


@pytest.mark.parametrize(
    "template",
    [
        # 10^7 loop steps
        "{% for k in range(100) %}{% for i in range(100000) %}{{ k }}{% endfor %}{% endfor %}",
        # 2^25 macro calls and no loop at all
        "{% macro t(n) %}{% if n %}{{ t(n - 1) }}{{ t(n - 1) }}{% endif %}{% endmacro %}{{ t(25) }}",
    ],
    ids=["loops", "calls"],
)
def test_loops_and_calls_each_run_into_the_limit(tiny_ckpt: Path, tmp_path: Path, template: str) -> None:
    """Each takes many seconds unguarded, against a 0.05 s limit: no machine is fast enough to pass."""
    tok = _with_template(tiny_ckpt, tmp_path, template)
    with pytest.raises(ChatTemplateError, match=r"took longer than 0\.05 s"):
        tok.render_chat(CONVERSATION, time_limit=0.05)


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "RecursionError"),
        ("{{ messages.append(1) }}", "SecurityError"),
    ],
    ids=["division", "recursion", "sandbox"],
)
def test_a_failing_template_is_a_chat_template_error(
    tiny_ckpt: Path, tmp_path: Path, template: str, message: str
) -> None:
    with pytest.raises(ChatTemplateError, match=f"the chat template failed \\({message}"):
        _with_template(tiny_ckpt, tmp_path, template).render_chat(CONVERSATION)


def test_stop_tokens(tiny_ckpt: Path, tmp_path: Path) -> None:
    tok = Tokenizer.from_pretrained(tiny_ckpt, extra_stop_ids=[2])
    assert tok.stop_token_ids == {tok.token_to_id("<|im_end|>"), 2}
    ckpt = _copy(tiny_ckpt, tmp_path)
    _edit_tokenizer_config(ckpt, eos_token="<|endoftext|>")
    assert Tokenizer.from_pretrained(ckpt).stop_token_ids == {
        tok.token_to_id("<|im_end|>"),
        tok.token_to_id("<|endoftext|>"),
    }


def test_special_tokens_parsed_and_skipped(tiny_ckpt: Path) -> None:
    tok = Tokenizer.from_pretrained(tiny_ckpt)
    im_start, im_end = tok.token_to_id("<|im_start|>"), tok.token_to_id("<|im_end|>")
    ids = tok.encode("<|im_start|>user\nhello<|im_end|>")
    assert ids[0] == im_start and ids[-1] == im_end
    assert tok.is_special(im_end) and not tok.is_special(ids[1])
    assert tok.decode(ids) == "user\nhello"
    assert tok.decode(ids, skip_special_tokens=False) == "<|im_start|>user\nhello<|im_end|>"
    assert tok.encode("hello", add_special_tokens=True)[0] == tok.bos_token_id
    assert tok.vocab_size == json.loads((tiny_ckpt / "config.json").read_text())["vocab_size"]


def test_missing_or_broken_tokenizer_is_a_checkpoint_error(tiny_ckpt: Path, tmp_path: Path) -> None:
    ckpt = _copy(tiny_ckpt, tmp_path)
    (ckpt / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"tokenizer\.json"):
        Tokenizer.from_pretrained(ckpt)
    (ckpt / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer\.json is missing"):
        Tokenizer.from_pretrained(ckpt)


# ---------------------------------------------------------------- incremental detokenization
def _stream(detok: IncrementalDetokenizer, ids: Sequence[int], step: int = 1) -> list[str]:
    return [detok.add(ids[i : i + step]) for i in range(0, len(ids), step)]


def test_tokenizer_really_splits_multibyte_characters(tiny_ckpt: Path) -> None:
    """Guards the tests below: they only mean something if characters straddle tokens."""
    tok = Tokenizer.from_pretrained(tiny_ckpt)
    pieces = [tok.decode([i]) for i in tok.encode(MULTIBYTE)]
    assert sum("\ufffd" in p for p in pieces) >= 3


@pytest.mark.parametrize("step", [1, 2, 3])
def test_incremental_deltas_are_whole_characters(tiny_ckpt: Path, step: int) -> None:
    tok = Tokenizer.from_pretrained(tiny_ckpt)
    ids = tok.encode(MULTIBYTE + " and more text 中文 after")
    detok = IncrementalDetokenizer(tok)
    deltas = _stream(detok, ids, step)
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == detok.text == tok.decode(ids) == MULTIBYTE + " and more text 中文 after"
    assert detok.flush() == ""


def test_incremental_skips_special_tokens_and_uses_prompt(tiny_ckpt: Path) -> None:
    tok = Tokenizer.from_pretrained(tiny_ckpt)
    prompt = tok.encode_chat([{"role": "user", "content": "hi"}])
    generated = tok.encode("Sure 🙂<|im_end|><|im_start|>user\n好")
    detok = IncrementalDetokenizer(tok, prompt_ids=prompt)
    deltas = _stream(detok, generated)
    assert "".join(deltas) == detok.text == tok.decode(generated) == "Sure 🙂user\n好"
    assert all("<|" not in d for d in deltas)


def test_reply_markup_survives_skipping_special_tokens(tiny_ckpt: Path) -> None:
    """Thinking and tool-call tokens are special in LFM2.5's vocabulary, but they are reply text: the app
    folds and labels by them, and the template needs them in past turns."""
    backend = BackendTokenizer.from_file(str(tiny_ckpt / "tokenizer.json"))
    backend.add_special_tokens(["<think>", "</think>"])
    tok = Tokenizer(backend, {}, {})
    reply = "<think>hmm 🙂</think>Call:<|tool_call_start|>[f(x=1)]<|tool_call_end|>done"
    generated = tok.encode(reply + "<|im_end|>")
    assert all(tok.is_special(tok.token_to_id(m)) for m in REPLY_MARKUP)
    assert tok.decode(generated) == reply
    assert tok.decode(generated, skip_special_tokens=False) == reply + "<|im_end|>"
    for step in (1, 3):
        detok = IncrementalDetokenizer(tok, prompt_ids=tok.encode("<|im_start|>assistant\n"))
        assert "".join(_stream(detok, generated, step)) == reply


def test_incomplete_character_is_held_until_flush(tiny_ckpt: Path) -> None:
    tok = Tokenizer.from_pretrained(tiny_ckpt)
    ids = tok.encode("ok 🦀")
    cut = next(n for n in range(len(ids), 0, -1) if tok.decode(ids[:n]).endswith("\ufffd"))
    detok = IncrementalDetokenizer(tok)
    shown = "".join(_stream(detok, ids[:cut]))
    assert shown.startswith("ok") and "ok 🦀".startswith(shown)  # the crab's bytes are held back
    assert shown + detok.flush() == tok.decode(ids[:cut])


class _DecodeSpy:
    """The real tokenizer, recording how many ids each decode call receives."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok, self.longest = tok, 0

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        self.longest = max(self.longest, len(ids))
        return self.tok.decode(ids, skip_special_tokens)


def test_incremental_decodes_a_bounded_window(tiny_ckpt: Path) -> None:
    tok = Tokenizer.from_pretrained(tiny_ckpt)
    ids = tok.encode(MULTIBYTE * 30)
    spy = _DecodeSpy(tok)
    detok = IncrementalDetokenizer(spy, prompt_ids=ids[:50])  # type: ignore[arg-type]
    _stream(detok, ids)
    assert detok.text == tok.decode(ids)
    assert spy.longest <= 12 < len(ids)
