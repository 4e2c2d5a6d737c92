"""Whether the Triton rungs can run here, and what this GPU allows them: Triton and torch
installed, tensor cores, Hopper's Gluon (and its clusters), its SMs, shared memory and 32-bit tile coordinates."""
from __future__ import annotations

import functools
import sys

from tilemm.system import compat, machine

# Hopper's opt-in limit of dynamic shared memory per block (232,448 bytes on an H100).
H100_SHARED_OPTIN = 232448
H100_SMS = 132


def available() -> str | None:
    """Why the Triton rungs can't run here, or None; worked out once (the answer does not change
    within a process, and every plan asks)."""
    return available_under(compat.triton_interpreter())


def triton_loaded() -> bool:
    """Whether this process has Triton loaded already (imported, as it is to run a program): a
    Triton rung's first call then pays its compile (or cache load) alone, not Triton's own start
    (its import, and the hash of its compiler it works out before any program)."""
    return "triton" in sys.modules


@functools.lru_cache(maxsize=None)
def available_under(interpreter: bool) -> str | None:
    """available()'s answer, in or outside Triton's interpreter."""
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError:
        return "needs Triton and PyTorch (pip install 'tilemm[triton]')"
    if interpreter:
        return None
    import torch
    if not torch.cuda.is_available():
        return ("needs a CUDA GPU (torch finds none); run it in Triton's interpreter at toy sizes with "
                "TRITON_INTERPRET=1, or a CPU rung (numpy takes every dtype)")
    major, _ = torch.cuda.get_device_capability()
    if major < 8:
        return f"needs tensor cores of compute capability 8.0 or newer (this GPU is {major}.x)"
    return None


@functools.lru_cache(maxsize=None)
def hopper_gluon() -> bool:
    """Whether the Gluon program written for Hopper (wgmma) runs here: a GPU of compute
    capability 9.x, outside Triton's interpreter (which runs no Gluon), with a Triton whose Gluon
    has what the program uses."""
    if compat.triton_interpreter() or available() is not None:
        return False
    import torch
    if torch.cuda.get_device_capability()[0] != 9:
        return False
    # Gluon's API moves between releases: the programs run on 3.6 and compile on 3.9
    if triton_version() < (3, 6):
        return False
    try:   # what the programs take from Gluon, as this Triton spells it (the TMA load: gluon_helpers)
        from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: F401
            fence_async_shared, warpgroup_mma, warpgroup_mma_wait)
        from tilemm.engine import gluon_helpers  # noqa: F401
    except (ImportError, AttributeError):
        return False
    return True


@functools.lru_cache(maxsize=None)
def triton_version() -> tuple:
    """(major, minor) of the installed Triton."""
    import triton
    return tuple(int(part) for part in triton.__version__.split(".")[:2])


@functools.lru_cache(maxsize=None)
def gluon_float64_descriptors() -> str | None:
    """Why Gluon's TMA descriptors can't describe float64 tensors with this Triton, or None.
    TMA copies 8-byte elements, but Gluon's host-side descriptor takes 8-, 16- and 32-bit ones only
    in the releases after 3.6 (3.7 and 3.9 refuse 64)."""
    import torch
    import triton
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    sample = torch.zeros(16, 16, dtype=torch.float64)
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=64, rank=2)
    try:
        TensorDescriptor(sample, [16, 16], [16, 1], [16, 8], layout)
    except AssertionError:
        return f"Triton {triton.__version__}'s Gluon makes no TMA descriptor of float64 elements (3.6's does)"
    return None


@functools.lru_cache(maxsize=None)
def gluon_multicast() -> bool:
    """Whether the Gluon cluster program (scaled_fp8_cluster_kernel: two CTAs, B loaded once for
    both) runs here: hopper_gluon(), and a Gluon that has what it takes (gluon_cluster_api())."""
    return hopper_gluon() and gluon_cluster_api()


