"""The public products beside tilemm.matmul, with their docs: scaled_matmul (float8),
grouped_matmul (a mixture of experts' grouped GEMM), linear and matmul_epilogue (a product and
its epilogue in one pass).

Each decides here what is torch's to run (a call that records a gradient, or that torch.compile
traces: tilemm.torch), and otherwise calls its product (tilemm.products), which checks the call
(a repeated grouped call on torch tensors: its key's plan, tilemm.products.grouped_calls).

    c = tilemm.scaled_matmul(a8, b8, scale_a, scale_b)          # float8 torch tensors, as torch._scaled_mm
    c = tilemm.grouped_matmul(x, w, offs)                        # experts' products in one launch
    y = tilemm.linear(x, weight, bias, activation="gelu")        # gelu(x @ weight.T + bias)
    d = tilemm.matmul_epilogue(a, b, c=c, alpha=2.0, beta=0.5)   # 0.5 * c + 2 * a @ b
"""
from __future__ import annotations

import functools
import numbers

import numpy as np

from tilemm import api
from tilemm.contract import numpy_rules
from tilemm.numerics import arrays
from tilemm.numerics.epilogue_math import check_activation
from tilemm.products import block_scaled, grouped, linear as host_epilogues, scaled
from tilemm.products.block_scaled import vector_scales

__all__ = ["scaled_matmul", "grouped_matmul", "linear", "matmul_epilogue"]


