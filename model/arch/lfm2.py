"""The LFM2 causal language model over packed ragged batches.

``Lfm2ForCausalLM(batch, cache)`` runs one engine step: every sequence's new tokens in one
``[T, hidden]`` tensor, caches read and written in place, logits only for the rows the
batch asks for.

Plain PyTorch: the layers own their forwards (model/arch/layers.py) and the model calls its
``DecoderStack`` once per step. It knows nothing of the native kernels: the loader swaps them in
underneath (model/native/accelerate.py) and sets the two things the engine asks of the model,
``kernels`` and ``row_query_limit``.
"""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from model.arch.cache import HybridCache
from model.arch.layers import DecoderLayer, DecoderStack, RMSNorm, RotaryTable
from model.arch.lfm2_config import ATTENTION, CONV, Lfm2Config
from model.batch import ForwardBatch, SequenceChunk, build_forward_batch


def fuse_swiglu(tensors: dict[str, torch.Tensor], prefix: str) -> None:
    """A SwiGLU's w1 and w3 (checkpoint names, under ``prefix``) -> its fused ``w13``, in place."""
    w1, w3 = (tensors.pop(f"{prefix}{w}.weight") for w in ("w1", "w3"))
    tensors[prefix + "w13.weight"] = torch.cat((w1, w3))


def logits_into(head: nn.Module, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``head(x).float()`` for 2-D ``x``, written into ``out``: the engine's logits buffer, reused each step.

    A fresh fp32 logits tensor per step (2 MB at 8 rows) is a fresh mmap under model/memory.py's
    threshold, so writing it page-faulted every step (measured in docs/ARCHITECTURE.md). A head with a
    ``fill_float`` (the native and quantized linears the loader swaps in) stores fp32 straight from
    its sums, with the values ``head(x)`` rounds to; any other head computes in its dtype and copies.
    """
    fill = getattr(head, "fill_float", None)
    return fill(x, out) if fill is not None else out.copy_(head(x))


class Embedding(nn.Module):
    """Token embedding without nn.Embedding's random init.

    Weights always come from a checkpoint; nn.Embedding's ``normal_`` init on the meta device
    pulls in ~800 Python modules of torch's decompositions (+68 MB of RSS) for nothing.
    """

    def __init__(self, vocab_size: int, hidden_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, hidden_size))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)


class Lfm2Model(nn.Module):
    """Embedding, decoder stack and final ``embedding_norm`` (HF module names)."""

    def __init__(self, config: Lfm2Config, decoder_layer: type[DecoderLayer] = DecoderLayer) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = DecoderStack(decoder_layer(config, i) for i in range(len(config.layer_types)))
        self.embedding_norm = RMSNorm(config.hidden_size, config.norm_eps)


class Lfm2ForCausalLM(nn.Module):
    """LFM2 with a tied or untied head."""

    decoder_layer: ClassVar[type[DecoderLayer]] = DecoderLayer  # another architecture's layer swaps in here

    def __init__(self, config: Lfm2Config) -> None:
        super().__init__()
        self.config = config
        self.model = Lfm2Model(config, self.decoder_layer)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        # each attention kind's cos/sin tables (another architecture's kinds may differ)
        self.rotary = {ATTENTION: RotaryTable(config.head_dim, config.rope_theta)}
        # chunks this short attend as single-query rows (model/batch.py); model/native/accelerate.py
        # raises it where attention runs the paged kernel, which reads each row's context in place
        self.row_query_limit = 1
        # the native kernels, where they run (model/native/accelerate.py)
        self.kernels: ModuleType | None = None

    @classmethod
    def empty(cls, config: Lfm2Config, dtype: torch.dtype) -> Lfm2ForCausalLM:
        """The model on the meta device (nothing allocated, no random init), each tensor in the dtype
        it will hold: what a checkpoint's tensors are cast to and assigned into
        (model/checkpoint/loader.py)."""
        with torch.device("meta"):
            model = cls(config)
        return model.to(dtype)

    @classmethod
    def fuse_layer(
        cls, tensors: dict[str, torch.Tensor], config: Lfm2Config, layer: int
    ) -> dict[str, torch.Tensor]:
        """One layer's checkpoint tensors -> module layout, in place: q/k/v and w1/w3 concatenated,
        so each is one matmul. The loader calls it layer by layer, so at most one layer exists in
        both layouts at once."""
        p = f"model.layers.{layer}."
        cls.fuse_feed_forward(tensors, config, layer, p + "feed_forward.")
        if config.layer_types[layer] != CONV:
            q, k, v = (tensors.pop(f"{p}self_attn.{n}_proj.weight") for n in "qkv")
            tensors[p + "self_attn.qkv_proj.weight"] = torch.cat((q, k, v))
        return tensors

    @classmethod
    def fuse_feed_forward(
        cls, tensors: dict[str, torch.Tensor], config: Lfm2Config, layer: int, prefix: str
    ) -> None:
        """Layer ``layer``'s feed-forward, under ``prefix``: one SwiGLU (an MoE's differs)."""
        fuse_swiglu(tensors, prefix)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype activations run in (the norms' weights stay in it whatever the linears store)."""
        return self.model.embedding_norm.weight.dtype

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def build_batch(
        self, chunks: list[SequenceChunk], block_size: int, device: torch.device | str = "cpu"
    ) -> ForwardBatch:
        """``chunks`` packed as this model reads them: its conv width, which chunks attend as
        single-query rows, its sliding window."""
        return build_forward_batch(
            chunks,
            block_size,
            self.config.conv_L_cache,
            device,
            row_query_limit=self.row_query_limit,
            sliding_window=self.config.attention_window,
        )

    @torch.inference_mode()
    def forward(
        self, batch: ForwardBatch, cache: HybridCache, logits_out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Run one step; returns float32 logits ``[len(batch.logits_index), vocab]``.

        ``logits_out``: a float32 tensor of that shape to write them into and return (a buffer the
        caller reuses every step; see `logits_into`).
        """
        hidden = self.model.embed_tokens(batch.input_ids)
        ropes = {kind: table.at(batch.positions) for kind, table in self.rotary.items()}
        pending = self.model.layers(hidden, batch, ropes, cache)  # added into hidden by the final norm
        rows = batch.logits_index
        if rows.numel() == batch.num_tokens:  # every row, in order (a decode step): no gather
            last = self.model.embedding_norm(hidden, pending)
        else:
            last = self.model.embedding_norm(hidden[rows], pending[rows])
        if logits_out is None:
            logits_out = torch.empty(rows.numel(), self.config.vocab_size, device=last.device)
        return logits_into(self.lm_head, last, logits_out)
