"""Which layer each scheme's name builds, and the walk that swaps a model's linears for them."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from torch import nn

from model.native.linears import replace_linears
from model.quant import BF12, SCHEMES
from model.quant.bf12 import Bf12Linear
from model.quant.int4 import Int4Linear
from model.quant.int8 import Int8Linear, W8A8Linear
from model.quant.linear import QuantizedLinear

# Each scheme's layer is built as ``make(linear, kernels)``. Its whole state must be its registered
# buffers, its bias and plain attributes (numbers, strings; ``kernels``): model/checkpoint/quantized_cache.py
# saves exactly that, and a later launch rebuilds the layer from it without calling the constructor.
QUANTIZED_LINEARS: dict[str, type[QuantizedLinear]] = dict(
    zip(SCHEMES, (Int8Linear, W8A8Linear, Int4Linear), strict=True)
)
# Every form the loader converts linears to and caches: the schemes', and BF12's lossless 12 bits.
CONVERTED_LINEARS: dict[str, type[QuantizedLinear]] = {**QUANTIZED_LINEARS, BF12: Bf12Linear}


def quantize_linears(
    model: nn.Module,
    scheme: str,
    kernels: ModuleType | None = None,
    progress: Callable[[float], None] | None = None,
) -> nn.Module:
    """Replace every nn.Linear in ``model`` (lm_head included) with the scheme's layer, in place.

    ``progress(fraction)`` after each layer, the fraction counted in weights done (the head alone
    is a fifth of LFM2-350M's).
    """
    make = CONVERTED_LINEARS[scheme]
    total = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    done = 0

    def quantize(linear: nn.Linear) -> nn.Module:
        nonlocal done
        layer = make(linear, kernels)
        done += linear.weight.numel()
        if progress is not None:
            progress(done / max(total, 1))
        return layer

    return replace_linears(model, quantize)
