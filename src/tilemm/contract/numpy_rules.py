"""numpy.matmul's contract at tilemm's boundary: the exact result dtype, out= (its cast and its
shape), the dtypes it multiplies.

- **Result dtype**: for NumPy (and CuPy) operands the dtype object ``np.result_type`` gives, its
  char and scalar type too: ``np.longlong`` operands give ``'q'``, ``longlong @ intc`` gives
  ``'l'``. Those two dtypes compare and hash equal, so a cache keyed on dtypes must key on the
  char as well (``dtype_key``).
- **out=**: the result is computed in its own dtype and cast into ``out`` where NumPy's
  ``casting="same_kind"`` (or the ``casting=`` given) allows it (int16 results into int8, float64
  into float32); where it does not, ``OutputCastingError``, NumPy's own class (a ``TypeError``),
  with NumPy's words. An operand's cast to ``dtype=`` likewise: ``InputCastingError``. ``out`` takes the
  shapes NumPy's gufunc takes: the result's core dimensions last, and leading (loop) dimensions
  that the operands' stack broadcasts to (the result is repeated along them): a (1, 1) ``out`` for
  1-D @ 1-D. ``out`` may be given by position, or as a tuple of one array.
- **CuPy outs** follow the same rules, as CuPy does. **torch outs** follow torch.matmul's own
  (tilemm.contract.torch_rules): one of another shape is resized, one of another dtype refused.
- **ndarray subclasses** (``np.matrix``): tilemm.contract.numpy_subclasses.
"""
from __future__ import annotations

import importlib

import numpy as np

from tilemm.numerics.arrays import Operand, elements_share_memory, torch_of
from tilemm.numerics.dtypes import HOST_ONLY, SUPPORTED, check_supported, dtype_name

SIGNATURE = "(n?,k),(k,m?)->(n?,m?)"


def numpy_error_class(name: str):
    """NumPy's own exception class of this name (numpy._core._exceptions; numpy.core's before
    NumPy 2), so that code catching NumPy's errors catches tilemm's; TypeError where it is missing."""
    for module in ("numpy._core._exceptions", "numpy.core._exceptions"):
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    return TypeError


def dtype_repr(dtype) -> str:
    """A dtype as NumPy's messages write it: dtype('float64'), dtype('>f8'); torch's by name."""
    return repr(dtype) if isinstance(dtype, np.dtype) else f"dtype('{dtype}')"


class InputCastingError(numpy_error_class("_UFuncInputCastingError")):
    """An operand can't be cast to the dtype the product is computed in (dtype=, signature=, or
    the operands' common dtype) under the casting rule: NumPy's _UFuncInputCastingError, a
    TypeError, with its words."""

    def __init__(self, from_, to, casting: str, index: int):
        TypeError.__init__(self, from_, to, casting, index)      # (NumPy's __init__ wants the ufunc)
        self.ufunc, self.from_, self.to, self.casting, self.in_i = np.matmul, from_, to, casting, index

    def __str__(self):
        return (f"Cannot cast ufunc 'matmul' input {self.in_i} from {dtype_repr(self.from_)} to "
                f"{dtype_repr(self.to)} with casting rule {self.casting!r}")


class OutputCastingError(numpy_error_class("_UFuncOutputCastingError")):
    """``out`` is of a dtype the result can't be cast to under the casting rule ("same_kind" unless
    casting= says otherwise): NumPy's _UFuncOutputCastingError, a TypeError, with its words."""

    def __init__(self, from_, to, casting: str = "same_kind"):
        TypeError.__init__(self, from_, to, casting)
        self.ufunc, self.from_, self.to, self.casting, self.out_i = np.matmul, from_, to, casting, 0

    def __str__(self):
        return (f"Cannot cast ufunc 'matmul' output from {dtype_repr(self.from_)} to {dtype_repr(self.to)} "
                f"with casting rule {self.casting!r}")


def single_out(out):
    """The one output array of ``out`` (an array, or NumPy's tuple of one), or None."""
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError(f"matmul: The 'out' tuple must have exactly one entry per ufunc output "
                             f"(matmul has one; got {len(out)})")
        return out[0]
    return out


def result_type(a_dtype, b_dtype, asked=None) -> np.dtype:
    """The dtype object numpy.matmul returns for operands of these NumPy dtypes. asked: (dtype=,
    its checked name) where one was given: that dtype as given (NumPy keeps its spelling, 'l' or
    'q'), or by its name where NumPy can't read it (a torch dtype)."""
    if asked is not None:
        try:
            return np.dtype(asked[0])
        except TypeError:
            return np.dtype(asked[1])
    return np.result_type(a_dtype, b_dtype)


