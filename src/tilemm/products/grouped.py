"""tilemm.grouped_matmul's products: many matrix products in one call, the grouped GEMM of a
mixture of experts, with torch._grouped_mm's arguments; on the `tensorcore-grouped` rung for torch
and CuPy arrays on a GPU, a loop of products on the host for NumPy's and for torch CPU tensors
(tilemm.products.grouped_host; under Triton's interpreter CPU tensors run the rung). Gradients are
tilemm.torch.grouped_autograd's, where the public function (tilemm.products_api) sends them; a
repeated call on torch tensors starts from its key's plan (torch_plan's, kept by
tilemm.products.grouped_calls), this path being its first call's."""
from __future__ import annotations

import numpy as np

from tilemm.numerics import arrays
from tilemm.products.grouped_checks import check_scales, check_values, layout
from tilemm.products import grouped_host
from tilemm.products.grouped_launch import as_array, host_values, resolve, run
from tilemm.numerics.dtypes import torch_dtype_name


def grouped_matmul(a, b, offs=None, *, counts=None, scale_a=None, scale_b=None, out_dtype=None, out=None, **params):
    """tilemm.grouped_matmul's products (its docstring: tilemm.products_api), recording no gradient
    (tilemm.products_api sends those to tilemm.torch.grouped_autograd first)."""
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return problems(a, b, offs, counts, out_dtype, out, params, grouped_matmul)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if scale_a is not None or scale_b is not None:
            raise TypeError("grouped_matmul: block scales are for float8 torch tensors (NumPy has no float8)")
        if params:
            raise TypeError(f"grouped_matmul: parameter(s) {', '.join(sorted(params))} are the GPU program's; "
                            "NumPy operands are multiplied on the host")
        return host_grouped(a, b, offs, counts, out_dtype, out)
    cupy = arrays.cupy_of(a)             # (from a's type: a traced frame reads no sys.modules)
    if cupy is not None and isinstance(b, cupy.ndarray):
        cut = counts if counts is not None else offs
        cut = arrays.torch_view(cut) if isinstance(cut, cupy.ndarray) else cut
        view = arrays.torch_view(out) if out is not None else None
        offs, counts = (cut, None) if counts is None else (None, cut)
        c = grouped_matmul(arrays.torch_view(a), arrays.torch_view(b), offs, counts=counts, scale_a=scale_a,
                           scale_b=scale_b, out_dtype=out_dtype, out=view, **params)
        if out is not None and arrays.torch_needs_copy(out):     # (its view was a copy: the result written back)
            out[...] = cupy.asarray(view)
        return out if out is not None else cupy.asarray(c)
    torch = arrays.torch_of(a)
    if torch is None or not isinstance(b, torch.Tensor):
        raise TypeError(f"grouped_matmul: operands are {type(a).__name__} and {type(b).__name__}; pass two NumPy "
                        "arrays, two CuPy arrays or two torch tensors (or two lists of them)")
    plan, cut, scales = torch_plan(a, b, offs, counts, scale_a, scale_b, out_dtype, out, params)
    return run(plan, a, b, cut, out, scales)


def torch_plan(a, b, offs, counts, scale_a, scale_b, out_dtype, out, params) -> tuple:
    """(GroupedPlan, offs or counts, the block scales or None) of a call on torch tensors a and b
    that records no gradient, after every check that depends on its key alone."""
    scaled = scale_a is not None or scale_b is not None
    offs, counts, lay = torch_layout(a, b, offs, counts, out_dtype, scaled)
    scales = None
    if scaled:
        check_scales(scale_a, scale_b, a, b, lay, arrays.torch_of(a))
        scales = (scale_a, scale_b)
    cut = offs if counts is None else counts
    return resolve(a, b, cut, lay, out, params, scales=scales), cut, scales


