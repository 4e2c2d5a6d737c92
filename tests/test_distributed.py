"""tilemm.spread.distributed on the CPU: four gloo processes (the same code NCCL runs on GPUs), every
dtype family, grids 2 x 2, 1 x 4 and 4 x 1, shapes that the grid does not divide (and blocks that
are empty), checked against NumPy; blocks that do not form the layout refused on every rank. In
the same processes (one start for all): the pipeline's knobs on every grid of 4 and of 2, and
DTensors on meshes of 4, 2 x 2 and 2 (a row of the 2 x 2 one), each product checked against
torch.matmul on the same DTensors: the same placements, and the values of A @ B."""
import multiprocessing


import numpy as np
import pytest

from tilemm.spread import summa
from tilemm.spread.distributed import Grid, _panels
from tilemm.spread.panels import accumulate, block, blocks

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
    narrow = _panels(10, Grid(3, 2), width=3)     # and every 3 columns within those
    assert [(p[0], p[1]) for p in narrow] == [(0, 3), (3, 4), (4, 5), (5, 7), (7, 10)]


def test_a_grid_of_no_ranks_is_refused():
    with pytest.raises(ValueError, match="must be >= 1"):
        Grid(0, 2)


def reference(a, b, dtype):
    if dtype.startswith("int"):
        return np.matmul(a, b)                  # NumPy's wrap
    return a.astype(np.float64) @ b.astype(np.float64)


def test_a_running_sum_wider_than_the_operands_takes_products_in_its_own_dtype():
    """out_dtype="int64" of int32 blocks: each panel's product exact in int64 (not wrapped in int32,
    then widened); float32 blocks summed in float64: products in float64."""
    import torch
    a, b = torch.full((2, 3), 60000, dtype=torch.int32), torch.full((3, 2), 60000, dtype=torch.int32)
    acc = torch.empty((2, 2), dtype=torch.int64)
    accumulate(acc, a, b, "int64", first=True)
    accumulate(acc, a, b, "int64", first=False)
    assert torch.equal(acc, torch.full((2, 2), 6 * 60000 ** 2))
    x = torch.full((1, 3), 1 + 2 ** -20)
    acc = torch.empty((1, 1), dtype=torch.float64)
    accumulate(acc, x, x.t(), "float64", first=True)
    assert acc.item() == 3 * (1 + 2 ** -20) ** 2          # exact in float64; float32 rounds the square


def test_importing_the_dtensor_module_registers_the_rule():
    """As its docstring says (a program's first product of DTensors may be one torch.compile traces,
    which never calls tilemm.spread.dtensor.matmul)."""
    import torch
    from torch.distributed.tensor import DTensor

    import tilemm.dtensor  # noqa: F401
    assert torch.ops.tilemm.matmul.default in DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs


def test_a_grid_of_no_ints_is_refused():
    with pytest.raises(TypeError, match="ints"):
        Grid(2.0, 1)


def test_a_panel_is_wide_enough_for_its_launch_and_grows_with_the_block():
    small = summa.panel_width(4096, 1024, 1024, 4, 2)
    big = summa.panel_width(65536, 32768, 32768, 4, 2)
    assert small == summa.SMALLEST_PANEL and big > small and big % 256 == 0


def _mesh_cases():
    from torch.distributed.tensor import Partial, Replicate, Shard
    S0, S1, R, P = Shard(0), Shard(1), Replicate(), Partial()
    one_d = [((S0,), (R,)), ((R,), (S1,)), ((S1,), (S0,)), ((R,), (R,)), ((S0,), (S0,)), ((P,), (R,))]
    two_d = [((S0, R), (R, S1)), ((S1, S1), (S0, S0)), ((S0, S1), (R, S0))]
    return one_d, two_d


