"""LFM2 hyper-parameters, read from a checkpoint's config.json.

Real LFM2 checkpoints carry several generations of field names (``block_ff_dim`` vs
``intermediate_size``, ``full_attn_idxs`` vs ``layer_types``, ``rope_theta`` vs
``rope_parameters``, ``tie_embedding`` vs ``tie_word_embeddings``). This module folds them
into one normalised dataclass so the rest of the code never looks at raw JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, ClassVar, TypeGuard, cast

from model.errors import CheckpointError
from model.small_file import JSON_BYTES, read_small_file

ATTENTION = "full_attention"
CONV = "conv"
SLIDING = "sliding_attention"  # attention over the last `sliding_window` positions (LFM3)

# Bounds far beyond any real LFM2 (350M: vocab 65536, hidden 1024, 16 layers of 16 heads) yet small
# enough that nothing sized from them (a list per layer, a table per position) exhausts memory.
# Checked before anything is built from them: a config.json is data from the internet.
_INT_RANGES: dict[str, tuple[int, int]] = {
    "vocab_size": (1, 2**24),
    "hidden_size": (1, 2**16),
    "intermediate_size": (1, 2**20),
    "num_hidden_layers": (1, 1024),
    "num_attention_heads": (1, 1024),
    "num_key_value_heads": (1, 1024),
    "max_position_embeddings": (1, 2**24),
    "conv_L_cache": (2, 256),
    "block_multiple_of": (1, 2**16),
}
# (low, high]: each must be a number above low and at most high
_REAL_RANGES: dict[str, tuple[float, float]] = {
    "norm_eps": (0.0, 1.0),
    "rope_theta": (0.0, 1e12),
    "block_ffn_dim_multiplier": (0.0, 64.0),
}
_FLAGS = ("conv_bias", "block_auto_adjust_ff_dim", "tie_word_embeddings")
_NULLABLE_IDS = ("pad_token_id", "bos_token_id")
_NULLABLE = {"block_ffn_dim_multiplier", *_NULLABLE_IDS}  # None is a valid value of these


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_problem(name: str, value: object) -> str | None:
    low, high = _INT_RANGES[name]
    if _is_int(value) and low <= value <= high:
        return None
    return f"{name} must be an integer in [{low}, {high}], got {value!r}"


def _real_problem(name: str, value: object) -> str | None:
    low, high = _REAL_RANGES[name]
    if isinstance(value, int | float) and not isinstance(value, bool) and low < value <= high:
        return None
    return f"{name} must be a number in ({low:g}, {high:g}], got {value!r}"


def _flag_problem(name: str, value: object) -> str | None:
    return None if isinstance(value, bool) else f"{name} must be true or false, got {value!r}"


def _id_problem(name: str, value: object) -> str | None:
    return None if _is_int(value) and value >= 0 else f"{name} must hold token ids (ints >= 0), got {value!r}"


def read_json_object(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON file (config, tokenizer config) as a dict, or a one-line CheckpointError."""
    data = read_small_file(path, JSON_BYTES)
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise CheckpointError(f"{path} is not valid JSON (nested too deep)") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} does not hold a JSON object")
    return raw


# Each field and the config.json names it is read from, the current name first where transformers
# reads it; older LFM2 checkpoints carry the block_* / num_heads / tie_embedding ones.
_FIELD_NAMES: dict[str, tuple[str, ...]] = {
    "vocab_size": ("vocab_size",),
    "hidden_size": ("hidden_size", "block_dim"),
    "intermediate_size": ("block_ff_dim", "intermediate_size"),
    "num_hidden_layers": ("num_hidden_layers",),
    "num_attention_heads": ("num_attention_heads", "num_heads"),
    "num_key_value_heads": ("num_key_value_heads",),
    "max_position_embeddings": ("max_position_embeddings",),
    "norm_eps": ("norm_eps", "block_norm_eps"),
    "conv_L_cache": ("conv_L_cache",),
    "conv_bias": ("conv_bias",),
    "block_auto_adjust_ff_dim": ("block_auto_adjust_ff_dim",),
    "block_multiple_of": ("block_multiple_of",),
    "block_ffn_dim_multiplier": ("block_ffn_dim_multiplier",),
    "tie_word_embeddings": ("tie_embedding", "tie_word_embeddings"),
    "pad_token_id": ("pad_token_id",),
    "bos_token_id": ("bos_token_id",),
    "head_dim": ("head_dim",),
}
# LFM2's FFN-sizing fields, which LFM3 and LFM2-MoE do not have (their intermediate_size is the width)
LFM2_ONLY_FIELDS = (
    "block_auto_adjust_ff_dim",
    "block_multiple_of",
    "block_ffn_dim_multiplier",
    "block_ff_dim",
)


