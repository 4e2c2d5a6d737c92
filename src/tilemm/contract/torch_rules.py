"""torch.matmul's contract for torch tensors: one dtype for both operands, and torch's errors.

NumPy promotes mixed dtypes (``float32 @ float64`` is float64); torch.matmul refuses them, and
a model that mixes them by mistake learns of it from that error. So for torch tensors tilemm
keeps torch's rule: both operands of one dtype (``out_dtype=``, tilemm's own keyword, still
chooses the result's dtype). NumPy arrays keep NumPy's rules, and so do CuPy arrays: CuPy follows
NumPy, promotion included.

An ``out`` for torch tensors follows torch's rule, not NumPy's: of the result's dtype exactly, and
resized to the result's shape where it has another (with torch's warning where it held elements).

The errors for torch tensors are of a class that is both NumPy's (ValueError for shapes,
TypeError for dtypes) and torch's (RuntimeError), with torch's words, so that code written
against either catches them: ``mat1 and mat2 shapes cannot be multiplied (10x9 and 8x25)``. The
words are torch's: torch picks among mm, mv, dot and bmm by the operands' ranks, strides and
whether they require grad (``folds``), and each says it its way, on CUDA in its kernels' own
words where they differ (mm's; torch 2.11's mv of an integer matrix).

Nothing here imports torch: the rules read shapes and dtype names (and the version of the torch
already imported, where its words changed).
"""
from __future__ import annotations

import math
import sys
import warnings

from tilemm.contract.numpy_layout import contiguous_strides
from tilemm.numerics.dtypes import torch_dtype_name


class TorchShapeError(ValueError, RuntimeError):
    """torch tensors whose shapes torch.matmul refuses (torch raises RuntimeError; NumPy's
    ValueError for the same shapes)."""


class TorchTypeError(TypeError, RuntimeError):
    """torch tensors of two dtypes, or ``out=`` on a call that records a gradient: torch.matmul
    raises RuntimeError."""


# torch's names for a dtype in its messages: the C++ type (mm's), the ScalarType (mv's, dot's, bmm's)
CPP_NAMES = {"float16": "c10::Half", "bfloat16": "c10::BFloat16", "float32": "float", "float64": "double",
             "complex64": "c10::complex<float>", "complex128": "c10::complex<double>", "int8": "signed char",
             "uint8": "unsigned char", "int16": "short int", "int32": "int", "int64": "long int", "bool": "bool",
             "uint16": "short unsigned int", "uint32": "unsigned int", "uint64": "long unsigned int"}
SCALAR_NAMES = {"float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double",
                "complex64": "ComplexFloat", "complex128": "ComplexDouble", "int8": "Char", "uint8": "Byte",
                "int16": "Short", "int32": "Int", "int64": "Long", "bool": "Bool", "uint16": "UInt16",
                "uint32": "UInt32", "uint64": "UInt64"}


# torch's bmm picks its kernel by A's dtype before it reads B as of that dtype: A of a dtype with
# no kernel gives NotImplementedError where B's is another. The CPU's kernels take every dtype but
# these (measured, torch 2.13); CUDA's (ATen's cuda/Blas.cpp: AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES_AND2,
# "baddbmm_cuda") only these. (Where both are of one, tilemm gives NumPy's answer.)
CPU_BMM_LACKS = ("bool", "uint16", "uint32", "uint64")
CUDA_BMM_TAKES = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")


def folds(sa: tuple, strides_a: tuple, sb: tuple, strides_b: tuple, a_grad: bool = False, b_grad: bool = False,
          has_out: bool = False) -> bool:
    """Whether torch.matmul folds the stack of its operand of more dimensions into the rows of one
    matrix (mm, or mv for a vector) rather than multiplying the stacks by bmm (ATen's should_fold).
    Only where that operand has 3 dimensions or more and the other 2 or fewer; then always where the
    other records a gradient and there is no out; never for a matrix A times a stack; else where
    the stack is empty or its leading dimensions lie one after another in memory (rows it views
    without a copy). A stack of B is folded as B^T's."""
    a_larger = len(sa) >= len(sb)
    if not (max(len(sa), len(sb)) >= 3 and min(len(sa), len(sb)) <= 2):
        return False
    if a_larger:
        shape, strides, other_grad = sa, strides_a, b_grad
    else:              # B^T's stack: B's last two dimensions swapped
        shape, strides = (*sb[:-2], sb[-1], sb[-2]), (*strides_b[:-2], strides_b[-1], strides_b[-2])
        other_grad = a_grad
    if other_grad and not has_out:
        return True
    if len(sa) == 2:
        return False
    if math.prod(shape) == 0:
        return True
    return all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(len(shape) - 2))


