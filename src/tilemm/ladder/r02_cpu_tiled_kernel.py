"""Rung 2's kernel (`cpu-tiled`, the record in r02_cpu_tiled.py): cache tiles of C over the cores,
compiled with numba, and the launch that keeps Numba's threading layers safe. In a file of its own,
imported at the first launch, so that importing tilemm or reading the ladder never imports numba."""
import os
import threading
import types

import numpy as np
from numba import njit, prange
from numba.np.ufunc import parallel as numba_parallel


# --8<-- [start:kernel]
# contract: fuse a*b+c into one FMA; reassoc: let LLVM split each dot product into
# vector lanes. Neither assumes away NaN or Inf.
@njit(parallel=True, cache=True, fastmath={"contract", "reassoc"})
def _tiled(a, b, c, block_m, block_n, block_k, zero):
    m, k = a.shape
    n = b.shape[1]
    tiles_n = (n + block_n - 1) // block_n
    tiles = ((m + block_m - 1) // block_m) * tiles_n
    for t in prange(tiles):                                # one output tile per task
        i0 = (t // tiles_n) * block_m
        j0 = (t % tiles_n) * block_n
        rows = min(block_m, m - i0)
        cols = min(block_n, n - j0)
        rows4 = (rows + 3) // 4 * 4                        # zero-padded to the 4x4 micro-tile
        cols4 = (cols + 3) // 4 * 4
        acc = np.zeros((rows4, cols4), c.dtype)            # (BLOCK_M, BLOCK_N) accumulators
        a_tile = np.zeros((rows4, block_k), a.dtype)       # (BLOCK_M, BLOCK_K), rows contiguous in K
        bt_tile = np.zeros((cols4, block_k), b.dtype)      # (BLOCK_N, BLOCK_K): B transposed
        for p0 in range(0, k, block_k):
            depth = min(block_k, k - p0)
            for i in range(rows):                          # pack: any strides in, contiguous out
                for p in range(depth):
                    a_tile[i, p] = a[i0 + i, p0 + p]
            for p in range(depth):
                for j in range(cols):
                    bt_tile[j, p] = b[p0 + p, j0 + j]
            for i in range(0, rows4, 4):
                for j in range(0, cols4, 4):
                    # a 4x4 block of C in registers: 8 loads feed 16 multiply-adds per step
                    c00 = c01 = c02 = c03 = zero
                    c10 = c11 = c12 = c13 = zero
                    c20 = c21 = c22 = c23 = zero
                    c30 = c31 = c32 = c33 = zero
                    for p in range(depth):
                        a0 = a_tile[i, p]
                        a1 = a_tile[i + 1, p]
                        a2 = a_tile[i + 2, p]
                        a3 = a_tile[i + 3, p]
                        b0 = bt_tile[j, p]
                        b1 = bt_tile[j + 1, p]
                        b2 = bt_tile[j + 2, p]
                        b3 = bt_tile[j + 3, p]
                        c00 += a0 * b0; c01 += a0 * b1; c02 += a0 * b2; c03 += a0 * b3  # noqa: E702
                        c10 += a1 * b0; c11 += a1 * b1; c12 += a1 * b2; c13 += a1 * b3  # noqa: E702
                        c20 += a2 * b0; c21 += a2 * b1; c22 += a2 * b2; c23 += a2 * b3  # noqa: E702
                        c30 += a3 * b0; c31 += a3 * b1; c32 += a3 * b2; c33 += a3 * b3  # noqa: E702
                    acc[i, j] += c00; acc[i, j + 1] += c01; acc[i, j + 2] += c02; acc[i, j + 3] += c03  # noqa: E702,E501
                    acc[i + 1, j] += c10; acc[i + 1, j + 1] += c11; acc[i + 1, j + 2] += c12; acc[i + 1, j + 3] += c13  # noqa: E702,E501
                    acc[i + 2, j] += c20; acc[i + 2, j + 1] += c21; acc[i + 2, j + 2] += c22; acc[i + 2, j + 3] += c23  # noqa: E702,E501
                    acc[i + 3, j] += c30; acc[i + 3, j + 1] += c31; acc[i + 3, j + 2] += c32; acc[i + 3, j + 3] += c33  # noqa: E702,E501
        for i in range(rows):
            for j in range(cols):
                c[i0 + i, j0 + j] = acc[i, j]
# --8<-- [end:kernel]


def compiled_for(dtype: str) -> bool:
    """Whether this process has compiled (or loaded from Numba's disk cache) cpu-tiled for
    operands of dtype."""
    return any(str(signature[0].dtype) == dtype for signature in _tiled.signatures)


def _one_core_twin(kernel, name: str):
    """kernel (parallel=True) compiled to run on the calling thread alone (prange as range),
    cached under a name of its own: Numba's cache keys a function by its name, not its flags."""
    body = types.FunctionType(kernel.py_func.__code__, kernel.py_func.__globals__, name)
    body.__qualname__ = name
    return njit(cache=True, fastmath=kernel.targetoptions["fastmath"])(body)


_tiled_one_core = _one_core_twin(_tiled, "_tiled_one_core")

# Numba's threading layers fail two kinds of user program: its workqueue layer (where neither
# TBB nor OpenMP loads) aborts the process when two threads launch parallel code at once, and its
# OpenMP layer (Linux's usual one) terminates a process forked after its parent ran parallel code
# (multiprocessing's fork, a DataLoader's workers). So cpu-tiled launches one call at a time
# (each uses every core), and a process so forked runs its tiles on one core.
_PARALLEL_LAUNCH = threading.Lock()
_forked_from_openmp = False


def _after_fork_in_child():
    global _PARALLEL_LAUNCH, _forked_from_openmp
    _PARALLEL_LAUNCH = threading.Lock()           # another thread may have held it at the fork
    _forked_from_openmp = _forked_from_openmp or (numba_parallel._is_initialized
                                                  and numba_parallel._threading_layer == "omp")


os.register_at_fork(after_in_child=_after_fork_in_child)


def run_tiled(a, b, c, block_m, block_n, block_k):
    zero = np.zeros(1, c.dtype)[0]
    if _forked_from_openmp:
        _tiled_one_core(a, b, c, block_m, block_n, block_k, zero)
        return
    with _PARALLEL_LAUNCH:
        _tiled(a, b, c, block_m, block_n, block_k, zero)