def dtype_of_class(dtype):
    """A DType class (np.dtypes.Float32DType) as the dtype NumPy's keywords read it for (np.dtype
    reads a class as a Python type: object); anything else as it is."""
    if isinstance(dtype, type) and issubclass(dtype, np.dtype):
        return np.dtype(dtype.type)
    return dtype


def dtype_key(dtype):
    """A hashable key that tells dtypes NumPy returns apart: ``np.dtype('l') == np.dtype('q')``
    (same hash), their chars differ."""
    return dtype, getattr(dtype, "char", None)


def castable(from_, to, casting: str = "same_kind") -> bool:
    """Whether NumPy's ``casting`` rule takes dtype ``from_`` to ``to`` (np.can_cast; each an
    np.dtype, a name, or a torch dtype). torch's bfloat16, which NumPy lacks: a float of 8 bits of
    mantissa, its own dtype ("no", "equiv"), safe from bool and 8-bit integers and into float32 and
    wider, of float's kind."""
    source, target = numpy_or_name(from_), numpy_or_name(to)
    if not (isinstance(source, str) or isinstance(target, str)):
        return bool(np.can_cast(source, target, casting=casting))
    if str(source) == str(target) or casting == "unsafe":       # (one of them is bfloat16)
        return True
    if casting == "safe":
        if isinstance(source, str):
            return np.dtype(target).name in ("float32", "float64", "complex64", "complex128") + HOST_ONLY
        return source.name in ("bool", "int8", "uint8")
    if casting == "same_kind":
        def as_numpy(dtype):
            return np.dtype("float16") if isinstance(dtype, str) else dtype
        return bool(np.can_cast(as_numpy(source), as_numpy(target), casting="same_kind"))
    return False


def numpy_or_name(dtype):
    """An np.dtype as it is (its byte order and char kept), else its dtype's NumPy name, or
    "bfloat16"."""
    if isinstance(dtype, np.dtype):
        return dtype
    name = dtype_name(dtype)
    return name if name == "bfloat16" else np.dtype(name)


def check_out_writeable(out) -> None:
    """Refuse a read-only NumPy ``out`` (ValueError), which NumPy refuses before it looks at the
    operands' dtypes or shapes."""
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise ValueError("matmul: output array is read-only")


def check_operand_dtypes(first, second, into=None) -> None:
    """Refuse (TypeError) operands of dtypes NumPy has no loop for, or that tilemm does not
    multiply: ``first`` and ``second`` their dtypes (np.dtype, torch's or CuPy's). Beside an
    object operand, NumPy's object loop takes any dtype it promotes to object (str, bytes,
    datetimes: their Python objects' own + and *), and so does tilemm's numpy rung (not structured
    or void dtypes). ``into``: dtype=, to which NumPy casts str, bytes and datetime operands where
    the casting rule allows (strings parsed as numbers by "unsafe"; InputCastingError else)."""
    kinds = (getattr(first, "kind", None), getattr(second, "kind", None))
    if "O" in kinds and "V" not in kinds and isinstance(first, np.dtype) and isinstance(second, np.dtype):
        try:
            if np.result_type(first, second).kind == "O":
                return
        except TypeError:
            pass
    for i, dtype in enumerate((first, second)):   # (a NumPy dtype of either byte order by its name)
        if into is not None and getattr(dtype, "kind", None) in tuple("SUmM") and castable(dtype, into, "unsafe"):
            continue
        check_supported(dtype_name(dtype.newbyteorder("=") if isinstance(dtype, np.dtype) else dtype), str(i))


def check_one_kind(kind_a: str, kind_b: str) -> None:
    """Refuse operands of two kinds of array (a NumPy array beside a torch tensor): TypeError."""
    if kind_a != kind_b:
        raise TypeError(f"matmul: operand 0 is a {kind_a} array and operand 1 a {kind_b} array; "
                        "pass both as the same kind")


def check_out_place(given: Operand, operand: Operand, error=TypeError) -> None:
    """Refuse an ``out`` (described as ``given``) of another kind or device than the operands (a
    TypeError; ``error``, a subclass, for torch's: a RuntimeError as well)."""
    if (given.kind, given.device) != (operand.kind, operand.device):
        raise error(f"matmul: out is a {given.kind} array on {given.device}; the result is a "
                    f"{operand.kind} array on {operand.device}")


