"""What the Triton rungs share: whether they can run here, and the shared-memory check."""
from __future__ import annotations

from .. import _compat, machine

# Hopper's opt-in limit of dynamic shared memory per block (232,448 bytes on an H100).
H100_SHARED_OPTIN = 232448


def available() -> str | None:
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError:
        return "needs Triton and PyTorch (pip install 'tilemm[triton]')"
    if _compat.triton_interpreter():
        return None
    import torch
    if not torch.cuda.is_available():
        return ("needs a CUDA GPU (torch finds none); run it in Triton's interpreter at toy sizes with "
                "TRITON_INTERPRET=1, or use kernel='cpu-tiled'")
    major, _ = torch.cuda.get_device_capability()
    if major < 8:
        return f"needs tensor cores of compute capability 8.0 or newer (this GPU is {major}.x)"
    return None


def check_shared(block_m: int, block_n: int, block_k: int, num_stages: int, itemsize: int) -> str | None:
    """Triton keeps num_stages copies of the A and B tiles in shared memory: refuse a
    configuration that can't fit before it is compiled, not after a failed launch."""
    need = num_stages * (block_m + block_n) * block_k * itemsize
    gpu = machine.gpu()
    limit = gpu.max_shared_per_block_optin if gpu else H100_SHARED_OPTIN
    if need > limit:
        return (f"{num_stages} stages of {block_m}x{block_k} and {block_k}x{block_n} tiles need {need} bytes of "
                f"shared memory, over the {limit} a block may use; fewer stages or smaller tiles")
    return None
