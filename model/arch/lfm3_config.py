"""LFM3 hyper-parameters: LFM2's fields plus sliding-window attention, gates, sandwich norms, per-type RoPE.

Read the way transformers' ``Lfm3Config`` reads config.json (its defaults are LFM3-1.7B's), so a
checkpoint means the same thing to both. What LFM3 drops from LFM2 (``block_auto_adjust_ff_dim``
and the other ``block_*`` FFN rules, ``full_attn_idxs``) is not read: the feed-forward width is
``intermediate_size`` as given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from model.arch.lfm2_config import (
    ATTENTION,
    CONV,
    LFM2_ONLY_FIELDS,
    MISSING,
    SLIDING,
    Lfm2Config,
    _is_int,
    first_of,
    rope_settings,
)
from model.errors import CheckpointError

ROPE_TYPES = ("default", "proportional")
DEFAULT_THETA = 1_000_000.0  # transformers' Lfm3Config.default_theta: a RoPE entry's theta when none is given


def lfm3_layer_types(num_hidden_layers: int) -> list[str]:
    """transformers' default: full attention at i % 4 == 2, sliding at i % 4 == 0 (i > 0), else conv."""
    return [
        ATTENTION if i % 4 == 2 else SLIDING if i % 4 == 0 and i > 0 else CONV
        for i in range(num_hidden_layers)
    ]


@dataclass(frozen=True, slots=True)
class RopeParameters:
    """One attention layer type's RoPE, as transformers' modeling_rope_utils computes it.

    "default": every pair of head_dim rotates, frequency ``theta ** (-2i / head_dim)``.
    "proportional": only the first ``int(partial_rotary_factor * head_dim / 2)`` of those
    frequencies are kept (the exponent still divides by the whole head_dim), the other pairs get
    frequency 0 (cos 1, sin 0: not rotated), and all are divided by ``factor``.
    """

    rope_type: str = "default"
    rope_theta: float = 10_000.0
    partial_rotary_factor: float = 1.0  # read by "proportional" only, as transformers does
    factor: float = 1.0  # read by "proportional" only

    def rotated_pairs(self, head_dim: int) -> int:
        """How many of head_dim's rotate-half pairs turn with position."""
        if self.rope_type == "default":
            return head_dim // 2
        return int(self.partial_rotary_factor * head_dim // 2)

    def problem(self, kind: str) -> str | None:
        if self.rope_type not in ROPE_TYPES:
            supported = ", ".join(ROPE_TYPES)
            return f"rope type {self.rope_type!r} of {kind} layers is not supported (only {supported})"
        for name, low, high in (("rope_theta", 0.0, 1e12), ("factor", 0.0, 1e6)):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and not isinstance(value, bool) and low < value <= high):
                return f"rope {name} of {kind} layers must be a number in ({low:g}, {high:g}], got {value!r}"
        value = self.partial_rotary_factor
        if not (isinstance(value, int | float) and not isinstance(value, bool) and 0.0 <= value <= 1.0):
            return f"rope partial_rotary_factor of {kind} layers must be in [0, 1], got {value!r}"
        return None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rope_type": self.rope_type, "rope_theta": self.rope_theta}
        if self.rope_type == "proportional":
            out["partial_rotary_factor"] = self.partial_rotary_factor
            if self.factor != 1.0:  # transformers reads it but warns about it as an unknown key
                out["factor"] = self.factor
        return out


def default_rope_parameters() -> dict[str, RopeParameters]:
    """transformers' defaults: sliding layers plain RoPE at 10k, full ones proportional at 1M, half."""
    return {
        SLIDING: RopeParameters("default", 10_000.0),
        ATTENTION: RopeParameters("proportional", 1_000_000.0, partial_rotary_factor=0.5),
    }


# config.json keys of LFM2 that LFM3 does not have (transformers' Lfm3Config deletes them)
_NOT_SHARED = (
    *LFM2_ONLY_FIELDS,
    "rope_parameters",
    "rope_scaling",
)  # read here, per layer type, not as LFM2's


