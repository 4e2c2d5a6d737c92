"""The tiling one level up: C = A @ B over the ranks of a torch.distributed process group.

The ranks form a ROWS x COLS grid (rank r sits at row r // COLS, column r % COLS). Each holds one
block of each matrix in the 2-D block layout: A (M x K) and C (M x N) cut into ROWS row blocks, B
(K x N) into ROWS row blocks too, and A's K, B's N and C's N into COLS column blocks; the cuts
are as even as can be (``block``: the first ``n % parts`` blocks one longer), so any M, N, K works.

SUMMA (van de Geijn and Watts, 1997): K is walked in panels, cut where either A's or B's K blocks
end and every ``panel`` columns. For each panel the rank of grid row i that holds it broadcasts A's
panel along row i, the rank of grid column j that holds it broadcasts B's panel along column j, and
every rank adds A_panel @ B_panel to its C block with tilemm's own rungs. A 1 x P or P x 1 grid is
a 1-D ring instead: the operand split along K alone (A on 1 x P, B on P x 1) goes round, half of
each block each way, each rank starting on the block it holds. Either way ``depth`` panels or steps
are in flight while one multiplies, the products on a stream of their own (tilemm.spread.summa).

    torchrun --nproc-per-node 2 my_program.py     # init_process_group("nccl"), then:
    grid = tilemm.distributed.Grid(1, 2)
    a_mine = tilemm.distributed.shard(a, grid, rank, "A")   # or build your block directly
    c_mine = tilemm.distributed.matmul(a_mine, b_mine, grid)
    c = tilemm.distributed.matmul(dtensor_a, dtensor_b)           # DTensors: tilemm.spread.dtensor

Sums: 16-bit floats are summed in float32 across panels and rounded once; float32 and float64 in
their own type; integers wrap (sums modulo 2^w are exact in any order).
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

from tilemm.contract import numpy_rules as contract
from tilemm.spread import summa
from tilemm.numerics.dtypes import dtype_name, result_dtype
from tilemm.spread.panels import SIXTEEN_BIT, block, blocks

# what a rank's running sum can hold (torch has no sum of uint16, uint32 or uint64 tensors on the CPU)
DTYPES = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128", "int8", "int16", "int32", "int64",
          "uint8", "bool")


@dataclass(frozen=True)
class Grid:
    """A rows x cols grid of ranks, numbered row by row (rank r sits at row r // cols, column r % cols).

    Attributes
    ----------
    rows, cols : int
        The grid's shape, each 1 or more.
    size : int
        rows * cols: the ranks the process group must have.

    Raises
    ------
    TypeError
        rows or cols not an int.
    ValueError
        rows or cols under 1.
    """
    rows: int
    cols: int

    def __post_init__(self):
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (self.rows, self.cols)):
            raise TypeError(f"tilemm.distributed: a grid of {self.rows!r} x {self.cols!r} ranks; both must be ints")
        if self.rows < 1 or self.cols < 1:
            raise ValueError(f"tilemm.distributed: a grid of {self.rows} x {self.cols} ranks; both must be >= 1")

    @property
    def size(self) -> int:
        return self.rows * self.cols

    def position(self, rank: int) -> tuple[int, int]:
        return divmod(rank, self.cols)

    def rank(self, row: int, col: int) -> int:
        return row * self.cols + col


def shard(x, grid: Grid, rank: int, which: str):
    """Rank's block of the global matrix x: rows cut into grid.rows blocks, columns into grid.cols.

    Parameters
    ----------
    x : array or torch.Tensor
        The whole matrix.
    grid : Grid
        The ranks' grid.
    rank : int
        Whose block.
    which : {"A", "B", "C"}
        Which operand x is: A (M x K), B (K x N) or C (M x N).

    Returns
    -------
    array or torch.Tensor
        A view of x: the block rank holds.

    Raises
    ------
    ValueError
        which is not "A", "B" or "C".
    """
    if which not in ("A", "B", "C"):
        raise ValueError(f"tilemm.distributed.shard: which={which!r}; 'A', 'B' or 'C'")
    i, j = grid.position(rank)
    return x[block(x.shape[0], grid.rows, i), block(x.shape[1], grid.cols, j)]


def matmul(a, b, grid: Grid | None = None, group=None, out_dtype=None, *, depth: int = summa.DEPTH,
           panel: int | None = None, both_ways: bool = True, link_ctas: int | None = None, placements=None,
           kernel: str | None = None, **params):
    """This rank's block of C = A @ B over the ranks of a process group (SUMMA; the module's docstring).

    Parameters
    ----------
    a, b : torch.Tensor
        This rank's blocks of A and B, on the CUDA device the rank uses with NCCL, or on the CPU
        with gloo; or two DTensors on one DeviceMesh (then no grid): tilemm.spread.dtensor's product,
        each rank's local product by tilemm (kernel, params), the communication DTensor's, the
        result a DTensor placed as torch.matmul places it.
    grid : Grid
        The ranks' grid: its size is the group's.
    group : torch.distributed.ProcessGroup, optional
        None: the default group.
    out_dtype : str or torch.dtype, optional
        Compute in and return this dtype, as for `tilemm.matmul`.
    depth : int
        Panels (SUMMA) or ring steps in flight ahead of the product running (the same on every rank).
    panel : int, optional
        K columns a SUMMA panel (cut also where a rank's K block ends); default from the shape and
        the link (tilemm.spread.summa.panel_width).
    both_ways : bool
        A ring sends half of each block each way round (False: all of it one way).
    link_ctas : int, optional
        The most thread blocks NCCL may take for the transfers (its max_ctas, on process groups of
        the same ranks made once): SMs left to the products. None: NCCL's choice.
    placements : list, optional
        DTensors only: redistribute the result to these (e.g. [Shard(0)] after Shard(1) x
        Shard(0): a reduce-scatter of the partial sums).
    kernel, **params
        The rung (and its parameters) each rank's local products run.

    Returns
    -------
    torch.Tensor
        This rank's block of C, on a's device (a DTensor for DTensor operands).

    Raises
    ------
    RuntimeError
        torch.distributed is not initialized.
    TypeError
        DTensors with a pipeline knob (depth, panel, both_ways, link_ctas); an out_dtype the sums
        do not take (``DTYPES``).
    ValueError
        A grid whose size is not the group's, a rank outside the group; or, on every rank alike,
        before any product (all blocks are checked together with one all-gather): blocks that are
        not torch matrices of one dtype (``DTYPES``) on the CPU or one CUDA GPU, blocks that
        require grad (no autograd graph is recorded), a block that does not fit the layout,
        dtypes or devices that differ, knobs or out_dtype that differ between ranks.
    """
    import torch
    import torch.distributed as dist
    if _is_dtensor(a) or _is_dtensor(b):
        if grid is not None or group is not None:
            raise ValueError("tilemm.distributed.matmul: DTensors carry their mesh; pass no grid or group")
        knobs = {"depth": depth, "panel": panel, "both_ways": both_ways, "link_ctas": link_ctas}
        if any(value != matmul.__kwdefaults__[name] for name, value in knobs.items()):    # (the signature's)
            raise TypeError("tilemm.distributed.matmul: depth=, panel=, both_ways= and link_ctas= set a grid's "
                            "pipeline; DTensors move their data by DTensor's own collectives")
        from tilemm.spread import dtensor
        return dtensor.matmul(a, b, kernel=kernel, out_dtype=out_dtype, placements=placements, **params)
    if grid is None:
        raise TypeError("tilemm.distributed.matmul: a grid of ranks is needed for plain tensors "
                        "(tilemm.distributed.Grid(rows, cols)); DTensors carry their mesh instead")
    if placements is not None or kernel is not None or params:
        raise TypeError("tilemm.distributed.matmul: placements=, kernel= and kernel parameters are taken for "
                        "DTensors; blocks of a grid run tilemm's default rungs")
    if not isinstance(grid, Grid):       # (the uninitialized process group was named first)
        raise TypeError(f"tilemm.distributed.matmul: grid={grid!r}; give a tilemm.distributed.Grid(rows, cols)")
    if not dist.is_initialized():
        raise RuntimeError("tilemm.distributed.matmul: call torch.distributed.init_process_group first")
    try:
        knobs, problem = _checked_knobs(depth, panel, both_ways, link_ctas), None
    except ValueError as e:          # raised after the gather, on every rank: none waits for this one
        knobs, problem = (depth, panel, both_ways, link_ctas), str(e).removeprefix("tilemm.distributed.matmul: ")
    # the blocks' GPU current for the whole product (a rank that never called torch.cuda.set_device,
    # LOCAL_RANK's tensors on cuda:1 with cuda:0 current): NCCL's collectives of Python objects and
    # every allocation follow the current device
    on_gpu = isinstance(a, torch.Tensor) and a.is_cuda
    with torch.cuda.device(a.device) if on_gpu else contextlib.nullcontext():
        return _matmul(a, b, grid, group, out_dtype, knobs, problem)


def _is_dtensor(x) -> bool:
    tensor_module = sys.modules.get("torch.distributed.tensor")
    return tensor_module is not None and isinstance(x, tensor_module.DTensor)


def _checked_knobs(depth, panel, both_ways, link_ctas) -> tuple:
    def positive(name, value, optional):
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"tilemm.distributed.matmul: {name}={value!r}; a positive int"
                             + (" or None" if optional else ""))
    positive("depth", depth, False)
    positive("panel", panel, True)
    positive("link_ctas", link_ctas, True)
    if not isinstance(both_ways, bool):
        raise ValueError(f"tilemm.distributed.matmul: both_ways={both_ways!r}; True or False")
    return depth, panel, both_ways, link_ctas


def _matmul(a, b, grid: Grid, group, out_dtype, knobs: tuple, problem: str | None):
    import torch
    import torch.distributed as dist
    world = dist.get_world_size(group)
    me = dist.get_rank(group)
    if me < 0:
        raise ValueError("tilemm.distributed.matmul: this rank is not in the group")
    if grid.size != world:
        problem = problem or f"a {grid.rows} x {grid.cols} grid is {grid.size} ranks; the group has {world}"
    m, n, k = _checked_layout(a, b, grid, group, me, knobs + (str(out_dtype), (grid.rows, grid.cols)), problem)
    depth, panel, both_ways, link_ctas = knobs
    i, j = grid.position(me)
    rows_i, cols_j = block(m, grid.rows, i), block(n, grid.cols, j)
    result = result_dtype(dtype_name(a.dtype), dtype_name(b.dtype))
    if out_dtype is not None:        # (the same on every rank, as the gathered knobs showed: the same error)
        result = contract.checked_out_dtype(out_dtype, result)
        if result not in DTYPES:
            raise TypeError(f"tilemm.distributed.matmul: out_dtype={out_dtype!r}; the sums take {', '.join(DTYPES)}")
    sums = "float32" if result in SIXTEEN_BIT else result
    acc = torch.empty((rows_i.stop - rows_i.start, cols_j.stop - cols_j.start), dtype=getattr(torch, sums),
                      device=a.device)
    if k == 0:                                  # an empty sum
        return acc.zero_().to(getattr(torch, result))
    links = _link_group(group, link_ctas, a)
    if grid.rows == 1 or grid.cols == 1:        # one operand is split along K alone: pass it round
        p = grid.size
        summa.ring(a, b, acc, k, grid.rows == 1, me, p, _global((me - 1) % p, group), _global((me + 1) % p, group),
                   links, sums, depth, both_ways)
    else:
        row_groups, col_groups = _groups(grid, group, link_ctas, a)
        # from the largest block, not this rank's: every rank must cut K alike
        width = panel or summa.panel_width(k, -(-m // grid.rows), -(-n // grid.cols), acc.element_size(),
                                           a.element_size())
        panels = [p + (p[2] == j, p[4] == i) for p in _panels(k, grid, width)]
        summa.summa(a, b, acc, panels, row_groups[i], col_groups[j],
                    lambda p: _global(grid.rank(i, panels[p][2]), group),
                    lambda p: _global(grid.rank(panels[p][4], j), group), sums, depth)
    return acc if sums == result else acc.to(getattr(torch, result))


def _panels(k: int, grid: Grid, width: int | None = None) -> list[tuple]:
    """(k0, k1, A's owner column, its first K index, B's owner row, its first K index) for each panel
    of K: cut wherever A's K blocks (grid.cols of them) or B's (grid.rows) end, and every `width`
    columns within; empty panels left out."""
    a_blocks, b_blocks = blocks(k, grid.cols), blocks(k, grid.rows)
    cuts = {0, k} | {s.stop for s in a_blocks} | {s.stop for s in b_blocks}
    if width:
        for start, stop in zip(sorted(cuts), sorted(cuts)[1:]):
            cuts |= set(range(start, stop, width))
    cuts = sorted(cuts)
    panels = []
    for k0, k1 in zip(cuts, cuts[1:]):
        if k1 > k0:
            ca = next(c for c, s in enumerate(a_blocks) if s.start <= k0 < s.stop)
            rb = next(r for r, s in enumerate(b_blocks) if s.start <= k0 < s.stop)
            panels.append((k0, k1, ca, a_blocks[ca].start, rb, b_blocks[rb].start))
    return panels


_GROUPS: dict = {}


def _groups(grid: Grid, group, link_ctas, like):
    """([row i's group], [column j's group]) of a 2-D grid, made once per grid, group and link_ctas:
    every rank takes part in making every group, in one order, as torch.distributed requires."""
    import torch.distributed as dist
    key = (grid, group, link_ctas)
    if key not in _GROUPS:
        ranks = [_global(r, group) for r in range(grid.size)]
        options = _nccl_options(link_ctas, like)
        rows = [dist.new_group([ranks[grid.rank(i, j)] for j in range(grid.cols)], pg_options=options)
                for i in range(grid.rows)]
        cols = [dist.new_group([ranks[grid.rank(i, j)] for i in range(grid.rows)], pg_options=options)
                for j in range(grid.cols)]
        _GROUPS[key] = rows, cols
    return _GROUPS[key]


def _link_group(group, link_ctas, like):
    """The group the ring's transfers go on: `group` itself, or (link_ctas on NCCL) a group of the same
    ranks whose NCCL communicator takes at most link_ctas thread blocks, made once."""
    import torch.distributed as dist
    options = _nccl_options(link_ctas, like)
    if options is None:
        return group
    key = ("ring", group, link_ctas)
    if key not in _GROUPS:
        ranks = [_global(r, group) for r in range(dist.get_world_size(group))]
        _GROUPS[key] = dist.new_group(ranks, pg_options=options)
    return _GROUPS[key]


def _nccl_options(link_ctas, like):
    """NCCL's options for groups of at most link_ctas thread blocks (None: no limit, or not NCCL)."""
    import torch.distributed as dist
    if link_ctas is None or not like.is_cuda or not hasattr(dist, "ProcessGroupNCCL"):
        return None
    options = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)
    options.config.max_ctas = link_ctas
    options.config.min_ctas = 1
    return options