def check_out_dtype(out, given: Operand, operand: Operand, result: str, casting: str = "same_kind") -> None:
    """Refuse an ``out`` (described as ``given``) that numpy.matmul would refuse before it looks at
    shapes: of another kind or device than the operands (TypeError), of a dtype the result can't be
    cast to under ``casting`` (OutputCastingError)."""
    check_out_place(given, operand)
    into = out.dtype if isinstance(getattr(out, "dtype", None), np.dtype) else given.dtype   # (its byte order)
    if not castable(result, into, casting):
        raise OutputCastingError(result, into, casting)


class OverlappingOutError(ValueError, RuntimeError):
    """A torch ``out`` with elements that share memory (a zero stride): torch.matmul raises
    RuntimeError; a ValueError too, as tilemm's other refusals of a bad out."""


def check_out_elements(shape: tuple, strides: tuple) -> None:
    """OverlappingOutError for a torch out of this shape and these strides whose elements share
    memory (expand, a zero stride): torch.matmul's error, raised before the product rather than
    from the copy into out after it (NumPy writes such an out)."""
    if elements_share_memory(shape, strides):
        raise OverlappingOutError("unsupported operation: more than one element of the written-to tensor refers "
                                  "to a single memory location. Please clone() the tensor before performing the "
                                  "operation.")


def check_out_shape(out, batch: tuple, core: tuple) -> None:
    """Refuse an ``out`` that numpy.matmul would refuse, before any work: read-only, or of a shape
    other than the result's core dimensions after loop dimensions that the stack ``batch``
    broadcasts to (ValueError); and a torch out that torch.matmul would refuse, its elements
    sharing memory (OverlappingOutError)."""
    check_out_writeable(out)
    shape = tuple(out.shape)
    check_out_elements(shape, out.stride() if callable(getattr(out, "stride", None)) else ())
    loops = shape[:len(shape) - len(core)]
    if len(shape) >= len(core):
        for i, (have, want) in enumerate(zip(shape[len(loops):], core)):
            if have != want:
                raise ValueError(f"matmul: Output operand 0 has a mismatch in its core dimension {i}, with gufunc "
                                 f"signature {SIGNATURE} (size {have} is different from {want})")
        try:
            fits = tuple(np.broadcast_shapes(batch, loops)) == loops
        except ValueError:
            fits = False
        if fits:
            return
    raise ValueError(f"matmul: non-broadcastable output operand with shape {_shape(shape)} doesn't match "
                     f"the broadcast shape {_shape(batch + core)}")


def _shape(shape: tuple) -> str:
    """A shape as NumPy's messages write it: (1,5,2), (5,)."""
    return "(" + ",".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def torch_routed(a, b) -> bool:
    """Whether torch.matmul(a, b) does what a plan can't: torch tensors that record a gradient,
    or (torch_unplanned) under a torch.func transform or torch.jit.trace, or holding no memory.
    tilemm.torch.ops takes those calls."""
    torch = torch_of(a)                  # (traced under torch.compile: no sys.modules)
    if torch is None or not isinstance(b, torch.Tensor):
        return False
    return ((a.requires_grad or b.requires_grad) and torch.is_grad_enabled()) or torch_unplanned(torch, a, b)


def torch_unplanned(torch, a, b) -> bool:
    """Whether torch tensors a, b are multiplied under a torch.func transform (grad, vmap, jvp,
    ...), torch.jit.trace or a forward-mode AD level (dual tensors carry tangents a plan would
    drop), or hold no memory a kernel could read (the meta device; FakeTensor and other tensors
    dispatched by Python)."""
    return (torch._C._is_tracing() or torch_transformed(torch)
            or a.is_meta or b.is_meta or python_dispatched(torch, a) or python_dispatched(torch, b))


def autocast_operands(a, b, out):
    """(a, b) as torch's autocast would multiply them, or None where it would not cast them: torch
    tensors on a device whose autocast is on, without an out= (torch does not autocast those), each
    floating-point one but float64 in autocast's dtype (as F.linear's and matmul's operands)."""
    torch = torch_of(a)                  # (traced under torch.compile: no sys.modules)
    if (torch is None or out is not None or not isinstance(b, torch.Tensor)
            or not torch._C._is_any_autocast_enabled() or not torch.is_autocast_enabled(a.device.type)):
        return None
    dtype = torch.get_autocast_dtype(a.device.type)
    cast = [autocast_cast(torch, x, dtype) for x in (a, b)]
    return None if cast[0] is a and cast[1] is b else tuple(cast)