def refusal(sa: tuple, sb: tuple, da: str, db: str, fold: bool | None = None, device: str = "cpu",
            out: tuple | None = None) -> Exception | None:
    """The error torch.matmul raises for operands of shapes sa, sb and dtype names da, db, in the
    order torch checks (shapes before dtypes, but for two vectors), or None where it multiplies them.
    fold: whether torch folds the larger operand's stack (``folds`` of the operands' strides,
    gradients and out; None: as for contiguous operands that record no gradient). device: the
    operands' ("cpu", "cuda:0", ...), whose bmm kernels differ. out: (shape, dtype name) of an
    ``out=``, whose dtype the product torch picks reads before the operands' (mm, bmm, dot) or
    names among addmv's (mv), or None."""
    ra, rb = len(sa), len(sb)
    out_dtype = out[1] if out is not None else None
    if fold is None:
        fold = folds(sa, contiguous_strides(sa), sb, contiguous_strides(sb))
    if ra == 0 or rb == 0:
        return TorchShapeError(f"both arguments to matmul need to be at least 1D, but they are {ra}D and {rb}D")
    if ra == 1 and rb == 1:                                 # torch.dot
        if out_dtype not in (None, da):                     # (its out's dtype first, before sizes)
            return out_refusal(sa, sb, da, out_dtype)
        if da != db:
            return TorchTypeError(f"dot : expected both vectors to have same dtype, but found {_scalar(da)} and "
                                  f"{_scalar(db)}")
        if sa[0] != sb[0]:
            return TorchShapeError(f"inconsistent tensor size, expected tensor [{sa[0]}] and src [{sb[0]}] to have "
                                   f"the same number of elements, but got {sa[0]} and {sb[0]} elements respectively")
        return None
    if ra >= 2 and rb == 1 and (ra == 2 or fold):          # torch.mv of A's rows (a stack folded into them)
        rows = math.prod(sa[:-1])
        if sa[-1] != sb[0]:
            return TorchShapeError(f"size mismatch, got input ({rows}), mat ({rows}x{sa[-1]}), vec ({sb[0]})")
        if da == db:
            return None
        if out_dtype not in (None, db) and torch_before(2, 13):   # 2.11's mv read its out's dtype first
            return out_dtype_refusal(db, out_dtype)
        out_is_self = out is not None and addmv_self_is_out(sa, sb, out[0], fold)
        return mv_mismatch(da, db, device, out_dtype if out_is_self else db)
    if rb == 2 and (ra <= 2 or fold):                       # torch.mm of A's rows (a vector as one row)
        rows = math.prod(sa[:-1])
        if sa[-1] != sb[0]:
            return TorchShapeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{sa[-1]} and "
                                   f"{sb[0]}x{sb[1]})")
        if da != db and out_dtype not in (None, da):
            return out_dtype_refusal(da, out_dtype)
        return mm_mismatch(da, db, device) if da != db else None
    if ra <= 2 and fold:
        return _folded_b(sa, sb, da, db, device, out_dtype)
    batch = _broadcast(sa[:-2], sb[:-2])                    # torch.bmm of the broadcast stacks
    if isinstance(batch, Exception):
        return batch
    k, k2 = sa[-1], sb[-2] if rb > 1 else sb[0]
    if k != k2:
        count = math.prod(batch)
        return TorchShapeError(f"Expected size for first two dimensions of batch2 tensor to be: [{count}, {k}] but "
                               f"got: [{count}, {k2}].")
    if da != db and out_dtype not in (None, db):
        return out_dtype_refusal(db, out_dtype)
    if da != db:
        mismatch = TorchTypeError(f"expected scalar type {_scalar(da)} but found {_scalar(db)}")
        if k == 0 or 0 in batch or (ra > 1 and sa[-2] == 0) or (rb > 1 and sb[-1] == 0):
            return mismatch       # (torch's bmm returns before its kernel: the stricter refusal, tilemm's)
        return no_bmm_kernel(da, device) or mismatch
    return None


