"""tensorcore-int at small M: int8 x int8 -> int32 in small tiles, K split where that pays.

Why: a few rows of activations times a layer's weight (M up to a few hundred, N and K in the
thousands) reads the weight once and does little arithmetic on each byte: its time is the weight's
bytes over the bandwidth the launch keeps busy. The rung's 128 x 256 tiles, a program an SM, give
such a product a few dozen programs (M = 16, N = 3584: 14 of the H200's 132 SMs reading), and
each walks all of K alone. Here C is cut into BLOCK_M x BLOCK_N tiles sized to M (16 rows for a
vector), and where those tiles are few beside K's steps, each tile's K steps are split into runs, a
program each, that many more programs reading the weight at once (split K). How many runs is a
measured model's (split_cost): a split shortens the steps each program walks, but its programs
may take more waves of the SMs, and each run hands a tile of partial sums over, which cost as much
as dozens of steps in the measurements. The runs' int32 partial sums are exact, so the order they meet in
changes no bit: the last run of a tile adds the others' (hand_over_int, in the same launch: no
zeroed C, no second launch). Where one run a tile fills the GPU, each program stores its tile.

B is read in the layout it comes in, no copy: as torch.nn.Linear keeps a weight, (N, K).T (B's
columns contiguous, K-major: what Hopper's 8-bit tensor-core instruction reads from shared memory),
or row-major (K, N) (B's rows contiguous). A row-major tile is loaded as it lies, N along each
warp's lines (B_ROWS), and Triton turns it K-major on chip, between registers, shared memory and
the tensor cores: the weight's bytes are read once, coalesced, and the turn costs shared-memory
accesses, not passes over the weight (a copy of B into K-major planes, which the rung's other
programs make, reads and writes all of it at every call). The two layouts have tiles of their
own (TILES, ROW_TILES; past 64 rows, 64 x 64 tiles where the table's are few beside the SMs:
FEW_TILES). Other layouts, and A not row-major, take the rung's programs.

The program (r11_int8_small_m_kernel.py) loads through pointers, no descriptors: a launch passes
three pointers and integers, the cheapest call a repeated product can replay (tilemm.engine.replay),
which matters where the product itself takes a few microseconds.

A row of the tables may name the tensor cores the tile runs on (its seventh item, PRODUCTS):
"int8" (the default); "int8-words" and "int8-words-ahead", the int8 tensor cores with a row-major
B turned over in registers, 32 bits at a time (B_WORDS: four rows' words, a 4 x 4 turn of their
bytes, into shared memory a word a store rather than a byte), its words staged by Triton's
pipeline or, -ahead, the next step's loaded into registers while one is multiplied (B where the
words don't fit, words_fit, and B as (N, K).T run as "int8"); or the 16-bit ones
(r11_int8_f16_kernel.py), which read B from shared memory in either major order, so a row-major B
needs no turning over. An int8 is exact in float16 and a product of two is at most 2^14, so
CHUNK_K products sum exactly in float32; each chunk's sum is added into int32. "fp16" multiplies A @ B; "fp16-swap" multiplies C^T = B^T A^T,
so the weight's columns fill the instruction's 64-row side and A's few rows its other side.
"""
from __future__ import annotations

from tilemm.engine import launches, workspaces
from tilemm.engine import availability
from tilemm.system import compat

# Tiles by M: (up to this many rows, (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, programs an
# SM that the words products' split fills (runs_to_fill; the others split by split_cost))). B as
# (N, K).T: kernels alone over the fit set's 6 layers' N x K (2048-28672), one set of tiles for
# each M class; up to 16 and 33-64 rows the best geomean of 11-18 candidates timed in CUDA graphs
# (benchmarks/int8_small_m.py --tune: 16 x 64 x 256 1.02-1.33x the 16 x 128 x 256 tiles before on 5
# of the 6 layers, 0.97x on the sixth; 64 x 64 x 256 1.00-1.23x 64 x 64 x 128 on all 6).
TILES = ((16, (16, 64, 256, 4, 3, 1)),
         (32, (32, 64, 128, 4, 4, 2)),
         (64, (64, 64, 256, 4, 3, 1)),
         (None, (64, 128, 128, 4, 4, 1)))
