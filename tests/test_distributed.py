"""tilemm.distributed on the CPU: four gloo processes (the same code NCCL runs on GPUs), every
dtype family, grids 2 x 2, 1 x 4 and 4 x 1, shapes that the grid does not divide (and blocks that
are empty), checked against NumPy; blocks that do not form the layout refused on every rank."""
import multiprocessing


import numpy as np
import pytest

from tilemm.distributed import Grid, _panels
from tilemm.panels import block, blocks

SHAPES = [(13, 11, 7), (5, 3, 9), (2, 9, 3), (16, 16, 16), (7, 5, 0), (1, 1, 1)]
DTYPES = ["float32", "float64", "int32", "int64", "int8", "bfloat16"]
GRIDS = [(2, 2), (1, 4), (4, 1)]


def test_blocks_cover_the_range_evenly():
    for n in range(0, 12):
        for parts in range(1, 6):
            sizes = [s.stop - s.start for s in blocks(n, parts)]
            assert sum(sizes) == n and max(sizes) - min(sizes) <= 1
            assert all(blocks(n, parts)[i].stop == blocks(n, parts)[i + 1].start for i in range(parts - 1))


def test_panels_cut_where_either_operand_s_blocks_end():
    panels = _panels(10, Grid(3, 2))    # A's K blocks: 5 | 5; B's: 4 | 3 | 3
    assert [(p[0], p[1]) for p in panels] == [(0, 4), (4, 5), (5, 7), (7, 10)]
    assert [p[2] for p in panels] == [0, 0, 1, 1] and [p[4] for p in panels] == [0, 1, 1, 2]


def test_a_grid_of_no_ranks_is_refused():
    with pytest.raises(ValueError, match="must be >= 1"):
        Grid(0, 2)


def reference(a, b, dtype):
    if dtype.startswith("int"):
        return np.matmul(a, b)                  # NumPy's wrap
    return a.astype(np.float64) @ b.astype(np.float64)


def _worker(rank, world, path, failures):
    import torch
    import torch.distributed as dist

    import tilemm
    from tilemm.accuracy import compare
    from tilemm.data import random_operand
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    try:
        for rows, cols in GRIDS:
            grid = tilemm.distributed.Grid(rows, cols)
            for dtype in DTYPES:
                for m, n, k in SHAPES:
                    rng = np.random.default_rng([m, n, k])          # every rank draws the same A and B
                    a, b = random_operand(rng, (m, k), dtype), random_operand(rng, (k, n), dtype)
                    to = (lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16)) \
                        if dtype == "bfloat16" else (lambda x: torch.from_numpy(np.ascontiguousarray(x)))
                    mine = tilemm.distributed.matmul(to(tilemm.distributed.shard(a, grid, rank, "A")),
                                                     to(tilemm.distributed.shard(b, grid, rank, "B")), grid)
                    want = tilemm.distributed.shard(np.zeros((m, n)), grid, rank, "C").shape
                    got = (mine.float() if dtype == "bfloat16" else mine).numpy()
                    i, j = grid.position(rank)
                    rows_i, cols_j = block(m, rows, i), block(n, cols, j)
                    verdict = compare(got, a[rows_i], b[:, cols_j], dtype) if got.shape == want else None
                    if verdict is None or not verdict.ok:
                        failures.append(f"rank {rank} grid {rows}x{cols} {dtype} {m}x{n}x{k}: "
                                        f"{verdict.message if verdict else f'shape {got.shape}, want {want}'}")
        # a rank whose block does not fit the layout: the same ValueError on every rank, before any product
        grid = tilemm.distributed.Grid(2, 2)
        a = torch.ones((3 if rank == 3 else 2, 2))
        try:
            tilemm.distributed.matmul(a, torch.ones((2, 2)), grid)
            failures.append(f"rank {rank}: a bad layout was not refused")
        except ValueError as e:
            if "rank 3" not in str(e):
                failures.append(f"rank {rank}: {e}")
    finally:
        dist.destroy_process_group()


def test_four_gloo_ranks_every_dtype_grid_and_ragged_shape(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        failures = manager.list()
        procs = [ctx.Process(target=_worker, args=(r, 4, str(tmp_path / "rendezvous"), failures)) for r in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(600)
        assert [p.exitcode for p in procs] == [0] * 4
        assert list(failures) == []


