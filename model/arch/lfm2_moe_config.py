"""LFM2-MoE hyper-parameters: LFM2's fields plus the sparse feed-forward's (experts, router, dense layers).

Read the way transformers' ``Lfm2MoeConfig`` reads config.json (its defaults are LFM2-8B-A1B's), so
a checkpoint means the same thing to both. The first ``num_dense_layers`` layers keep a dense SwiGLU
of width ``intermediate_size`` as given (LFM2's ``block_*`` auto-adjust rules are not read, as
transformers does not); every later layer routes each token to ``num_experts_per_tok`` of
``num_experts`` SwiGLU experts of width ``moe_intermediate_size``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from model.arch.lfm2_config import LFM2_ONLY_FIELDS, Lfm2Config, _is_int
from model.errors import CheckpointError

# config.json keys of LFM2 that transformers' Lfm2MoeConfig does not read
_FLAGS = ("norm_topk_prob", "use_expert_bias")
MAX_EXPERTS = 4096


@dataclass(slots=True)
class Lfm2MoeConfig(Lfm2Config):
    """Normalised LFM2-MoE hyper-parameters (names and defaults follow transformers' ``Lfm2MoeConfig``)."""

    MODEL_TYPE: ClassVar[str] = "lfm2_moe"
    ARCHITECTURE: ClassVar[str] = "Lfm2MoeForCausalLM"
    LABEL: ClassVar[str] = "LFM2-MoE"

    hidden_size: int = 2048
    intermediate_size: int = 7168  # the dense layers' SwiGLU width, as given
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    block_auto_adjust_ff_dim: bool = False
    model_type: str = "lfm2_moe"
    moe_intermediate_size: int = 1792  # each expert's SwiGLU width
    num_experts: int = 32
    num_experts_per_tok: int = 4
    num_dense_layers: int = 2  # the first layers keep a dense SwiGLU
    norm_topk_prob: bool = True  # the chosen experts' weights are scaled to sum to 1
    use_expert_bias: bool = True  # a per-expert bias added to the scores when choosing (not weighting)
    routed_scaling_factor: float = 1.0  # the chosen experts' weights are multiplied by it

    # ----------------------------------------------------------------- derived
    @property
    def ffn_dim(self) -> int:
        """The dense layers' SwiGLU width is intermediate_size itself (no LFM2 auto-adjust)."""
        return self.intermediate_size

    @property
    def summary(self) -> str:
        return f"{self.LABEL} · {self.num_experts_per_tok}/{self.num_experts} experts per token"

    def is_moe_layer(self, layer: int) -> bool:
        return layer >= self.num_dense_layers

    # ------------------------------------------------------------------ checkpoint
    def feed_forward_shapes(self, layer: int, prefix: str) -> dict[str, tuple[int, ...]]:
        """A dense layer's SwiGLU, or the router (``gate``), its bias and each expert's w1, w3 and w2,
        stored per expert as on the Hub (transformers' save_pretrained writes them so too)."""
        if not self.is_moe_layer(layer):
            return Lfm2Config.feed_forward_shapes(self, layer, prefix)
        h, width, experts = self.hidden_size, self.moe_intermediate_size, self.num_experts
        shapes: dict[str, tuple[int, ...]] = {prefix + "gate.weight": (experts, h)}
        if self.use_expert_bias:
            shapes[prefix + "expert_bias"] = (experts,)
        for e in range(experts):
            p = f"{prefix}experts.{e}."
            shapes |= {p + "w1.weight": (width, h), p + "w3.weight": (width, h), p + "w2.weight": (h, width)}
        return shapes

    # ------------------------------------------------------------------ checks
    def _value_problems(self) -> list[str]:
        problems = Lfm2Config._value_problems(self)
        for name, high in (("num_experts", MAX_EXPERTS), ("moe_intermediate_size", 2**20)):
            value = getattr(self, name)
            if not (_is_int(value) and 1 <= value <= high):
                problems.append(f"{name} must be an integer in [1, {high}], got {value!r}")
        for name, low, high in (("num_experts_per_tok", 1, MAX_EXPERTS), ("num_dense_layers", 0, 1024)):
            value = getattr(self, name)
            if not (_is_int(value) and low <= value <= high):
                problems.append(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        for name in _FLAGS:
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name} must be true or false, got {getattr(self, name)!r}")
        scale = self.routed_scaling_factor
        if not (isinstance(scale, int | float) and not isinstance(scale, bool) and 0 < scale <= 1e6):
            problems.append(f"routed_scaling_factor must be a number in (0, 1e+06], got {scale!r}")
        return problems

    def _shape_problems(self) -> list[str]:
        problems = Lfm2Config._shape_problems(self)
        if self.num_experts_per_tok > self.num_experts:
            problems.append(
                f"num_experts_per_tok ({self.num_experts_per_tok}) exceeds num_experts ({self.num_experts})"
            )
        if self.num_dense_layers > self.num_hidden_layers:
            dense, layers = self.num_dense_layers, self.num_hidden_layers
            problems.append(f"num_dense_layers ({dense}) exceeds num_hidden_layers ({layers})")
        return problems

    # ------------------------------------------------------------------ (de)serialise
    @classmethod
    def fields_from_dict(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """LFM2's reading of the fields both share (with LFM2-MoE's defaults), then the MoE's own.

        ``layer_types`` is required: transformers' Lfm2MoeConfig has no default for it (nor reads
        LFM2's older ``full_attn_idxs``), so a checkpoint without it runs nowhere.
        """
        if raw.get("layer_types") is None:
            raise CheckpointError(f"invalid {cls.LABEL} config: config.json has no layer_types")
        shared = {key: value for key, value in raw.items() if key not in LFM2_ONLY_FIELDS}
        own = {name: raw[name] for name in _OWN_FIELDS if name in raw}
        return super(Lfm2MoeConfig, cls).fields_from_dict(shared) | own | {"block_auto_adjust_ff_dim": False}

    def to_dict(self) -> dict[str, Any]:
        """A config.json dict that both this loader and transformers' Lfm2MoeConfig read back."""
        out = Lfm2Config.to_dict(self)
        for key in (*LFM2_ONLY_FIELDS, "rope_theta"):
            out.pop(key, None)
        return out


# the sparse feed-forward's fields, read under their own names
_OWN_FIELDS = (
    "moe_intermediate_size",
    "num_experts",
    "num_experts_per_tok",
    "num_dense_layers",
    "norm_topk_prob",
    "use_expert_bias",
    "routed_scaling_factor",
)
