"""The launchers of tilemm's fused-epilogue programs on torch tensors: which program a product
takes, their tiles by dtype (configurations are data: EPILOGUE_CONFIGS), the grids, and the
launches. The checks of the operands are the caller's (tilemm.epilogue_args); this module only
launches.

Which program (takes_tma): the persistent TMA program (epilogue_tma_kernel.py, rung 10's
schedule) for float16 / bfloat16 operands that TMA can read as they are (A and B each with rows,
or columns, contiguous, their strides and start 16-byte aligned; Y's and AUX's rows contiguous;
K >= 1), on a Hopper GPU or newer (or under Triton's interpreter), where tma=None and the product
is past rung 10's POINTERS_UP_TO and FEW_TILES (a launch's CPU time outweighs the gain under them)
and not skinny (M and N over 64: rung 10's rule; such a product is bound by reading the other
operand, which the pointer program's many loads do faster), or where tma=True at any size.
Everything else (float32, float64, other strides, K = 0, small or skinny products, older GPUs,
tma=False) takes the pointer program (epilogue_kernel.py), which reads any strides. Inside a
compiled graph (wrap given) the TMA program makes its descriptors itself (MAKE_DESCRIPTORS:
torch's tracer of triton_ops holds no host descriptors, torch 2.11 and 2.13 alike) where this
Triton has tl.make_tensor_descriptor and an allocator for their scratch; else the pointer program.
"""
from __future__ import annotations

import contextlib
import functools

import torch

from tilemm.system import compat
from tilemm.engine import availability, launch_hooks
from tilemm.engine.jit_lock import JIT_LOCK
from tilemm.engine.tensorcore_launch import default_tiles, takes_tma as large_enough
from tilemm.engine.tile_model import EAGER_LAUNCH_US, sliver_rows
from tilemm.numerics.keys import typed_items
from tilemm.numerics.dtypes import torch_dtype_name

ACTIVATION_CODES = {None: 0, "identity": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}

# Tiles, warps and stages by the operands' dtype. "16-bit TMA", the persistent TMA program's: what
# it names, else rung 10's tiles for the shape (tensorcore_launch.default_tiles: 128 x 256 x 64, 8
# warps, 4 stages at MLP shapes) and group_m 8. benchmarks/fused_linear.py --sweep times the
# candidates (TMA_CANDIDATES) at an MLP shape on a GPU and prints the winner in this form.
EPILOGUE_CONFIGS = {
    "16-bit TMA": {},
    "16-bit": dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3),   # the pointer program's best, H200
    "float32": dict(block_m=64, block_n=64, block_k=32, group_m=8, num_warps=4, num_stages=3),
    "float64": dict(block_m=32, block_n=32, block_k=16, group_m=8, num_warps=4, num_stages=2),
}
# (two programs an SM: where their shared memory, under half an SM's 228 KB, and registers fit)
TMA_CANDIDATES = [dict(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=w, num_stages=s, programs_per_sm=p)
                  for bm, bn, bk, w, s, p in ((128, 256, 64, 8, 4, 1), (128, 256, 64, 8, 3, 1), (256, 128, 64, 8, 4, 1),
                                              (128, 128, 64, 4, 4, 1), (128, 128, 64, 4, 3, 2), (128, 128, 64, 8, 3, 2),
                                              (64, 256, 32, 4, 4, 2), (128, 128, 32, 4, 5, 2))]
