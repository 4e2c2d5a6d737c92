"""What the Triton rungs share: whether they can run here, and the shared-memory check."""
from __future__ import annotations

import functools
import itertools

from .. import _compat, machine

# Hopper's opt-in limit of dynamic shared memory per block (232,448 bytes on an H100).
H100_SHARED_OPTIN = 232448
H100_SMS = 132
SPLIT_BLOCK = 64   # split passes: 64 x 64 elements a program


def available() -> str | None:
    """Why the Triton rungs can't run here, or None; worked out once (the answer does not change
    within a process, and every plan asks)."""
    return _available(_compat.triton_interpreter())


@functools.lru_cache(maxsize=None)
def _available(interpreter: bool) -> str | None:
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
                "TRITON_INTERPRET=1, or use kernel='cpu-tiled'")
    major, _ = torch.cuda.get_device_capability()
    if major < 8:
        return f"needs tensor cores of compute capability 8.0 or newer (this GPU is {major}.x)"
    return None


@functools.lru_cache(maxsize=None)
def hopper_gluon() -> bool:
    """Whether the Gluon program written for Hopper (wgmma) runs here: a GPU of compute
    capability 9.x, outside Triton's interpreter (which runs no Gluon), with a Triton whose Gluon
    has what the program uses."""
    if _compat.triton_interpreter() or available() is not None:
        return False
    import torch
    import triton
    if torch.cuda.get_device_capability()[0] != 9:
        return False
    # Gluon's API moves between releases: the program is measured on 3.6 and compiled on 3.9
    if tuple(int(part) for part in triton.__version__.split(".")[:2]) < (3, 6):
        return False
    try:   # the program itself: it names Gluon's TMA load as this Triton spells it
        from .tensorcore import t2_int8_gluon_kernel  # noqa: F401
    except (ImportError, AttributeError):
        return False
    return True


@functools.lru_cache(maxsize=None)
def multiprocessors() -> int:
    """SMs of the GPU (a persistent kernel starts one program each; tile choices count them).
    Under Triton's interpreter 4: a few programs that each take several tiles, so the tests walk
    a persistent kernel's tile loop."""
    if _compat.triton_interpreter():
        return 4
    import torch
    if not torch.cuda.is_available():   # planning on a CPU machine: an H100, as tilemm assumes there
        return H100_SMS
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


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


def k_major(x) -> bool:
    """x's rows are contiguous, with the 16-byte aligned row stride and base TMA needs."""
    return x.stride(1) == 1 and (x.stride(0) * x.element_size()) % 16 == 0 and x.data_ptr() % 16 == 0


def row_descriptor(x, block_rows: int, block_cols: int, align: int = 16):
    """(TMA descriptor, fill) for x (rows, cols) read row by row: of x itself when its rows are
    contiguous and `align`-byte aligned (16: TMA's rule, k_major), fill None; else of aligned rows
    that fill() copies x into, a pass over x that counts in the caller's time (a row of 8191 bf16
    is 16382 bytes; a transposed view has no rows; align=128 for speed: rows_aligned_pays). Call
    fill before each launch: it reads x's current values."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor
    fill = None
    if not k_major(x) or (x.stride(0) * x.element_size()) % align:
        rows, cols = x.shape
        per_row = align // x.element_size()
        padded = torch.empty((rows, -(-cols // per_row) * per_row), dtype=x.dtype, device=x.device)
        fill = functools.partial(padded[:, :cols].copy_, x)
        x = padded[:, :cols]
    return TensorDescriptor.from_tensor(x, [block_rows, block_cols]), fill


def stacked_parts(x, parts: int, dtype, split, block_rows: int, block_k: int, **constexprs):
    """A TMA descriptor of the parts the split program writes for x (digits, or TF32 parts),
    stacked (parts * rows, K padded to 16 bytes), K contiguous. Passing B^T as x writes B K-major.
    split(x, out, R, C, C_PAD, stride_r, stride_c, BLOCK_R, BLOCK_C, **constexprs) is the program."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    return TensorDescriptor.from_tensor(stacked_parts_tensor(x, parts, dtype, split, **constexprs), [block_rows, block_k])


def stacked_parts_tensor(x, parts: int, dtype, split, **constexprs):
    """The (parts * rows, K padded to 16 bytes) tensor of stacked_parts, K contiguous."""
    import torch
    rows, k = x.shape
    per_16_bytes = 16 // dtype.itemsize
    k_pad = -(-k // per_16_bytes) * per_16_bytes
    out = torch.empty((parts, rows, k_pad), dtype=dtype, device=x.device)
    grid = (-(-rows // SPLIT_BLOCK), -(-k_pad // SPLIT_BLOCK))
    split[grid](x, out, rows, k, k_pad, x.stride(0), x.stride(1), BLOCK_R=SPLIT_BLOCK, BLOCK_C=SPLIT_BLOCK,
                **constexprs)
    return out.view(parts * rows, k_pad)


_WORKSPACES: dict = {}
_EPOCHS = itertools.count(1)


def stream_k_workspace(device, programs: int, block_m: int, block_n: int):
    """(partials, flags, epoch) for the stream-K share of matmul_persistent: two float32 slots of
    block_m x block_n a program and a flag a program, kept per device and stream (launches on one
    stream never overlap) and grown when needed. The flags are never cleared: a helper raises its
    flag to the launch's epoch, a number no earlier launch used."""
    import torch
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
    key = (str(device), stream)
    size = 2 * programs * block_m * block_n
    partials, flags = _WORKSPACES.get(key, (None, None))
    if partials is None or partials.numel() < size or flags.numel() < programs:
        partials = torch.empty(size, dtype=torch.float32, device=device)
        flags = torch.zeros(programs, dtype=torch.int32, device=device)
        _WORKSPACES[key] = partials, flags
    return partials, flags, next(_EPOCHS) % (2**31 - 2) + 1


# matmul_persistent's flags when a caller names none: A row-major, B given K-major (as B^T),
# float32 sums of unscaled 16-bit products
PERSISTENT_FLAGS = dict(A_T=False, B_T=True, SCALED=False, FAST_ACCUM=False, INT=False, F64=False, UPCAST=False)


def persistent_launch(a_desc, b_desc, c, m: int, n: int, k: int, scales=(None, None), stream_k: bool = False,
                      **config):
    """A launcher without arguments of matmul_persistent: one program an SM (as many as there are
    tiles, or all SMs when stream_k shares the tiles' K steps out); stream-K only when the tiles
    do not fill whole rounds. config: the program's tiles and flags (PERSISTENT_FLAGS where not
    given) and num_warps / num_stages."""
    from .tensorcore.t1_blocked_kernel import matmul_persistent   # Triton loads on first use
    config = {**PERSISTENT_FLAGS, **config}
    tiles = -(-m // config["BLOCK_M"]) * -(-n // config["BLOCK_N"])
    sms = multiprocessors()
    programs = sms if stream_k else min(tiles, sms)
    stream_k = stream_k and tiles % programs != 0
    kernel = matmul_persistent[(programs,)]
    none = (None, None, 0)

    def go():
        ws = stream_k_workspace(c.device, programs, config["BLOCK_M"], config["BLOCK_N"]) if stream_k else none
        kernel(a_desc, b_desc, c, *scales, *ws, m, n, k, c.stride(0), c.stride(1), STREAM_K=stream_k,
               PROGRAMS=programs, **config)
    return go
