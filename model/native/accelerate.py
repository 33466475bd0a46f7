"""How a loaded model takes the native kernels: one call, `use_native_kernels`, by the loader.

Why one place: the model modules (model/arch/lfm2.py, lfm3.py, moe.py, layers.py) are plain PyTorch
that reads like the reference and knows nothing of the kernels. Acceleration swaps
implementations in underneath them, in place, keeping every parameter and the state_dict: the
linears (the loader's convert step, as each layer's weights arrive), then here the elementwise
layers (model/native/layers.py) and the decoder stack for decode steps (model/native/stack.py).
The model keeps only what the engine asks of it: ``kernels`` (for its argmax) and
``row_query_limit``.
"""

from __future__ import annotations

from types import ModuleType

import torch

from model.arch.lfm2 import Lfm2ForCausalLM
from model.native.layers import use_native_layers, use_reference_layers
from model.native.stack import use_native_stack, use_python_stack

# With the paged attention kernel, prompt chunks up to this long attend row by row instead of
# gathering their context for SDPA: the small chunks paced in beside decoding streams (a 2k
# prompt's 8-token chunks cost 15-40 ms each through SDPA, growing with the prompt).
ROW_QUERY_LIMIT = 16


def use_native_kernels(model: Lfm2ForCausalLM, kernels: ModuleType, paged_attention: bool) -> Lfm2ForCausalLM:
    """Run the elementwise work in model/native/kernels' fused loops (a bf16 model on CPU), in place;
    a float32 model takes only the kernels' argmax here (its linears came from the loader).

    The norms, SwiGLUs, short convs (and an MoE's routers) become model/native/layers.py's
    subclasses; then the decoder stack becomes the native one where the kernels run all of it.

    ``paged_attention``: attention layers also take the kernels (their fused projection side
    and the paged decode kernel), and prompt chunks up to ``ROW_QUERY_LIMIT`` tokens attend
    row by row; off where the head shape is outside what the kernel takes.
    """
    model.kernels = kernels
    if model.dtype != torch.bfloat16:  # the layer ops and the decode stack are bf16 loops
        return model
    use_native_layers(model.model, kernels, attention=paged_attention)
    if paged_attention:
        model.row_query_limit = ROW_QUERY_LIMIT
    use_native_stack(model.model.layers)
    return model


def undo_native_kernels(model: Lfm2ForCausalLM) -> Lfm2ForCausalLM:
    """Undo `use_native_kernels`: the Python stack, the layers' PyTorch code and argmax again (the
    linears keep the form the loader gave them, and ``row_query_limit`` its value)."""
    use_python_stack(model.model.layers)
    use_reference_layers(model)
    model.kernels = None
    return model
