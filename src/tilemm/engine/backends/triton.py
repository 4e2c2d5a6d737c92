"""The Triton backend: the tensor-core rungs (and the library's), on torch tensors."""
from __future__ import annotations

import functools
import math

import numpy as np

from tilemm.system import compat
from tilemm.numerics import arrays
from tilemm.engine.replay import recorded
from tilemm.engine.backends.common import replayable


def prepare(plan, a, b, poison: bool, copy: bool, where: str | None = None):
    """Triton takes torch tensors: host arrays are copied to the GPU (to CPU tensors under
    Triton's interpreter), CuPy arrays are viewed through __cuda_array_interface__. Returns
    (launch, result, record): record() gives the launch as a Replay, where it can be replayed."""
    import torch     # (torch loads on first use)
    p = plan.problem
    where = where or ("cpu" if compat.triton_interpreter() else "cuda")
    if where == "cuda" and plan.operand.device != "cpu":
        where = plan.operand.device      # the operands' GPU, not the current one (C and any copy made there)
    on_gpu = where != "cpu"
    if not on_gpu:
        compat.mend_triton_interpreter()     # (once: an older Triton's interpreter with a newer NumPy)
    dtype = getattr(torch, p.dtype)

    def tensor(x):
        x = arrays.native_order(x)        # a conjugate or negative view's values: Triton reads memory as it is
        if isinstance(x, torch.Tensor) and x.dtype == dtype and x.is_cuda == on_gpu:
            return x.clone() if copy else x            # as it is: the usual call, and the cheapest
        if isinstance(x, np.ndarray):
            # a copy (in x's layout) where torch can't view x, and of a read-only x, on which it warns
            x = torch.from_numpy(arrays.torch_readable(
                np.array(x) if arrays.torch_needs_copy(x, copy_read_only=True) else x))
        elif not isinstance(x, torch.Tensor):
            x = arrays.torch_view(x)
        narrow = (plan.kernel.narrow_operands and not x.dtype.is_floating_point and x.is_signed()
                  and x.element_size() < dtype.itemsize)
        y = x.to(where, x.dtype if narrow else dtype)
        return y.clone() if copy and y is x else y
    a_t, b_t = tensor(a), tensor(b)
    c = torch.empty(plan.batch + (p.m, p.n), dtype=dtype, device=where)
    if poison:
        arrays.poison(c)

    calls = []
    # A bound launch keeps its scratch buffers (operands' split parts, aligned copies) for the
    # plan's life: a stack of matrices would keep one set a matrix, so stacks run unbound.
    bind = plan.kernel.bind if math.prod(plan.batch) == 1 else None
    if p.m and p.n and plan.batch and plan.kernel.run_stack:
        calls.append(functools.partial(plan.kernel.run_stack, a_t, b_t, c))
    elif p.m and p.n:
        for idx, a_i, b_i in arrays.matrices(plan.batch, a_t, b_t):
            c_i = c[idx] if idx else c
            bound = bind and bind(a_i, b_i, c_i, **plan.params)
            calls.append(bound or functools.partial(plan.kernel.run, a_i, b_i, c_i, **plan.params))
    record = None          # for a repeated call's replay
    if len(calls) == 1 and bind and on_gpu and replayable(plan, copy, poison, a, b, a_t, b_t):
        record = functools.partial(recorded, calls[0], (a_t, b_t, c))

    def launch():
        for call in calls:
            call()

    def result():
        if plan.operand.device == "cpu":
            return arrays.host_copy(c) if p.dtype != "bfloat16" else c.cpu()
        if plan.operand.kind == "cupy":
            import cupy    # (the operands are CuPy's: imported already)
            return cupy.asarray(c)
        return c
    return launch, result, record
