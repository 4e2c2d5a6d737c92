"""What the Triton rungs share: whether they can run here, and the shared-memory check."""
from __future__ import annotations

import functools
import itertools

from .. import _compat, machine, streams
from .direct_launch import direct_runner

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
    if torch.cuda.get_device_capability()[0] != 9:
        return False
    # Gluon's API moves between releases: the programs run on 3.6 and compile on 3.9
    if triton_version() < (3, 6):
        return False
    try:   # what the programs take from Gluon, as this Triton spells it (the TMA load: gluon_helpers)
        from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: F401
            fence_async_shared, warpgroup_mma, warpgroup_mma_wait)
        from .tensorcore import gluon_helpers  # noqa: F401
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
    if _compat.triton_interpreter():
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


def k_major(x) -> bool:
    """x's rows are contiguous, with the 16-byte aligned row stride and base TMA needs."""
    return x.stride(1) == 1 and (x.stride(0) * x.element_size()) % 16 == 0 and x.data_ptr() % 16 == 0


def row_descriptor(x, block_rows: int, block_cols: int, align: int = 16):
    """(TMA descriptor, fill) for x (rows, cols) read row by row: of x itself when its rows are
    contiguous and `align`-byte aligned (16: TMA's rule, k_major), fill None; else of aligned rows
    that fill() copies x into, a pass over x that counts in the caller's time (a row of 8191 bf16
    is 16382 bytes; a transposed view has no rows; align=128 for speed: rows_aligned_pays). Call
    fill before each launch: it reads x's current values."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    x, fill = aligned_rows(x, align)
    return TensorDescriptor.from_tensor(x, [block_rows, block_cols]), fill


def aligned_rows(x, align: int = 16):
    """(rows, fill): x itself where its rows are contiguous and `align`-byte aligned, fill None;
    else a view of fresh rows that are, which fill() copies x into (see row_descriptor)."""
    if k_major(x) and (x.stride(0) * x.element_size()) % align == 0:
        return x, None
    import torch
    rows, cols = x.shape
    per_row = align // x.element_size()
    padded = torch.empty((rows, -(-cols // per_row) * per_row), dtype=x.dtype, device=x.device)
    return padded[:, :cols], rows_copy(x, padded[:, :cols])


COPY_BLOCK = 64
# Bytes from which an operand whose rows are contiguous but not 16-byte aligned is copied by torch:
# faster on the GPU than copy_rows, but ~8 µs of CPU against a replayed launch's ~4. Under it, the
# launch: bf16 whole calls with copies of 0.3-2 MB, 1.15-1.47x where the call was CPU-bound
# (2131 x 4127 x 94 nt 50.7 -> 34.4 µs), 0.96x at 7615 x 432 x 1866 nt, GPU-bound, with a 1.6 MB B
TORCH_COPY_FROM = 2 << 20


def rows_copy(x, rows):
    """A launcher without arguments copying x into rows (contiguous rows, 16-byte aligned): torch's
    copy where x's rows are contiguous but not 16-byte aligned and x has TORCH_COPY_FROM bytes or
    more, else r10_tensorcore_kernel.copy_rows, 64 x 64 tiles. torch's against Triton's: fp16
    6000² transposed 295 µs against 54, 6000² in 12000-byte rows 91 µs against 55, but 7615 x 1866
    (3732-byte rows, no vector loads) 39 µs against 55; fp8 8192² transposed 461 µs against 52,
    7001 x 5003 transposed 285 against 293, but 4096 x 4100 in its own rows 31 against 142. torch's
    copy itself runs faster on 4-byte words: where such rows' bytes and x's start divide by 4, it
    copies int32 views (bf16 7615 x 1866 38.5 µs against 26.6, fp8 4096 x 4100 29.7 against 12.6)."""
    if x.stride(1) == 1 and (x.stride(0) * x.element_size()) % 16 and x.numel() * x.element_size() >= TORCH_COPY_FROM:
        row_bytes = x.shape[1] * x.element_size()
        words = x.element_size() < 4 and row_bytes % 4 == 0 and x.stride(0) * x.element_size() % 4 == 0
        return CopyInto(rows, x, "int32" if words and x.data_ptr() % 4 == 0 else None)
    from .tensorcore.r10_tensorcore_kernel import copy_rows
    grid = (-(-x.shape[0] // COPY_BLOCK), -(-x.shape[1] // COPY_BLOCK))
    return bound_launch(copy_rows, grid, (x, rows, x.shape[0], x.shape[1], x.stride(0), x.stride(1), rows.stride(0)),
                        dict(BLOCK_R=COPY_BLOCK, BLOCK_C=COPY_BLOCK))


def stacked_parts(x, parts: int, dtype, split, block_rows: int, block_k: int, **constexprs):
    """(TMA descriptor, fill): of the parts the split program writes for x (digits, or TF32
    parts), stacked (parts * rows, K padded to 16 bytes), K contiguous, and a launcher without
    arguments that writes them from x's current values. Passing B^T as x writes B K-major.
    split(x, out, R, C, C_PAD, stride_r, stride_c, BLOCK_R, BLOCK_C, **constexprs) is the program."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    out = parts_buffer(x.shape[0], x.shape[1], parts, dtype, x.device)
    stacked = out.view(parts * x.shape[0], out.shape[2])
    return TensorDescriptor.from_tensor(stacked, [block_rows, block_k]), parts_fill(x, out, split, **constexprs)


