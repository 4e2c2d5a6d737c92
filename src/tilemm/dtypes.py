"""Result dtypes (NumPy's rules), how a kernel computes them, and tolerances.

NumPy's matmul casts both operands to ``np.result_type(a, b)`` and computes in
that type: integers wrap, float16 sums in float32 and rounds once at the end.
Integer arithmetic modulo 2**w is a ring, so an integer result of width w can be
computed in any wider integer type and truncated: the bits are the same.
"""
from __future__ import annotations

import functools

import numpy as np

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
SUPPORTED = FLOATS + INTS

# Unit roundoff of each float type: half the distance from 1.0 to the next number.
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}
# The type each float result accumulates in (NumPy sums float16 in float32).
ACCUMULATE = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}


def dtype_name(dtype) -> str:
    """Canonical name of a NumPy, torch or CuPy dtype ('float32', 'bfloat16', ...)."""
    try:
        return _cached_name(dtype)
    except TypeError:                 # not hashable: named afresh
        return _name(dtype)


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


# NumPy builds a dtype's name anew each time (~5 us): every matmul call asks for two.
_cached_name = functools.lru_cache(maxsize=256)(_name)


def is_integer(name: str) -> bool:
    return name in INTS


def int_width(name: str) -> int:
    return np.dtype(name).itemsize * 8


def check_supported(name: str, operand: str) -> None:
    if name not in SUPPORTED:
        kinds = {"bool": "booleans", "complex64": "complex numbers", "complex128": "complex numbers",
                 "object": "Python objects"}
        what = kinds.get(name, f"dtype {name}")
        raise TypeError(
            f"matmul: operand {operand} has dtype {name}; tilemm does not multiply {what}. "
            f"Supported: {', '.join(SUPPORTED)}")


def result_dtype(a: str, b: str) -> str:
    """The dtype numpy.matmul gives for operands of these dtypes (bfloat16 as torch gives it)."""
    if a == b:
        return a
    if "bfloat16" in (a, b):
        other = b if a == "bfloat16" else a
        # torch's promotion: bf16 with any integer stays bf16; with float16 -> float32.
        if is_integer(other):
            return "bfloat16"
        return {"float16": "float32"}.get(other, other)
    return np.result_type(np.dtype(a), np.dtype(b)).name


def compute_dtype(result: str, native: tuple[str, ...]) -> str | None:
    """The dtype a kernel with these native dtypes computes ``result`` in, or None.

    Integers go to the narrowest native integer type at least as wide (then wrap);
    float16/bfloat16 go to their accumulation type. Anything else must be native.
    """
    if result in native:
        return result
    if is_integer(result):
        wide = [d for d in native if is_integer(d) and int_width(d) >= int_width(result)]
        return min(wide, key=int_width) if wide else None
    if result in ("float16", "bfloat16") and ACCUMULATE[result] in native:
        return ACCUMULATE[result]
    return None
