"""The arguments of tilemm's torch operators as Python constants: a kernel's parameters as one
string (``"block_m=64;tma=True"``), the result's dtype as its name."""
import ast
import functools
import operator
from typing import Optional

import numpy as np
import torch

from tilemm.numerics import dtypes


def encode_params(params: dict) -> str:
    """A kernel's parameters as the op's string argument: "name=repr(value)" joined by ";", sorted.
    (Dynamo folds this to a constant: the values are Python constants.)"""
    return ";".join(f"{name}={specialized(params[name])!r}" for name in sorted(params))


def specialized(value):
    """A parameter's value as a Python constant. Under torch.compile(dynamic=True), or once Dynamo
    has seen an int argument change, an int passed in (``block_m=bm``) is symbolic, though
    Dynamo shows it as an int; a shape's SymInt may be passed too (``block_m=x.shape[0]``). The
    program and its tiles depend on the value, so the graph is specialized to it (a guard:
    another value compiles anew), as torch does where an op needs a constant."""
    if isinstance(value, (torch.SymBool, torch.SymFloat)):
        return bool(value) if isinstance(value, torch.SymBool) else float(value)
    if isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool):
        return operator.index(value)
    return value


@functools.lru_cache(maxsize=256)
def decode_params(text: str) -> dict:
    """encode_params' inverse (the values are Python literals: ints, bools, None, strings)."""
    if not text:
        return {}
    pairs = (item.split("=", 1) for item in text.split(";"))
    return {name: ast.literal_eval(value) for name, value in pairs}


def dtype_text(dtype) -> Optional[str]:
    """out_dtype as the op's string: None, "float32", ... (torch dtypes, names, NumPy dtypes); a
    TypeError naming it where it is no dtype tilemm returns torch tensors in (the op's fake once
    failed on getattr(torch, "bogus"), and meta tensors took float8)."""
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype) or dtype in TORCH_DTYPES:
        name = dtypes.torch_dtype_name(dtype)
    else:                                # NumPy's spellings: "f4", ">f4", np.float32
        try:
            name = np.dtype(dtype).name
        except TypeError:                # (NumPy's "Cannot interpret '5' as a data type")
            name = None
    if name not in TORCH_DTYPES:
        raise TypeError(f"out_dtype={dtype!r} is not a dtype tilemm computes for torch tensors; choose one of "
                        f"{', '.join(TORCH_DTYPES)}")
    return name


TORCH_DTYPES = tuple(name for name in dtypes.NUMERIC if name not in dtypes.HOST_ONLY)
