"""tilemm.outofcore.matmul's arguments, checked before any panel moves: host operands of a dtype
it takes, an out it can write, a device and a memory limit it can plan for (TypeError, ValueError
or KernelUnavailable naming the problem)."""
from __future__ import annotations

import math
import numbers

import numpy as np

from tilemm.numerics.arrays import elements_share_memory, host_torch
from tilemm.numerics.dtypes import dtype_name
from tilemm.plans.plan import KernelUnavailable

DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8")


def host_tensor(x, operand: str):
    """Operand x as a torch CPU tensor (a NumPy array's view)."""
    import torch
    if isinstance(x, np.ndarray):
        if dtype_name(x.dtype) not in DTYPES:
            raise TypeError(f"tilemm.outofcore: operand {operand} has dtype {x.dtype}; it takes {', '.join(DTYPES)}")
        x = host_torch(x)
    elif not isinstance(x, torch.Tensor):
        raise TypeError(f"tilemm.outofcore: operand {operand} is a {type(x).__name__}; pass a NumPy array or a torch "
                        "CPU tensor (device arrays fit the GPU already: use tilemm.matmul)")
    elif x.device.type != "cpu":
        raise ValueError(f"tilemm.outofcore: operand {operand} is on {x.device}; out of core takes host operands "
                         "(tilemm.matmul multiplies device arrays)")
    elif dtype_name(x.dtype) not in DTYPES:
        raise TypeError(f"tilemm.outofcore: operand {operand} has dtype {x.dtype}; it takes {', '.join(DTYPES)}")
    if x.ndim != 2:
        raise ValueError(f"tilemm.outofcore: operand {operand} has shape {tuple(x.shape)}; it takes matrices (2-D)")
    return x


def checked_out(out, shape, result: str, as_numpy: bool):
    """out, or the new host array of the result; a ValueError for one of another kind, shape or
    dtype, read-only, or whose elements share memory (torch's RuntimeError from the last copy)."""
    import torch
    if out is None:
        if as_numpy:
            return np.empty(shape, dtype=result)
        return torch.empty(shape, dtype=getattr(torch, result), pin_memory=torch.cuda.is_available())
    kind_ok = isinstance(out, np.ndarray) or (isinstance(out, torch.Tensor) and out.device.type == "cpu")
    if not kind_ok or tuple(out.shape) != tuple(shape) or dtype_name(out.dtype) != result:
        raise ValueError(f"tilemm.outofcore: out must be a host array of shape {shape} and dtype {result}; got "
                         f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))} {getattr(out, 'dtype', '')}")
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise ValueError("tilemm.outofcore: out is read-only")
    steps = out.strides if isinstance(out, np.ndarray) else out.stride()
    if elements_share_memory(out.shape, steps):
        raise ValueError(f"tilemm.outofcore: out has a zero stride (strides {steps}): its elements share memory; "
                         "pass an array of its own")
    return out


def checked_device(device):
    """The torch device to multiply on: "cuda", "cuda:N", "cpu" or a torch.device (torch's RuntimeError for "gpu",
    its AssertionError for "cuda" without CUDA, before)."""
    import torch
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = device if isinstance(device, torch.device) else torch.device(device) if isinstance(device, str) else None
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ValueError(f"tilemm.outofcore: device={device!r}; give 'cuda', 'cuda:N', 'cpu' or None")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise KernelUnavailable(f"tilemm.outofcore: device={device!r}, but torch sees no CUDA GPU here; "
                                "device='cpu' multiplies on the host")
    return dev


def checked_limit(memory_limit):
    """memory_limit as whole bytes (TypeError for a str, a bool: '>' failed on "1G" deep in the plan)."""
    if memory_limit is None:
        return None
    if not isinstance(memory_limit, numbers.Real) or isinstance(memory_limit, (bool, np.bool_)):
        raise TypeError(f"tilemm.outofcore: memory_limit={memory_limit!r}; give a number of bytes (e.g. 8 << 30)")
    if not math.isfinite(memory_limit):    # (int() of it raised Python's own words)
        raise ValueError(f"tilemm.outofcore: memory_limit={memory_limit!r}; give a finite number of bytes "
                         "(None: what the device has free)")
    return int(memory_limit)


def may_overlap(x, y) -> bool:
    """Whether two torch CPU tensors' memory may overlap: their byte ranges meet (an out that is an
    operand, or a view of one, would be written while later panels still read it)."""
    def span(t):
        if t.numel() == 0:
            return 0, 0
        start = t.data_ptr()
        last = sum((size - 1) * step for size, step in zip(t.shape, t.stride()) if size) * t.element_size()
        return start, start + last + t.element_size()
    (x0, x1), (y0, y1) = span(x), span(y)
    return x0 < y1 and y0 < x1