def no_bmm_kernel(da: str, device: str) -> Exception | None:
    """torch's NotImplementedError where its bmm on this device has no kernel for A's dtype, else None."""
    if device.startswith("cuda"):
        return None if da in CUDA_BMM_TAKES else NotImplementedError(
            f"\"baddbmm_cuda\" not implemented for '{_scalar(da)}'")
    return NotImplementedError(f"\"bmm\" not implemented for '{_scalar(da)}'") if da in CPU_BMM_LACKS else None


def _folded_b(sa: tuple, sb: tuple, da: str, db: str, device: str, out_dtype: str | None = None
              ) -> Exception | None:
    """refusal's error where torch folds B's stack into the rows of B^T (a stack that is contiguous)
    and multiplies them by A on the right: mm with A^T for a matrix A, mv for a vector (an out,
    made the rows' length first, addmv's `self`)."""
    rows, k2, k = math.prod(sb[:-2]) * sb[-1], sb[-2], sa[-1]
    if len(sa) == 1:
        if k2 != k:
            return TorchShapeError(f"size mismatch, got input ({rows}), mat ({rows}x{k2}), vec ({k})")
        return mv_mismatch(db, da, device, out_dtype or da) if da != db else None
    if k2 != k:
        return TorchShapeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{k2} and {k}x{sa[0]})")
    return mm_mismatch(db, da, device) if da != db else None


def mv_mismatch(mat: str, vec: str, device: str, addmv_self: str | None = None) -> Exception:
    """torch.mv's refusal of a matrix and a vector of two dtypes: addmv's words, which name its
    `self` (an empty vector like the vector, or the out: addmv_self) first. torch 2.11 read no
    dtypes before its kernels (2.12 not read): its mv said it as bmm does, and on CUDA a matrix
    of a dtype the kernels lack was refused in their words first."""
    if torch_before(2, 13):
        if device.startswith("cuda") and mat not in CUDA_BMM_TAKES:
            return NotImplementedError(f"\"addmv_impl_cuda\" not implemented for '{_scalar(mat)}'")
        return TorchTypeError(f"expected scalar type {_scalar(mat)} but found {_scalar(vec)}")
    return TorchTypeError(f"addmv input tensors must have the same dtype, but got {_scalar(addmv_self or vec)}, "
                          f"{_scalar(mat)}, and {_scalar(vec)}")


def addmv_self_is_out(sa: tuple, sb: tuple, out_shape: tuple | None, fold: bool) -> bool:
    """Whether torch's mv takes the out as addmv's `self` (its mv_out): a vector of the rows'
    length or of one element, for a matrix times a vector; the out of a folded stack's mv, which
    torch makes the rows' length first (else `self` is a new vector like the vector)."""
    if len(sa) == 2 and len(sb) == 1:
        return out_shape is not None and len(out_shape) == 1 and math.prod(out_shape) in (sa[0], 1)
    return fold and (len(sa) >= 3 and len(sb) == 1 or len(sa) == 1 and len(sb) >= 3)


def out_dtype_refusal(expected: str, given: str) -> Exception:
    """A product's refusal of an out of dtype ``given`` where it makes ``expected`` (mm's and bmm's
    words; they read it before their operands' dtypes)."""
    return TorchTypeError(f"Expected out tensor to have dtype {_cpp(expected)}, but got {_cpp(given)} instead")


def mm_mismatch(first: str, second: str, device: str) -> Exception:
    """torch.mm's refusal of two dtypes, in the words of the device's kernels."""
    names = "mat1 and mat2" if device.startswith("cuda") else "m1 and m2"
    return TorchTypeError(f"expected {names} to have the same dtype, but got: {_cpp(first)} != {_cpp(second)}")


