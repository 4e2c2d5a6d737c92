"""Which kind of array came in (NumPy, PyTorch, CuPy), where it lives, and moving it.

Nothing here imports torch or cupy: a user who has neither never pays for them.
"""
from __future__ import annotations

import itertools
import sys
from math import prod
from dataclasses import dataclass

import numpy as np

from tilemm.numerics.dtypes import dtype_name, torch_dtype_name


@dataclass(frozen=True)
class Operand:
    kind: str      # "numpy", "torch" or "cupy"
    device: str    # "cpu" or "cuda:N"
    dtype: str     # canonical dtype name
    shape: tuple


def elements_share_memory(shape, strides) -> bool:
    """Whether an array of this shape and these strides (elements or bytes) has two elements at one
    address: a zero stride over a dimension of more than one element (expand, broadcast_to), and
    no empty dimension (an empty array holds nothing, whatever its strides)."""
    shape = tuple(shape)
    return 0 not in shape and any(step == 0 and size > 1 for step, size in zip(strides, shape))


def check_torch_out_memory(name: str, out) -> None:
    """ValueError (before any work) for a torch ``out`` whose elements share memory, which torch
    refuses to write: the products whose outs are torch tensors alone (grouped, scaled)."""
    if out is not None and elements_share_memory(out.shape, out.stride()):
        raise ValueError(f"{name}: out has a zero stride (strides {out.stride()}): its elements share memory, "
                         f"and torch refuses to write such a tensor; pass a tensor of its own (out.clone())")


def torch_if_imported():
    """torch if the program has imported it, else None. The import statement, not sys.modules
    alone: while another thread is still importing it, sys.modules holds it half made, and the
    statement waits for that import to finish. Once torch is found, the module kept (TORCH) and
    no sys.modules read: code that torch.compile traces reads none (see torch_of)."""
    global TORCH
    if TORCH is not None:
        return TORCH
    if "torch" not in sys.modules:
        return None
    import torch
    TORCH = torch
    return torch


def torch_of(x):
    """torch where x is a torch tensor, else None. Known from x's type, not sys.modules: code that
    torch.compile traces reads no sys.modules, which Dynamo wraps whole (while another thread's
    import may be changing it)."""
    global TORCH
    if TORCH is not None and isinstance(x, TORCH.Tensor):    # (the usual answer, in a few steps)
        return TORCH
    if isinstance(x, np.ndarray) or not hasattr(type(x), "__torch_function__"):   # (NumPy's first: Dynamo
        return None                                  # traces isinstance on its arrays, not hasattr on their type)
    import torch
    if not isinstance(x, torch.Tensor):
        return None
    TORCH = torch
    return torch


# torch, once torch_of has met a torch tensor or torch_if_imported found it (a module, which Dynamo reads as it is)
TORCH = None


def cupy_if_imported():
    """cupy if the program has imported it, else None (see torch_if_imported; kept once found)."""
    global CUPY
    if CUPY is not None:
        return CUPY
    if "cupy" not in sys.modules:
        return None
    import cupy
    CUPY = cupy
    return cupy


def cupy_of(x):
    """cupy where x is a CuPy array (or of a subclass), else None. Known from x's type, not
    sys.modules (see torch_of)."""
    global CUPY
    if isinstance(x, np.ndarray) or not any(kind.__module__ == "cupy" or kind.__module__.startswith("cupy.")
                                            for kind in type(x).__mro__):
        return None
    import cupy
    if not isinstance(x, cupy.ndarray):
        return None
    CUPY = cupy
    return cupy


# cupy, once found (as TORCH)
CUPY = None


def native_order(x):
    """NumPy data stored in the other byte order (read from a file, say) as a copy in this
    machine's order, which the kernels read; a torch conjugate or negative view as a copy holding
    its values (resolved_view), as the kernels read memory as it is; anything else as it is."""
    if isinstance(x, np.ndarray):
        return x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("="))
    return resolved_view(x)


def as_rows(x, width=None):
    """x (..., width) as one matrix of rows, (the leading dimensions' product, width), as F.linear
    reads it: reshape(-1, width) is refused where x has no element (a size -1 could be anything),
    a Linear of no input or output features' case."""
    return x.reshape(prod(x.shape[:-1]), x.shape[-1] if width is None else width)