# An activation's instructions are a larger share of a tile's time the shorter K is, and the
# program's warps that run them leave the tensor cores idle. Up to OVERLAPPED_UP_TO_K, where the
# default tiles are the big ones, two programs an SM of OVERLAPPED_TILES take their place for the
# activations of several instructions (HEAVY_ACTIVATIONS): one's epilogue runs while the other's
# products do. Timed on an H200 (benchmarks/fused_linear.py --overlap, record
# benchmarks/results/h200/fused_overlap.jsonl.gz: bf16 8192 x 8192 x K with bias, the activation and
# AUX): at K 512 and 1024 gelu 1.17x / 1.04x the default tiles, gelu_tanh 1.14x / 1.03x, silu
# 1.09x / 1.04x, relu 1.01x / 1.00x; from 1536 on level or slower (0.94-1.02x; an earlier run gave
# gelu 1.06x at 1536, within the runs' spread).
OVERLAPPED_UP_TO_K = 1024
OVERLAPPED_TILES = TMA_CANDIDATES[5]
HEAVY_ACTIVATIONS = ("gelu", "gelu_tanh", "silu")
# Where rung 10 gives a shape 64 x 128 tiles (a narrow product: a GQA layer's k/v, few tiles of
# one warpgroup each), the TMA program sums K steps of DEEP_STEP in place of 64: twice the loads in
# flight a stage. H200, bf16, cold operands as a compiled graph launches them: 1.05-1.13x on the
# 3 products of a 2052 x 512 x 2048 layer it was chosen on (3 stages), 1.07-1.17x (3 stages) and
# 1.10-1.28x (4 stages) on 7 others (256-1536 wide, K 1000-5120).
DEEP_STEP = 128
THIN_ROWS = 64      # a product of this many rows or fewer takes thin tiles (thin_config)
TILE_KEYS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")
CONFIG_KEYS = TILE_KEYS + ("programs_per_sm", "tma")
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def dtype_group(dtype: torch.dtype) -> str:
    return "16-bit" if dtype in (torch.float16, torch.bfloat16) else torch_dtype_name(dtype)


def config_for(dtype: torch.dtype, params: dict | None = None) -> dict:
    """The programs' configuration for operands of this dtype: the pointer program's tiles
    (EPILOGUE_CONFIGS' for the dtype), "tma_tiles" the TMA program's ("16-bit TMA": those it
    names; the launch takes the rest from the shape), the tile parameters of params (block_m=...,
    num_warps=...) replacing both's, and "tma" (None: by the
    product, True: the TMA program wherever it can read the operands, False: never). TypeError
    for a name not a parameter, ValueError for a tile that is not a power of two of 16 or more
    (tl.dot's smallest). The dict is shared: read it only."""
    given = typed_items(params) if params else ()
    try:
        return checked_config(dtype, given)
    except TypeError as e:
        if "unhashable" not in str(e):
            raise
        return checked_config.__wrapped__(dtype, given)


@functools.lru_cache(maxsize=256)
def checked_config(dtype: torch.dtype, params: tuple) -> dict:
    """config_for's dict; params: (name, value, its type) of each parameter given."""
    config = dict(EPILOGUE_CONFIGS.get(dtype_group(dtype), EPILOGUE_CONFIGS["16-bit"]), tma=None)
    tma_tiles = dict(EPILOGUE_CONFIGS["16-bit TMA"])
    for name, value, _ in params:
        if name not in CONFIG_KEYS:
            raise TypeError(f"epilogue: unknown parameter {name!r}; the fused-epilogue programs take "
                            f"{', '.join(CONFIG_KEYS)}")
        if name == "tma":
            if value is not None and type(value) is not bool:
                raise ValueError(f"epilogue: tma={value!r}; None, True or False")
        elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"epilogue: {name}={value!r}; a positive int")
        else:
            tma_tiles[name] = value
        if name != "programs_per_sm":               # (the TMA program's alone)
            config[name] = value
    for name in ("block_m", "block_n", "block_k"):
        size = config[name]
        if size < 16 or size & (size - 1):
            raise ValueError(f"epilogue: {name}={size}; tiles are powers of two, 16 or more (tl.dot's smallest)")
    return {**config, "tma_tiles": tma_tiles}


