"""One launcher for the SIMT rungs: the grid (ceil-div over the output tile), the limits a
launch must respect, and the compiled-kernel cache.

The limits are the GPU's own (numba-cuda reads them off the device) or, with no GPU or
under the simulator, a typical H100's: CUDA refuses a block of more than 1024 threads with
"invalid configuration argument" (seed 000's TILE_WIDTH > 32); here the refusal comes
first, and says which limit and why.
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

import numpy as np

from tilemm.system import compat, machine
from tilemm.engine import streams
from tilemm.numerics.dtypes import WORD_DTYPES
from tilemm.ladder.record import Kernel, Param, Problem, register
from tilemm.ladder.simt import direct

SIMT_DTYPES = WORD_DTYPES
# 16-byte aligned shared arrays let the compiler merge four neighbouring loads into one
# ld.shared.v4; the simulator refuses any alignment argument but None.
SHARED_ALIGN = None if compat.cuda_simulator() else 16
# Inlining a device function: by NVVM (forceinline, LLVM's alwaysinline), which the simulator
# does not take; there Numba's own (inline="always"), which runs the same Python.
INLINE = {"inline": "always"} if compat.cuda_simulator() else {"forceinline": True}


# The parameters several rungs share: naive's block (rungs 3-5) and tiled's tile (rungs 6-7).
BLOCK = Param("block", 16, (1, 2, 4, 8, 16, 32, 64), "threads per block side (BLOCK x BLOCK); 64 exceeds 1024")
TILE = Param("tile", 16, (8, 16, 32, 64), "TILE_WIDTH: a block is TILE x TILE threads and tiles")


@dataclass(frozen=True)
class Factory:
    """A rung's kernel factory, named by its module and function: factory(numba scalar type,
    **compile params) -> a @cuda.jit kernel. The module (and numba-cuda with it) is imported at the
    first build, so that reading a rung's record never imports numba."""
    module: str
    function: str

    def __call__(self, scalar, **params):
        return getattr(importlib.import_module(self.module), self.function)(scalar, **params)


@dataclass(frozen=True)
class LaunchShape:
    grid: tuple          # blocks along (x, y): x walks the columns of C, y its rows
    block: tuple         # threads along (x, y)
    shared_bytes: int    # static shared memory per block
    per_thread: tuple    # outputs each thread computes (rows, cols)

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1]


def register_cap(threads: int, blocks_per_sm: int = 2) -> int | None:
    """A register budget that lets blocks_per_sm blocks of this size share one SM's 65536
    registers (None: no cap needed). Unrolled loops keep many loads in flight and the compiler
    spends registers on them; at 1024 threads a block, 33 registers a thread already halve
    the blocks an SM can hold."""
    cap = 65536 // (threads * blocks_per_sm) // 8 * 8
    return cap if cap < 255 else None


def jit_options(registers: int | None = None) -> dict:
    """cuda.jit options: machine code cached on disk across processes, and a register cap
    where one is asked for (the simulator takes no cap)."""
    options = {"cache": True}
    if registers and not compat.cuda_simulator():
        options["max_registers"] = registers
    return options


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check(shape: LaunchShape) -> str | None:
    """The limit this launch would break, with the reason, or None."""
    gpu = machine.limits()
    where = f"on {gpu.name}"
    if shape.threads > gpu.max_threads_per_block:
        return (f"a block of {shape.block[0]}x{shape.block[1]} = {shape.threads} threads exceeds the "
                f"{gpu.max_threads_per_block} threads per block allowed {where} (CUDA would fail with "
                f"'invalid configuration argument'); use a smaller tile")
    for axis, (d, lim) in enumerate(zip(shape.block, gpu.max_block_dim)):
        if d > lim:
            return f"block dimension {'xyz'[axis]} = {d} exceeds {lim} {where}"
    for axis, (d, lim) in enumerate(zip(shape.grid, gpu.max_grid_dim)):
        if d > lim:
            return (f"grid dimension {'xyz'[axis]} = {d} blocks exceeds {lim} {where}; "
                    "the matrix is too large for this tile")
    if shape.shared_bytes > gpu.max_shared_per_block:
        return (f"{shape.shared_bytes} bytes of static shared memory per block exceed the "
                f"{gpu.max_shared_per_block} bytes a block may declare statically {where}")
    return None


# The SIMT rungs index in 32 bits (uint32: half the instructions of 64-bit address arithmetic, the
# seeds' `int`): an operand or result of 2^31 elements or more is refused, never wrapped.
INDEX_LIMIT = 2**31


def index_limit(problem: Problem, who: str = "the SIMT rungs") -> str | None:
    """Why 32-bit indices can't address this problem's operands and result, or None. (CuPy's
    integer matmul, rung `cublas`'s for integers, faults past it: seen on an H100, 47000² int32.)"""
    for name, rows, cols in (("A", problem.m, problem.k), ("B", problem.k, problem.n), ("C", problem.m, problem.n)):
        if rows * cols >= INDEX_LIMIT:
            return (f"{name} is {rows} x {cols} = {rows * cols} elements, and {who} index in 32 bits "
                    f"(under 2^31 = {INDEX_LIMIT} elements a matrix); use a tensor-core rung, or the default")
    return None