@dataclass(slots=True)
class Lfm3Config(Lfm2Config):
    """Normalised LFM3 hyper-parameters (names and defaults follow transformers' ``Lfm3Config``)."""

    MODEL_TYPE: ClassVar[str] = "lfm3"
    ARCHITECTURE: ClassVar[str] = "Lfm3ForCausalLM"
    LABEL: ClassVar[str] = "LFM3"
    LAYER_TYPES: ClassVar[tuple[str, ...]] = (ATTENTION, SLIDING, CONV)

    vocab_size: int = 128_000
    hidden_size: int = 2048
    intermediate_size: int = 7680
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    num_key_value_heads: int = 4
    conv_L_cache: int = 7
    block_auto_adjust_ff_dim: bool = False
    pad_token_id: int | None = 124_893
    bos_token_id: int | None = 124_894
    eos_token_id: list[int] = field(default_factory=lambda: [124_900])
    model_type: str = "lfm3"
    head_dim: int = 128  # explicit: not hidden_size / heads
    sliding_window: int | None = 256
    use_sandwich_norm: bool = True  # RMSNorm on each sublayer's output before the residual add
    use_attention_gate: bool = True  # a sigmoid gate per head, from the layer input
    attention_bias: bool = False
    attention_dropout: float = 0.0  # training only
    rope_parameters: dict[str, RopeParameters] = field(default_factory=default_rope_parameters)

    def __post_init__(self) -> None:
        if not self.layer_types and _is_int(self.num_hidden_layers) and self.num_hidden_layers > 0:
            self.layer_types = lfm3_layer_types(self.num_hidden_layers)
        Lfm2Config.__post_init__(self)

    # ----------------------------------------------------------------- derived
    @property
    def ffn_dim(self) -> int:
        """LFM3's SwiGLU width is intermediate_size itself (no LFM2 auto-adjust)."""
        return self.intermediate_size

    @property
    def sliding_layers(self) -> list[int]:
        return self.layers_of_kind(SLIDING)

    @property
    def attention_window(self) -> int | None:
        return self.sliding_window if self.sliding_layers else None

    # ------------------------------------------------------------------ checkpoint
    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """LFM2's table with LFM3's attention and, with sandwich norms, two more norms per layer."""
        shapes = Lfm2Config.expected_shapes(self)
        if self.use_sandwich_norm:
            for i in range(self.num_hidden_layers):
                for norm in ("post_operator_norm", "post_ffn_norm"):
                    shapes[f"model.layers.{i}.{norm}.weight"] = (self.hidden_size,)
        return shapes

    def attention_shapes(self, prefix: str) -> dict[str, tuple[int, ...]]:
        """Qwen3-style names (o_proj, q_norm, k_norm) and the per-head gate, ``gate_proj`` on disk
        (transformers' ``g_proj`` in memory: model/checkpoint/names.py)."""
        h, hd = self.hidden_size, self.head_dim
        q_dim, kv_dim = self.num_attention_heads * hd, self.num_key_value_heads * hd
        shapes = {
            prefix + "q_proj.weight": (q_dim, h),
            prefix + "k_proj.weight": (kv_dim, h),
            prefix + "v_proj.weight": (kv_dim, h),
            prefix + "o_proj.weight": (h, q_dim),
            prefix + "q_norm.weight": (hd,),
            prefix + "k_norm.weight": (hd,),
        }
        if self.use_attention_gate:
            shapes[prefix + "gate_proj.weight"] = (self.num_attention_heads, h)
        return shapes

    # ------------------------------------------------------------------ checks
    def _value_problems(self) -> list[str]:
        problems = Lfm2Config._value_problems(self)
        window = self.sliding_window
        if window is not None and not (_is_int(window) and 1 <= window <= 2**24):
            problems.append(f"sliding_window must be null or an integer in [1, {2**24}], got {window!r}")
        for name in ("use_sandwich_norm", "use_attention_gate", "attention_bias"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name} must be true or false, got {getattr(self, name)!r}")
        dropout = self.attention_dropout
        if not (isinstance(dropout, int | float) and not isinstance(dropout, bool) and 0 <= dropout <= 1):
            problems.append(f"attention_dropout must be a number in [0, 1], got {dropout!r}")
        return problems

    def _shape_problems(self) -> list[str]:
        problems = [self._layer_types_problem(), self._head_dim_problem()]
        if self.num_attention_heads % self.num_key_value_heads:
            problems.append("num_attention_heads is not divisible by num_key_value_heads")
        if self.attention_bias:
            problems.append("attention_bias true is not supported (LFM3 checkpoints have none)")
        if problems[0] is None:
            if SLIDING in self.layer_types and self.sliding_window is None:
                problems.append("sliding_attention layers need a sliding_window")
            for kind in dict.fromkeys(t for t in self.layer_types if t != CONV):
                rope = self.rope_parameters.get(kind)
                problems.append(
                    f"rope_parameters has no entry for {kind} layers" if rope is None else rope.problem(kind)
                )
        return [p for p in problems if p is not None]

    # ------------------------------------------------------------------ (de)serialise
    @classmethod
    def fields_from_dict(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """LFM2's reading of the fields both share (with LFM3's defaults), then LFM3's own."""
        shared = {key: value for key, value in raw.items() if key not in _NOT_SHARED}
        layers = shared.get("num_hidden_layers", cls.default("num_hidden_layers"))
        if shared.get("layer_types") is None and _is_int(layers):
            shared["layer_types"] = lfm3_layer_types(layers)
        own = {name: first_of(raw, name) for name in _OWN_FIELDS}
        # rms_norm_eps: another name of it in transformers' Lfm3Config (its attribute_map)
        own["norm_eps"] = first_of(raw, "norm_eps", "rms_norm_eps")
        return (
            super(Lfm3Config, cls).fields_from_dict(shared)
            | {name: value for name, value in own.items() if value is not MISSING}
            | {
                "block_auto_adjust_ff_dim": False,
                "rope_parameters": _rope_parameters(rope_settings(raw)[1], raw),
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """A config.json dict that both this loader and transformers' Lfm3Config read back."""
        out = Lfm2Config.to_dict(self)
        for key in (*LFM2_ONLY_FIELDS, "rope_theta"):
            out.pop(key, None)
        out["head_dim"] = self.head_dim  # always: LFM3's default is 128, not hidden_size / heads
        out["rope_parameters"] = {kind: rope.to_dict() for kind, rope in self.rope_parameters.items()}
        return out


# LFM3's fields beyond LFM2's, read under their own names
_OWN_FIELDS = (
    "head_dim",
    "sliding_window",
    "use_sandwich_norm",
    "use_attention_gate",
    "attention_bias",
    "attention_dropout",
)


def _rope_parameters(raw: object, config: dict[str, Any]) -> dict[str, RopeParameters]:
    """config.json's ``rope_parameters``: one entry per attention layer type (None: the defaults).

    An entry without ``rope_theta`` or ``partial_rotary_factor`` takes config.json's top-level
    one (else ``DEFAULT_THETA``), as transformers' ``convert_rope_params_to_dict`` does.
    """
    if raw is None:
        return default_rope_parameters()
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()) or "rope_type" in raw:
        raise CheckpointError(
            "invalid LFM3 config: rope_parameters must map each attention layer type "
            f"({ATTENTION}, {SLIDING}) to its own RoPE settings, got {raw!r}"
        )
    return {
        kind: RopeParameters(
            rope_type=entry.get("rope_type", entry.get("type", "default")),
            rope_theta=entry.get("rope_theta", config.get("rope_theta", DEFAULT_THETA)),
            partial_rotary_factor=entry.get(
                "partial_rotary_factor", config.get("partial_rotary_factor", 1.0)
            ),
            factor=entry.get("factor", 1.0),
        )
        for kind, entry in raw.items()
    }