def launch_epilogue(a, b, y, aux, bias, bias_over_m: bool, c, residual, activation, alpha: float, beta: float,
                    config: dict, wrap=None) -> None:
    """y = activation(alpha * a @ b + beta * c + bias) + residual, written into y (and the
    pre-activation into aux): 2-D torch tensors of one dtype on one device, bias 1-D (over y's
    columns, or its rows where bias_over_m), aux, bias, c, residual None where absent. config:
    config_for's. wrap: torch.library.wrap_triton inside a triton_op (the compiled graph then
    holds the program), None to launch it directly (eager). The program: see takes_tma."""
    if a.is_cuda and a.device.index != torch.cuda.current_device():
        # Triton launches on the current GPU: the operands' for the call (a triton_op's body run
        # eagerly, as under torch.jit.trace, launches through wrap as well)
        with torch.cuda.device(a.device):
            return launch_epilogue(a, b, y, aux, bias, bias_over_m, c, residual, activation, alpha, beta, config,
                                   wrap)
    if a.shape[0] == 0 or b.shape[1] == 0:
        return
    with JIT_LOCK if wrap is None else contextlib.nullcontext():     # (a compiled graph's launch: its own)
        for program, grid, args, options in parts_arguments(a, b, y, aux, bias, bias_over_m, c, residual, activation,
                                                            alpha, beta, config, wrap, eager=wrap is None):
            program[grid](*args, **options)


def bound_epilogue(a, b, y, aux, bias, bias_over_m: bool, c, residual, activation, alpha: float, beta: float,
                   config: dict):
    """launch_epilogue's eager launch (the same program, grid and arguments), not launched: a
    BoundLaunch (tilemm.engine.launches), whose launches a replay records (tilemm.engine.replay).
    None where nothing is launched (M or N zero). The caller launches it on the operands' GPU."""
    if a.shape[0] == 0 or b.shape[1] == 0:
        return None
    from tilemm.engine.launches import Steps, bound_launch
    launches = [bound_launch(*arguments) for arguments in parts_arguments(a, b, y, aux, bias, bias_over_m, c, residual,
                                                                          activation, alpha, beta, config)]
    return launches[0] if len(launches) == 1 else Steps(launches)


def parts_arguments(a, b, y, aux, bias, bias_over_m: bool, c, residual, activation, alpha: float, beta: float,
                    config: dict, wrap=None, eager: bool = False) -> list:
    """[(program, grid, args, options)] of each launch that makes the product (row_parts)."""
    return [epilogue_arguments(a_part, b, y_part, aux_part, bias_part, bias_over_m, c_part, residual_part, activation,
                               alpha, beta, part_config, wrap)
            for a_part, y_part, aux_part, bias_part, c_part, residual_part, part_config
            in row_parts(a, b, y, aux, bias, bias_over_m, c, residual, config, wrap is not None, eager)]


def row_parts(a, b, y, aux, bias, bias_over_m: bool, c, residual, config: dict, traced: bool = False,
              eager: bool = False) -> list:
    """[(a, y, aux, bias, c, residual, config)] of the launches that make the product: the whole
    (in thin tiles where it has THIN_ROWS rows or fewer: thin_config), or where the TMA program
    would take it in tiles of its own choosing and a few rows past the last multiple of 128 are
    predicted faster apart (tile_model.sliver_rows), the rows before them (the TMA program) and
    those rows (the pointer program in thin tiles, reading B once). Where traced (inside a
    triton_op's body) never cut: the whole, its config's "sliver" ({"rows", "block_m", "block_n",
    "block_k"}: the thin tiles) saying that the TMA program sums those rows in its own launch.
    eager: launched through Triton's JIT, not replayed (a second launch's CPU time counts)."""
    if not static_sizes(a, b):
        return [(a, y, aux, bias, c, residual, config)]      # symbolic sizes (a traced call): never cut
    m, k = int(a.shape[0]), int(a.shape[1])
    if (m <= THIN_ROWS and a.element_size() == 2 and config.get("tma") is not True and not any(
            key in config["tma_tiles"] for key in TILE_KEYS) and thin_fills(int(b.shape[1]))):
        return [(a, y, aux, bias, c, residual, thin_config(config, m, int(b.shape[1])))]
    rest = (sliver_rows(m, int(b.shape[1]), k, saving_us=EAGER_LAUNCH_US if eager else 0.0)
            if config.get("tma") is None and a.element_size() == 2 else 0)
    if not rest or "block_m" in config["tma_tiles"] or takes_tma(a, b, y, aux, None, traced) is None:
        return [(a, y, aux, bias, c, residual, config)]
    thin = sliver_config(config, rest, int(b.shape[1]))
    if traced:
        # (never cut inside a compiled graph: Inductor up to torch 2.11 copies a mutated view that
        # starts past its storage's first element into a buffer the view's size, then reads it at
        # the storage's offsets, past that buffer's end (pytorch/pytorch#192226): the sliver's
        # Y[cut:]. The TMA program sums the sliver in its own launch, on the whole tensors.)
        sliver = dict(rows=rest, block_m=thin["block_m"], block_n=thin["block_n"], block_k=thin["block_k"])
        return [(a, y, aux, bias, c, residual, {**config, "sliver": sliver})]

    def rows(first, last, part_config):
        def of(x):
            return None if x is None else x[first:last]
        return a[first:last], y[first:last], of(aux), of(bias) if bias_over_m else bias, of(c), of(residual), part_config
    cut = m - rest
    return [rows(0, cut, config), rows(cut, m, thin)]


