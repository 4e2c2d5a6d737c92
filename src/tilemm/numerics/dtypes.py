"""Result dtypes (NumPy's rules), how a kernel computes them, and tolerances.

NumPy's matmul casts both operands to ``np.result_type(a, b)`` and computes in
that type: integers wrap, float16 sums in float32 and rounds once at the end.
Integer arithmetic modulo 2**w is a ring, so an integer result of width w can be
computed in any wider integer type and truncated: the bits are the same. A bool
product is the OR of ANDs: the count of true pairs in an integer type of at least
32 bits, then "!= 0" (exact while K < 2^31; api widens past that).
Complex results are computed in their own type (a rung of real products builds
them itself). longdouble (and its complex) and object arrays are the host's alone: NumPy's rung.
"""
from __future__ import annotations

import numpy as np

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
BOOL = ("bool",)
COMPLEX = ("complex64", "complex128")
# longdouble and clongdouble by this platform's names (float128 / complex256 on x86-64 Linux); where
# longdouble is double (Windows, some ARM), they are float64 and complex128 already
HOST_ONLY = tuple(name for name in (np.dtype(np.longdouble).name, np.dtype(np.clongdouble).name)
                  if name not in FLOATS + COMPLEX)
# Python objects (NumPy's object arrays, e.g. of Fraction or Decimal): NumPy's own loop on the host,
# the objects' own + and *
OBJECT = ("object",)
NUMERIC = FLOATS + INTS + BOOL + COMPLEX + HOST_ONLY      # the dtypes of numbers (the CLI's --dtype choices)
SUPPORTED = NUMERIC + OBJECT
# What the numba rungs (CPU and SIMT) compute natively; other dtypes are promoted to one of these.
WORD_DTYPES = ("int32", "int64", "float32", "float64")

# Unit roundoff of each float type: half the distance from 1.0 to the next number (a complex type's
# is its parts').
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53,
                 "complex64": 2.0**-24, "complex128": 2.0**-53,
                 **{name: float(np.finfo(np.longdouble).eps) / 2 for name in HOST_ONLY}}
# The type each float result accumulates in (NumPy sums float16 in float32).
ACCUMULATE = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64",
              "complex64": "complex64", "complex128": "complex128", **{name: name for name in HOST_ONLY}}


# NumPy builds a dtype's name anew each time, and every matmul call asks for two: kept once made
# (a dict, not functools.lru_cache, which torch.compile warns of wherever a traced call reaches it)
NAMES = {}


def dtype_name(dtype) -> str:
    """Canonical name of a NumPy, torch or CuPy dtype ('float32', 'bfloat16', ...)."""
    try:
        return NAMES[dtype]
    except KeyError:
        name = NAMES[dtype] = torch_dtype_name(dtype)
        return name
    except TypeError:                 # not hashable: named afresh
        return torch_dtype_name(dtype)


def torch_dtype_name(dtype) -> str:
    """A torch dtype's name (any dtype's, from its text), made afresh: what a traced call asks
    (Dynamo can't look up NAMES, whose keys may be NumPy's DType classes)."""
    return str(dtype).removeprefix("torch.")


def is_integer(name: str) -> bool:
    return name in INTS


def is_exact(name: str) -> bool:
    """Integers and bool: answers equal to NumPy's bit for bit, with no rounding to bound."""
    return name in INTS or name == "bool"


def is_complex(name: str) -> bool:
    return name in COMPLEX or (name in HOST_ONLY and np.dtype(name).kind == "c")


def int_width(name: str) -> int:
    return np.dtype(name).itemsize * 8


def check_supported(name: str, operand: str) -> None:
    if name not in SUPPORTED:
        kinds = {"object": "Python objects", "complex32": "complex32 (torch's chalf)"}
        what = kinds.get(name, f"dtype {name}")
        float8 = " (float8 with its scales: tilemm.scaled_matmul)" if name.startswith("float8") else ""
        raise TypeError(
            f"matmul: operand {operand} has dtype {name}; tilemm does not multiply {what}{float8}. "
            f"Supported: {', '.join(SUPPORTED)}")


def result_dtype(a: str, b: str) -> str:
    """The dtype numpy.matmul gives for operands of these dtypes (bfloat16 as torch gives it)."""
    if a == b:
        return a
    if "bfloat16" in (a, b):
        other = b if a == "bfloat16" else a
        # torch's promotion: bf16 with any integer or bool stays bf16; with float16 -> float32.
        if is_exact(other):
            return "bfloat16"
        return {"float16": "float32"}.get(other, other)
    return np.result_type(np.dtype(a), np.dtype(b)).name


def compute_dtype(result: str, native: tuple[str, ...]) -> str | None:
    """The dtype a kernel with these native dtypes computes ``result`` in, or None.

    Integers go to the narrowest native integer type at least as wide (then wrap);
    bool to the narrowest native integer of 32 bits or more (a count of true pairs,
    then != 0); float16/bfloat16 go to their accumulation type. Anything else must be native.
    """
    if result in native:
        return result
    if is_integer(result) or result == "bool":
        least = 32 if result == "bool" else int_width(result)
        wide = [d for d in native if is_integer(d) and int_width(d) >= least]
        return min(wide, key=int_width) if wide else None
    if result in ("float16", "bfloat16") and ACCUMULATE[result] in native:
        return ACCUMULATE[result]
    return None