def autocast_cast(torch, x, dtype):
    """x as autocast casts an operand to its dtype: floating point but float64; x itself otherwise
    (None, an integer tensor, a float64 one, one already of that dtype)."""
    if x is None or not x.is_floating_point() or x.dtype in (dtype, torch.float64):
        return x
    return x.to(dtype)


def torch_transformed(torch) -> bool:
    """Whether a torch.func transform (grad, vmap, jvp, ...) or a forward-mode AD level is active."""
    return torch._C._are_functorch_transforms_active() or dual_level(torch)


def dual_level(torch) -> bool:
    """Whether a forward-mode AD level is open (torch.autograd.forward_ad.dual_level)."""
    return torch.autograd.forward_ad._current_level >= 0


def torch_function_subclass(torch, x) -> bool:
    """Whether torch tensor x is of a subclass with a ``__torch_function__`` of its own, to which
    torch's functions hand a call (and wrap the result in): not Parameter, DTensor, FakeTensor or
    another type that disables it."""
    kind = type(x)
    return (kind is not torch.Tensor and isinstance(x, torch.Tensor)
            and getattr(kind, "__torch_function__", None) is not torch._C._disabled_torch_function_impl)


def handled_by_subclass(a, b) -> bool:
    """Whether tilemm.matmul(a, b) goes to a tensor subclass's ``__torch_function__`` first, as
    torch.matmul(a, b) would (torch.overrides' protocol; False inside that call, where torch
    disables it for the subclass)."""
    torch = torch_of(a) or torch_of(b)   # (traced under torch.compile: no sys.modules)
    return (torch is not None and (torch_function_subclass(torch, a) or torch_function_subclass(torch, b))
            and torch.overrides.has_torch_function((a, b)))


def python_dispatched(torch, x) -> bool:
    """Whether torch tensor x is dispatched by Python (FakeTensor and the like): no memory to read."""
    kind = type(x)
    return (kind is not torch.Tensor and kind is not torch.nn.Parameter
            and torch._C._dispatch_keys(x).has(torch._C.DispatchKey.Python))


def check_no_gradient(a, b) -> None:
    """A plan records no autograd graph: where torch.matmul would give a result that carries a
    gradient, a plan's would silently carry none, so it refuses (tilemm.matmul records one)."""
    import torch      # (only torch operands come here)
    for i, x in enumerate((a, b)):
        if x.requires_grad and torch.is_grad_enabled():
            raise TypeError(f"plan: operand {i} requires grad, and a plan records no autograd graph (its result "
                            "would carry no gradient); call tilemm.matmul, or plan under torch.no_grad()")



def checked_out_dtype(out_dtype, result: str, inputs: tuple = None, casting: str = "same_kind") -> str:
    """numpy.matmul's rule for dtype=: each operand (of dtypes ``inputs``; else the operands'
    common dtype ``result``) is cast to it under ``casting`` ("same_kind" unless casting= says
    otherwise: float -> int is refused), else InputCastingError. Returns the dtype's name."""
    name = dtype_name(out_dtype)
    if name not in SUPPORTED:
        try:
            name = np.dtype(out_dtype).name     # np.int32, np.dtype("i4"), ...
        except TypeError:
            pass
    check_supported(name, "out_dtype")
    for i, dtype in enumerate(inputs or (result,)):
        if not castable(dtype, name, casting):     # (torch's bfloat16 as a float of NumPy's)
            raise InputCastingError(numpy_or_name(dtype), numpy_or_name(name), casting, i)
    return name


def check_not_scalars(*shapes) -> None:
    """NumPy's refusal of a 0-d operand (a scalar), which it makes before it looks at dtypes."""
    for i, shape in enumerate(shapes):
        if len(shape) == 0:
            raise ValueError(f"matmul: Input operand {i} does not have enough dimensions "
                             f"(has 0, gufunc core with signature {SIGNATURE} requires 1)")


def broadcast_batch(sa, sb, full_a, full_b) -> tuple:
    try:
        return tuple(np.broadcast_shapes(sa, sb))
    except ValueError:
        raise ValueError(f"matmul: the stacks of matrices can't be broadcast together: "
                         f"shapes {full_a} and {full_b} (batch dimensions {sa} and {sb})") from None