def _distributed(local, mesh, placements, whole):
    """A DTensor of `whole` with these placements (a Partial one holds whole / count on each rank)."""
    import torch
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
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    import tilemm
    one_d, two_d = _mesh_cases()
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(9, 7, generator=g), torch.randn(7, 6, generator=g)   # no mesh divides them evenly
    want = a.double() @ b.double()
    # the process's first product of DTensors traced by torch.compile (no eager call has registered the
    # rule), then the op itself, as a DTensor program calls it
    line = init_device_mesh("cpu", (4,))
    da, db = distribute_tensor(a, line, [Shard(0)]), distribute_tensor(b, line, [Replicate()])
    for how, product in (("compiled", torch.compile(tilemm.matmul, backend="eager", fullgraph=True)),
                         ("the op", lambda x, y: torch.ops.tilemm.matmul(x, y, None, "", None))):
        c = product(da, db)
        if c.placements != (Shard(0),) or not torch.allclose(c.full_tensor().double(), want, atol=1e-4):
            failures.append(f"rank {rank}: {how} on DTensors gave {c.placements}")
    grid = init_device_mesh("cpu", (2, 2), mesh_dim_names=("rows", "cols"))
    meshes = [(line, one_d), (grid, two_d), (grid["cols"], one_d[:3])]
    for mesh, cases in meshes:
        for number, (pa, pb) in enumerate(cases):
            da, db = _distributed(a, mesh, pa, a), _distributed(b, mesh, pb, b)
            torch_c = torch.matmul(da, db)
            entry = tilemm.matmul if number % 2 else tilemm.spread.distributed.matmul     # both routes, in turn
            for label, c in ((entry.__module__, entry(da, db)),):
                where = f"rank {rank} mesh {tuple(mesh.shape)} {pa} x {pb} {label}"
                if tuple(c.placements) != tuple(torch_c.placements):
                    failures.append(f"{where}: placements {c.placements}, torch.matmul gives {torch_c.placements}")
                elif not torch.allclose(c.full_tensor().double(), want, atol=1e-4):
                    failures.append(f"{where}: wrong values")
    # K split, then a reduce-scatter: C's rows
    mesh = init_device_mesh("cpu", (4,))
    da, db = _distributed(a, mesh, (Shard(1),), a), _distributed(b, mesh, (Shard(0),), b)
    c = tilemm.spread.distributed.matmul(da, db, placements=[Shard(0)])
    partial = tilemm.spread.distributed.matmul(da, db)
    if tuple(c.placements) != (Shard(0),) or not isinstance(partial.placements[0], Partial) or \
            not torch.allclose(c.full_tensor().double(), want, atol=1e-4):
        failures.append(f"rank {rank}: Shard(1) x Shard(0) reduce-scattered to {c.placements}")
    # ... in the steps torch's takes: beside the product, the same ops on the same shapes and dtypes (one
    # reduce-scatter of the 16-bit partial sums, no copy, cast or other collective)
    a16, b16 = (_distributed(x.bfloat16(), mesh, p, x.bfloat16()) for x, p in ((a, (Shard(1),)), (b, (Shard(0),))))
    ours = _dtensor_steps(lambda: tilemm.spread.distributed.matmul(a16, b16, placements=[Shard(0)]))
    theirs = _dtensor_steps(lambda: torch.matmul(a16, b16).redistribute(placements=[Shard(0)]))
    collectives = [op for op, _ in ours if any(kind in op for kind in ("reduce", "gather", "all_to_all", "broadcast"))]
    if ours != theirs or collectives != ["_c10d_functional.reduce_scatter_tensor.default"]:
        first = next((i for i, pair in enumerate(zip(ours, theirs)) if pair[0] != pair[1]), min(len(ours), len(theirs)))
        failures.append(f"rank {rank}: Shard(1) x Shard(0) to Shard(0): tilemm's steps from {first}: {ours[first:]}; "
                        f"torch's: {theirs[first:]}")
    # integers: each rank's product is tilemm's exact one; out_dtype and a kernel travel to it
    ai, bi = (torch.randint(-100, 100, s, generator=g, dtype=torch.int32) for s in ((9, 7), (7, 6)))
    ci = tilemm.matmul(_distributed(ai, mesh, (Shard(0),), ai), _distributed(bi, mesh, (Shard(0),), bi),
                       out_dtype="int64", kernel="numpy")
    if ci.dtype != torch.int64 or not torch.equal(ci.full_tensor(), ai.long() @ bi.long()):
        failures.append(f"rank {rank}: int32 with out_dtype=int64 gave {ci.dtype}")
    for bad, kind in ((lambda: tilemm.spread.distributed.matmul(da, a), TypeError),
                      (lambda: tilemm.spread.distributed.matmul(da, db, tilemm.spread.distributed.Grid(1, 4)), ValueError),
                      (lambda: tilemm.spread.distributed.matmul(da, db, placements=[Shard(0), Shard(1)]), ValueError),
                      (lambda: tilemm.spread.distributed.matmul(da, db, placements=[Shard(2)]), ValueError),
                      (lambda: tilemm.spread.distributed.matmul(da, db, depth=1), TypeError),
                      (lambda: tilemm.matmul(da, db, devices=["cpu", "cpu"]), TypeError)):
        try:
            bad()
            failures.append(f"rank {rank}: a bad DTensor call was not refused")
        except kind:
            pass
    _dtensor_edge_checks(rank, failures, mesh, grid)
    dist.barrier()