def resolved_view(x):
    """A torch tensor with its conjugate or negative bit set (x.conj(), x.conj().imag: a view whose
    memory holds the values before that operation) as a copy holding its values, differentiable
    under autograd and torch.func alike (resolve_conj, resolve_neg); anything else as it is."""
    if torch_of(x) is not None and (x.is_conj() or x.is_neg()):
        return x.resolve_conj().resolve_neg()
    return x


def as_arrays(a, b):
    """The operands, array-likes among them (lists, tuples, Python and NumPy scalars, objects with
    ``__array__`` or ``__array_interface__``) converted as np.asarray converts them (its errors
    passed on), as numpy.matmul does. Where the other operand is a torch tensor or a CuPy array
    there is no NumPy array to make: a TypeError naming the conversion to make."""
    if type(a) is np.ndarray and type(b) is np.ndarray:
        return a, b
    device = [x for x in (a, b) if device_kind(x)]
    if not device:
        for i, x in enumerate((a, b)):
            check_no_ufunc_override(i, x)
        return tuple(x if isinstance(x, np.ndarray) else np.asarray(x) for x in (a, b))
    for i, x in enumerate((a, b)):
        if not (isinstance(x, np.ndarray) or device_kind(x)):
            kind = device_kind(device[0])
            fix = ("torch.as_tensor(x, device=other.device)" if kind == "torch" else
                   "cupy.asarray(x) on the other operand's device")
            raise TypeError(f"matmul: operand {i} is a {type(x).__module__}.{type(x).__name__} and the other a "
                            f"{kind} array; tilemm converts array-likes as numpy.matmul does only beside NumPy "
                            f"arrays: pass {fix}")
    return a, b


def check_no_ufunc_override(i: int, x) -> None:
    """Refuse (TypeError) an array-like with an ``__array_ufunc__`` of its own, to which numpy.matmul
    hands the call (its answer is its own, not a product of np.asarray(x)), or None, with which it
    refuses ufuncs (NumPy's TypeError). ndarrays (their subclasses: tilemm.contract.numpy_subclasses)
    and NumPy scalars keep NumPy's."""
    override = getattr(type(x), "__array_ufunc__", np.ndarray.__array_ufunc__)
    if override is np.ndarray.__array_ufunc__ or isinstance(x, (np.ndarray, np.generic)):
        return
    if override is None:
        raise TypeError(f"operand '{type(x).__name__}' does not support ufuncs (__array_ufunc__=None)")
    raise TypeError(f"matmul: operand {i} is a {type(x).__module__}.{type(x).__name__}, whose __array_ufunc__ "
                    "answers numpy.matmul itself; tilemm multiplies arrays (pass np.asarray(x))")


def device_kind(x) -> str | None:
    """"torch" for a torch tensor, "cupy" for a CuPy array, else None."""
    if torch_of(x) is not None:
        return "torch"
    if cupy_of(x) is not None:
        return "cupy"
    return None


def cast(x, dtype):
    """x (NumPy, torch or CuPy) as a new array of ``dtype`` (a name, or for NumPy and CuPy an
    np.dtype), cast as NumPy casts with casting="unsafe" (floats to integers truncate)."""
    if isinstance(x, np.ndarray):
        return exactly(x.astype(dtype), dtype)
    return device_cast(x, dtype if isinstance(dtype, str) else dtype.name, copy=False)


def describe(x, operand: str) -> Operand:
    torch = torch_of(x)                 # (from x's type: a traced frame reads no sys.modules)
    if torch is not None:
        if x.device.type not in ("cpu", "cuda"):
            raise ValueError(f"matmul: operand {operand} is on torch device {x.device}; tilemm multiplies "
                             "tensors on the CPU or a CUDA GPU")
        if x.layout != torch.strided or x.is_nested:
            kind = "a nested" if x.is_nested else f"a {str(x.layout).replace('torch.', '')}"
            raise TypeError(f"matmul: operand {operand} is {kind} tensor; tilemm multiplies dense (strided) "
                            "tensors: torch.matmul takes this one, or x.to_dense() (x.to_padded_tensor for nested)")
        dev = "cpu" if x.device.type == "cpu" else f"cuda:{x.device.index or 0}"
        return Operand("torch", dev, dtype_name(x.dtype), tuple(x.shape))
    cupy = cupy_of(x)
    if cupy is not None:
        return Operand("cupy", f"cuda:{x.device.id}", dtype_name(x.dtype), x.shape)
    if isinstance(x, np.ndarray):
        return Operand("numpy", "cpu", dtype_name(x.dtype), x.shape)
    raise TypeError(f"matmul: operand {operand} is a {type(x).__module__}.{type(x).__name__}; "
                    "pass a NumPy array, a PyTorch tensor or a CuPy array (np.asarray(x) for lists)")


