"""A `Structure` compiled by llguidance into a matcher: one per request, copied from a cached one.

llguidance builds its token trie from the checkpoint's tokenizer.json once, on a thread of its own
started by the first constrained request (`start_build`), so engines that never see a structure
never pay for it and the engine's step never waits for it: the requests that need it wait in the
engine until `ready()`. The build's cost grows with the square of the tokenizer's added tokens: the
benchmarks' random checkpoint (928 BPE tokens, 64,608 reserved special ones) took 122 s on the
2-core build machine under load; a real vocabulary of merges is seconds. Each structure's grammar is
checked and its first matcher built once, then kept by the structure's text: requests with the
same schema start from a copy, which costs microseconds instead of a lexer build.

Every limit llguidance has is set here, explicitly: a structure is outside input, and its compile
must end in an error, not a hang or a gigabyte. The fuel figures are llguidance's own measures
(lexer fuel ~50k/ms while building, ~14k/ms per mask; Earley items ~20k/ms). llguidance walks a
grammar's rules recursively, and a chain of a few thousand rules overflows a thread's usual 8 MiB
stack (a segfault, not an error), so compiles run on a thread with COMPILE_STACK_BYTES: enough for
the longest chain that fits MAX_STRUCTURE_CHARS (and virtual memory only, until touched).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import llguidance

from engine.core.structure import RequestGrammar, Structure, StructureError
from model.text.tokenizer import IM_END, Tokenizer

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # a TypedDict of the stubs only


def parser_limits() -> llguidance.LLParserLimits:
    """Every limit llguidance has, explicitly (the module docstring says why)."""
    return llguidance.LLParserLimits(
        max_items_in_row=2000,  # alternatives in one grammar row (an enum's entries)
        initial_lexer_fuel=1_000_000,  # ~20 ms to build the lexer's regexes
        step_lexer_fuel=200_000,  # ~15 ms for one mask at worst
        step_max_items=50_000,  # ~2.5 ms of Earley items per step
        max_lexer_states=50_000,  # ~100 MB of lexer states at most
        max_grammar_size=200_000,  # symbols in all productions
        verbose_errors=False,  # errors name the problem without echoing the grammar back
    )


COMPILE_STACK_BYTES = 256 * 2**20
COMPILE_SECONDS = 10.0  # past this a compile is abandoned (it still ends, by its fuel, off the engine's path)
CACHED_GRAMMARS = 64  # compiled structures kept by text (a server's few schemas, each reused)
# JSON without optional whitespace: fewer tokens, and a model cannot wander off into blank runs
JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": False}


def grammar_text(structure: Structure) -> str:
    """The llguidance grammar of ``structure`` (not yet checked: the matcher does that)."""
    kind, text = structure.kind, structure.text
    if kind == "json_schema":
        return llguidance.LLMatcher.grammar_from_json_schema(text, defaults=JSON_OPTIONS)
    if kind == "json_object":
        return llguidance.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_OPTIONS)
    if kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(text)
    if kind == "choice":  # JSON string literals are Lark's too
        alternatives = " | ".join(json.dumps(choice) for choice in structure.value)
        return llguidance.LLMatcher.grammar_from_lark(f"start: {alternatives}\n")
    return llguidance.LLMatcher.grammar_from_lark(text)


def check_structure(structure: Structure) -> None:
    """StructureError if ``structure`` cannot compile, found without a tokenizer or a model: a
    command line refuses a bad schema before it loads anything (the engine checks again, fully)."""
    try:
        error = _on_big_stack(
            lambda: llguidance.LLMatcher.validate_grammar(grammar_text(structure), limits=parser_limits())
        )
    except ValueError as exc:
        error = str(exc)
    if error is None:
        raise _too_slow(structure)
    if error:
        raise _not_compiling(structure, error)


class GrammarCompiler:
    """Structures to fresh matchers over one tokenizer; thread-safe (the worker and callers share it)."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int) -> None:
        """``vocab_size``: the model's logits width, which may exceed the tokenizer's ids."""
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._lock = threading.Lock()
        self._lltokenizer: llguidance.LLTokenizer | None = None
        self._build: threading.Thread | None = None
        self._built = threading.Event()  # set once the build ended, well or not
        self._build_error: Exception | None = None
        self._cache: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()

    @property
    def eos_token_id(self) -> int:
        """The token that ends a constrained reply: <|im_end|>, else the lowest stop id."""
        im_end = self._tokenizer.token_to_id(IM_END)
        return im_end if im_end is not None else min(self._tokenizer.stop_token_ids)

    def start_build(self) -> None:
        """Begin building llguidance's tokenizer on a thread of its own, once (later calls return)."""
        with self._lock:
            if self._build is None:
                self._build = threading.Thread(
                    target=self._build_lltokenizer, name="grammar-tokenizer", daemon=True
                )
                self._build.start()

    def ready(self) -> bool:
        """Whether `grammar` can compile without waiting for the tokenizer build (which this starts)."""
        self.start_build()
        return self._built.is_set()

    def wait_ready(self, timeout: float) -> bool:
        """`ready`, waiting up to ``timeout`` seconds for the build to end."""
        self.start_build()
        return self._built.wait(timeout)

    def _build_lltokenizer(self) -> None:
        try:
            n_vocab = max(self._vocab_size, self._tokenizer.vocab_size)
            self._lltokenizer = llguidance.LLTokenizer(
                self._tokenizer.to_json(), n_vocab=n_vocab, eos_token=self.eos_token_id
            )
        except Exception as exc:  # handed to every structure's compile
            self._build_error = exc
        finally:
            self._built.set()

    @property
    def lltokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's tokenizer, waiting for its build if it is not done."""
        self.start_build()
        self._built.wait()
        if self._lltokenizer is None:
            raise StructureError(f"llguidance cannot read this checkpoint's tokenizer ({self._build_error})")
        return self._lltokenizer

    def grammar(self, structure: Structure) -> RequestGrammar:
        """A request's grammar at the start of ``structure``; StructureError if it does not compile."""
        return RequestGrammar(self._matcher(structure), -(-self.lltokenizer.vocab_size // 32))

    def _matcher(self, structure: Structure) -> llguidance.LLMatcher:
        key = f"{structure.kind}\0{structure.text}"
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached.deep_copy()
        lltokenizer = self.lltokenizer  # built once, before the clock that bounds a structure's compile
        compiled = _on_big_stack(lambda: self._compile(structure, lltokenizer))
        if compiled is None:
            raise _too_slow(structure)
        with self._lock:
            self._cache[key] = compiled
            while len(self._cache) > CACHED_GRAMMARS:
                self._cache.popitem(last=False)
        return compiled.deep_copy()

    def _compile(self, structure: Structure, lltokenizer: llguidance.LLTokenizer) -> llguidance.LLMatcher:
        try:
            grammar = grammar_text(structure)
        except ValueError as exc:
            raise _not_compiling(structure, str(exc)) from None
        matcher = llguidance.LLMatcher(lltokenizer, grammar, log_level=0, limits=parser_limits())
        if matcher.is_error():
            raise _not_compiling(structure, matcher.get_error())
        return matcher


T = TypeVar("T")


def _on_big_stack(work: Callable[[], T]) -> T | None:
    """``work()`` on a fresh thread with COMPILE_STACK_BYTES of stack; None if it runs past
    COMPILE_SECONDS. Its exception is raised here."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    previous = threading.stack_size(COMPILE_STACK_BYTES)
    try:
        thread = threading.Thread(target=run, name="structure-compile", daemon=True)
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join(COMPILE_SECONDS)
    if error:
        raise error[0]
    return result[0] if result else None


def _too_slow(structure: Structure) -> StructureError:
    return StructureError(f"the {structure.kind} structure took longer than {COMPILE_SECONDS:g} s to compile")


def _not_compiling(structure: Structure, error: str) -> StructureError:
    """llguidance's reason, without the trace it may append."""
    reason = error.strip().splitlines()[0][:500] if error.strip() else "unknown error"
    return StructureError(f"the {structure.kind} structure does not compile: {reason}")
