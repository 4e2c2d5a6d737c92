"""The launch of the persistent TMA epilogue program (epilogue_tma_kernel.py): its descriptors
(made on the host, or in the program inside a compiled graph), its grid of one program an SM,
and the hook that readies a thread for descriptors made in the program (launch_hooks); and a sliver of
rows in the same launch (the program's thin tiles, or its short ones on the programs its whole
tiles leave short: short_tiles_fit). Which products take it is
epilogue_launch.takes_tma's rule."""
from __future__ import annotations

from tilemm.system import compat
from tilemm.engine import availability, launch_hooks
from tilemm.engine.operand_copies import c_alignment
from tilemm.engine.tile_model import SLIVER_PAST

# A sliver's short tiles (short_tiles_fit): the rows of one warpgroup's wgmma
SHORT_ROWS = 64


def launch(a_rows, a_t: bool, b_rows, b_t: bool, y, aux, bias, bias_over_m: bool, c, residual, activation: int,
           alpha: float, beta: float, tiles: dict, wrap=None) -> None:
    """y = activation(alpha * A @ B + beta * c + bias) + residual (Z into aux where given) by the
    persistent TMA program. a_rows: A, or A^T where a_t (rows TMA reads); b_rows: B, or B^T where
    b_t. tiles: block_m, block_n, block_k, group_m, num_warps, num_stages, and programs_per_sm
    (1 where absent: two let one program's epilogue run while the other's tensor cores work, where
    their shared memory and registers fit twice on an SM). wrap: as launch_epilogue's (then the
    program makes its descriptors from the operands' pointers)."""
    program, grid, args, options = arguments(a_rows, a_t, b_rows, b_t, y, aux, bias, bias_over_m, c, residual,
                                             activation, alpha, beta, tiles, wrap)
    program[grid](*args, **options)


def arguments(a_rows, a_t: bool, b_rows, b_t: bool, y, aux, bias, bias_over_m: bool, c, residual, activation: int,
              alpha: float, beta: float, tiles: dict, wrap=None, sliver: dict | None = None) -> tuple:
    """(program, grid, args, options) of launch's launch, program[grid](*args, **options): what it
    launches, or what a BoundLaunch (tilemm.engine.launches) launches and a replay records.
    sliver: None, or the rows past the last multiple of SLIVER_PAST summed in the same launch in
    thin tiles ({"rows": how many, "block_m", "block_n", "block_k": the thin tiles}; tiles are
    then the whole tiles' of the rows before them), or in short tiles where short_tiles_fit."""
    from tilemm.engine.epilogue_tma_kernel import matmul_epilogue_persistent   # Triton loads on first use
    m, n = y.shape
    k = a_rows.shape[0] if a_t else a_rows.shape[1]
    block_m, block_n, block_k = tiles["block_m"], tiles["block_n"], tiles["block_k"]
    slots = availability.multiprocessors() * tiles.get("programs_per_sm", 1)     # programs the SMs hold at once
    whole_rows, thin_tiles = m, 0
    if sliver is not None:
        whole_rows, thin_tiles = m - sliver["rows"], -(-n // sliver["block_n"])
        if whole_rows % SLIVER_PAST or not 0 < sliver["rows"] <= sliver["block_m"] or whole_rows < 1:
            raise ValueError(f"epilogue: a sliver of {sliver['rows']} rows in tiles of {sliver['block_m']} past "
                             f"{whole_rows}; no more rows than its tiles', past a multiple of {SLIVER_PAST}")
    whole_tiles = -(-whole_rows // block_m) * -(-n // block_n)
    if wrap is None:
        from triton.tools.tensor_descriptor import TensorDescriptor
        # (over all of A's rows, a sliver's too: a tile's stores stop before the sliver, whose rows a
        # tile that reaches them reads, in place of the zeros of the program's own descriptor)
        a_in = TensorDescriptor.from_tensor(a_rows, [block_k, block_m] if a_t else [block_m, block_k])
        b_in = TensorDescriptor.from_tensor(b_rows, [block_n, block_k] if b_t else [block_k, block_n])
        programs = min(slots, whole_tiles + thin_tiles)
        program = matmul_epilogue_persistent
    else:
        # the tracing thread's allocator too: where this Triton has no pre-run hooks, the hook below
        # is not added and this is the only one set
        launch_hooks.ensure_allocator()
        launch_hooks.hook(matmul_epilogue_persistent, launch_hooks.descriptors_hook)
        a_in, b_in = a_rows, b_rows
        programs = slots        # a traced shape may be symbolic: every slot, those past the tiles end at once
        program = wrap(matmul_epilogue_persistent)
    short = sliver is not None and short_tiles_fit(whole_tiles, -(-n // block_n), programs)
    sliver_in = (None, None)               # (in the program: its descriptors' pointers)
    if sliver is not None and wrap is None:
        sliver_in = ((TensorDescriptor.from_tensor(a_rows, [block_k, SHORT_ROWS] if a_t else [SHORT_ROWS, block_k]),
                      None) if short else (a_rows, b_rows))
    args = (a_in, b_in, y, aux, bias, c, residual, m, n, k, a_rows.stride(0), b_rows.stride(0), y.stride(0),
            aux.stride(0) if aux is not None else 0, bias.stride(0) if bias is not None else 0,
            *(c.stride() if c is not None else (0, 0)), *(residual.stride() if residual is not None else (0, 0)),
            float(alpha), float(beta), *sliver_in)
    options = dict(A_T=a_t, B_T=b_t, BIAS_OVER_M=bool(bias_over_m), ACTIVATION=activation,
                   UPCAST=compat.triton_interpreter(), MAKE_DESCRIPTORS=wrap is not None, Y_ALIGN=store_alignment(y, aux),
                   BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=tiles["group_m"], PROGRAMS=programs,
                   FLATTEN=True, num_warps=tiles["num_warps"], num_stages=tiles["num_stages"])
    # named even where there is no sliver (SLIVER_M=0: the tiles' code alone): Inductor's launch of a
    # wrapped program passes no constexpr's default
    sliver_tiles = dict(block_m=0, block_n=16, block_k=256) if sliver is None or short else sliver
    options.update(SLIVER_M=sliver_tiles["block_m"], SLIVER_N=sliver_tiles["block_n"],
                   SLIVER_K=sliver_tiles["block_k"], SLIVER_PAST=SLIVER_PAST, SHORT_M=SHORT_ROWS if short else 0)
    return program, (programs,), args, options


def short_tiles_fit(whole_tiles: int, short_tiles: int, programs: int) -> bool:
    """Whether a sliver's rows go in SHORT_ROWS-row tiles as wide as the whole ones (the
    program's short_tiles) in place of thin ones: where the whole tiles leave programs a tile
    short and those take two short tiles each at most (about a whole tile's time). H200, bf16, as
    a compiled graph launches them, 2052 rows: 2052 x 2048 x 2048 33.8 -> 30.5 µs (the 2048 rows
    alone 27.0), x 2048 x 5632 79.2 -> 69.9, x 2048 x 32000 421 -> 379, x 512 x 2048
    16.2 -> 13.5; the same bits."""
    first_short = whole_tiles % programs
    return first_short > 0 and short_tiles <= 2 * (programs - first_short)


def store_alignment(y, aux) -> int:
    """The largest power of two up to 8 dividing Y's (and AUX's) width and row strides (1 where a
    traced shape is symbolic): the program stores rows that many elements at a time."""
    given = (y,) if aux is None else (y, aux)
    if not all(type(t.shape[1]) is int and type(t.stride(0)) is int for t in given):
        return 1
    return min(c_alignment(t) for t in given)
