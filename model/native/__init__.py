"""Acceleration swapped in under the layers at load: native layers, linears, the decode stack, kernels."""
