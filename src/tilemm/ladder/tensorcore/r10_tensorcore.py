"""Rung 10, `tensorcore`: the tiled GEMM on tensor cores, in Triton: rung 9's program (Triton's
matmul tutorial, r09_tutorial.py) made fast; the programs themselves are in
r10_tensorcore_kernel.py, and how a product is launched (which program, which tiles, split K) in
tilemm.engine.tensorcore_launch, which rung 12 shares. Each program computes a BLOCK_M x BLOCK_N
tile of C: per K step it loads a (BLOCK_M, BLOCK_K) tile of A and a (BLOCK_K, BLOCK_N) tile of B
and `tl.dot` multiplies them on the tensor cores into float32 accumulators; Triton stages the
tiles through shared memory (num_stages deep) itself. Programs are numbered in groups of GROUP_M block rows so that
neighbours share their B tiles in L2.

What it adds to rung 9: tiles brought in by TMA where a product pays for it (takes_tma: no address
arithmetic, no masks); persistent programs, one an SM, that write one tile while the next one loads;
split K (and stream-K, on request) where the tiles of C leave SMs idle; operands copied into aligned
rows where TMA needs them or reads them faster; tiles chosen by shape (tile_model); 64-bit offsets;
and a bound launcher (bind) that tilemm.engine.replay launches again on a repeated call's operands.
The persistent programs are the engine's tile schedule (tilemm.engine.programs.matmul_persistent)
filled with this rung's sum of a tile's K steps (tile_steps).

float16 and bfloat16 in, float32 accumulation, rounded once to the input type: what NumPy
does for float16 (and torch for bfloat16).

Constraints: float16 / bfloat16 only; BLOCK_* >= 16 (tl.dot's smallest tile); any M, N, K,
any strides; shared memory of a configuration must fit the GPU (checked before launch).
"""
from __future__ import annotations

from tilemm.system import compat, tuning
from tilemm.ladder.record import Kernel, Param, Traffic, WholeNumbers, register
from tilemm.ladder.tensorcore import r10_cluster
from tilemm.ladder.tensorcore.tile_params import tile_params
from tilemm.engine import availability, tensorcore_launch
from tilemm.engine.tensorcore_launch import default_tiles, resolve_tiles, takes_tma  # noqa: F401  (default_tiles: this rung's tiles, read here by benchmarks)


# Candidates for autotune=True (configurations are data, never edits of the kernel); each is
# checked against the shared-memory limit before it is tried.
CANDIDATES = [
    dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=4),
    dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3),
    dict(block_m=256, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=4),
    dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=4, num_stages=4),
    dict(block_m=128, block_n=128, block_k=32, group_m=8, num_warps=4, num_stages=5),
    dict(block_m=64, block_n=256, block_k=64, group_m=8, num_warps=4, num_stages=4),
    dict(block_m=64, block_n=64, block_k=64, group_m=8, num_warps=4, num_stages=4),
]


def run(a, b, c, **params):
    if params.get("autotune"):
        config, _ = tuned(a, b, c)
        return launch(a, b, c, **config)
    bind(a, b, c, **params)()


def bind(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages, persistent=True, stream_k=False,
         split_k=None, align_rows=None, tma=None, autotune=False, cluster=False):
    """run(a, b, c, ...) as a launcher without arguments, the tiles and descriptors worked out
    once: a prepared plan launched many times pays Triton's launch alone (with autotune, the
    configuration is tuned, or read from the tuning cache, here; cluster: r10_cluster's program)."""
    if cluster:
        return r10_cluster.bind(a, b, c)
    if autotune:
        config, _ = tuned(a, b, c)
        return launcher(a, b, c, **config)
    m, k = a.shape
    n = b.shape[1]
    tiles = resolve_tiles(m, n, k, dict(block_m=block_m, block_n=block_n, block_k=block_k, num_warps=num_warps,
                                     num_stages=num_stages))
    return launcher(a, b, c, group_m=group_m, persistent=persistent, stream_k=stream_k, split_k=split_k,
                    align_rows=align_rows, tma=tma if tma is not None else takes_tma(m, n, k), **tiles)


def launcher(a, b, c, **config):
    """c = a @ b (c += a @ b with accumulate) as a function without arguments, by this rung's
    programs (see tilemm.engine.tensorcore_launch.launcher for the configuration)."""
    from tilemm.ladder.tensorcore import r10_tensorcore_kernel as kernel  # Triton loads on first use
    programs = tensorcore_launch.Programs(kernel.matmul_kernel, kernel.matmul_tma, kernel.tile_steps)
    return tensorcore_launch.launcher(programs, a, b, c, **config)