# B row-major: from 17 rows the words products (B turned over in registers 32 bits at a time, a
# word a shared-memory store), one set of tiles for each M class: the best geomean over the five
# (N, K) of benchmarks/int8_words_probe.py (H200, kernel alone against torch._int_mm given B
# column-major; M 32: 1.05x, 33-64: 1.16x, 65-256: 1.07x, where the byte-turning tiles before them
# gave 0.59x over all); up to 16 rows the tiles --tune --layouts row of benchmarks/int8_small_m.py
# chose (record benchmarks/results/h200/int8_small_m_row.jsonl.gz), bytes turned over on chip.
ROW_TILES = ((16, (16, 128, 64, 4, 6, 1)),
             (32, (32, 64, 128, 4, 4, 1, "int8-words")),
             (64, (64, 64, 128, 4, 4, 1, "int8-words")),
             (None, (128, 64, 128, 4, 4, 1, "int8-words")))
# Past 64 rows, where the table's tiles are few beside the SMs, 64 x 64 tiles (twice the programs
# reading B): B as (N, K).T where its 64 x 128 tiles number fewer than the SMs, B row-major where its
# 128 x 64 ones number half the SMs or fewer. H200, kernels alone in CUDA graphs (.T: 64 x 128 tiles
# 0.99-1.52x the time of 64 x 64 ones where fewer than the SMs, 0.72-0.97x where not; row-major:
# 128 x 64 words tiles 1.30-1.36x the time of 64 x 64 ones where half the SMs or fewer, 0.92-1.04x
# past that), M 100-512 times the six layers of benchmarks/int8_small_m.py's fit set.
FEW_TILES = (64, 64, 128, 4, 4, 1)
FEW_ROW_TILES = (64, 64, 128, 4, 4, 1, "int8-words")
WGMMA_ROWS = 64         # BLOCK_M from which Triton multiplies with wgmma on Hopper (a warpgroup's rows)
ROW_MAJOR_ROWS = 256    # rows up to which a row-major B takes this program wherever its tiles fit
LEAST_RUN = 4           # K steps a run takes at least (a run's hand-over is a tile's store and reads)
MOST_RUNS = 8           # runs a tile is split into at most (the most the split's rule was measured at)
SHARE_AN_SM = 2         # programs an SM the split's rule counts as running side by side (split_cost)
HAND_OVER = 40          # a split's hand-over in K steps, a byte of partial sums a byte a step loads
RUNG_TILE = (128, 256)  # the rung's own tiles (its Gluon and persistent programs)
FILL = 1.0              # rung tiles per SM below which this program is the rung's choice
PRODUCTS = ("int8", "int8-words", "int8-words-ahead", "fp16", "fp16-swap")   # a table row's seventh item
INT8_PRODUCTS = PRODUCTS[:3]                # small_m_matmul's (the others: small_m_f16_matmul's)
WORDS_PRODUCTS = PRODUCTS[1:3]              # a row-major B turned over in registers a word at a time
CHUNK_K = 512           # K of a float32 sum of int8 products that stays exact: 512 x 2^14 = 2^23 < 2^24