def owned(x):
    """A NumPy result that owns its data, as NumPy's own do (ndarray.resize works on it): x, or a
    copy of a view in x's layout (a promoted 1-D operand's dimension taken off, a torch tensor's
    memory, core axes placed by axes=); anything but a NumPy array as it is."""
    return x if not isinstance(x, np.ndarray) or x.flags.owndata else x.copy(order="K")


def host_copy(t) -> np.ndarray:
    """A NumPy copy of torch tensor t (on the host or a GPU) that owns its data, copied straight
    into NumPy's memory (t.cpu().numpy() views torch's)."""
    import torch      # (only torch tensors come here: imported already)
    host = np.empty(tuple(t.shape), dtype=torch_dtype_name(t.dtype))
    torch.from_numpy(host).copy_(t)
    return host


def to_host(x, dtype: str) -> np.ndarray:
    """A NumPy array of ``dtype`` holding x's values (bfloat16 comes out as float32, exactly)."""
    if isinstance(x, np.ndarray):      # (NumPy's own: no look for torch or CuPy)
        return x.astype(np.float32 if dtype == "bfloat16" else dtype, copy=False)
    torch = torch_of(x)
    if torch is not None:
        if x.dtype == torch.bfloat16:  # NumPy has no bfloat16; float32 holds it exactly
            x = x.detach().cpu().float()
        x = x.numpy(force=True)        # detached, on the host, a conjugate or negative view's own values
    elif (cupy := cupy_of(x)) is not None:
        x = cupy.asnumpy(x)
    return x.astype(np.float32 if dtype == "bfloat16" else dtype, copy=False)


def from_host(c: np.ndarray, like: Operand, dtype):
    """c (host, any dtype) converted to ``dtype`` (a name, or for NumPy and CuPy the exact np.dtype)
    in the kind and on the device of ``like``."""
    if like.kind == "numpy":
        return exactly(c.astype(dtype, copy=False), dtype)
    if like.kind == "cupy":
        cupy = cupy_if_imported()
        with cupy.cuda.Device(int(like.device.split(":")[1])):
            return cupy.asarray(exactly(c.astype(dtype, copy=False), dtype))
    torch = torch_if_imported()
    # np.asarray keeps a 0-d result (1-D @ 1-D) 0-d, where np.ascontiguousarray makes it shape (1,)
    if dtype == "bfloat16":
        t = torch.from_numpy(np.asarray(c.astype(np.float32), order="C")).to(torch.bfloat16)
    else:
        t = torch.from_numpy(np.asarray(c.astype(dtype, copy=False), order="C"))
    if t.numel() == 0:          # (NumPy gives an empty result zero strides; torch, a contiguous tensor's)
        t = torch.empty(t.shape, dtype=t.dtype)
    return t.to(like.device)


def exactly(x, dtype):
    """x (NumPy or CuPy) as the very dtype object asked for: astype keeps an equal dtype of another
    char ('l' for 'q'), which a copy changes for NumPy (an array that owns its data, as NumPy's
    results do) and a view for CuPy."""
    if isinstance(dtype, np.dtype) and x.dtype.char != dtype.char:
        if isinstance(x, np.ndarray):
            exact = np.empty_like(x, dtype=dtype)
            np.copyto(exact, x)
            return exact
        return x.view(dtype)
    return x


def convert(c, like: Operand, dtype):
    """The result in ``dtype``, in the kind and on the device of ``like``: a host array is
    moved there, a device array is cast in place (integers wrap, floats round)."""
    if isinstance(c, np.ndarray):
        return from_host(c, like, dtype)
    return device_cast(c, dtype, copy=False)


def torch_needs_copy(x, copy_read_only: bool = False) -> bool:
    """Whether torch must be given a copy of NumPy or CuPy array x: its strides are negative
    (a[::-1]), which torch can't represent (torch.from_numpy refuses them; torch.as_tensor of a
    CuPy array ends the process instead of raising), or, with ``copy_read_only``, it is a read-only
    NumPy array, on which torch.from_numpy warns (a caller whose operand may be larger than the
    GPU's memory views it instead). Each caller makes its copy in the layout it wants."""
    return min(x.strides, default=0) < 0 or (copy_read_only and not x.flags.writeable)