def launch(a, b, c, **config):
    """One launch: c = a @ b (see launcher)."""
    launcher(a, b, c, **config)()


def tuned(a, b, c):
    """The fastest candidate for this device, dtype, shape and layout, tuned once and then
    read from tilemm's tuning cache (see tilemm.system.tuning)."""
    import torch
    m, k = a.shape
    n = b.shape[1]
    layout = ("n" if a.stride(1) == 1 else "t") + ("n" if b.stride(1) == 1 else "t")
    device = "interpreter" if compat.triton_interpreter() else torch.cuda.get_device_name(a.device)
    key = f"tensorcore|{device}|{str(a.dtype).removeprefix('torch.')}|{m}x{n}x{k}|{layout}"
    fitting = [cfg for cfg in CANDIDATES
               if availability.check_shared(cfg["block_m"], cfg["block_n"], cfg["block_k"], cfg["num_stages"], 2) is None]

    def time_ms(cfg):
        if compat.triton_interpreter():  # no clock worth reading: run it once, keep the first
            launch(a, b, c, **cfg)
            return float(fitting.index(cfg))
        import triton.testing
        return triton.testing.do_bench(lambda: launch(a, b, c, **cfg), warmup=25, rep=100, return_mode="median")
    return tuning.best(key, fitting, time_ms)


def traffic(p, cluster=False, **params):
    """A read once per block column and B once per block row, and split K's partials
    (tensorcore_launch.traffic); cluster: its program's tiles."""
    if cluster:
        return traffic(p, **r10_cluster.CLUSTER_TILE, split_k=1)
    read, written = tensorcore_launch.traffic(p, **params)
    return Traffic(read=read, written=written)


def limits(p, cluster=False, **params):
    if cluster:
        return r10_cluster.limits(p, **params)
    return tensorcore_launch.limits(p, **params)


TILE_PARAMS = tile_params(None, None, None, num_warps=None, num_stages=None)
def accumulate(a, b, acc, first: bool) -> None:
    """a @ b added into float32 acc in the product's own epilogue (first: written over it), at the
    default tiles: the K panels of the products past one GPU (tilemm.spread.panels)."""
    tiles = resolve_tiles(a.shape[0], b.shape[1], a.shape[1],
                          dict(block_m=None, block_n=None, block_k=None, num_warps=None, num_stages=None))
    launcher(a, b, acc, group_m=8, accumulate=not first, **tiles)()


register(Kernel(
    name="tensorcore", rung=10, device="cuda", backend="triton", dtypes=("float16", "bfloat16"),
    seed="beyond", summary="Triton tl.dot on tensor cores: tiles staged through shared memory, grouped order",
    run=run, bind=bind, traffic=traffic, limits=limits, available=availability.available, accumulate=accumulate,
    params=TILE_PARAMS + (
            Param("persistent", True, (False, True),
                  "16-bit operands: one program an SM walks the tiles, writing a tile while the next one "
                  "loads; False: one program a tile"),
            Param("stream_k", False, (False, True),
                  "16-bit operands: the tiles of a last, partial round (or of the only one) are shared out by "
                  "K steps among all SMs by the persistent program; off by default: it measured slower "
                  "(stream_k_pays)"),
            Param("split_k", None, WholeNumbers(1, 256),
                  "16-bit operands: each tile's K steps split into this many runs, programs of their own whose "
                  "float32 partials the last to finish adds up (1: no split); None: where one round of tiles "
                  "leaves half the SMs idle, enough runs to fill them (k_splits); for M or N <= 16 with that "
                  "thin operand not read K-major, two rounds of SMs (thin_splits)"),
            Param("align_rows", None, (None, False, True),
                  "16-bit operands whose rows are not a multiple of 128 bytes are copied into rows that are "
                  "(TMA reads them faster); None: where the product does enough work per operand element "
                  "(rows_aligned_pays)"),
            Param("tma", None, (None, False, True),
                  "operands read through TMA descriptors (True) or by pointers (False); None: TMA past 2^28 "
                  "multiply-adds (a smaller product is launched more cheaply by pointers: POINTERS_UP_TO) "
                  "but for a C of 8 tiles or fewer (FEW_TILES)"),
            Param("autotune", False, (False, True),
                  "time the CANDIDATES once per device, dtype, shape and layout, cache the winner on disk, "
                  "and use it (the other parameters are then ignored)"),
            Param("cluster", False, (False, True),
                  "Hopper, with a Triton whose Gluon has clusters (3.9): the Gluon program in clusters of two "
                  "CTAs, 256 x 256 tiles, B loaded once for both (r10_cluster; its own tiles: the tile "
                  "parameters stay at their defaults); refused elsewhere"),),
))