def _dtensor_edge_checks(rank, failures, mesh, grid):
    """What torch.matmul gives on DTensors at the edges: gradients of products with an empty dimension
    (DTensors placed as torch's, not plain zeros), and its RuntimeError for a plain tensor or another mesh."""
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import tilemm
    for sa, sb, pa, pb in (((0, 7), (7, 3), Shard(0), Replicate()), ((5, 0), (0, 3), Shard(1), Shard(0)),
                           ((0, 7), (7, 3), Replicate(), Shard(1))):
        grads = []
        for product in (torch.matmul, tilemm.matmul):
            a, b = (distribute_tensor(torch.randn(s), mesh, [p]).requires_grad_() for s, p in ((sa, pa), (sb, pb)))
            product(a, b).sum().backward()
            grads.append([(type(g).__name__, getattr(g, "placements", None), tuple(g.shape)) for g in (a.grad, b.grad)])
        if grads[0] != grads[1]:
            failures.append(f"rank {rank}: {sa} {pa} x {sb} {pb}: gradients {grads[1]}, torch's {grads[0]}")
    # stacks and vectors: placed as torch places them (each stack dimension, K, rows, columns)
    for sa, sb, pa, pb in (((4, 5, 7), (4, 7, 4), Shard(0), Shard(0)), ((3, 5, 7), (3, 7, 4), Replicate(), Shard(2)),
                           ((3, 5, 7), (3, 7, 4), Shard(2), Shard(1)), ((5, 7), (7,), Shard(0), Replicate()),
                           ((7,), (7,), Shard(0), Shard(0)), ((7,), (7, 5), Replicate(), Shard(1)),
                           ((4, 5, 7), (7, 4), Shard(0), Replicate())):
        g = torch.Generator().manual_seed(len(sa) + len(sb))        # every rank draws the same A and B
        whole_a, whole_b = (torch.randn(s, generator=g, dtype=torch.float64) for s in (sa, sb))
        a, b = distribute_tensor(whole_a, mesh, [pa]), distribute_tensor(whole_b, mesh, [pb])
        ours, theirs = tilemm.matmul(a, b), torch.matmul(a, b)
        if ours.placements != theirs.placements or not torch.allclose(ours.full_tensor(), whole_a @ whole_b):
            failures.append(f"rank {rank}: {sa} {pa} x {sb} {pb}: {ours.placements}, torch's {theirs.placements} "
                            f"(values {'right' if torch.allclose(ours.full_tensor(), whole_a @ whole_b) else 'wrong'})")
    da = distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)])
    other = distribute_tensor(torch.randn(4, 4), grid, [Replicate(), Replicate()])
    for x, y in ((da, torch.ones(4, 4)), (torch.ones(4, 4), da), (da, other)):
        for product in (torch.matmul, tilemm.matmul):
            try:
                product(x, y)
                failures.append(f"rank {rank}: {product.__module__} took {type(x).__name__} x {type(y).__name__}")
            except RuntimeError:
                pass
            except Exception as e:
                failures.append(f"rank {rank}: {product.__module__} raised {type(e).__name__}, not RuntimeError: {e}")


