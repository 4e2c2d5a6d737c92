"""What tilemm's fused epilogues compute, written once in torch and once in NumPy: the activations,
their derivatives from what the forward saved, and which of them need the pre-activation saved
(nvmath-python's AUX output)."""
from __future__ import annotations

import math

import numpy as np

# the activations an epilogue applies; "identity" (or None) applies none
ACTIVATIONS = ("identity", "relu", "gelu", "gelu_tanh", "silu")


def check_activation(activation) -> str:
    """The activation's name ("identity" for None); ValueError naming the known ones otherwise."""
    if activation is None:
        return "identity"
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r}; tilemm's epilogues know {', '.join(map(repr, ACTIVATIONS))} "
                         "and None")
    return activation


def needs_aux(activation: str, residual: bool) -> bool:
    """Whether the backward needs the pre-activation Z saved: gelu's and silu's derivatives are
    functions of Z; relu's is known from the output Y (Y > 0 where Z > 0) unless a residual was
    added to Y; the identity needs nothing."""
    return activation in ("gelu", "gelu_tanh", "silu") or (activation == "relu" and residual)


def activate_torch(z, activation: str):
    """activation(z) with torch's own functions (what torch.nn's modules compute)."""
    import torch.nn.functional as F
    if activation == "relu":
        return F.relu(z)
    if activation == "gelu":
        return F.gelu(z)
    if activation == "gelu_tanh":
        return F.gelu(z, approximate="tanh")
    if activation == "silu":
        return F.silu(z)
    return z


def activation_backward(grad, saved, activation: str):
    """dL/dZ from dL/dY and what the forward saved (Z, or Y for relu without a residual): torch's
    own backward kernels, one pass each (Inductor fuses them with their neighbours)."""
    return activation_backward_of(activation)(grad, saved)


def activation_backward_of(activation: str):
    """activation_backward for one activation, chosen once (a caller that keeps it per layout
    skips the choice at each call): (grad, saved) -> dL/dZ."""
    import torch
    aten = torch.ops.aten
    if activation == "relu":
        threshold_backward = aten.threshold_backward
        return lambda grad, saved: threshold_backward(grad, saved, 0)
    if activation in ("gelu", "gelu_tanh"):
        gelu_backward, approximate = aten.gelu_backward, "none" if activation == "gelu" else "tanh"
        return lambda grad, saved: gelu_backward(grad, saved, approximate=approximate)
    if activation == "silu":
        return aten.silu_backward
    return unchanged


def unchanged(grad, saved):
    """The identity's backward: dL/dZ is dL/dY."""
    return grad


erf = np.vectorize(math.erf, otypes=[np.float64])


def activate_numpy(z: np.ndarray, activation: str) -> np.ndarray:
    """activation(z) in NumPy, in float64 (z float64)."""
    if activation == "relu":
        return np.maximum(z, 0.0)
    if activation == "gelu":
        return 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))
    if activation == "gelu_tanh":
        return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z ** 3)))
    if activation == "silu":
        with np.errstate(over="ignore"):
            return z / (1.0 + np.exp(-z))
    return z
