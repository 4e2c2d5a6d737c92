"""Test and benchmark inputs: random, never zeros (zeros hide unwritten outputs and run
faster than real data), integers over their full range so sums overflow and must wrap."""
from __future__ import annotations

import numpy as np


def random_operand(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Random values of dtype; bfloat16 (which NumPy lacks) as float32 holding bfloat16 values
    (arrays.to_device makes them torch bfloat16 tensors)."""
    if dtype == "bfloat16":
        bits = rng.standard_normal(shape, dtype=np.float32).view(np.uint32)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000      # round to nearest even
        return bits.view(np.float32)
    kind = np.dtype(dtype).kind
    if kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if kind == "b":                       # half true: an AND of two operands is rarely all ones
        return rng.random(shape) < 0.5
    if kind == "c":                       # both parts: a real-valued complex operand checks half the product
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape, dtype=np.float32).astype(dtype)


def operands(seed: int, m: int, n: int, k: int, dtype: str, layout: str = "nn"):
    """A (m, k) and B (k, n); per operand 'n' is row-major, 't' a transposed view,
    's' a view of every other column."""
    rng = np.random.default_rng(seed)

    def make(rows, cols, how):
        if how == "t":
            return random_operand(rng, (cols, rows), dtype).T
        if how == "s":
            return random_operand(rng, (rows, 2 * cols), dtype)[:, ::2]
        return random_operand(rng, (rows, cols), dtype)
    return make(m, k, layout[0]), make(k, n, layout[1])
