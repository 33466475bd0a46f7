"""A checkpoint's tokenizer: ``tokenizer.json`` through ``tokenizers`` plus its chat template(s).

We do not use ``transformers`` at run time, so this module reproduces the two parts of its
tokenizer that a chat app needs: rendering the chat template exactly as
``apply_chat_template`` does (model/text/chat_template.py; the template files found where
transformers finds them, the same special-token variables) and streaming detokenization that
never shows half a character.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as BackendTokenizer

from model.arch.lfm2_config import read_json_object
from model.errors import CheckpointError, TokenizerCrash
from model.small_file import JSON_BYTES, read_small_file
from model.text import template_worker
from model.text.chat_template import LFM2_CHAT_TEMPLATE, RENDER_TIME_LIMIT, ChatTemplate
from model.text.token_bytes import TokenBytes

Message = Mapping[str, Any]

BOS_TOKEN = "<|startoftext|>"
IM_END = "<|im_end|>"
# Special tokens that belong to a reply's text: decoding keeps them even when it skips the other
# special tokens, because the app folds thinking and labels tool calls by them, and the chat
# template needs them in past turns (to strip the thinking, to show the calls).
REPLY_MARKUP = ("<think>", "</think>", "<|tool_call_start|>", "<|tool_call_end|>")
# LFM2's special tokens, in id order 0..13 (the same in every LFM2 checkpoint).
LFM2_SPECIAL_TOKENS = (
    "<|pad|>",
    BOS_TOKEN,
    "<|endoftext|>",
    "<|fim_pre|>",
    "<|fim_mid|>",
    "<|fim_suf|>",
    "<|im_start|>",
    IM_END,
    "<|tool_list_start|>",
    "<|tool_list_end|>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    "<|tool_response_start|>",
    "<|tool_response_end|>",
)

# Special-token variables that transformers exposes to chat templates (its special_tokens_map).
_TEMPLATE_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
DEFAULT_TEMPLATE = "default"
# A chat template's source: real ones are 1-30 KiB; parsing one costs memory and time in proportion.
TEMPLATE_SOURCE_LIMIT = 2**20
_LFM2_TEMPLATE = ChatTemplate(LFM2_CHAT_TEMPLATE, "LFM2's built-in chat template")
TOOL_TEMPLATE = "tool_use"  # transformers' choice for a render with tools, when a checkpoint names one


def _token_content(value: Any) -> str | None:
    """A special token as tokenizer_config.json spells it: a string or a serialised AddedToken."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_chat_templates(root: Path, tokenizer_config: Mapping[str, Any]) -> dict[str, ChatTemplate]:
    """Templates by name, found as transformers finds them, each compiled and named by its file.

    Files win over tokenizer_config.json: chat_template.jinja is "default", and each
    additional_chat_templates/NAME.jinja is NAME. In the config, "chat_template" is one template
    or a list of {"name", "template"}. CheckpointError naming the file for anything else.
    """
    files = {"default": root / "chat_template.jinja"}
    files.update((path.stem, path) for path in sorted((root / "additional_chat_templates").glob("*.jinja")))
    found = {name: path for name, path in files.items() if path.exists()}  # a FIFO too: refused, said
    if found:
        return {name: _compile(_read_template_file(path), str(path)) for name, path in found.items()}
    template = tokenizer_config.get("chat_template")
    origin = f"the chat_template of {root / 'tokenizer_config.json'}"
    if template is None:
        return {}
    if isinstance(template, str):
        return {"default": _compile(template, origin)}
    named: list[Any] = template if isinstance(template, list) else [None]
    if not all(isinstance(t, Mapping) and isinstance(t.get("template"), str) for t in named):
        raise CheckpointError(f"{origin} is not a template (a string, or a list of name and template)")
    return {str(t.get("name")): _compile(t["template"], f"{origin} named {t.get('name')!r}") for t in named}