@functools.lru_cache(maxsize=None)
def gluon_cluster_api() -> bool:
    """Whether this Triton's Gluon has what a cluster program takes, by its API: the TMA load's
    multicast, CGA layouts, barriers shared by a pair of CTAs, and arrivals routed to the CTA that
    holds a barrier (mbarrier.arrive's from_cta). Triton 3.7 has the first three but arrives on
    each CTA's own copy of a shared barrier: the lead could overwrite a stage the other CTA still
    reads. Needs no GPU."""
    import inspect
    try:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia.hopper import mbarrier
        from tilemm.engine.gluon_helpers import tma_load
        takes = [(tma_load, "multicast"), (mbarrier.arrive, "from_cta"), (gl.NVMMADistributedLayout, "cga_layout"),
                 (mbarrier.allocate_mbarrier, "two_ctas")]
        # (a jit function keeps its Python one as .fn)
        return all(name in inspect.signature(getattr(function, "fn", function)).parameters for function, name in takes)
    except (ImportError, AttributeError, TypeError, ValueError):
        return False


def gluon_multicast_refusal(asked: str) -> str | None:
    """Why `asked` (a parameter that picks a Gluon cluster program) can't be had here, or None
    where gluon_multicast()."""
    refusal = hopper_gluon_refusal(asked)
    if refusal or gluon_multicast():
        return refusal
    return (f"{asked} needs a Triton whose Gluon routes mbarrier arrivals between the CTAs of a cluster "
            f"(3.9 has it; this is Triton {'.'.join(map(str, triton_version()))})")


def hopper_gluon_refusal(asked: str) -> str | None:
    """Why `asked` (a parameter that picks a Gluon program) can't be had here, or None where
    hopper_gluon()."""
    if hopper_gluon():
        return None
    installed = f" (this is Triton {'.'.join(map(str, triton_version()))})" if available() is None else ""
    return (f"{asked} needs a Hopper GPU (compute capability 9.x) and Triton's Gluon (3.6 or newer){installed}, "
            "outside Triton's interpreter")


@functools.lru_cache(maxsize=None)
def multiprocessors() -> int:
    """SMs of the GPU (a persistent kernel starts one program each; tile choices count them).
    Under Triton's interpreter 4: a few programs that each take several tiles, so the tests walk
    a persistent kernel's tile loop."""
    if compat.triton_interpreter():
        return 4
    import torch
    if not torch.cuda.is_available():   # planning on a CPU machine: an H100, as tilemm assumes there
        return H100_SMS
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


# TMA takes 32-bit signed tile coordinates, and the digit and TF32 programs stack up to 8 planes
# of an operand's rows in one tensor (tensorcore-int's int64: 8 digits).
COORDINATE_LIMIT = 2**31
MAX_PLANES = 8


def dimension_limit(m: int, n: int, k: int) -> str | None:
    """Why a dimension is too long for the Triton rungs' 32-bit tile coordinates, or None (every
    offset into memory is 64-bit: operands and results of 2^31 elements or more are fine)."""
    longest = max(m, n, k)
    if longest * MAX_PLANES >= COORDINATE_LIMIT:
        return (f"a dimension of {longest} is too long: the tensor-core rungs address tiles with 32-bit "
                f"coordinates over up to {MAX_PLANES} stacked planes (each of M, N, K under "
                f"{COORDINATE_LIMIT // MAX_PLANES}); use kernel='cublas'")
    return None


def check_shared(block_m: int, block_n: int, block_k: int, num_stages: int, itemsize: int,
                 epilogue: int = 0) -> str | None:
    """Triton keeps num_stages copies of the A and B tiles in shared memory (plus, for a kernel
    that writes one tile while loading the next, `epilogue` bytes for the tile it writes): refuse
    a configuration that can't fit before it is compiled, not after a failed launch."""
    need = num_stages * (block_m + block_n) * block_k * itemsize + epilogue
    gpu = machine.gpu()
    limit = gpu.max_shared_per_block_optin if gpu else H100_SHARED_OPTIN
    if need > limit:
        return (f"{num_stages} stages of {block_m}x{block_k} and {block_k}x{block_n} tiles"
                f"{f' and {epilogue} bytes for writing C' if epilogue else ''} need {need} bytes of "
                f"shared memory, over the {limit} a block may use; fewer stages or smaller tiles")
    return None
