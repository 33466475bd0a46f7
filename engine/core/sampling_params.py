"""How one request wants its tokens chosen and when it wants to stop.

Validation happens here, at construction, so a bad value is a clear error for the caller who
made it instead of a crash (or a silently wrong sample) deep inside a batched engine step.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.core.structure import Structure

# Below this temperature logits / T overflows float32 long before the distribution differs
# from argmax in any way that matters, so such requests are treated as greedy (as vLLM does).
GREEDY_TEMPERATURE = 1e-5

_SEED_LIMIT = 2**64  # torch.Generator.manual_seed accepts seeds in [0, 2**64)
# Past these, output is no more useful but the arithmetic degrades: 1e300 is inf in float32, and a
# penalty of inf times a logit of 0 is NaN. Stop strings are matched at every step of the batch.
MAX_TEMPERATURE = 100.0
MIN_REPETITION_PENALTY, MAX_REPETITION_PENALTY = 0.01, 100.0
MAX_STOP_STRINGS, MAX_STOP_LENGTH = 16, 256
# OpenAI's and vLLM's bounds: top logprobs per token, and the size of one token's bias.
MAX_LOGPROBS = 20
MAX_LOGIT_BIAS = 100.0
# No vocabulary is larger, so a longer dict is refused before its entries are looked at; the engine
# checks every id against its own vocabulary (which bounds a valid dict by the vocabulary's size).
MAX_LOGIT_BIAS_ENTRIES = 2**18


class SamplingParamsError(ValueError):
    """A SamplingParams field is out of range; the message names the field and the allowed range."""


def _shown(value: object) -> str:
    """A value for an error message: its repr, abbreviated when long (a dict of every token id)."""
    text = repr(value)
    return text if len(text) <= 200 else reprlib.repr(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    """An int or a float that is not NaN (no float conversion: int(1e400) would overflow it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or not math.isnan(value)


def _is_text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _is_logit_bias(value: object) -> bool:
    return (
        isinstance(value, dict)
        and len(value) <= MAX_LOGIT_BIAS_ENTRIES
        and all(
            _is_int(k) and k >= 0 and _is_real(v) and -MAX_LOGIT_BIAS <= v <= MAX_LOGIT_BIAS
            for k, v in value.items()
        )
    )


def _is_list_of(value: object, item_ok: Callable[[object], bool]) -> bool:
    return isinstance(value, list | tuple) and all(item_ok(item) for item in value)


def _is_stop_string(value: object) -> bool:
    return _is_text(value) and len(value) <= MAX_STOP_LENGTH


def _is_stop_list(value: object) -> bool:
    return _is_list_of(value, _is_stop_string) and len(value) <= MAX_STOP_STRINGS


# (field, check, allowed range as shown to the user); checked in this order.
_RULES: tuple[tuple[str, Callable[[object], bool], str], ...] = (
    (
        "temperature",
        lambda v: _is_real(v) and 0 <= v <= MAX_TEMPERATURE,
        f"a number in [0, {MAX_TEMPERATURE:g}] (0 = greedy)",
    ),
    ("top_k", lambda v: _is_int(v) and v >= -1, "an int >= -1 (0 or -1 = off)"),
    ("top_p", lambda v: _is_real(v) and 0 < v <= 1, "a number in (0, 1]"),
    ("min_p", lambda v: _is_real(v) and 0 <= v <= 1, "a number in [0, 1]"),
    (
        "repetition_penalty",
        lambda v: _is_real(v) and MIN_REPETITION_PENALTY <= v <= MAX_REPETITION_PENALTY,
        f"a number in [{MIN_REPETITION_PENALTY:g}, {MAX_REPETITION_PENALTY:g}] (1 = off)",
    ),
    ("presence_penalty", lambda v: _is_real(v) and -2 <= v <= 2, "a number in [-2, 2]"),
    ("frequency_penalty", lambda v: _is_real(v) and -2 <= v <= 2, "a number in [-2, 2]"),
    ("seed", lambda v: v is None or (_is_int(v) and 0 <= v < _SEED_LIMIT), "None or an int in [0, 2**64)"),
    ("max_tokens", lambda v: _is_int(v) and v >= 1, "an int >= 1"),
    ("stop_token_ids", lambda v: _is_list_of(v, lambda i: _is_int(i) and i >= 0), "a list of ints >= 0"),
    (
        "stop",
        _is_stop_list,
        f"a list of at most {MAX_STOP_STRINGS} non-empty strings of at most {MAX_STOP_LENGTH} characters",
    ),
    ("ignore_eos", lambda v: isinstance(v, bool), "a bool"),
    (
        "logprobs",
        lambda v: v is None or (_is_int(v) and 0 <= v <= MAX_LOGPROBS),
        f"None or an int in [0, {MAX_LOGPROBS}] (the top tokens reported beside each sampled one)",
    ),
    (
        "logit_bias",
        _is_logit_bias,
        f"a dict of at most {MAX_LOGIT_BIAS_ENTRIES} token ids >= 0 to numbers in "
        f"[{-MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}]",
    ),
    ("structure", lambda v: v is None or isinstance(v, Structure), "None or a Structure"),
)


@dataclass(slots=True)
class SamplingParams:
    """Per-request sampling settings, named and defaulted as in vLLM / the OpenAI API.

    temperature 0 means greedy; top_k 0 or -1 and top_p 1 and min_p 0 switch those filters off;
    repetition_penalty follows Hugging Face (prompt and output tokens), presence/frequency
    penalties follow OpenAI (output tokens only).

    logprobs: report each sampled token's log-probability and that many most likely alternatives
    (None: none), from the model's raw distribution (docs/ENGINE_API.md). logit_bias: added to
    those token ids' logits before the penalties, as OpenAI does. Several samples of one prompt
    are `Engine.add_request(..., n=...)`, not a field here. A ``structure`` constrains every token
    to what it still allows; the request then ends ("stop") when the structure is complete.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    max_tokens: int = 256
    stop_token_ids: list[int] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    structure: Structure | None = None  # what the output must match (engine/core/structure.py)

    def __post_init__(self) -> None:
        for name, ok, allowed in _RULES:
            value = getattr(self, name)
            if not ok(value):
                raise SamplingParamsError(f"SamplingParams.{name} must be {allowed}, got {_shown(value)}")
        self.stop_token_ids = list(self.stop_token_ids)  # tuples accepted; stored as lists
        self.stop = list(self.stop)
        self.logit_bias = dict(self.logit_bias)

    @property
    def is_greedy(self) -> bool:
        """True when the request takes the argmax and never draws from its generator."""
        return self.temperature < GREEDY_TEMPERATURE

    @property
    def has_penalties(self) -> bool:
        """True when the sampler must look at this request's token history at all."""
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