def torch_before(major: int, minor: int) -> bool:
    """Whether the torch already imported (the operands' own) is older than major.minor."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", "")
    try:
        return tuple(int(part) for part in version.split(".")[:2]) < (major, minor)
    except ValueError:
        return False


# torch.matmul's words where out= meets a tensor that requires grad (the operands or out itself) in grad mode
OUT_GRADIENT = ("matmul(): functions with out=... arguments don't support automatic differentiation, but one of the "
                "arguments requires grad.")


def check_out_gradient(a, b, out) -> None:
    """torch.matmul's first check of a call with ``out``: while grad mode is on, none of a, b and
    out may require grad (torch would have no graph to record the write in); TorchTypeError."""
    if ((a.requires_grad or b.requires_grad or getattr(out, "requires_grad", False))   # (out: maybe no tensor)
            and sys.modules["torch"].is_grad_enabled()):
        raise TorchTypeError(OUT_GRADIENT)


RESIZED = ("An output with one or more elements was resized since it had shape {have}, which does not match the "
           "required output shape {want}. This behavior is deprecated, and in a future PyTorch release outputs will "
           "not be resized unless they have zero elements. You can explicitly reuse an out tensor t by resizing it, "
           "inplace, to zero elements with t.resize_(0).")


def out_refusal(sa: tuple, sb: tuple, result: str, given: str, out_shape: tuple = None,
                fold: bool | None = None) -> Exception | None:
    """torch.matmul's error for an ``out`` of dtype name ``given`` (and shape ``out_shape``) where
    the result is ``result`` (torch takes an out of the result's dtype alone, and says so as the op
    it picks does: mv as addmv, whose `self` the out is where it is a vector of the rows' length or
    of one element, or a folded stack's; torch 2.11 said it for a stack folded into mv as for any
    other product), or None. fold: as refusal's (None: contiguous operands)."""
    if given == result:
        return None
    if len(sa) == 1 and len(sb) == 1:                       # torch.dot
        return TorchTypeError(f"result dtype {_scalar(given)} does not match input dtype {_scalar(result)}")
    if fold is None:
        fold = folds(sa, contiguous_strides(sa), sb, contiguous_strides(sb), has_out=True)
    if addmv_self_is_out(sa, sb, out_shape, fold) and not torch_before(2, 13):   # mv's words
        return TorchTypeError(f"addmv input tensors must have the same dtype, but got {_scalar(given)}, "
                              f"{_scalar(result)}, and {_scalar(result)}")
    return out_dtype_refusal(result, given)


def out_device_refusal(sa: tuple, sb: tuple, out_shape: tuple, device: str, out_device: str) -> Exception:
    """torch.matmul's error for an ``out`` on out_device where its operands are on the CUDA device
    ``device``: the device check of the op it picks, which comes before the out's shape and dtype
    are read, in its words (read from torch 2.11 on two GPUs)."""
    if len(sa) == 1 and len(sb) == 1:                       # torch.dot
        return TorchTypeError(f"dot: Expected the output and input tensors to be on the same device, but got the "
                              f"output tensor on {out_device}, the 'input' tensor on {device}, and the 'other' "
                              f"tensor on {device}")
    if len(sb) == 1:            # mv: an out of the result's shape is addmv's `self`, so the matrix differs
        argument = "mat" if len(sa) >= 3 or tuple(out_shape) == tuple(sa[:1]) else "self"
        op = "addmv"
    else:                       # mm (a stack of A folded into its rows) or bmm
        argument, op = "self", "mm" if len(sb) == 2 else "bmm"
    return TorchTypeError(f"Expected all tensors to be on the same device, but got {argument} is on {device}, "
                          f"different from other tensors on {out_device} (when checking argument in method "
                          f"wrapper_CUDA_{op}_out_out)")


def resized_first(sa: tuple, sb: tuple) -> bool:
    """Whether torch.matmul resizes its out to the result's shape before the product it picks
    reads it, and so before that product's checks of the out's dtype and device: a product with a
    stack (its bmm, or the one mm or mv of a folded stack)."""
    return max(len(sa), len(sb)) >= 3