def torch_view(x):
    """A torch tensor on the GPU viewing CuPy array x (no copy), or a copy of x where torch can't
    view it (torch_needs_copy)."""
    torch = torch_if_imported()
    return torch.as_tensor(x.copy() if torch_needs_copy(x) else x, device=f"cuda:{x.device.id}")


def device_cast(x, dtype: str, copy: bool):
    """A torch or CuPy array cast to ``dtype`` on its device (a fresh copy if ``copy``)."""
    torch = torch_if_imported()
    if torch is not None and isinstance(x, torch.Tensor):
        y = x.to(getattr(torch, dtype))
        return y.clone() if copy and y is x else y
    return exactly(x.astype(dtype, copy=copy), dtype)


def matrices(batch: tuple, a, b):
    """(index into C, A's matrix, B's matrix) for each matrix of the stack batch + (m, n) that a
    and b broadcast to (a dimension of 1 repeats its matrix); for no batch, ((), a, b)."""
    if not batch:
        yield (), a, b
        return
    sa, sb = a.shape[:-2], b.shape[:-2]
    for idx in itertools.product(*map(range, batch)):
        ia = tuple(i if d != 1 else 0 for i, d in zip(idx[len(idx) - len(sa):], sa))
        ib = tuple(i if d != 1 else 0 for i, d in zip(idx[len(idx) - len(sb):], sb))
        yield idx, a[ia], b[ib]


def poison(c):
    """Fill c (NumPy, CuPy or torch) with NaN, or with 0xA5 bytes for integers, so that an entry
    a kernel never writes can't pass a check. Returns c."""
    torch = torch_if_imported()
    if torch is not None and isinstance(c, torch.Tensor):
        c.fill_(float("nan")) if c.is_floating_point() or c.is_complex() else c.view(torch.uint8).fill_(0xA5)
    elif np.dtype(c.dtype).kind in "fc":
        c.fill(np.nan)
    else:
        c.view(np.uint8).fill(0xA5)
    return c


def device_empty(like: Operand, shape: tuple, dtype: str, poisoned: bool):
    """An array on the device of ``like``, poisoned if asked."""
    if like.kind == "cupy":
        cupy = cupy_if_imported()
        with cupy.cuda.Device(int(like.device.split(":")[1])):
            c = cupy.empty(shape, dtype)
    else:
        torch = torch_if_imported()
        c = torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    return poison(c) if poisoned else c


def synchronize(x) -> None:
    """Wait for the work queued on the current stream of x's device (torch or CuPy); nothing for
    host arrays."""
    torch = torch_of(x)
    if torch is not None:
        if x.is_cuda:
            torch.cuda.current_stream(x.device).synchronize()
    elif (cupy := cupy_of(x)) is not None:
        cupy.cuda.get_current_stream().synchronize()


def assign(out, value) -> None:
    """out[...] = value for any of the three kinds (value of the same kind), value cast to out's
    dtype and repeated along out's leading dimensions where it has fewer (NumPy's broadcasting)."""
    if hasattr(out, "copy_"):
        out.copy_(value)
    else:
        out[...] = value


def to_device(x: np.ndarray, dtype: str | None = None):
    """A CUDA copy of a host array: a CuPy array where CuPy is installed, else a torch tensor;
    for dtype "bfloat16" (float32 values in x) a torch bfloat16 tensor, as CuPy has none."""
    if dtype == "bfloat16":
        return host_bfloat16(x).cuda()
    try:
        import cupy
        return cupy.asarray(x)
    except ImportError:
        import torch
        return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def host_torch(x: np.ndarray):
    """A CPU torch tensor viewing NumPy array x, or of a copy of x where its strides are negative
    (torch_needs_copy); a read-only x is viewed, not copied: it may be larger than the GPU's memory."""
    import torch
    return torch.from_numpy(x.copy() if torch_needs_copy(x) else x)


def torch_readable(x: np.ndarray) -> np.ndarray:
    """x as torch.from_numpy takes it: NumPy's unsigned long long ('Q', uint64 by another char than
    np.uint64's, which torch refuses) viewed as np.uint64; anything else as it is."""
    return x.view(np.uint64) if x.dtype.char == "Q" and np.dtype(np.uint64).char != "Q" else x


def host_bfloat16(x: np.ndarray):
    """A CPU torch bfloat16 tensor of x's values (float32 holding bfloat16 values: exact), its
    strides kept (a transposed view stays transposed)."""
    import torch
    return torch.from_numpy(x).to(torch.bfloat16)