def _global(rank: int, group) -> int:
    import torch.distributed as dist
    return rank if group is None else dist.get_global_rank(group, rank)


def _checked_layout(a, b, grid: Grid, group, me: int, knobs: tuple = (), problem: str | None = None
                    ) -> tuple[int, int, int]:
    """(M, N, K) from every rank's blocks, gathered once; the same ValueError on every rank if they
    do not form the layout, or if any rank has a problem (its arguments' or its blocks', in words)."""
    import torch.distributed as dist
    problem = problem or _block_problem(a, b)
    if problem:
        mine = ("problem", problem)
    else:
        mine = (tuple(a.shape), tuple(b.shape), str(a.dtype), str(b.dtype), a.device.type, b.device.type, knobs)
    every = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, mine, group=group)
    problems = [(r, s[1]) for r, s in enumerate(every) if len(s) == 2]
    if len(problems) == len(every) and len({text for _, text in problems}) == 1:
        raise ValueError(f"tilemm.distributed.matmul: {problems[0][1]} (every rank)")
    if problems:
        raise ValueError("tilemm.distributed.matmul: " + "; ".join(f"rank {r}: {text}" for r, text in problems))
    kinds = {s[2:6] for s in every}
    if len(kinds) > 1:
        raise ValueError(f"tilemm.distributed.matmul: the ranks' blocks differ in dtype or device: {sorted(kinds)}")
    settings = {s[6] for s in every}
    if len(settings) > 1:
        raise ValueError("tilemm.distributed.matmul: the ranks' knobs (depth, panel, both_ways, link_ctas, out_dtype, "
                         "grid) differ: "
                         f"{sorted(settings, key=repr)}")
    # the global sizes: A's rows down grid column 0, A's columns along grid row 0, B's columns along row 0
    m = sum(every[grid.rank(i, 0)][0][0] for i in range(grid.rows))
    k = sum(every[grid.rank(0, j)][0][1] for j in range(grid.cols))
    n = sum(every[grid.rank(0, j)][1][1] for j in range(grid.cols))
    bad = []
    for r, s in enumerate(every):
        i, j = grid.position(r)
        want_a = (_length(block(m, grid.rows, i)), _length(block(k, grid.cols, j)))
        want_b = (_length(block(k, grid.rows, i)), _length(block(n, grid.cols, j)))
        if s[0] != want_a or s[1] != want_b:
            bad.append(f"rank {r} (grid {i}, {j}) holds A {s[0]} and B {s[1]}, the layout gives A {want_a} "
                       f"and B {want_b}")
    if bad:
        raise ValueError(f"tilemm.distributed.matmul: the blocks do not form the {grid.rows} x {grid.cols} block "
                         f"layout of a ({m} x {k}) @ ({k} x {n}) product: " + "; ".join(bad))
    return m, n, k


def _block_problem(a, b) -> str | None:
    """What makes this rank's blocks unfit for any product, in words (None: nothing): gathered with
    the other ranks' so that every rank raises, before any transfer."""
    import torch
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return f"blocks {type(a).__name__}, {type(b).__name__} are not torch tensors"
    if a.ndim != 2 or b.ndim != 2:
        return f"blocks {tuple(a.shape)}, {tuple(b.shape)} are not matrices"
    if a.device != b.device or a.device.type not in ("cpu", "cuda"):
        return f"blocks on {a.device} and {b.device}: both on the CPU (gloo) or both on the rank's CUDA GPU (NCCL)"
    if a.dtype != b.dtype:
        return f"blocks of {a.dtype} and {b.dtype}: torch tensors of one dtype, as torch.matmul takes"
    if dtype_name(a.dtype) not in DTYPES:
        return f"blocks of {a.dtype}: the sums take {', '.join(DTYPES)}"
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return ("blocks that require grad: tilemm.distributed.matmul records no autograd graph (detach them, or "
                "call it under torch.no_grad())")
    return None


def _length(s: slice) -> int:
    return s.stop - s.start


__all__ = ["Grid", "block", "blocks", "shard", "matmul"]