def thin_config(config: dict, rows: int, n: int) -> dict:
    """The pointer program's tiles for a whole 16-bit product of THIN_ROWS rows or fewer whose
    caller named no tile, where they fill the SMs (thin_fills): sliver_config's thin tiles, 64
    rows tall past 32 (one row of tiles: B read once). The default 128 x 256 tiles leave all but
    N / 256 SMs idle there (1 to 64 rows x 2048 x 2048: 8 programs, 34-36 µs a call on an H200,
    7-9 µs in thin tiles; x 2048 x 5632: 82-85 against 13-19 µs). Tiles of THIN_PARTS_UP_TO
    elements or fewer sum each K step in parts (THIN_PARTS)."""
    thin = sliver_config(config, rows, n)
    if rows > 32:
        # (64 rows: three stages of 256-long K steps fit shared memory with 64 columns, four do not)
        return {**thin, "block_m": 64, "num_stages": 3}
    if thin["block_m"] * thin["block_n"] > THIN_PARTS_UP_TO:
        return thin
    return {**thin, **THIN_PARTS}


# A thin tile of 16 x 16, 16 x 32 or 32 x 16: its sums are a few chains of mma.sync along K, each
# instruction waiting on the last, in one warp; 512-long K steps cut into 8 parts (split_sums) give
# 8 warps a chain each. An H200, bf16, whole products of 1-32 rows x 896-4096 x 1536-14336 (the
# pointer program, GPU time): 1.15-1.63x the speed of one chain on the layers this was chosen on,
# 1.09-1.57x on held-out ones (benchmarks/thin_parts.py). Larger tiles were slower in parts (32 x 32
# and 16 x 64: 0.86-0.93x at their best; more parts spilled registers).
THIN_PARTS_UP_TO = 512
THIN_PARTS = dict(block_k=512, split=8, num_warps=8, num_stages=3)