def stacked_parts_tensor(x, parts: int, dtype, split, **constexprs):
    """The (parts * rows, K padded to 16 bytes) tensor of stacked_parts, written now."""
    out = parts_buffer(x.shape[0], x.shape[1], parts, dtype, x.device)
    parts_fill(x, out, split, **constexprs)()
    return out.view(parts * x.shape[0], out.shape[2])


def parts_buffer(rows: int, k: int, parts: int, dtype, device):
    """An empty (parts, rows, K padded to 16 bytes) tensor for parts_fill."""
    import torch
    per_16_bytes = 16 // dtype.itemsize
    return torch.empty((parts, rows, -(-k // per_16_bytes) * per_16_bytes), dtype=dtype, device=device)


def parts_fill(x, out, split, **constexprs):
    """A launcher without arguments of the split program of x (rows, K) into out (parts_buffer's
    shape)."""
    parts, rows, k_pad = out.shape
    grid = (-(-rows // SPLIT_BLOCK), -(-k_pad // SPLIT_BLOCK))
    return bound_launch(split, grid, (x, out, rows, x.shape[1], k_pad, x.stride(0), x.stride(1)),
                        dict(BLOCK_R=SPLIT_BLOCK, BLOCK_C=SPLIT_BLOCK, **constexprs))


def bound_launch(program, grid: tuple, args: tuple, options: dict):
    """program[grid](*args, **options) as a launcher without arguments (a BoundLaunch)."""
    return BoundLaunch(program, grid, args, options)


class BoundLaunch:
    """program[grid](*args, **options) as a launcher without arguments that, from its second call
    on, launches the compiled program directly. Triton binds and specializes every argument,
    computes a cache key and looks the program up at each launch: 24 µs of CPU a launch, against
    13 µs for the compiled program's own launcher and 12 µs for cuBLAS through torch. With the
    same argument objects at every call the lookup finds the same program, so it is done once;
    and the program's own launcher is called past Triton's Python layers where it can be
    (tilemm.ladder.direct_launch). Under the interpreter, or with another device current than at
    the first call, the plain launch. After a first launch, ``runner`` and
    ``values`` (every argument, constexprs too, in the signature's order) are what
    tilemm.ladder.replay needs to launch the same program on other operands."""

    def __init__(self, program, grid: tuple, args: tuple, options: dict):
        self.program, self.grid, self.args, self.options = program, tuple(grid), args, options
        self.device = self.runner = self.values = None

    def __call__(self):
        if _compat.triton_interpreter():
            return self.launch()
        from triton.runtime.driver import driver
        device = driver.active.get_current_device()
        if self.device == device:
            if self.values is None:            # worked out at the second call: one-shot calls skip it
                self.values = all_arguments(self.program, self.args, self.options)
            self.run(self.values)
            return
        compiled = self.launch()
        grid3 = self.grid + (1,) * (3 - len(self.grid))    # the compiled program's launcher reads three
        runner = compiled[grid3]
        self.device, self.runner = device, direct_runner(compiled, grid3, runner) or runner

    def launch(self):
        """The program launched through Triton's JIT (which compiles it the first time)."""
        return self.program[self.grid](*self.args, **self.options)

    def run(self, values: tuple, stream=None):
        """The compiled program on these values (its signature's order), on the stream given
        (a raw handle), else torch's current one."""
        self.runner(*values, stream=stream)


class WorkspaceLaunch(BoundLaunch):
    """A BoundLaunch whose program also takes a workspace (the arguments named in WORKSPACE, in
    the signature's order), taken at each launch for the stream current then (launches on one
    stream never overlap); while a CUDA graph is captured, `fallback` instead: a program that
    needs none (a graph would keep this launch's workspace). block_m x block_n: the program's
    tiles, which size its workspace."""
    WORKSPACE: tuple = ()

    def __init__(self, program, grid, args, options, fallback, block_m: int, block_n: int):
        super().__init__(program, grid, args, options)
        self.fallback, self.block_m, self.block_n = fallback, block_m, block_n
        names = list(_signature(program).parameters)
        self.at = names.index(self.WORKSPACE[0])

    def __call__(self):
        if streams.capturing():
            return self.fallback()
        super().__call__()

    def workspace(self, device: int, stream) -> tuple:
        """The workspace's arguments for a launch on device (an index; -1: the CPU) and stream (a
        raw handle, None on the CPU)."""
        raise NotImplementedError

    def with_workspace(self, values: tuple, stream=None) -> tuple:
        """values with the workspace of C's device and the launch's stream (None: torch's current
        one) in place."""
        device = values[2].get_device()
        at = self.at
        return values[:at] + self.workspace(device, raw_stream(device, stream)) + values[at + len(self.WORKSPACE):]

    def launch(self):
        """The program through Triton's JIT, its workspace in place (every argument positional)."""
        parameters = _signature(self.program).parameters
        values = self.with_workspace(all_arguments(self.program, self.args, self.options))
        return self.program[self.grid](*values, **{k: v for k, v in self.options.items() if k not in parameters})

    def run(self, values: tuple, stream=None):
        self.runner(*self.with_workspace(values, stream), stream=stream)

    def run_replayed(self, values: list, device: int, stream) -> None:
        """A replay's launch (tilemm.ladder.replay): values, a list with the operands as addresses,
        launched on stream (a raw handle, None on the CPU: the replay has resolved it) with the
        workspace of device and stream in place, as addresses too (Triton's launcher asks the
        driver about each tensor it is given)."""
        workspace = self.workspace(device, stream)
        values[self.at:self.at + len(workspace)] = [x.data_ptr() if hasattr(x, "data_ptr") else x for x in workspace]
        self.runner(*values, stream=stream)


def raw_stream(device: int, stream):
    """stream, or where it is None torch's current one on device (an index; -1, the CPU: None)."""
    if stream is None and device >= 0:
        import torch
        return torch._C._cuda_getCurrentRawStream(device)
    return stream


class StreamKLaunch(WorkspaceLaunch):
    """matmul_persistent with stream-K: its partials, flags and epoch (stream_k_workspace)."""
    WORKSPACE = ("ws_ptr", "flags_ptr", "epoch")

    def workspace(self, device: int, stream) -> tuple:
        return stream_k_workspace(device, stream, self.grid[0], self.block_m, self.block_n)


class SplitKLaunch(WorkspaceLaunch):
    """matmul_kernel or matmul_tma with split K: a slot of block_m x block_n float32 partial sums
    a program, and a count a tile (split_k_workspace)."""
    WORKSPACE = ("ws_ptr", "counts_ptr")

    def workspace(self, device: int, stream) -> tuple:
        return split_k_workspace(device, stream, self.grid[0], self.grid[1], self.block_m, self.block_n)


class CopyInto:
    """dst.copy_(src), on torch's current stream, as a step of Steps: an operand copied into a
    scratch buffer (aligned rows for TMA), which tilemm.ladder.replay makes again from a new
    call's operand into that call's scratch. word: a torch dtype's name to copy both as views of
    (rows_copy), or None."""

    def __init__(self, dst, src, word: str | None = None):
        self.dst, self.src, self.word = dst, src, word

    def __call__(self):
        copy_as(self.dst, self.src, self.word)


def copy_as(dst, src, word: str | None) -> None:
    """dst.copy_(src), through views of both as dtype `word` where it is given."""
    if word:
        import torch
        dst, src = dst.view(getattr(torch, word)), src.view(getattr(torch, word))
    dst.copy_(src)


class Steps:
    """Steps run in order, every one a BoundLaunch or a CopyInto: a launcher tilemm.ladder.replay
    can run again on other operands of the same shapes and strides."""

    def __init__(self, launches):
        self.launches = [launch for launch in launches if launch]

    def __call__(self):
        for launch in self.launches:
            launch()


def all_arguments(program, args: tuple, options: dict) -> tuple:
    """Every argument of program[grid](*args, **options), constexprs and defaults too, in its
    signature's order: what the compiled program's launcher takes (launch options such as
    num_warps are not arguments)."""
    signature = _signature(program)
    bound = signature.bind(*args, **{k: v for k, v in options.items() if k in signature.parameters})
    bound.apply_defaults()
    return tuple(bound.arguments.values())


@functools.lru_cache(maxsize=None)
def _signature(program):
    import inspect
    return inspect.signature(program.fn)


_SIDE_STREAMS: dict = {}


def side_stream(device, priority: bool = False):
    """A stream of the device besides the caller's, kept for the process: of the default (lowest)
    priority for copies that overlap a product, or of the highest for that product."""
    import torch
    key = (str(device), priority)
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(device, priority=-100 if priority else 0)   # clamped to the range
    return _SIDE_STREAMS[key]


_WORKSPACES: dict = {}
_EPOCHS = itertools.count(1)


def release_workspaces() -> None:
    """Let go of the stream-K and split-K workspaces (the next launch that needs one allocates it)."""
    _WORKSPACES.clear()


def stream_k_workspace(device: int, stream, programs: int, block_m: int, block_n: int):
    """(partials, flags, epoch) for the stream-K share of matmul_persistent on device and stream:
    two float32 slots of block_m x block_n a program and a flag a program (workspace). The flags
    are never cleared: a helper raises its flag to the launch's epoch, a number no earlier launch
    used."""
    partials, flags = workspace("stream-k", device, stream, 2 * programs * block_m * block_n, programs)
    return partials, flags, next(_EPOCHS) % (2**31 - 2) + 1


def split_k_workspace(device: int, stream, tiles: int, runs: int, block_m: int, block_n: int):
    """(partials, counts) for split K's hand-over on device and stream: a float32 slot of block_m x
    block_n for each run of each tile and an int32 count a tile (workspace). Counts start at 0 and
    every launch leaves them at 0 (the last run of a tile resets its count)."""
    return workspace("split-k", device, stream, tiles * runs * block_m * block_n, tiles)


def workspace(kind: str, device: int, stream, floats: int, flags: int):
    """(float32 tensor of `floats` elements or more, int32 tensor of `flags` zeros or more) on
    device (an index; -1: the CPU), kept per kind, device and stream (launches on one stream never
    overlap; the caching allocator reuses a replaced one's memory on that stream alone, after its
    last launch) and grown when needed."""
    key = (kind, device, stream)
    partials, counts = _WORKSPACES.get(key, (None, None))
    if partials is None or partials.numel() < floats or counts.numel() < flags:
        import torch
        where = torch.device("cuda", device) if device >= 0 else torch.device("cpu")
        partials = torch.empty(max(floats, 0 if partials is None else partials.numel()), dtype=torch.float32,
                               device=where)
        counts = torch.zeros(max(flags, 0 if counts is None else counts.numel()), dtype=torch.int32, device=where)
        _WORKSPACES[key] = partials, counts
    return partials, counts


# matmul_persistent's flags when a caller names none: A row-major, B given K-major (as B^T),
# float32 sums of unscaled 16-bit products, C's rows stored as if of any width (C_ALIGN=1)
PERSISTENT_FLAGS = dict(A_T=False, B_T=True, SCALED=False, FAST_ACCUM=False, INT=False, F64=False, UPCAST=False,
                        PARTS=1, CHUNK=1, ACCUMULATE=False, C_ALIGN=1)


def c_alignment(c) -> int:
    """The largest power of two up to 8 dividing C's width and its row stride, for a C whose rows
    are contiguous (else 1): what the TMA programs are told (C_ALIGN), so that they store rows of
    7026 or 6524 elements 2 or 4 at a time where Triton, knowing only divisibility by 16, stores
    them one by one. Each rung passes it where it was measured to pay (docs/tensor_cores.md)."""
    if c.stride(1) != 1:
        return 1
    width, stride = c.shape[1], c.stride(0)
    return min(8, width & -width if width else 8, stride & -stride if stride else 8)


def persistent_launch(a_desc, b_desc, c, m: int, n: int, k: int, scales=(None, None), stream_k: bool = False,
                      **config):
    """A launcher without arguments of matmul_persistent: one program an SM (as many as there are
    tiles, or all SMs when stream_k shares the tiles' K steps out); stream-K only when the tiles
    do not fill whole rounds. config: the program's tiles and flags (PERSISTENT_FLAGS where not
    given) and num_warps / num_stages."""
    from .tensorcore.r10_tensorcore_kernel import matmul_persistent   # Triton loads on first use
    config = {**PERSISTENT_FLAGS, **config}
    tiles = -(-m // config["BLOCK_M"]) * -(-n // config["BLOCK_N"])
    sms = multiprocessors()
    stream_k = stream_k and not config["ACCUMULATE"]
    programs = sms if stream_k else min(tiles, sms)
    stream_k = stream_k and tiles % programs != 0 and not config["ACCUMULATE"]
    if not stream_k:     # the same arguments at every launch
        return bound_launch(matmul_persistent, (programs,), (a_desc, b_desc, c, *scales, None, None, 0, m, n, k,
                                                             c.stride(0), c.stride(1)),
                            dict(STREAM_K=False, PROGRAMS=programs, **config))

    whole_tiles = persistent_launch(a_desc, b_desc, c, m, n, k, scales, stream_k=False, **config)
    return StreamKLaunch(matmul_persistent, (programs,), (a_desc, b_desc, c, *scales, None, None, 0, m, n, k,
                                                          c.stride(0), c.stride(1)),
                         dict(STREAM_K=True, PROGRAMS=programs, **config), whole_tiles, config["BLOCK_M"],
                         config["BLOCK_N"])
