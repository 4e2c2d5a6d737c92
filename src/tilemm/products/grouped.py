"""tilemm.grouped_matmul: many matrix products in one call, the grouped GEMM of a mixture of
experts, with torch._grouped_mm's arguments; on the `tensorcore-grouped` rung for torch and CuPy
arrays on a GPU, a loop of products on the host for NumPy's."""
from __future__ import annotations

import contextlib

import numpy as np

from tilemm.numerics import arrays
from tilemm.products.grouped_checks import BATCHED, COUNTED_M, SPLIT_M, SPLIT_K, check_scales, check_values, layout
from tilemm.products.grouped_launch import as_array, device_grouped, host_values


def grouped_matmul(a, b, offs=None, *, counts=None, scale_a=None, scale_b=None, out_dtype=None, out=None, **params):
    """Grouped products ``C_g = A_g @ B_g``, as ``torch._grouped_mm(a, b, offs)`` computes them.

    a, b: NumPy arrays, CuPy arrays or torch tensors (both one kind, on one device) of float16,
        bfloat16 (torch), float32 or int8, both one dtype, any strides. Their ranks pick the layout:

        - a (total_M, K) 2-D, b (G, K, N) 3-D, offs (G,): group g is a's rows offs[g-1]:offs[g]
          (tokens sorted by expert) times b[g]; the result is (total_M, N);
        - a (G, M, K), b (G, K, N): a batch, (G, M, N); with ``counts`` (G,), the masked layout:
          group g is a[g]'s first counts[g] rows;
        - a (M, total_K), b (total_K, N), offs (G,) over K: (G, M, N), C_g = a[:, cut g] @ b[cut g]
          (a weight gradient);
        - a (G, M, K), b (K, total_N), offs (G,) over N: (M, total_N), b's columns cut by offs.

        A list (or tuple) of a's and a list of b's instead: each pair a product of its own shape
        (a launch each, as a batch of one); returns the list of results.
    offs: int32 (G,) cumulative ends of the groups along the dimension they cut (torch's offs):
        group g spans offs[g-1] (0 for g = 0) to offs[g]. Where offs is on the host (NumPy, a list,
        a CPU tensor), it is checked: sorted, and offs[-1] within that dimension. Offsets on a GPU
        are trusted, as torch trusts them (reading them would wait for the GPU): the program
        clamps them into the operands, so bad ones give a wrong answer, never a fault.
    counts: int32 (G,), the masked layout's valid rows a group (checked where on the host, clamped
        to the capacity on a GPU). No value is read on the host for a GPU's counts or offs: the
        call's launch does not depend on them, so a CUDA graph can capture and replay it.
    scale_a, scale_b: block scales for float8 operands (torch, e4m3 or e5m2; the MoE forward
        layouts: 2-D x 3-D with offs, 3-D x 3-D, masked), DeepGEMM's: float32 scale_a (total_M,
        ceil(K/128)) (or (G, M, ceil(K/128))), one a 1 x 128 block of a row of A, and scale_b
        (G, ceil(K/128), ceil(N/128)), one a 128 x 128 block of B_g; each K step's float32
        partial sums are multiplied by theirs on the way into the accumulator (rung 16's rule).
    out_dtype: the result's dtype: the operands' (default; int8 gives int32, exact; float8
        bfloat16), or float32 for 16-bit operands (bfloat16, float16 or float32 for float8).
        Sums are float32 (int32 for int8), rounded once.
    out: an array of the result's shape and dtype, on the operands' device, to write into.
    params: the rung's parameters (block_m, block_n, block_k, group_m, num_warps, num_stages,
        programs: see ``tilemm.kernel("tensorcore-grouped")``); GPU operands only.

    Rows (or columns) that no group covers, past offs[-1] or past a group's count, are not written:
    in a new result they are 0 (offs on a GPU: unspecified, as torch's). Gradients flow for torch
    tensors in every contiguous layout and the batch (dA_g = dC_g B_g^T, dB_g = A_g^T dC_g: the
    weight's a K-cut product of this same program); with counts, rows past a group's count get
    none. Raises ValueError or TypeError naming the problem before any work.
    """
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return problems(a, b, offs, counts, out_dtype, out, params)
    torch, cupy = arrays.torch_if_imported(), arrays.cupy_if_imported()
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if scale_a is not None or scale_b is not None:
            raise TypeError("grouped_matmul: block scales are for float8 torch tensors (NumPy has no float8)")
        if params:
            raise TypeError(f"grouped_matmul: parameter(s) {', '.join(sorted(params))} are the GPU program's; "
                            "NumPy operands are multiplied on the host")
        return host_grouped(a, b, offs, counts, out_dtype, out)
    if cupy is not None and isinstance(a, cupy.ndarray) and isinstance(b, cupy.ndarray):
        cut = counts if counts is not None else offs
        cut = arrays.torch_view(cut) if isinstance(cut, cupy.ndarray) else cut
        view = arrays.torch_view(out) if out is not None else None
        offs, counts = (cut, None) if counts is None else (None, cut)
        c = grouped_matmul(arrays.torch_view(a), arrays.torch_view(b), offs, counts=counts, scale_a=scale_a,
                           scale_b=scale_b, out_dtype=out_dtype, out=view, **params)
        return out if out is not None else cupy.asarray(c)
    if torch is None or not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise TypeError(f"grouped_matmul: operands are {type(a).__name__} and {type(b).__name__}; pass two NumPy "
                        "arrays, two CuPy arrays or two torch tensors (or two lists of them)")
    if a.device != b.device:
        raise ValueError(f"grouped_matmul: a is on {a.device} and b on {b.device}; put both on one device")
    offs, counts = as_array(offs), as_array(counts)
    scaled = scale_a is not None or scale_b is not None
    lay = layout(a, b, offs, counts, out_dtype, scaled)
    if scaled:
        check_scales(scale_a, scale_b, a, b, lay, torch)
        return device_grouped(a, b, offs if counts is None else counts, lay, out, params, scales=(scale_a, scale_b))
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        if out is not None:
            raise TypeError("grouped_matmul: functions with out=... arguments don't support automatic "
                            "differentiation, but one of the arguments requires grad")
        if lay.dtype.startswith("int") or lay.dtype != str(a.dtype).removeprefix("torch."):
            raise TypeError(f"grouped_matmul: gradients flow for floating operands with the result in their dtype "
                            f"(here {lay.dtype} from {a.dtype}), as torch's grouped_mm")
        from tilemm.torch.grouped_autograd import differentiable
        return differentiable(a, b, offs, counts, lay, params)
    return device_grouped(a, b, offs if counts is None else counts, lay, out, params)


