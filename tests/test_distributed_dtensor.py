"""tilemm.distributed on DTensors and its pipeline's knobs, on the CPU: four gloo processes in one
start (meshes of 4, 2 x 2, and 2 ranks: a row of the 2 x 2 one). Each DTensor product is checked
against torch.matmul on the same DTensors: the same placements, and the values of A @ B."""
import multiprocessing

import numpy as np
import pytest

from tilemm import summa

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.tensor")


def test_a_panel_is_wide_enough_for_its_launch_and_grows_with_the_block():
    small = summa.panel_width(4096, 1024, 1024, 4, 2)
    big = summa.panel_width(65536, 32768, 32768, 4, 2)
    assert small == summa.SMALLEST_PANEL and big > small and big % 256 == 0


def _mesh_cases():
    from torch.distributed.tensor import Partial, Replicate, Shard
    S0, S1, R, P = Shard(0), Shard(1), Replicate(), Partial()
    one_d = [((S0,), (R,)), ((R,), (S1,)), ((S1,), (S0,)), ((R,), (R,)), ((S0,), (S0,)), ((P,), (R,)),
             ((S1,), (R,))]
    two_d = [((S0, R), (R, S1)), ((R, S0), (S1, R)), ((S1, S1), (S0, S0)), ((S0, S1), (R, S0))]
    return one_d, two_d