def _dtensor_steps(call) -> list:
    """The ops call() dispatches outside DTensor's own (a DTensor's product, its local collectives, copies
    and casts), each with its tensors' shapes and dtypes; the product itself named "product"."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Steps(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = "product" if str(func) in ("aten.mm.default", "tilemm.matmul.default") else str(func)
            self.ops.append((name, [(tuple(x.shape), x.dtype) for x in args if isinstance(x, torch.Tensor)]))
            return func(*args, **(kwargs or {}))
    with Steps() as steps:
        call().to_local()
    return steps.ops


def _pipeline_checks(rank, failures):
    """Every knob setting gives A @ B on every grid of 4 (and of 2, on a subgroup)."""
    import torch
    import torch.distributed as dist

    import tilemm
    rng = np.random.default_rng(3)
    m, n, k = 11, 9, 13
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    pair = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    settings = [dict(depth=1, panel=2, both_ways=False), dict(depth=3, panel=1, both_ways=True)]
    for rows, cols, group, me in [(2, 2, None, rank), (1, 4, None, rank), (4, 1, None, rank),
                                  (1, 2, pair, rank % 2), (2, 1, pair, rank % 2)]:
        grid = tilemm.spread.distributed.Grid(rows, cols)
        for knobs in settings:
            mine = tilemm.spread.distributed.matmul(torch.from_numpy(np.ascontiguousarray(tilemm.spread.distributed.shard(a, grid, me, "A"))),
                                             torch.from_numpy(np.ascontiguousarray(tilemm.spread.distributed.shard(b, grid, me, "B"))),
                                             grid, group, **knobs)
            want = tilemm.spread.distributed.shard(a.astype(np.float64) @ b.astype(np.float64), grid, me, "C")
            if mine.shape != want.shape or not np.allclose(mine.numpy(), want, atol=1e-4):
                failures.append(f"rank {rank} grid {rows}x{cols} {knobs}: wrong block")
    # knobs that differ between ranks: the same ValueError everywhere, before any transfer
    grid = tilemm.spread.distributed.Grid(2, 2)
    blocks = [torch.from_numpy(np.ascontiguousarray(tilemm.spread.distributed.shard(x, grid, rank, w))) for x, w in ((a, "A"), (b, "B"))]
    try:
        tilemm.spread.distributed.matmul(*blocks, grid, depth=1 + (rank == 2))
        failures.append(f"rank {rank}: knobs that differ were not refused")
    except ValueError as e:
        if "knobs" not in str(e):
            failures.append(f"rank {rank}: {e}")
    try:
        tilemm.spread.distributed.matmul(*blocks, grid, depth=0)
        failures.append(f"rank {rank}: depth=0 was not refused")
    except ValueError:
        pass


def _grid_edge_checks(rank, failures):
    """An out_dtype that widens the sums, on every grid of 4 (int32 products past 2^31: exact in
    int64, as tilemm.matmul's out_dtype gives); blocks no product takes, refused on every rank alike
    before any transfer (one rank's alone too: the others must not wait for it)."""
    import torch

    from tilemm.spread import distributed
    a = torch.arange(60000, 60035, dtype=torch.int32).reshape(5, 7)
    b = torch.arange(50000, 50042, dtype=torch.int32).reshape(7, 6)
    for rows, cols in GRIDS:
        grid = Grid(rows, cols)
        mine = distributed.matmul(distributed.shard(a, grid, rank, "A").contiguous(),
                                  distributed.shard(b, grid, rank, "B").contiguous(), grid, out_dtype="int64")
        if mine.dtype != torch.int64 or not torch.equal(mine, distributed.shard(a.long() @ b.long(), grid, rank, "C")):
            failures.append(f"rank {rank} grid {rows}x{cols}: int32 blocks with out_dtype=int64 gave {mine.dtype} "
                            "values other than the exact ones")
    grid = Grid(1, 4)

    def blocks(dtype=torch.float32, device="cpu"):          # the 1 x 4 layout of a (2 x 8) @ (8 x 8) product
        return torch.ones((2, 2), dtype=dtype, device=device), torch.ones((8, 2), dtype=dtype, device=device)
    one_grad = blocks()[0].requires_grad_(rank == 1), blocks()[1]
    one_mixed = blocks()[0], blocks(torch.float64 if rank == 2 else torch.float32)[1]
    for name, call, kind, words in (
            ("a rank's block that requires grad", lambda: distributed.matmul(*one_grad, grid), ValueError, "rank 1: "),
            ("meta blocks", lambda: distributed.matmul(*blocks(device="meta"), grid), ValueError, "meta"),
            ("a rank's blocks of two dtypes", lambda: distributed.matmul(*one_mixed, grid), ValueError, "rank 2: "),
            ("uint16 blocks", lambda: distributed.matmul(*blocks(torch.uint16), grid), ValueError, "uint16"),
            ("a rank's own out_dtype", lambda: distributed.matmul(*blocks(), grid, out_dtype="float64" if rank == 3
                                                                   else None), ValueError, "out_dtype"),
            ("out_dtype=uint16", lambda: distributed.matmul(*blocks(torch.uint8), grid, out_dtype="uint16"),
             TypeError, "out_dtype"),
            ("a rank's own depth=0", lambda: distributed.matmul(*blocks(), grid, depth=0 if rank == 1 else 2),
             ValueError, "rank 1: depth=0"),
            ("a rank's grid of 2", lambda: distributed.matmul(*blocks(), Grid(1, 2) if rank == 0 else grid),
             ValueError, "rank 0: a 1 x 2 grid is 2 ranks"),
            ("a rank's own grid of 4", lambda: distributed.matmul(*blocks(), Grid(2, 2) if rank == 0 else grid),
             ValueError, "differ")):
        try:
            call()
            failures.append(f"rank {rank}: {name} was taken")
        except kind as e:
            if words not in str(e):
                failures.append(f"rank {rank}: {name}: {e}")


def _worker(rank, world, path, failures):
    import torch
    import torch.distributed as dist

    import tilemm
    from tilemm.numerics.accuracy import compare
    from tilemm.numerics.data import random_operand
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    try:
        for rows, cols in GRIDS:
            grid = tilemm.spread.distributed.Grid(rows, cols)
            for dtype in DTYPES:
                for m, n, k in SHAPES:
                    rng = np.random.default_rng([m, n, k])          # every rank draws the same A and B
                    a, b = random_operand(rng, (m, k), dtype), random_operand(rng, (k, n), dtype)
                    to = (lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16)) \
                        if dtype == "bfloat16" else (lambda x: torch.from_numpy(np.ascontiguousarray(x)))
                    mine = tilemm.spread.distributed.matmul(to(tilemm.spread.distributed.shard(a, grid, rank, "A")),
                                                     to(tilemm.spread.distributed.shard(b, grid, rank, "B")), grid)
                    want = tilemm.spread.distributed.shard(np.zeros((m, n)), grid, rank, "C").shape
                    got = (mine.float() if dtype == "bfloat16" else mine).numpy()
                    i, j = grid.position(rank)
                    rows_i, cols_j = block(m, rows, i), block(n, cols, j)
                    verdict = compare(got, a[rows_i], b[:, cols_j], dtype) if got.shape == want else None
                    if verdict is None or not verdict.ok:
                        failures.append(f"rank {rank} grid {rows}x{cols} {dtype} {m}x{n}x{k}: "
                                        f"{verdict.message if verdict else f'shape {got.shape}, want {want}'}")
        # a rank whose block does not fit the layout: the same ValueError on every rank, before any product
        grid = tilemm.spread.distributed.Grid(2, 2)
        a = torch.ones((3 if rank == 3 else 2, 2))
        try:
            tilemm.spread.distributed.matmul(a, torch.ones((2, 2)), grid)
            failures.append(f"rank {rank}: a bad layout was not refused")
        except ValueError as e:
            if "rank 3" not in str(e):
                failures.append(f"rank {rank}: {e}")
        _pipeline_checks(rank, failures)
        _grid_edge_checks(rank, failures)
        _dtensor_checks(rank, failures)
    finally:
        dist.destroy_process_group()


def test_four_gloo_ranks_every_dtype_grid_ragged_shape_knob_and_dtensor_placement(tmp_path):
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


