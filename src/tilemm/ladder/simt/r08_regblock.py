"""Rung 8, `regblock`: beyond the seeds. A block computes a BLOCK_M x BLOCK_N tile of C and
each thread a THREAD_M x THREAD_N tile of it, held in registers (seed 001's idea carried to
both dimensions). Per step of the K loop a thread reads THREAD_M values of A and THREAD_N of
B from shared memory and does THREAD_M * THREAD_N multiply-adds: 16 x 8 (the default for 32-bit
types) gives 128 FMAs for 24 values read in 6 16-byte loads, where `tiled` gives 1 for 2.

    grid:   (ceil(N / BLOCK_N), ceil(M / BLOCK_M)) blocks
    block:  (BLOCK_N / THREAD_N, BLOCK_M / THREAD_M) threads
    thread: THREAD_M rows in runs of 4 neighbours, runs 4 * threads_y apart (columns alike),
            so each run is one 16-byte shared load and a warp's loads cover a contiguous span.

Shared memory is double-buffered: while the block computes on one (BLOCK_K, BLOCK_M) tile of
A (stored K-major, rows padded by 4 against bank conflicts) and (BLOCK_K, BLOCK_N) tile of B,
each thread already holds its share of the next tiles in registers, loaded before the
arithmetic so their latency hides behind it: one barrier per K step instead of two.

The kernel is in r08_regblock_kernel.py, built (numba-cuda imported) at the first launch.

Constraints: any M, N, K, any strides (edges are zero-filled); BLOCK_M * BLOCK_K and
BLOCK_K * BLOCK_N multiples of the thread count; at most 1024 threads and 48 KiB of shared
memory a block. Global loads are 16-byte vectors (vector_load.load_vector) for an operand whose rows
start 16-byte aligned and are contiguous (checked at each launch: a row-major float32 matrix with
a multiple of 4 columns, say), scalar for the others and at the edges; shared loads become
16-byte vectors where the compiler sees the alignment.
"""
from tilemm.ladder.record import Param, Traffic
from tilemm.ladder.simt import launch, vector

PAD = 4


def default_block_k(block_k, bits):
    """K tile 16 for 32-bit types (measured fastest); 8 for 64-bit ones, whose double-buffered
    16-deep tiles would need 66560 bytes of shared memory, over the 48 KiB a block may declare."""
    return block_k or (16 if bits == 32 else 8)


def default_thread_m(thread_m, bits):
    """16 rows a thread for 32-bit types: 16 x 8 = 128 multiply-adds for 6 16-byte shared loads a
    step (measured faster than 8 x 8); 8 for
    64-bit ones, whose 16 x 8 accumulators would take 256 registers a thread."""
    return thread_m or (16 if bits == 32 else 8)


def vector_widths(acc_bits, block_m, block_n, block_k, thread_m, thread_n, a_aligned, b_aligned):
    """(A's, B's) elements a thread loads as one 16-byte vector: vector.width_of where the
    operand's rows are aligned and its tile splits into whole vectors over the threads, else 1."""
    block_k = default_block_k(block_k, acc_bits)
    thread_m = default_thread_m(thread_m, acc_bits)
    threads = (block_m // thread_m) * (block_n // thread_n)
    width = vector.width_of(acc_bits // 8)

    def fits(aligned, rows, columns):
        return aligned and columns % width == 0 and (rows * columns // width) % threads == 0
    return (width if fits(a_aligned, block_m, block_k) else 1,
            width if fits(b_aligned, block_k, block_n) else 1)


def shape(p, block_m, block_n, block_k, thread_m, thread_n):
    block_k = default_block_k(block_k, 8 * p.itemsize)
    thread_m = default_thread_m(thread_m, 8 * p.itemsize)
    block = (max(1, block_n // thread_n), max(1, block_m // thread_m))
    return launch.LaunchShape((launch.ceil_div(p.n, block_n), launch.ceil_div(p.m, block_m)), block,
                              2 * block_k * (block_m + PAD + block_n) * p.itemsize, (thread_m, thread_n))


def limits(p, block_m, block_n, block_k, thread_m, thread_n):
    block_k = default_block_k(block_k, 8 * p.itemsize)
    thread_m = default_thread_m(thread_m, 8 * p.itemsize)
    too_large = launch.index_limit(p)
    if too_large:
        return too_large
    if block_m % thread_m or block_n % thread_n:
        return f"BLOCK_M={block_m} and BLOCK_N={block_n} must be multiples of THREAD_M={thread_m}, THREAD_N={thread_n}"
    threads = (block_m // thread_m) * (block_n // thread_n)
    if (block_m * block_k) % threads or (block_k * block_n) % threads:
        return (f"the {block_m}x{block_k} A tile and {block_k}x{block_n} B tile must split evenly over "
                f"{threads} threads")
    return launch.check(shape(p, block_m, block_n, block_k, thread_m, thread_n))


def traffic(p, block_m, block_n, **_):
    return Traffic(read=p.m * p.k * launch.ceil_div(p.n, block_n) + p.k * p.n * launch.ceil_div(p.m, block_m),
                   written=p.m * p.n)


def variant(a, b, block_m, block_n, block_k, thread_m, thread_n):
    """16-byte global loads of the operands whose rows are aligned for them."""
    widths = vector_widths(8 * a.dtype.itemsize, block_m, block_n, block_k, thread_m, thread_n,
                           vector.aligned_rows(a), vector.aligned_rows(b))
    return dict(vector_a=widths[0], vector_b=widths[1])


SIZES = (4, 8, 16, 32, 64, 128, 256)
launch.register_simt(
    "regblock", 8, launch.Factory("tilemm.ladder.simt.r08_regblock_kernel", "make_regblock"), shape, traffic,
    (Param("block_m", 128, SIZES, "rows of C per block"), Param("block_n", 128, SIZES, "columns of C per block"),
     Param("block_k", None, (None, 4, 8, 16, 32),
           "depth of one K tile (a multiple of 4: four steps a turn); None: 16 for 32-bit types, 8 for 64-bit"),
     Param("thread_m", None, (None, 1, 2, 4, 8, 16), "rows of C per thread; None: 16 for 32-bit types, 8 for 64-bit"),
     Param("thread_n", 8, (1, 2, 4, 8, 16), "columns of C per thread")),
    "beyond", "THREAD_M x THREAD_N register tiles, double-buffered shared memory",
    compile_params=("block_m", "block_n", "block_k", "thread_m", "thread_n"), limits=limits, variant=variant)