def _read_template_file(path: Path) -> str:
    """A template file's text: UTF-8, at most TEMPLATE_SOURCE_LIMIT bytes."""
    data = read_small_file(path, TEMPLATE_SOURCE_LIMIT)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path} is not UTF-8 (byte {exc.start} is {data[exc.start]:#04x})") from None


def _check_source_size(size: int, origin: str) -> None:
    if size > TEMPLATE_SOURCE_LIMIT:
        raise CheckpointError(
            f"{origin} is larger than {TEMPLATE_SOURCE_LIMIT >> 10} KiB: not a chat template"
        )


def _compile(source: str, origin: str) -> ChatTemplate:
    _check_source_size(len(source.encode("utf-8", "surrogatepass")), origin)
    try:
        return ChatTemplate(source, origin)
    except Exception as exc:  # a TemplateSyntaxError, or a nesting deep enough for a RecursionError
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise CheckpointError(
            f"the checkpoint's chat template does not compile ({reason}), in {origin}"
        ) from None


@contextmanager
def native_crash_caught() -> Iterator[None]:
    """A panic in ``tokenizers``' Rust code (pyo3's PanicException, a BaseException that no
    ``except Exception`` stops, so it would end the engine's thread) as a TokenizerCrash: the one
    text fails with a sentence. What Rust printed on fd 2 is kept off the screen by the chat app
    (cli/terminal.py)."""
    try:
        yield
    except Exception:
        raise
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":  # KeyboardInterrupt, SystemExit, GeneratorExit
            raise
        said = " ".join(str(exc).split())[:200]
        raise TokenizerCrash(f"the checkpoint's tokenizer crashed on this text ({said})") from None


class Tokenizer:
    """Text <-> ids and chat rendering for one checkpoint."""

    def __init__(
        self,
        backend: BackendTokenizer,
        chat_templates: Mapping[str, ChatTemplate],
        template_tokens: Mapping[str, str],
        extra_stop_ids: Iterable[int] = (),
    ) -> None:
        """``chat_templates`` by name (_read_chat_templates); without a "default", LFM2's ChatML is it."""
        self._backend = backend
        self._templates = {DEFAULT_TEMPLATE: _LFM2_TEMPLATE, **chat_templates}
        self._template_tokens = dict(template_tokens)
        self._special_ids = frozenset(
            i for i, tok in backend.get_added_tokens_decoder().items() if tok.special
        )
        self._markup = {i: tok for tok in REPLY_MARKUP if (i := backend.token_to_id(tok)) is not None}
        self.bos_token_id = self._id_of(template_tokens.get("bos_token"))
        stops = {self._id_of(IM_END), self._id_of(template_tokens.get("eos_token")), *extra_stop_ids}
        self.stop_token_ids: frozenset[int] = frozenset(i for i in stops if i is not None)
        self._token_bytes: TokenBytes | None = None  # built when first asked for

    @classmethod
    def from_pretrained(cls, checkpoint_dir: str | Path, extra_stop_ids: Iterable[int] = ()) -> Tokenizer:
        """Load tokenizer.json, tokenizer_config.json and the chat template from a checkpoint directory.

        ``extra_stop_ids`` are the model config's eos ids: generation stops on those too.
        """
        root = Path(checkpoint_dir)
        path = root / "tokenizer.json"
        if not path.exists():
            raise CheckpointError(f"{path} is missing: the checkpoint has no tokenizer")
        data = read_small_file(path, JSON_BYTES)
        try:
            with native_crash_caught():
                backend = BackendTokenizer.from_str(data.decode("utf-8"))
        except Exception as exc:  # tokenizers raises a bare Exception for any parse error (bad UTF-8 too)
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise CheckpointError(f"{path} is not a valid tokenizer file ({reason})") from None
        config_path = root / "tokenizer_config.json"
        config = read_json_object(config_path) if config_path.exists() else {}
        tokens = {name: _token_content(config.get(name)) for name in _TEMPLATE_TOKEN_NAMES}
        if tokens["bos_token"] is None and backend.token_to_id(BOS_TOKEN) is not None:
            tokens["bos_token"] = BOS_TOKEN
        present = {name: tok for name, tok in tokens.items() if tok is not None}
        tokenizer = cls(backend, _read_chat_templates(root, config), present, extra_stop_ids)
        template_worker.warm()  # a render worker starts while the weights load, not at the first prompt
        return tokenizer

    # ------------------------------------------------------------------ vocabulary
    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def to_json(self) -> str:
        """The vocabulary and its pipeline as ``tokenizers`` serialises them (a grammar engine builds its
        token trie from this)."""
        return self._backend.to_str()

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def same_vocabulary(self, other: Tokenizer) -> bool:
        """Every token has the same id in both (a draft model's drafts mean the same text)."""
        mine, theirs = (t._backend.get_vocab(with_added_tokens=True) for t in (self, other))
        return mine == theirs

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids

    def token_bytes(self, token_id: int) -> bytes:
        """The token's own bytes, which may be part of a character (model/text/token_bytes.py)."""
        if self._token_bytes is None:
            self._token_bytes = TokenBytes(
                self._backend, lambda i: self.decode([i], skip_special_tokens=False)
            )
        return self._token_bytes(token_id)

    def _id_of(self, token: str | None) -> int | None:
        return None if token is None else self._backend.token_to_id(token)

    # ------------------------------------------------------------------ text
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; special-token strings inside it become their special ids."""
        with native_crash_caught():
            return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; skipping special tokens still keeps REPLY_MARKUP (decoded run by run around it,
        which is exact for LFM2's byte-level BPE)."""
        with native_crash_caught():
            return self._decode(list(ids), skip_special_tokens)

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        if not skip_special_tokens or self._markup.keys().isdisjoint(ids):
            return self._backend.decode(ids, skip_special_tokens=skip_special_tokens)
        plain = partial(self._backend.decode, skip_special_tokens=True)
        parts: list[str] = []
        start = 0
        for index, token_id in enumerate(ids):
            if token_id in self._markup:
                parts += [plain(ids[start:index]), self._markup[token_id]]
                start = index + 1
        parts.append(plain(ids[start:]))
        return "".join(parts)

    # ------------------------------------------------------------------ chat
    @property
    def chat_template(self) -> str:
        """The default template's source (what a plain conversation renders with)."""
        return self._templates[DEFAULT_TEMPLATE].source

    def render_chat(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = True,
        time_limit: float = RENDER_TIME_LIMIT,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **variables: Any,
    ) -> str:
        """The prompt text for a conversation, exactly as transformers' ``apply_chat_template`` renders it.

        ``tools`` are JSON schemas; ``variables`` reach the template beside the special tokens
        (``keep_past_thinking=True``...). The template is the checkpoint's code: ChatTemplateError if
        it refuses the conversation, fails, or runs longer than ``time_limit`` seconds.
        """
        name = TOOL_TEMPLATE if tools is not None and TOOL_TEMPLATE in self._templates else DEFAULT_TEMPLATE
        return self._templates[name].render(
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            time_limit=time_limit,
            **{**self._template_tokens, **variables},
        )

    def encode_chat(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = True,
        time_limit: float = RENDER_TIME_LIMIT,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **variables: Any,
    ) -> list[int]:
        """Prompt ids for a conversation. The BOS is part of the template text, so none is added here."""
        text = self.render_chat(messages, add_generation_prompt, time_limit, tools=tools, **variables)
        return self.encode(text, add_special_tokens=False)


class IncrementalDetokenizer:
    """Turns a stream of generated ids into text deltas, one call per step.

    Decoding only the new ids would be wrong (byte-level BPE splits a character across
    tokens, and some decoders change a token's text depending on what precedes it), and
    decoding everything again each step is quadratic. Like vLLM, we decode a short window
    twice: ``ids[prefix:read]`` (already emitted) and ``ids[prefix:]``; the difference is the
    delta. While the window's text ends in U+FFFD a character is incomplete, so we emit
    nothing and wait for more bytes. Only the window is kept, so each call costs O(window).

        ids:   ... | prefix ... read | new ids
                     \\_ emitted _/    \\_ delta once it decodes cleanly
    """

    PROMPT_CONTEXT = 5  # prompt ids kept as decoding context for the first generated token

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int] | None = None) -> None:
        self._tokenizer = tokenizer
        self._ids = list(prompt_ids[-self.PROMPT_CONTEXT :]) if prompt_ids else []
        self._prefix = 0
        self._read = len(self._ids)
        self._parts: list[str] = []

    @property
    def text(self) -> str:
        """All text emitted so far (equal to decoding all generated ids, once flushed)."""
        return "".join(self._parts)

    def add(self, token_ids: int | Iterable[int]) -> str:
        """Append generated ids; return the new text, or "" while a character is still incomplete."""
        self._ids.extend([token_ids] if isinstance(token_ids, int) else token_ids)
        return self._emit(final=False)

    def flush(self) -> str:
        """At the end of a stream, emit whatever is held back (an unfinished character shows as U+FFFD)."""
        return self._emit(final=True)

    def _emit(self, final: bool) -> str:
        decode = self._tokenizer.decode
        emitted = decode(self._ids[self._prefix : self._read])
        window = decode(self._ids[self._prefix :])
        if len(window) <= len(emitted) or (window.endswith("\ufffd") and not final):
            return ""
        delta = window[len(emitted) :]
        self._parts.append(delta)
        del self._ids[: self._read]  # the newly emitted ids become the next window's context
        self._prefix, self._read = 0, len(self._ids)
        return delta