def check_out_dtype(out, sa: tuple, sb: tuple, result: str, given: str, shape: tuple,
                    fold: bool | None = None) -> None:
    """Raise out_refusal's error, if any; where torch resizes its out before it reads the dtype
    (torch.dot, and a stack folded into one product), after out is resized to the result's shape."""
    error = out_refusal(sa, sb, result, given, tuple(out.shape), fold)
    if error is None:
        return
    if len(sa) == len(sb) == 1 or resized_first(sa, sb):       # (torch.dot resizes before its dtype check)
        resize_out(out, shape, sa, sb)
    raise error


def resize_out(out, shape: tuple, sa: tuple = (), sb: tuple = ()) -> None:
    """A torch ``out`` made the result's shape as torch.matmul makes it (at::native::resize_output):
    resized in place where its shape differs, with torch's UserWarning where it held elements (for a
    vector times a matrix the warning names the row torch multiplies: [1, n])."""
    if tuple(out.shape) == tuple(shape):
        return
    if out.numel():
        said = (1,) + tuple(shape) if len(sa) == 1 and len(sb) == 2 else shape
        warnings.warn(RESIZED.format(have=list(out.shape), want=list(said)), UserWarning, stacklevel=4)
    if out.requires_grad:     # (under no_grad: torch resizes beneath autograd, where Tensor.resize_ refuses it)
        with sys.modules["torch"]._C._AutoDispatchBelowADInplaceOrView():
            out.resize_(shape)
    else:
        out.resize_(shape)


def check(sa: tuple, sb: tuple, da: str, db: str, fold: bool | None = None, device: str = "cpu",
          out: tuple | None = None) -> None:
    """Raise torch.matmul's error for these operands (see refusal), if it has one."""
    error = refusal(tuple(sa), tuple(sb), da, db, fold, device, out)
    if error is not None:
        raise error


def check_operands(a, b, da: str, db: str, out=None, device: str = "cpu", torch_out: bool = True) -> None:
    """check for torch tensors a and b (dtype names da, db) and a torch ``out`` (or None) as
    torch.matmul reads them: a stack of one matrix that requires grad beside a stack of another
    count is multiplied as that matrix (ATen's _matmul_impl), and a stack folded or not as folds
    says of the strides. torch_out: the out's dtype is torch's to read (not where tilemm's
    out_dtype= names the result's dtype)."""
    sa, sb, strides_a, strides_b = tuple(a.shape), tuple(b.shape), tuple(a.stride()), tuple(b.stride())
    if len(sa) == len(sb) == 3 and sa[0] != sb[0]:
        if sa[0] == 1 and a.requires_grad:
            sa, strides_a = sa[1:], strides_a[1:]
        elif sb[0] == 1 and b.requires_grad:
            sb, strides_b = sb[1:], strides_b[1:]
    fold = folds(sa, strides_a, sb, strides_b, a.requires_grad, b.requires_grad, out is not None)
    given = (tuple(out.shape), torch_dtype_name(out.dtype)) if torch_out and hasattr(out, "dtype") else None
    if given is not None and len(sa) == len(sb) == 1 and given[1] != da:
        resize_out(out, (), sa, sb)          # (torch.dot resizes its out before refusing its dtype)
    check(sa, sb, da, db, fold, device, given)


def folds_of(a, b, has_out: bool) -> bool:
    """folds for torch tensors a and b (their shapes, strides and whether they require grad)."""
    return folds(tuple(a.shape), tuple(a.stride()), tuple(b.shape), tuple(b.stride()), a.requires_grad,
                 b.requires_grad, has_out)


def _broadcast(sa: tuple, sb: tuple):
    """The stacks' broadcast shape, or torch's error where they do not broadcast (its
    infer_size, from the last dimension back)."""
    n = max(len(sa), len(sb))
    shape = []
    for i in range(n - 1, -1, -1):
        offset = n - 1 - i
        x = sa[len(sa) - 1 - offset] if len(sa) - 1 - offset >= 0 else 1
        y = sb[len(sb) - 1 - offset] if len(sb) - 1 - offset >= 0 else 1
        if x != y and x != 1 and y != 1:
            return TorchShapeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) at "
                                   f"non-singleton dimension {i}")
        shape.append(y if x == 1 else x)
    return tuple(shape[::-1])


def _cpp(name: str) -> str:
    return CPP_NAMES.get(name, name)


def _scalar(name: str) -> str:
    return SCALAR_NAMES.get(name, name)