def records_gradient(a, b, scale_a, scale_b) -> bool:
    """Whether autograd records a call: torch tensors (no block scales), one requiring grad, grad mode on."""
    torch = arrays.torch_of(a)        # (traced under torch.compile: no sys.modules)
    return (torch is not None and scale_a is None and scale_b is None and isinstance(b, torch.Tensor)
            and torch.is_grad_enabled() and (a.requires_grad or b.requires_grad))


def torch_layout(a, b, offs, counts, out_dtype, scaled: bool = False):
    """(offs, counts, layout) of a call on torch tensors a and b, checked."""
    if a.device != b.device:
        raise ValueError(f"grouped_matmul: a is on {a.device} and b on {b.device}; put both on one device")
    offs, counts = as_array(offs), as_array(counts)
    return offs, counts, layout(a, b, offs, counts, out_dtype, scaled)


def check_differentiable(a, lay, out, records: bool = True) -> None:
    """Refuse a call that records a gradient where torch's grouped_mm would (out=, an integer or
    widened result); not recording (torch.func's vmap or jvp alone): out=, which the transforms'
    Function does not write."""
    if out is not None:
        raise TypeError("grouped_matmul: functions with out=... arguments don't support automatic "
                        "differentiation, but one of the arguments requires grad" if records else
                        "grouped_matmul: out= is not taken under torch.func's transforms (vmap, jvp, ...)")
    if records and (lay.dtype.startswith("int") or lay.dtype != torch_dtype_name(a.dtype)):
        raise TypeError(f"grouped_matmul: gradients flow for floating operands with the result in their dtype "
                        f"(here {lay.dtype} from {a.dtype}), as torch's grouped_mm")


def problems(a_list, b_list, offs, counts, out_dtype, out, params, product) -> list:
    """A list of products of their own shapes, each product(a[None], b[None], ...) (a group of one)."""
    if not (isinstance(a_list, (list, tuple)) and isinstance(b_list, (list, tuple))):
        raise TypeError("grouped_matmul: a list of problems takes a list of a's and a list of b's")
    if len(a_list) != len(b_list):
        raise ValueError(f"grouped_matmul: {len(a_list)} a's for {len(b_list)} b's")
    if offs is not None or counts is not None or out is not None:
        raise ValueError("grouped_matmul: a list of problems takes no offs, counts or out (each pair is one product)")
    for i, (a, b) in enumerate(zip(a_list, b_list)):
        if getattr(a, "ndim", None) != 2 or getattr(b, "ndim", None) != 2:
            raise ValueError(f"grouped_matmul: problem {i} is {tuple(getattr(a, 'shape', ()))} x "
                             f"{tuple(getattr(b, 'shape', ()))}; a list holds matrices (2-D)")
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"grouped_matmul: problem {i}: shapes {tuple(a.shape)} and {tuple(b.shape)} do not "
                             f"line up (a's {a.shape[1]} columns vs b's {b.shape[0]} rows)")
    return [product(a[None], b[None], out_dtype=out_dtype, **params)[0] for a, b in zip(a_list, b_list)]


def host_grouped(a, b, offs, counts, out_dtype, out):
    """NumPy operands: a loop of NumPy products on the host, float32 sums (int64 for int8, wrapped
    to int32: exact), one rounding to the result's dtype."""
    offs, counts = as_array(offs), as_array(counts)
    lay = layout(a, b, offs, counts, out_dtype)
    cut = offs if counts is None else counts
    values = host_values(cut) if cut is not None else None
    if cut is not None:
        if values is None:
            raise TypeError("grouped_matmul: NumPy operands take offs or counts on the host (NumPy, a list)")
        check_values(values, lay)
    if out is not None and (not isinstance(out, np.ndarray) or out.shape != lay.shape or str(out.dtype) != lay.dtype):
        raise ValueError(f"grouped_matmul: out must be a NumPy array {lay.shape} of {lay.dtype}")
    if out is not None and not out.flags.writeable:     # (NumPy's error at the first group's write)
        raise ValueError("grouped_matmul: out is read-only")
    c = np.zeros(lay.shape, lay.dtype) if out is None else out
    grouped_host.numpy_products(a, b, c, values, lay)
    return c