def scaled_matmul(a, b, scale_a=1.0, scale_b=1.0, *, out_dtype="bfloat16", fast_accum: bool = False, out=None,
                  stream=None, library=None, **params):
    """``(scale_a * a) @ (scale_b * b)`` for float8 a and b, as ``torch._scaled_mm`` computes it.

    Parameters
    ----------
    a : torch.Tensor
        (M, K), float8_e4m3fn or float8_e5m2, on a CUDA device (a CPU tensor under Triton's
        interpreter), any strides. A row-major a is read as it is; another layout is first copied.
        CPU tensors outside the interpreter are multiplied on the host as torch._scaled_mm
        multiplies them there (tilemm.products.scaled_host): each operand times its scales, then
        their float32 product; no parameters, library or stream there.
    b : torch.Tensor
        (K, N), of a's kind and device. A b given as (N, K).T (its columns contiguous) is read as
        it is; another layout is first copied.
    scale_a, scale_b : float or torch.Tensor, default 1.0
        Per-tensor scales: Python numbers or one-element float tensors; or float32 tensors of
        row-wise scales, scale_a (M, 1) and scale_b (1, N); or of block scales (DeepGEMM's),
        scale_a (M, ceil(K/128)), one a 1 x 128 block of A, and scale_b (ceil(K/128), ceil(N/128)),
        one a 128 x 128 block of B, applied to each K block's float32 partial sums. Row-wise
        scales run the per-tensor program and its params (below; ``cluster`` per-tensor only),
        each element of C times its row's and column's scales as it is written. Block scales run
        torch's own block-scaled ``torch._scaled_mm`` (cuBLASLt) where this torch offers it and
        takes the call (see ``library``), else the `tensorcore-block-scaled` program
        (tilemm.products.block_scaled), whose params are block_m, block_n, block_k, group_m,
        num_warps, num_stages, tma, warp_specialized
        (``tilemm.ladder.tensorcore.r16_block_scaled.DEFAULTS``; on Hopper its warp-specialized
        Gluon program). Row-wise and block scales: a repeated call replays its launches (or calls
        torch's product without the checks); no torch.compile op.
    out_dtype : {"bfloat16", "float16", "float32"} or torch.dtype, default "bfloat16"
        The result's dtype.
    fast_accum : bool, default False
        Let the tensor cores add fp8 products with their shorter accumulator (faster, less
        accurate), as ``_scaled_mm(use_fast_accum=True)``; by default each K step's products are
        added to a float32 sum.
    out : torch.Tensor, optional
        An (M, N) tensor of out_dtype on the operands' device to write into (any strides).
    stream : optional
        Where the work is queued, as for `tilemm.matmul` (None: torch's current stream).
    library : {None, True, False}, default None
        Block scales only: who runs the product. None: torch's block-scaled ``_scaled_mm``
        where it runs and takes the call, else tilemm's program. torch's runs where torch is 2.9
        or newer, built with CUDA 12.9 or newer, the GPU is Hopper (compute capability 9.x), and
        the call has float8_e4m3fn operands, a row-major a and b given as (N, K).T, each starting
        on 16 bytes, bfloat16 out_dtype, fast_accum False, no tile parameter, M a multiple of 4,
        N of 16 and K of 512 (tilemm lays the scales out as torch asks, two small copies in the
        call; out= and stream= as for tilemm's program). True:
        torch's, or a ValueError (the call) or KernelUnavailable (this torch, this device, the
        interpreter) saying why not. False: tilemm's program. Per-tensor and row-wise scales
        always run tilemm's program (True is a ValueError there).
    **params
        ``block_m``, ``block_n``, ``block_k``, ``group_m``, ``num_warps``, ``num_stages``: the tile
        and schedule (``tilemm.ladder.tensorcore.scaled_fp8.DEFAULTS``). With none given, 64 x 128
        tiles for a product of M <= 256 rows whose tiles make less than a round, stream-K where
        they fill half the SMs or fewer and K >= 12288 (``scaled_fp8.thin_tiles``), and 128 x 128
        tiles where the default's would fill half the SMs or fewer (``scaled_fp8.MID_TILES``).
        ``stream_k`` (bool). ``warp_specialized``: None, on a Hopper GPU, runs the warp-specialized
        Gluon program (128 x 256 tiles) for float32 sums with K >= 4096 and none of the others
        given; True: that program or an error; False: the Triton program. ``cluster``: True runs
        that program in clusters of two CTAs that load each B tile once for both, where Triton's
        Gluon can (3.9), or an error; False (the default): one CTA a tile.

    Returns
    -------
    torch.Tensor
        out, or a new contiguous (M, N) tensor of out_dtype.

    Raises
    ------
    TypeError
        An operand that is not a float8 torch tensor, an unknown parameter or out_dtype, or out=
        with operands that require grad.
    ValueError
        Shapes that do not line up, operands on two devices, a bad out, scale, parameter or
        library value; library=True for a call torch's block-scaled product does not take.
    KernelUnavailable
        No PyTorch, or no GPU (or interpreter) that can run the program (library=True: no torch
        or GPU that runs torch's block-scaled product); the message says why.

    Notes
    -----
    A call that repeats an earlier one (the same shapes, strides, dtypes, device and parameters,
    no out, no stream) replays the first one's launches on its own operands
    (``tilemm.engine.replay``), or calls torch's block-scaled product where the first one did:
    none of the checks and choices are made again.

    Gradients follow ``torch._scaled_mm``'s rules: operands that require grad give a result
    whose backward pass raises (no derivative is implemented). Under ``torch.compile`` a call is
    one custom op (``tilemm.torch.ops``).
    """
    if out is None and stream is None and not api.compiling():
        # a repeated call of block scales: its replay straight away (its key says that no gradient
        # is recorded and no transform is active, as at its first call)
        c = block_scaled.repeated_call(a, b, scale_a, scale_b, out_dtype, fast_accum, library, params)
        if c is not None:
            return c
    records = scaled.records_gradient(a, b, scale_a, scale_b)
    if scaled.under_transform(a, b, scale_a, scale_b):    # torch.func's vmap, grad, ...: operands without memory
        if vector_scales(scale_a, scale_b) or out is not None or stream is not None:
            raise TypeError("scaled_matmul: under torch.func's transforms (vmap, grad, jacrev, ...) it takes "
                            "per-tensor scales and no out= or stream=")
        from tilemm.torch import ops as torch_ops       # (its op: torch's vmap takes one product an element)
        traced = params if library is None else {**params, "library": library}
        return torch_ops.traced_scaled_matmul(a, b, scale_a, scale_b, out_dtype, fast_accum, out, stream, traced)
    if records or not vector_scales(scale_a, scale_b):     # (row-wise and block scales: no op of their own)
        if api.compiling():           # one op in the graph; Dynamo never sees the replays
            from tilemm.torch import ops as torch_ops
            traced = params if library is None else {**params, "library": library}
            return torch_ops.traced_scaled_matmul(a, b, scale_a, scale_b, out_dtype, fast_accum, out, stream, traced)
        if records:                   # a node whose backward raises, as torch._scaled_mm's
            if out is not None:
                raise TypeError("scaled_matmul: functions with out=... arguments don't support automatic "
                                "differentiation, but one of the arguments requires grad (as torch._scaled_mm refuses)")
            from tilemm.torch import ops as torch_ops
            plain = functools.partial(scaled.scaled_matmul, a, b, scale_a, scale_b, out_dtype=out_dtype,
                                      fast_accum=fast_accum, stream=stream, library=library, **params)
            tensors = [x for x in (a, b, scale_a, scale_b) if hasattr(x, "requires_grad")]
            return torch_ops.not_differentiable(plain, *tensors)
    return scaled.scaled_matmul(a, b, scale_a, scale_b, out_dtype=out_dtype, fast_accum=fast_accum, out=out,
                                stream=stream, library=library, **params)


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
        programs: see ``tilemm.kernel("tensorcore-grouped")``); GPU operands only (NumPy arrays
        and torch CPU tensors run a loop of products on the host).

    Rows (or columns) that no group covers, past offs[-1] or past a group's count, are not written:
    in a new result they are 0 (offs on a GPU: unspecified, as torch's). Gradients flow for torch
    tensors in every contiguous layout and the batch (dA_g = dC_g B_g^T, dB_g = A_g^T dC_g: the
    weight's a K-cut product of this same program); with counts, rows past a group's count get
    none. Raises ValueError or TypeError naming the problem before any work. A repeated call
    (torch tensors of the same kinds, dtypes, shapes, strides and devices, the same out_dtype and
    params, out given or not alike, no gradient recorded) skips the checks its first call made
    and replays its launch: offsets or counts on the host are still checked at every call. Under
    ``torch.compile`` and ``torch.export`` a call on torch tensors is one custom op,
    ``torch.ops.tilemm.grouped_matmul`` (tilemm.torch.grouped_ops), with these gradients (a list
    of problems: an op a problem); its shapes, dtypes and parameters are checked while tracing.
    """
    torch = arrays.torch_of(a)        # (traced under torch.compile: no sys.modules)
    transformed = False               # under torch.func's transforms: the autograd Function's rules
    if torch is not None:
        if not api.compiling() and (a.is_neg() or isinstance(b, torch.Tensor) and b.is_neg()):
            # a negative view (x.conj().imag): a copy of its values (the launches read its memory as it is)
            a, b = arrays.resolved_view(a), arrays.resolved_view(b)
        transformed = scale_a is None and scale_b is None and numpy_rules.torch_transformed(torch)
        if api.compiling() and transformed:
            from tilemm.torch import compiled_transforms
            if compiled_transforms.transformed():    # inside autograd's torch.func transforms: the eager call's rules
                return compiled_transforms.outside_the_graph(grouped_matmul, a, b, offs, counts=counts,
                                                             out_dtype=out_dtype, out=out, **params)
        if api.compiling() or (not transformed and numpy_rules.torch_unplanned(torch, a, b)):
            # one op in the graph (Dynamo never sees the plans and replays), in a trace and on
            # tensors without memory (its fake gives their results)
            from tilemm.torch import grouped_ops
            return grouped_ops.traced_grouped_matmul(a, b, offs, counts, scale_a, scale_b, out_dtype, out, params)
        calls = grouped_calls()       # a repeated call: its key's plan (or the path below)
        c = calls.NOT_SERVED if transformed else calls.call(a, b, offs, counts, scale_a, scale_b, out_dtype, out,
                                                            params)
        if c is not calls.NOT_SERVED:
            return c
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return grouped.problems(a, b, offs, counts, out_dtype, out, params, grouped_matmul)
    records = grouped.records_gradient(a, b, scale_a, scale_b)
    if transformed or records:
        offs, counts, lay = grouped.torch_layout(a, b, offs, counts, out_dtype)
        grouped.check_differentiable(a, lay, out, records)
        from tilemm.torch.grouped_autograd import differentiable
        return differentiable(a, b, offs, counts, lay, params)
    return grouped.grouped_matmul(a, b, offs, counts=counts, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype,
                                  out=out, **params)


def linear(x, weight, bias=None, activation=None, *, residual=None, kernel: str | None = None, **params):
    """``activation(x @ weight.T + bias) + residual``, in one pass where the route is tilemm's program.

    x: (..., in_features), any leading dimensions; weight: (out_features, in_features); bias:
        (out_features,) or None; residual: broadcastable to the result (..., out_features), or None.
        torch tensors of one dtype and device, or NumPy arrays, of a float dtype (float16, bfloat16,
        float32, float64): integer and complex operands are refused (TypeError; tilemm.matmul
        takes them).
    activation: None, "relu", "gelu" (erf, torch's default), "gelu_tanh" (torch's approximate="tanh")
        or "silu".
    kernel: None: tilemm's default for the product's shape (the library's operators where that is
        the library); a Triton rung (e.g. "tensorcore"): tilemm's fused-epilogue program; "cublas":
        torch's operators. params: the program's tiles (block_m, block_n, block_k, group_m,
        num_warps, num_stages).

    The backward (torch) reads what the forward saved: the pre-activation for gelu and silu (and
    relu with a residual), the output for relu; dX = dZ @ W and dW = dZ^T @ X by the same route,
    dBias = dZ summed over rows. Errors (TypeError, ValueError) are raised before any work.
    """
    activation = check_activation(activation)
    check_epilogue_call("linear", kernel, x, weight, ("x", "weight"))
    if isinstance(x, np.ndarray) or isinstance(weight, np.ndarray):
        return host_epilogues.linear_numpy(x, weight, bias, activation, residual, kernel, params)
    return fused_autograd().linear(x, weight, bias, activation, residual, kernel, params)


def matmul_epilogue(a, b, *, bias=None, activation=None, alpha: float = 1.0, beta: float | None = None, c=None,
                    residual=None, kernel: str | None = None, **params):
    """``activation(alpha * a @ b + beta * c + bias) + residual``: cuBLASLt's and nvmath-python's
    epilogues on a 2-D product (M, K) @ (K, N).

    bias: a row over N (shape (N,) or (1, N)) or a column over M (shape (M, 1)); c: (M, N), added
    as beta * c (beta None: 1 where c is given); residual: (M, N), added after the activation;
    activation, kernel, params: as tilemm.linear's. torch tensors (autograd, torch.compile) or
    NumPy arrays.
    """
    activation = check_activation(activation)
    check_epilogue_call("matmul_epilogue", kernel, a, b, ("a", "b"))
    alpha = real_number("alpha", alpha)
    beta = (1.0 if c is not None else 0.0) if beta is None else real_number("beta", beta)
    if beta != 0 and c is None:
        raise ValueError(f"matmul_epilogue: beta={beta} adds beta * c, but no c is given")
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return host_epilogues.epilogue_numpy(a, b, bias, activation, alpha, beta, c, residual, kernel, params)
    return fused_autograd().matmul_epilogue(a, b, bias, activation, alpha, beta, c, residual, kernel, params)


def check_epilogue_call(name: str, kernel, first, second, labels: tuple) -> None:
    """Refuse first what the epilogues' checks would meet as an AttributeError or an unhashable
    key: an operand that is None, a kernel that is not a name (identity checks: a repeated call
    pays next to nothing for them)."""
    if first is None or second is None:
        raise TypeError(f"{name}: {labels[first is not None]} is None; pass a torch tensor or a NumPy array")
    if kernel is not None and kernel.__class__ is not str and not isinstance(kernel, str):
        raise TypeError(f"{name}: kernel must be a kernel's name (a str) or None, not {type(kernel).__name__} "
                        f"{kernel!r}")


def real_number(name: str, value) -> float:
    """matmul_epilogue's alpha or beta as a float: a real number or a one-element tensor or array of
    one (TypeError for a str, a bool, None or a complex, which float() took or named without the
    argument; ValueError for several elements)."""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return float(value)         # first: under torch.compile(dynamic=True) a float is symbolic, and has no hasattr
    if hasattr(value, "shape") and not isinstance(value, numbers.Number):
        if int(np.prod(value.shape)) != 1:
            raise ValueError(f"matmul_epilogue: {name} has shape {tuple(value.shape)}; it is one real number")
        value = value.item()
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"matmul_epilogue: {name}={value!r} must be a real number")
    return float(value)


# modules imported at the first call with torch tensors (they import torch), then a dict's look-up:
# an import statement's Python is a microsecond of a small call's CPU time (not functools.cache,
# which torch.compile warns of at each traced call)
IMPORTED = {}


def grouped_calls():
    """tilemm.products.grouped_calls (repeated grouped calls)."""
    if "grouped_calls" not in IMPORTED:
        from tilemm.products import grouped_calls as module
        IMPORTED["grouped_calls"] = module
    return IMPORTED["grouped_calls"]


def fused_autograd():
    """tilemm.torch.fused_autograd."""
    if api.compiling():   # (an import statement: Dynamo's guard on IMPORTED's key recompiled the first traced call)
        from tilemm.torch import fused_autograd as module
        return module
    if "fused_autograd" not in IMPORTED:
        from tilemm.torch import fused_autograd as module
        IMPORTED["fused_autograd"] = module
    return IMPORTED["fused_autograd"]
