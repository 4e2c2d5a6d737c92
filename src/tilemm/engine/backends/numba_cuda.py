"""The numba-cuda backend: the SIMT rungs, on numba-cuda's views of the operands."""
from __future__ import annotations

import functools

import numpy as np

from tilemm.numerics import arrays
from tilemm.system import compat
from tilemm.engine import numba_exit, streams
from tilemm.engine.backends.common import poisoned, replayable, run_over_stack


def prepare(plan, a, b, poison: bool, copy: bool):
    """Operands cast on the device (host arrays copied in), C allocated in the inputs' kind;
    numba-cuda sees torch and CuPy memory through __cuda_array_interface__, with no copy. Returns
    (launch, result, record): record() gives the launches as a Replay, where they can be replayed."""
    from numba import cuda     # (numba.cuda loads on first use)
    if not compat.cuda_simulator():
        numba_exit.keep_modules_at_exit()
    p = plan.problem
    host = plan.operand.device == "cpu"  # NumPy arrays or CPU tensors: copy in and out
    stream = streams.numba_stream()
    if host:
        a_d = cuda.to_device(np.ascontiguousarray(arrays.to_host(a, p.dtype)), stream=stream)
        b_d = cuda.to_device(np.ascontiguousarray(arrays.to_host(b, p.dtype)), stream=stream)
        c_d = cuda.to_device(poisoned(plan.batch + (p.m, p.n), p.dtype, poison), stream=stream)
        keep = ()
    else:   # no sync with the producer's stream: the kernels are queued on the caller's stream
        # (a conjugate or negative view as its values: numba reads memory as it is)
        a, b = arrays.native_order(a), arrays.native_order(b)
        keep = (arrays.device_cast(a, p.dtype, copy), arrays.device_cast(b, p.dtype, copy),
                arrays.device_empty(plan.operand, plan.batch + (p.m, p.n), p.dtype, poison))
        a_d, b_d, c_d = keep          # viewed by numba a matrix at a time (numba_view)

    record = None          # for a repeated call's replay
    if plan.kernel.replay and not host and p.m and p.n and p.k and replayable(plan, copy, poison, a, b, *keep[:2]):
        record = functools.partial(plan.kernel.replay, a, b, keep[2], **plan.params)

    def launch():
        if p.m and p.n and p.k:
            run_over_stack(plan, a_d, b_d, c_d, view=None if host else numba_view)
        elif p.m and p.n:  # K = 0: an empty sum, zeros with no launch (a zero-size operand
            if host:       # can't even be sliced on the device)
                c_d.copy_to_device(np.zeros(c_d.shape, c_d.dtype), stream=streams.numba_stream())
            else:
                keep[2].zero_() if hasattr(keep[2], "zero_") else keep[2].fill(0)

    def result():
        if not host:
            return keep[2]
        stream = streams.numba_stream()
        c_h = c_d.copy_to_host(stream=stream)
        if stream:
            stream.synchronize()
        return c_h
    return launch, result, record


def numba_view(x):
    """numba-cuda's view of a torch or CuPy matrix, no copy. The stack is cut into matrices by
    torch or CuPy first: numba-cuda 0.30's integer index of a stack whose matrices are F-ordered
    (a stack's .mT) gives them C-ordered strides, every element read from the wrong place. A torch
    tensor that requires grad (a replayed plan's operands under no_grad) is viewed detached:
    numba reads no tensor that requires grad."""
    from numba import cuda
    return cuda.as_cuda_array(x.detach() if getattr(x, "requires_grad", False) else x, sync=False)