def first_of(raw: dict[str, Any], *names: str) -> Any:
    """The value of the first of ``names`` that ``raw`` has, else MISSING (the default applies)."""
    return next((raw[name] for name in names if name in raw), MISSING)


@dataclass(slots=True)
class Lfm2Config:
    """Normalised LFM2 hyper-parameters (names follow transformers' ``Lfm2Config``)."""

    MODEL_TYPE: ClassVar[str] = "lfm2"
    ARCHITECTURE: ClassVar[str] = "Lfm2ForCausalLM"  # transformers' class, written to config.json
    LABEL: ClassVar[str] = "LFM2"  # the family's name in error messages
    LAYER_TYPES: ClassVar[tuple[str, ...]] = (ATTENTION, CONV)  # what layer_types may hold

    vocab_size: int = 65536
    hidden_size: int = 1024
    intermediate_size: int = 6656
    num_hidden_layers: int = 16
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    layer_types: list[str] = field(default_factory=list)
    max_position_embeddings: int = 128_000
    norm_eps: float = 1e-5
    rope_theta: float = 1_000_000.0
    conv_L_cache: int = 3
    conv_bias: bool = False
    block_auto_adjust_ff_dim: bool = True
    block_multiple_of: int = 256
    block_ffn_dim_multiplier: float | None = 1.0
    tie_word_embeddings: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: list[int] = field(default_factory=lambda: [2])
    model_type: str = "lfm2"
    # None: hidden_size / num_attention_heads; transformers' attention reads config.json's head_dim
    # where it has one, so the projections are then heads x head_dim wide. Typed int: __post_init__
    # replaces None, so every reader of a built config gets an int.
    head_dim: int = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not self.layer_types and _int_problem("num_hidden_layers", self.num_hidden_layers) is None:
            self.layer_types = [ATTENTION] * self.num_hidden_layers
        self.validate()
        if self.head_dim is None:
            self.head_dim = self.derived_head_dim

    # ----------------------------------------------------------------- derived
    @property
    def derived_head_dim(self) -> int:
        """The head width without a head_dim field: hidden_size split evenly over the heads."""
        return self.hidden_size // self.num_attention_heads

    @property
    def ffn_dim(self) -> int:
        """The SwiGLU width actually used, after LFM2's auto-adjust rule (350M: 6656 -> 4608)."""
        dim = self.intermediate_size
        if self.block_auto_adjust_ff_dim:
            dim = int(2 * dim / 3)
            if self.block_ffn_dim_multiplier is not None:
                dim = int(self.block_ffn_dim_multiplier * dim)
                multiple = self.block_multiple_of
                dim = multiple * ((dim + multiple - 1) // multiple)
        return dim

    def layers_of_kind(self, kind: str) -> list[int]:
        """Indices of the layers of one type: a layer's place in this list is its slot in the cache's."""
        return [i for i, t in enumerate(self.layer_types) if t == kind]

    @property
    def summary(self) -> str:
        """The architecture as the title bar and dashboard name it."""
        return self.LABEL

    @property
    def attention_window(self) -> int | None:
        """Positions a sliding-window layer's query sees, itself included; None: the model has none."""
        return None

    @property
    def conv_state_len(self) -> int:
        """Columns of past conv input a sequence must carry between steps."""
        return self.conv_L_cache - 1

    # ------------------------------------------------------------------ checkpoint
    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor a checkpoint of this architecture must hold (Hugging Face names), with its shape.

        Built from one method per sublayer, so an architecture that changes one (an MoE feed-forward,
        another attention) overrides only that.
        """
        h = self.hidden_size
        shapes: dict[str, tuple[int, ...]] = {
            "model.embed_tokens.weight": (self.vocab_size, h),
            "model.embedding_norm.weight": (h,),
        }
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, h)
        for i, kind in enumerate(self.layer_types):
            p = f"model.layers.{i}."
            shapes[p + "operator_norm.weight"] = (h,)
            shapes[p + "ffn_norm.weight"] = (h,)
            shapes |= self.feed_forward_shapes(i, p + "feed_forward.")
            if kind == CONV:
                shapes |= self.conv_shapes(p + "conv.")
            else:
                shapes |= self.attention_shapes(p + "self_attn.")
        return shapes

    def feed_forward_shapes(self, layer: int, prefix: str) -> dict[str, tuple[int, ...]]:
        """Layer ``layer``'s SwiGLU (w1 and w3 in, w2 out)."""
        h, ffn = self.hidden_size, self.ffn_dim
        return {
            prefix + "w1.weight": (ffn, h),
            prefix + "w3.weight": (ffn, h),
            prefix + "w2.weight": (h, ffn),
        }

    def attention_shapes(self, prefix: str) -> dict[str, tuple[int, ...]]:
        """GQA projections and the per-head q/k norms."""
        h, hd = self.hidden_size, self.head_dim
        q_dim, kv_dim = self.num_attention_heads * hd, self.num_key_value_heads * hd
        return {
            prefix + "q_proj.weight": (q_dim, h),
            prefix + "k_proj.weight": (kv_dim, h),
            prefix + "v_proj.weight": (kv_dim, h),
            prefix + "out_proj.weight": (h, q_dim),
            prefix + "q_layernorm.weight": (hd,),
            prefix + "k_layernorm.weight": (hd,),
        }

    def conv_shapes(self, prefix: str) -> dict[str, tuple[int, ...]]:
        """The short conv's projections and depthwise taps (biases where ``conv_bias``)."""
        h = self.hidden_size
        shapes = {
            prefix + "in_proj.weight": (3 * h, h),
            prefix + "out_proj.weight": (h, h),
            prefix + "conv.weight": (h, 1, self.conv_L_cache),
        }
        if self.conv_bias:
            shapes |= {
                prefix + "in_proj.bias": (3 * h,),
                prefix + "out_proj.bias": (h,),
                prefix + "conv.bias": (h,),
            }
        return shapes

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """CheckpointError naming every bad field; the numbers first, since the other checks use them."""
        if self.model_type != self.MODEL_TYPE:
            raise CheckpointError(
                f"{type(self).__name__} reads model_type {self.MODEL_TYPE!r}, not {self.model_type!r}"
            )
        problems = self._value_problems() or self._shape_problems()
        if problems:
            raise CheckpointError(f"invalid {self.LABEL} config: " + "; ".join(problems))

    def _value_problems(self) -> list[str]:
        """Each field's type and range, alone."""
        checks = ((_int_problem, _INT_RANGES), (_real_problem, _REAL_RANGES), (_flag_problem, _FLAGS))
        problems = []
        for check, names in (*checks, (_id_problem, _NULLABLE_IDS)):
            for name in names:
                value = getattr(self, name)
                if value is not None or name not in _NULLABLE:
                    problems.append(check(name, value))
        if self.head_dim is not None and not (_is_int(self.head_dim) and 2 <= self.head_dim <= 4096):
            problems.append(f"head_dim must be null or an integer in [2, 4096], got {self.head_dim!r}")
        if isinstance(self.eos_token_id, list):
            problems += [_id_problem("eos_token_id", i) for i in self.eos_token_id]
        else:
            problems.append(f"eos_token_id must be a token id or a list of them, got {self.eos_token_id!r}")
        return [p for p in problems if p is not None]

    def _shape_problems(self) -> list[str]:
        """How the fields fit together (each field already in range)."""
        problems = [self._layer_types_problem(), self._head_dim_problem()]
        if self.num_attention_heads % self.num_key_value_heads:
            problems.append("num_attention_heads is not divisible by num_key_value_heads")
        return [p for p in problems if p is not None]

    def _head_dim_problem(self) -> str | None:
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            return "hidden_size is not divisible by num_attention_heads (and config.json gives no head_dim)"
        named = "head_dim" if self.head_dim is not None else "head_dim (hidden_size / heads)"
        head_dim = self.derived_head_dim if self.head_dim is None else self.head_dim
        return f"{named} is {head_dim}; RoPE needs it even" if head_dim % 2 else None

    def _layer_types_problem(self) -> str | None:
        if not isinstance(self.layer_types, list):
            return f"layer_types must be a list, got {self.layer_types!r}"
        if len(self.layer_types) != self.num_hidden_layers:
            return f"layer_types has {len(self.layer_types)} entries for {self.num_hidden_layers} layers"
        unknown = sorted({repr(t) for t in self.layer_types if t not in self.LAYER_TYPES})
        return f"unknown layer types [{', '.join(unknown)}]" if unknown else None

    # ------------------------------------------------------------------ (de)serialise
    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Lfm2Config:
        """Build from a config.json dict of this class's ``model_type`` (architectures.py picks the class)."""
        if raw.get("model_type") != cls.MODEL_TYPE:
            raise CheckpointError(
                f"config.json has model_type {raw.get('model_type')!r}, not {cls.MODEL_TYPE!r}"
            )
        # Values are passed on as they are: __post_init__ checks each one's type and range.
        return cls(**cls.fields_from_dict(raw))

    @classmethod
    def fields_from_dict(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """The dataclass fields config.json gives, accepting every historical LFM2 field name.

        Only the fields it has: the dataclass's own defaults (this class's or a subclass's) fill in
        the rest, so each default is written once. Other architectures extend this with their own
        fields (model/arch/registry.py).
        """
        layer_types = raw.get("layer_types")
        if layer_types is None:
            n_layers = raw.get("num_hidden_layers", cls.default("num_hidden_layers"))
            layer_types = _layer_types_from_indices(n_layers, raw.get("full_attn_idxs"))
        rope_key, rope = rope_settings(raw)
        rope = rope or {}
        if not isinstance(rope, dict):
            raise CheckpointError(f"invalid LFM2 config: {rope_key} must be an object, got {rope!r}")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise CheckpointError(
                f"rope type {rope_type!r} (config.json's {rope_key}) is not supported: lfm-chat runs "
                "LFM2 with default RoPE only"
            )
        given = {field: first_of(raw, *names) for field, names in _FIELD_NAMES.items()}
        given["rope_theta"] = first_of(rope, "rope_theta")
        if given["rope_theta"] is MISSING:
            given["rope_theta"] = first_of(raw, "rope_theta")
        if "eos_token_id" in raw:
            eos = raw["eos_token_id"]
            given["eos_token_id"] = [] if eos is None else (eos if isinstance(eos, list) else [eos])
        fields = {name: value for name, value in given.items() if value is not MISSING}
        return fields | {"layer_types": layer_types, "model_type": cls.MODEL_TYPE}

    @classmethod
    def default(cls, name: str) -> Any:
        """This class's default for field ``name`` (a subclass's where it sets its own)."""
        (found,) = (f for f in dataclass_fields(cls) if f.name == name)
        if found.default is MISSING:  # then it has a factory: every field has one or the other
            return cast(Callable[[], Any], found.default_factory)()
        return found.default

    def to_dict(self) -> dict[str, Any]:
        """A config.json dict that both this loader and transformers' Lfm2Config read back."""
        out = asdict(self)
        out["architectures"] = [self.ARCHITECTURE]
        out["eos_token_id"] = self.eos_token_id[0] if len(self.eos_token_id) == 1 else self.eos_token_id
        out["block_ff_dim"] = self.intermediate_size
        out["rope_parameters"] = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.head_dim == self.derived_head_dim:  # the usual shape: config.json leaves it out
            del out["head_dim"]
        return out


def read_config_json(checkpoint_dir: str | Path) -> dict[str, Any]:
    """A local checkpoint's config.json as a dict, or a one-line CheckpointError saying what is missing."""
    path = Path(checkpoint_dir) / "config.json"
    if not Path(checkpoint_dir).is_dir():
        raise CheckpointError(f"checkpoint directory {str(checkpoint_dir)!r} does not exist")
    if not path.exists():
        raise CheckpointError(f"{path} is missing: not an LFM2 checkpoint directory")
    return read_json_object(path)


GENERATION_CONFIG = "generation_config.json"


def generation_stop_ids(checkpoint_dir: str | Path) -> list[int]:
    """generation_config.json's eos ids (none without the file): transformers' generate stops on these,
    and a fine-tune's save_pretrained may list more there than config.json does."""
    path = Path(checkpoint_dir) / GENERATION_CONFIG
    if not path.is_file():
        return []
    eos = read_json_object(path).get("eos_token_id")
    ids = [] if eos is None else (eos if isinstance(eos, list) else [eos])
    if not all(_is_int(i) and i >= 0 for i in ids):
        raise CheckpointError(f"{path}: eos_token_id must hold token ids (ints >= 0), got {eos!r:.200}")
    return ids


def rope_settings(raw: dict[str, Any]) -> tuple[str, object]:
    """config.json's RoPE settings and the key they are under: the older ``rope_scaling`` wins over
    ``rope_parameters`` where both are set, as in transformers' ``convert_rope_params_to_dict``."""
    for key in ("rope_scaling", "rope_parameters"):
        if raw.get(key):
            return key, raw[key]
    return "rope_parameters", None


def _layer_types_from_indices(n_layers: object, attention_indices: object) -> list[str]:
    """Layer types from the older ``full_attn_idxs`` form (None: all attention), layer count checked first."""
    problem = _int_problem("num_hidden_layers", n_layers)
    if problem is not None:
        raise CheckpointError(f"invalid LFM2 config: {problem}")
    n_layers = cast(int, n_layers)  # what _int_problem found
    if attention_indices is None:
        return [ATTENTION] * n_layers
    if not isinstance(attention_indices, list) or not all(
        _is_int(i) and 0 <= i < n_layers for i in attention_indices
    ):
        raise CheckpointError(
            f"invalid LFM2 config: full_attn_idxs must list layer indices in [0, {n_layers}), "
            f"got {attention_indices!r}"
        )
    attention = set(attention_indices)
    return [ATTENTION if i in attention else CONV for i in range(n_layers)]