def tiles_for(m: int, b_rows: bool = False, n: int | None = None, multiprocessors: int | None = None) -> tuple:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, programs an SM[, product]) for M rows, B
    row-major (b_rows) or as (N, K).T: the table's for M, or where N is given and the table's last
    row's tiles are few beside the SMs (multiprocessors; None: this GPU's), FEW_TILES."""
    for rows, tiles in (ROW_TILES if b_rows else TILES):
        if rows is None or m <= rows:
            if rows is None and n is not None and few_tiles(m, n, tiles, b_rows, multiprocessors):
                return FEW_ROW_TILES if b_rows else FEW_TILES
            return tiles
    raise AssertionError("the tiles end with a row of any M")


def few_tiles(m: int, n: int, tiles: tuple, b_rows: bool, multiprocessors: int | None = None) -> bool:
    """Whether M x N in these tiles leaves the SMs short (see FEW_TILES): fewer tiles than SMs, B as
    (N, K).T; B row-major, half the SMs or fewer."""
    count = -(-m // tiles[0]) * -(-n // tiles[1])
    sms = multiprocessors or availability.multiprocessors()
    return 2 * count <= sms if b_rows else count < sms


def runs_of_k(m: int, n: int, k: int, multiprocessors: int, tiles: tuple | None = None) -> int:
    """Into how many runs of K steps each tile is split (none shorter than LEAST_RUN steps, none
    empty, at most MOST_RUNS): the words products as many as fill the programs an SM their tiles
    aim at (runs_to_fill); the others the count split_cost finds cheapest."""
    tiles = tiles or tiles_for(m, n=n, multiprocessors=multiprocessors)
    block_m, block_n, block_k, _, _, per_sm = tiles[:6]
    tiles_of_c = -(-m // block_m) * -(-n // block_n)
    k_steps = -(-k // block_k)
    if product_of(tiles) in WORDS_PRODUCTS:
        return runs_to_fill(tiles_of_c, k_steps, per_sm * multiprocessors)
    most = max(1, min(MOST_RUNS, k_steps // LEAST_RUN))
    counts = sorted({-(-k_steps // -(-k_steps // wanted)) for wanted in range(1, most + 1)})   # (no empty run)
    return min(counts, key=lambda runs: split_cost(runs, tiles_of_c, k_steps, multiprocessors, tiles))


def split_cost(runs: int, tiles_of_c: int, k_steps: int, multiprocessors: int, tiles: tuple) -> float:
    """A launch's time in K steps of one program, as a model: the waves its programs take,
    SHARE_AN_SM an SM at a time (two programs of these tiles on an SM took as long as one: both
    wait on memory), times what each program does: the steps of its run and, where K is split,
    the hand-over of its tile's partial sums (written, then read by the last run: HAND_OVER steps
    for each byte of them per byte a step loads: (BLOCK_M + BLOCK_N) x BLOCK_K). Kernels alone at
    every count of 1-8 runs (H200, benchmarks/results/h200/int8_split_runs.jsonl.gz, B as
    (N, K).T), the rule's count took 1.02-1.04x the best count's time (geomean over the layers it
    was fit on, then two other sets), filling the SMs 1.08-1.13x: a split pays where K is long
    beside the tiles."""
    block_m, block_n, block_k = tiles[:3]
    per_run = -(-k_steps // runs)
    waves = -(-tiles_of_c * runs // (SHARE_AN_SM * multiprocessors))
    hand_over = HAND_OVER * block_m * block_n * 4 / ((block_m + block_n) * block_k) if runs > 1 else 0
    return waves * (per_run + hand_over)


def runs_to_fill(tiles_of_c: int, k_steps: int, programs: int) -> int:
    """Enough runs that the tiles' programs reach `programs`, none shorter than LEAST_RUN steps."""
    wanted = max(1, min(-(-programs // tiles_of_c), k_steps // LEAST_RUN))
    per_run = -(-k_steps // wanted)
    return -(-k_steps // per_run)


def preferred(m: int, n: int, k: int, multiprocessors: int, b_rows: bool = False) -> bool:
    """Whether tensorcore-int takes this program for an int8 product into int32 of M x N x K in
    a layout it reads (layout): where the rung's own tiles would leave SMs idle, and with B
    row-major (b_rows) also up to ROW_MAJOR_ROWS rows (the rung's own programs would copy B)."""
    tiles = -(-m // RUNG_TILE[0]) * -(-n // RUNG_TILE[1])
    return k > 0 and (tiles < FILL * multiprocessors or (b_rows and m <= ROW_MAJOR_ROWS))


def b_rows(b) -> bool:
    """Whether B is read row by row: its rows contiguous and its columns not (B (K, N) row-major,
    or a slice of one's columns)."""
    return b.stride(1) == 1 and b.stride(0) != 1


def layout(a, b) -> str | None:
    """How this program reads the operands: "col" (A's rows and B's columns contiguous: B as
    torch.nn.Linear keeps a weight, (N, K).T), "row" (A's rows and B's rows contiguous: B row-major)
    or None (another layout: the rung's programs, which copy the operands into K-major planes)."""
    if a.stride(1) != 1 and a.shape[1] > 1:
        return None
    if b.stride(0) == 1:
        return "col"
    return "row" if b_rows(b) else None


def takes(a, b, c, small_m=None) -> bool:
    """Whether tensorcore-int runs this program: int8 A and B into a 2-D int32 C, where small_m
    is True, or, small_m None, in a layout it reads where preferred() says (False: never)."""
    if small_m is False or a.element_size() != 1 or b.element_size() != 1 or c.element_size() != 4 or c.dim() != 2:
        return False
    if small_m:
        return True
    m, k = a.shape
    read = layout(a, b)
    return read is not None and preferred(m, b.shape[1], k, availability.multiprocessors(), read == "row")


def product_of(tiles: tuple, chunk_k: int = CHUNK_K) -> str:
    """The tensor cores a row of tiles runs on (PRODUCTS), checked: a 16-bit product's K step
    must divide its exact chunk (chunk_k, at most CHUNK_K)."""
    product = tiles[6] if len(tiles) > 6 else "int8"
    if len(tiles) not in (6, 7) or product not in PRODUCTS:
        raise ValueError(f"small-M tiles {tiles!r}: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, programs "
                         f"an SM[, product in {PRODUCTS}])")
    if product not in INT8_PRODUCTS and not (0 < chunk_k <= CHUNK_K and chunk_k % tiles[2] == 0):
        raise ValueError(f"small-M tiles {tiles!r}: BLOCK_K must divide the exact chunk of {chunk_k} "
                         f"(at most {CHUNK_K}) on the 16-bit tensor cores")
    return product


def words_fit(b, block_n: int) -> bool:
    """Whether a row-major B (b_rows) can be read as int32 words of four columns (B_WORDS): N, its
    row stride and its start (bytes) multiples of 4, and BLOCK_N of 16 (the turned tile's columns
    are set in a rotated order, 16 a group)."""
    return b.shape[1] % 4 == 0 and b.stride(0) % 4 == 0 and b.data_ptr() % 4 == 0 and block_n % 16 == 0


def launcher(a, b, c, split_k=None, tiles: tuple | None = None, chunk_k: int = CHUNK_K):
    """c = a @ b (int8 into int32, K >= 1) as a launcher without arguments: one launch, of
    split_k runs of K a tile (None: runs_of_k), tiles as tiles_for gives them (None: the shape's
    for B's layout). On the int8 tensor cores B row-major (b_rows) is loaded row by row (B_ROWS; from
    WGMMA_ROWS rows a tile, a step ahead: B_AHEAD), or for the words products where words_fit, as
    int32 words (B_WORDS; -ahead: B_AHEAD), any other B as (N, K).T; on the 16-bit ones
    (the tiles' product) both as they lie, float32 sums flushed into int32 every chunk_k of K."""
    m, k = a.shape
    n = b.shape[1]
    rows = b_rows(b)
    sms = availability.multiprocessors()
    tiles = tiles or tiles_for(m, rows, n, sms)
    product = product_of(tiles, chunk_k)
    block_m, block_n, block_k, num_warps, num_stages, _ = tiles[:6]
    tiles_of_c = -(-m // block_m) * -(-n // block_n)
    k_steps = -(-k // block_k)
    runs = split_k or runs_of_k(m, n, k, sms, tiles)
    slots = (2**31 - 1) // (tiles_of_c * block_m * block_n)      # partials addressed by 32-bit offsets
    per_run = -(-k_steps // max(1, min(runs, k_steps, slots)))
    runs = -(-k_steps // per_run)                                # no empty run
    args = (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    options = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=k % block_k == 0, num_warps=num_warps,
                   num_stages=max(1, min(num_stages, per_run)))   # stages past a run's K steps only load zeros
    if product in INT8_PRODUCTS:
        from tilemm.ladder.tensorcore.r11_int8_small_m_kernel import small_m_matmul as program  # Triton on first use
        words = product != "int8" and rows and words_fit(b, block_n)
        ahead = product == "int8-words-ahead" if words else block_m >= WGMMA_ROWS
        # the turn in prmt.b32 on the GPU; in integers in Triton's interpreter (no PTX there)
        options.update(B_ROWS=rows, B_AHEAD=rows and ahead, B_WORDS=words,
                       TURN_PRMT=words and not compat.triton_interpreter())
    else:
        from tilemm.ladder.tensorcore.r11_int8_f16_kernel import small_m_f16_matmul as program
        options.update(CHUNK_STEPS=chunk_k // block_k, SWAP=product == "fp16-swap")
    whole = launches.bound_launch(program, (tiles_of_c,), args, options)
    if runs == 1:
        return whole
    return workspaces.SplitKLaunch(program, (tiles_of_c, runs), args, {**options, "split_steps": per_run},
                                   whole, block_m, block_n)