def available() -> str | None:
    """Why numba-cuda kernels can't run here, or None; worked out once (the answer does not
    change within a process, and every plan asks)."""
    return _available(compat.cuda_simulator())


@functools.lru_cache(maxsize=None)
def _available(simulator: bool) -> str | None:
    if simulator:
        return None
    try:
        from numba import cuda
    except ImportError:
        return "needs numba-cuda (pip install 'tilemm[cuda]')"
    if not cuda.is_available():
        return ("needs a CUDA GPU (numba.cuda finds none); run it in the simulator at toy sizes with "
                "NUMBA_ENABLE_CUDASIM=1, or a CPU rung (numpy takes every dtype)")
    return None


BUILT: list = []     # the kernels compiled() built in this process, for disk_cache_counts


@functools.lru_cache(maxsize=None)
def compiled(factory, dtype: str, **params):
    """factory(numba scalar type, **params) -> a @cuda.jit kernel, built once per combination.

    numba-cuda keeps its machine code on disk (cache=True: NUMBA_CACHE_DIR, else __pycache__ beside
    the rung's file, else a folder of the user's), so a new process loads what an earlier one
    compiled. The kernels are closures, and numba-cuda keys a closure's entry by its bytecode and a
    hash of its cells pickled (the scalar type, the tile sizes, the device functions it calls):
    each combination has an entry of its own, and the key is the same in every process
    (tests/test_warmup.py checks it). A jit option is not in the key: a rung's register cap must
    follow from its cells, as each rung's does."""
    import numba
    kernel = factory(getattr(numba, dtype), **params)
    BUILT.append(kernel)
    return kernel


def disk_cache_counts() -> dict:
    """{"loaded": n, "compiled": n}: the SIMT kernels' specialisations this process loaded from
    numba-cuda's disk cache and those it compiled (nothing under the simulator)."""
    counts = {"loaded": 0, "compiled": 0}
    for kernel in BUILT:
        stats = getattr(kernel, "stats", None)
        if stats is not None:
            counts["loaded"] += sum(stats.cache_hits.values())
            counts["compiled"] += sum(stats.cache_misses.values())
    return counts


# name -> (factory, compile parameters): what compile-only checks need to build each rung.
FACTORIES: dict = {}
FLAT_FACTORIES: dict = {}   # name -> the factory of its flat (C-contiguous) form, where it has one


def register_simt(name, rung, factory, shape_fn, traffic, params, seed, summary, compile_params=(), limits=None,
                  flat_factory=None, variant=None):
    """Register a numba-cuda rung: one run, one limits check, one availability test for all.

    shape_fn(problem, **params) -> LaunchShape; factory(scalar type, **compile params) -> kernel.
    flat_factory, if given, builds the kernel for C-contiguous operands, passed flat with m, n, k.
    variant, if given, is variant(a, b, **params) -> more compile parameters, read off the
    operands themselves (their alignment, say).
    """
    def parts(a, b, c, **p):
        """(kernel, launch shape, arguments) of c = a @ b: the flat form for C-contiguous operands."""
        problem = Problem(a.shape[0], b.shape[1], a.shape[1], np.dtype(c.dtype).name)
        chosen = {k: p[k] for k in compile_params}
        if variant:
            chosen.update(variant(a, b, **p))
        grid = shape_fn(problem, **p)
        if flat_factory and all(x.is_c_contiguous() for x in (a, b, c)):
            return compiled(flat_factory, problem.dtype, **chosen), grid, (a.reshape(-1), b.reshape(-1), c.reshape(-1),
                                                                             problem.m, problem.n, problem.k)
        return compiled(factory, problem.dtype, **chosen), grid, (a, b, c)

    def run(a, b, c, **p):
        kernel, grid, args = parts(a, b, c, **p)
        kernel[grid.grid, grid.block, streams.numba_stream()](*args)    # the caller's stream (tilemm.engine.streams)

    def replay(a, b, c, **p):
        """After a first launch on torch CUDA tensors: the same kernel launched directly (simt.direct)."""
        from numba import cuda
        views = tuple(cuda.as_cuda_array(x.detach() if getattr(x, "requires_grad", False) else x, sync=False)
                      for x in (a, b, c))      # (numba reads no tensor that requires grad)
        kernel, grid, args = parts(*views, **p)
        return direct.recorded(kernel, grid.grid, grid.block, args, views, c)

    def launch_limits(problem, **p):
        return index_limit(problem) or check(shape_fn(problem, **p))

    FACTORIES[name] = (factory, compile_params)
    if flat_factory:
        FLAT_FACTORIES[name] = flat_factory
    return register(Kernel(name=name, rung=rung, device="cuda", backend="numba-cuda", dtypes=SIMT_DTYPES,
                           seed=seed, summary=summary, run=run, traffic=traffic, params=params,
                           limits=limits or launch_limits, available=available, launch_shape=shape_fn,
                           replay=replay))