def thin_fills(n: int) -> bool:
    """Whether thin tiles 64 columns wide at most give the SMs one program each at most (N up to
    64 x SMs): wider products (an LM head's 32000 columns) keep the default tiles, which were
    faster there (32 x 32000 x 2048 on an H200: 46.5 µs against 51.1 in 64-column thin tiles)."""
    return -(-n // 64) <= availability.multiprocessors()


def sliver_config(config: dict, rows: int, n: int) -> dict:
    """The pointer program's thin tiles for a sliver of rows: 16 or 32 rows, 256-long K steps
    (loads in flight enough to read B at speed), the narrowest columns of 16, 32 or 64 that give
    the SMs one program each at most (timed on an H200: 4 x 2048 x 5632 in 10.9 µs where 16 x 16
    x 128 tiles took 14.8; N = 5632 fastest in 64 columns, 88 programs). Each K step one chain
    of sums, as the TMA program's tiles: a sliver's rows get the bits the whole tiles give them."""
    sms = availability.multiprocessors()
    block_n = next((width for width in (16, 32) if -(-n // width) <= sms), 64)
    return {**config, "block_m": 16 if rows <= 16 else 32, "block_n": block_n, "block_k": 256, "split": 0,
            "group_m": 1, "num_warps": 4, "num_stages": 4, "tma": False}


def epilogue_arguments(a, b, y, aux, bias, bias_over_m: bool, c, residual, activation, alpha: float, beta: float,
                       config: dict, wrap=None) -> tuple:
    """(program, grid, args, options) of the product's program (see takes_tma) for these operands."""
    read = takes_tma(a, b, y, aux, config.get("tma"), traced=wrap is not None)
    if read is not None:
        from tilemm.engine import epilogue_tma_launch     # (Triton loads on first use)
        sliver = config.get("sliver")        # (row_parts': the whole tiles are those of the rows before it)
        rows = size_hint(a.shape[0]) - (sliver["rows"] if sliver else 0)
        tiles = tma_tiles(rows, size_hint(b.shape[1]), size_hint(a.shape[1]), tuple(config["tma_tiles"].items()),
                          activation in HEAVY_ACTIVATIONS)
        return epilogue_tma_launch.arguments(*read, y, aux, bias, bias_over_m, c, residual, ACTIVATION_CODES[activation],
                                             alpha, beta, tiles, wrap, sliver=sliver)
    return pointer_arguments(a, b, y, aux, bias, bias_over_m, c, residual, activation, alpha, beta, config, wrap)


@functools.lru_cache(maxsize=1024)
def tma_tiles(m: int, n: int, k: int, given: tuple, heavy: bool = False) -> dict:
    """The TMA program's tiles for this shape: those given (EPILOGUE_CONFIGS["16-bit TMA"] and the
    caller's), the rest rung 10's for the shape (K steps of DEEP_STEP in its 64 x 128 tiles) and
    group_m 8; where no tile is given, with an
    activation of several instructions (heavy) over a short K, OVERLAPPED_TILES in place of the big ones
    (remembered: a model asks again and again). The dict is shared: read it only."""
    given = dict(given)
    tiles = {**default_tiles(m, n, k), "group_m": 8}
    if (tiles["block_m"], tiles["block_n"], tiles["block_k"]) == (64, 128, 64):
        tiles["block_k"] = DEEP_STEP
    if (heavy and k <= OVERLAPPED_UP_TO_K and tiles["block_m"] * tiles["block_n"] >= 128 * 256
            and given.keys().isdisjoint(TILE_KEYS)):
        tiles = dict(OVERLAPPED_TILES)
    return {**tiles, **given}


def takes_tma(a, b, y, aux, tma, traced: bool = False):
    """(A's rows, A_T, B's rows, B_T) where the product takes the TMA program (see the module's
    rule; A's rows: A, or A^T when A_T; B's: B, or B^T when B_T), else None. traced: inside a
    triton_op's body (the program then makes its descriptors)."""
    if tma is False or a.element_size() != 2 or a.shape[1] == 0 or y.stride(1) != 1:
        return None
    if aux is not None and aux.stride(1) != 1:
        return None
    if not tma_here() or traced and not device_descriptors():
        return None
    m, n = size_hint(a.shape[0]), size_hint(b.shape[1])
    if tma is None and (min(m, n) <= 64 or not large_enough(m, n, size_hint(a.shape[1]))):
        return None
    a_rows = tma_rows(a, prefer_transpose=False)
    b_rows = tma_rows(b, prefer_transpose=True)   # B^T's rows: K-major, as a Linear's weight
    if a_rows is None or b_rows is None:
        return None
    return (*a_rows, *b_rows)


def static_sizes(a, b) -> bool:
    """Whether the product's M, K and N are ints (none symbolic: a traced call's under dynamic shapes)."""
    return all(type(size) is int for size in (*a.shape, b.shape[1]))


def size_hint(size) -> int | None:
    """A size as an int: itself, or where it is symbolic (a traced call's under dynamic shapes)
    the value it had when traced, read without a guard: the program and its tiles are chosen for
    that value and serve every other (the persistent program takes any M, N and K). None where a
    symbolic size has no such value (the caller then keeps its sizes out of the trace)."""
    if type(size) is int:
        return size
    hint = getattr(getattr(size, "node", None), "hint", None)
    return hint if type(hint) is int else None


def tma_rows(x, prefer_transpose: bool):
    """(rows, transposed): x, or x^T where that is what has rows TMA reads (contiguous, 16-byte
    aligned stride and start); None where neither has. (Read off the strides: a call's CPU time
    counts next to a small product's GPU time.)"""
    s0, s1 = x.stride()
    size = x.element_size()
    rows = s1 == 1 and (s0 * size) % 16 == 0            # x's rows
    columns = s0 == 1 and (s1 * size) % 16 == 0         # x^T's rows
    if not (rows or columns) or not start_aligned(x):
        return None
    if columns and (prefer_transpose or not rows):
        return x.T, True
    return x, False


def start_aligned(t) -> bool:
    """Whether t starts 16-byte aligned; True for a traced tensor, which has no address (the
    compiled graph's buffers are aligned, and Inductor copies inputs that are not)."""
    try:
        return t.data_ptr() % 16 == 0
    except (RuntimeError, NotImplementedError):
        return True


def tma_here() -> bool:
    """Whether the TMA program runs here: Triton's interpreter, or a GPU of compute capability
    9.0 or newer (Hopper's copy engine; the current device's, as Triton launches on it)."""
    if compat.triton_interpreter():
        return True
    return torch.cuda.is_available() and capability_major(torch.cuda.current_device()) >= 9


@functools.lru_cache(maxsize=None)
def capability_major(device: int) -> int:
    return torch.cuda.get_device_capability(device)[0]


@functools.lru_cache(maxsize=None)
def device_descriptors() -> bool:
    """Whether this Triton makes TMA descriptors inside a program (tl.make_tensor_descriptor)
    and takes an allocator for their scratch (triton.set_allocator)."""
    import triton
    import triton.language as tl
    return hasattr(tl, "make_tensor_descriptor") and hasattr(triton, "set_allocator")


def pointer_arguments(a, b, y, aux, bias, bias_over_m: bool, c, residual, activation, alpha: float, beta: float,
                      config: dict, wrap=None) -> tuple:
    """(program, grid, args, options) of the pointer program (epilogue_kernel.py): any dtype of
    DTYPES, any strides, any K."""
    from tilemm.engine.epilogue_kernel import matmul_epilogue_kernel    # Triton loads on first use
    m, k = a.shape
    n = b.shape[1]
    grid = (-(-m // config["block_m"]) * -(-n // config["block_n"]),)
    wide = {torch.float32: 1, torch.float64: 2}.get(a.dtype, 0)
    program = matmul_epilogue_kernel
    if wrap is not None:
        launch_hooks.hook(program, launch_hooks.device_hook)
        program = wrap(program)

    def strides(x):
        return (x.stride(0), x.stride(1)) if x is not None else (0, 0)

    args = (a, b, y, aux, bias, c, residual, m, n, k, *strides(a), *strides(b), *strides(y), *strides(aux),
            bias.stride(0) if bias is not None else 0, *strides(c), *strides(residual), float(alpha), float(beta))
    options = dict(BIAS_OVER_M=bool(bias_over_m), ACTIVATION=ACTIVATION_CODES[activation], WIDE=wide,
                   UPCAST=compat.triton_interpreter() and wide == 0, EVEN_K=bool(k % config["block_k"] == 0),
                   BLOCK_M=config["block_m"], BLOCK_N=config["block_n"], BLOCK_K=config["block_k"],
                   GROUP_M=config["group_m"], SPLIT=config.get("split", 0) if wide == 0 else 0,
                   num_warps=config["num_warps"], num_stages=config["num_stages"])
    return program, grid, args, options