def _distributed(local, mesh, placements, whole):
    """A DTensor of `whole` with these placements (a Partial one holds whole / count on each rank)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, distribute_tensor
    if not any(isinstance(p, Partial) for p in placements):
        return distribute_tensor(whole, mesh, list(placements))
    count = 1
    for d, p in enumerate(placements):
        count *= mesh.size(d) if isinstance(p, Partial) else 1
    even = [Replicate() if isinstance(p, Partial) else p for p in placements]
    part = distribute_tensor(whole, mesh, even).to_local() / count
    return DTensor.from_local(part, mesh, list(placements), run_check=False, shape=whole.shape, stride=whole.stride())


def _dtensor_checks(rank, failures):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Shard

    import tilemm
    one_d, two_d = _mesh_cases()
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(9, 7, generator=g), torch.randn(7, 6, generator=g)   # no mesh divides them evenly
    want = a.double() @ b.double()
    grid = init_device_mesh("cpu", (2, 2), mesh_dim_names=("rows", "cols"))
    meshes = [(init_device_mesh("cpu", (4,)), one_d), (grid, two_d), (grid["cols"], one_d[:4])]
    for mesh, cases in meshes:
        for pa, pb in cases:
            da, db = _distributed(a, mesh, pa, a), _distributed(b, mesh, pb, b)
            torch_c = torch.matmul(da, db)
            for label, c in (("tilemm.matmul", tilemm.matmul(da, db)), ("distributed", tilemm.distributed.matmul(da, db))):
                where = f"rank {rank} mesh {tuple(mesh.shape)} {pa} x {pb} {label}"
                if tuple(c.placements) != tuple(torch_c.placements):
                    failures.append(f"{where}: placements {c.placements}, torch.matmul gives {torch_c.placements}")
                elif not torch.allclose(c.full_tensor().double(), want, atol=1e-4):
                    failures.append(f"{where}: wrong values")
    # K split, then a reduce-scatter: C's rows
    mesh = init_device_mesh("cpu", (4,))
    da, db = _distributed(a, mesh, (Shard(1),), a), _distributed(b, mesh, (Shard(0),), b)
    c = tilemm.distributed.matmul(da, db, placements=[Shard(0)])
    partial = tilemm.distributed.matmul(da, db)
    if tuple(c.placements) != (Shard(0),) or not isinstance(partial.placements[0], Partial) or \
            not torch.allclose(c.full_tensor().double(), want, atol=1e-4):
        failures.append(f"rank {rank}: Shard(1) x Shard(0) reduce-scattered to {c.placements}")
    # integers: each rank's product is tilemm's exact one; out_dtype and a kernel travel to it
    ai, bi = (torch.randint(-100, 100, s, generator=g, dtype=torch.int32) for s in ((9, 7), (7, 6)))
    ci = tilemm.matmul(_distributed(ai, mesh, (Shard(0),), ai), _distributed(bi, mesh, (Shard(0),), bi),
                       out_dtype="int64", kernel="numpy")
    if ci.dtype != torch.int64 or not torch.equal(ci.full_tensor(), ai.long() @ bi.long()):
        failures.append(f"rank {rank}: int32 with out_dtype=int64 gave {ci.dtype}")
    for bad, kind in ((lambda: tilemm.distributed.matmul(da, a), TypeError),
                      (lambda: tilemm.distributed.matmul(da, db, tilemm.distributed.Grid(1, 4)), ValueError),
                      (lambda: tilemm.distributed.matmul(da, db, placements=[Shard(0), Shard(1)]), ValueError)):
        try:
            bad()
            failures.append(f"rank {rank}: a bad DTensor call was not refused")
        except kind:
            pass
    dist.barrier()


def _pipeline_checks(rank, failures):
    """Every knob setting gives A @ B on every grid of 4 (and of 2, on a subgroup)."""
    import torch.distributed as dist

    import tilemm
    rng = np.random.default_rng(3)
    m, n, k = 11, 9, 13
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    pair = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    settings = [dict(depth=1, panel=2, both_ways=False), dict(depth=3, panel=1, both_ways=True),
                dict(depth=2, panel=None, both_ways=True)]
    for rows, cols, group, me in [(2, 2, None, rank), (1, 4, None, rank), (4, 1, None, rank),
                                  (1, 2, pair, rank % 2), (2, 1, pair, rank % 2)]:
        grid = tilemm.distributed.Grid(rows, cols)
        for knobs in settings:
            mine = tilemm.distributed.matmul(torch.from_numpy(np.ascontiguousarray(tilemm.distributed.shard(a, grid, me, "A"))),
                                             torch.from_numpy(np.ascontiguousarray(tilemm.distributed.shard(b, grid, me, "B"))),
                                             grid, group, **knobs)
            want = tilemm.distributed.shard(a.astype(np.float64) @ b.astype(np.float64), grid, me, "C")
            if mine.shape != want.shape or not np.allclose(mine.numpy(), want, atol=1e-4):
                failures.append(f"rank {rank} grid {rows}x{cols} {knobs}: wrong block")
    # knobs that differ between ranks: the same ValueError everywhere, before any transfer
    grid = tilemm.distributed.Grid(2, 2)
    blocks = [torch.from_numpy(np.ascontiguousarray(tilemm.distributed.shard(x, grid, rank, w))) for x, w in ((a, "A"), (b, "B"))]
    try:
        tilemm.distributed.matmul(*blocks, grid, depth=1 + (rank == 2))
        failures.append(f"rank {rank}: knobs that differ were not refused")
    except ValueError as e:
        if "knobs" not in str(e):
            failures.append(f"rank {rank}: {e}")
    try:
        tilemm.distributed.matmul(*blocks, grid, depth=0)
        failures.append(f"rank {rank}: depth=0 was not refused")
    except ValueError:
        pass


def _worker(rank, world, path, failures):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    try:
        _dtensor_checks(rank, failures)
        _pipeline_checks(rank, failures)
    except Exception as e:           # noqa: BLE001 (reported, and the test fails on it)
        failures.append(f"rank {rank}: {type(e).__name__}: {e}")
        raise
    finally:
        dist.destroy_process_group()


def test_dtensor_placements_and_pipeline_knobs_on_four_gloo_ranks(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        failures = manager.list()
        procs = [ctx.Process(target=_worker, args=(r, 4, str(tmp_path / "rendezvous"), failures)) for r in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(600)
        assert list(failures) == []
        assert [p.exitcode for p in procs] == [0] * 4