def problems(a_list, b_list, offs, counts, out_dtype, out, params) -> list:
    """A list of products of their own shapes, each as grouped_matmul's plain one (a group of one)."""
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
    return [grouped_matmul(a[None], b[None], out_dtype=out_dtype, **params)[0] for a, b in zip(a_list, b_list)]


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
    wide = np.int64 if lay.dtype == "int32" else np.float32
    c = np.zeros(lay.shape, lay.dtype) if out is None else out
    for g, (rows, a_g, b_g, c_at) in enumerate(slices(a, b, values, lay)):
        c[c_at] = (a_g[rows].astype(wide) @ b_g.astype(wide)).astype(lay.dtype)
    return c


def slices(a, b, values, lay):
    """(rows of A_g, A_g, B_g, where C_g lies in C) for each group: the layouts' meaning, written
    as plain slicing (the host loop, and the reference the program is tested against)."""
    start = 0
    for g in range(lay.groups):
        end = values[g] if values is not None else 0
        everything = slice(None)
        if lay.split == BATCHED:
            yield everything, a[g], b[g], g
        elif lay.split == COUNTED_M:
            yield slice(0, end), a[g], b[g], (g, slice(0, end))
        elif lay.split == SPLIT_M:
            yield slice(start, end), a, b[g], slice(start, end)
        elif lay.split == SPLIT_K:
            yield everything, a[:, start:end], b[start:end], g
        else:
            yield everything, a[g], b[:, start:end], (everything, slice(start, end))
        start = end if lay.split != COUNTED_M else 0
