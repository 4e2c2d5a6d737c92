"""The tiling one level up: C = A @ B over the ranks of a torch.distributed process group.

The ranks form a ROWS x COLS grid (rank r sits at row r // COLS, column r % COLS). Each holds one
block of each matrix in the 2-D block layout: A (M x K) and C (M x N) cut into ROWS row blocks, B
(K x N) into ROWS row blocks too, and A's K, B's N and C's N into COLS column blocks; the cuts
are as even as can be (``block``: the first ``n % parts`` blocks one longer), so any M, N, K works.

SUMMA (van de Geijn and Watts, 1997): K is walked in panels, cut where either A's or B's K blocks
end. For each panel the rank of grid row i that holds it broadcasts A's panel along row i, the
rank of grid column j that holds it broadcasts B's panel along column j, and every rank adds
A_panel @ B_panel to its C block with tilemm's own rungs. The next panel's broadcasts are in flight
while this one multiplies (``async_op``: NCCL moves them on its own stream). A 1 x P or P x 1 grid
is a 1-D ring instead: the operand split along K alone (A on 1 x P, B on P x 1) goes round, each
rank starting on the block it holds and passing it on while it multiplies.

    torchrun --nproc-per-node 2 my_program.py     # init_process_group("nccl"), then:
    grid = tilemm.distributed.Grid(1, 2)
    a_mine = tilemm.distributed.shard(a, grid, rank, "A")   # or build your block directly
    c_mine = tilemm.distributed.matmul(a_mine, b_mine, grid)

Sums: 16-bit floats are summed in float32 across panels and rounded once; float32 and float64 in
their own type; integers wrap (sums modulo 2^w are exact in any order).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from . import contract
from .dtypes import dtype_name, result_dtype
from .panels import SIXTEEN_BIT, accumulate, block, blocks



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
    ValueError
        rows or cols under 1.
    """
    rows: int
    cols: int

    def __post_init__(self):
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


def matmul(a, b, grid: Grid, group=None, out_dtype=None):
    """This rank's block of C = A @ B over the ranks of a process group (SUMMA; the module's docstring).

    Parameters
    ----------
    a, b : torch.Tensor
        This rank's blocks of A and B, on the CUDA device the rank uses with NCCL, or on the CPU
        with gloo.
    grid : Grid
        The ranks' grid: its size is the group's.
    group : torch.distributed.ProcessGroup, optional
        None: the default group.
    out_dtype : str or torch.dtype, optional
        Compute in and return this dtype, as for `tilemm.matmul`.

    Returns
    -------
    torch.Tensor
        This rank's block of C, on a's device.

    Raises
    ------
    RuntimeError
        torch.distributed is not initialized.
    ValueError
        A grid whose size is not the group's; or, on every rank alike, before any product (all
        blocks are checked together with one all-gather): a block that does not fit the layout,
        dtypes or devices that differ.
    """
    import torch
    import torch.distributed as dist
    if not dist.is_initialized():
        raise RuntimeError("tilemm.distributed.matmul: call torch.distributed.init_process_group first")
    # the blocks' GPU current for the whole product (a rank that never called torch.cuda.set_device,
    # LOCAL_RANK's tensors on cuda:1 with cuda:0 current): NCCL's collectives of Python objects and
    # every allocation follow the current device
    on_gpu = isinstance(a, torch.Tensor) and a.is_cuda
    with torch.cuda.device(a.device) if on_gpu else contextlib.nullcontext():
        return _matmul(a, b, grid, group, out_dtype)


def _matmul(a, b, grid: Grid, group, out_dtype):
    import torch
    import torch.distributed as dist
    world = dist.get_world_size(group)
    if grid.size != world:
        raise ValueError(f"tilemm.distributed.matmul: a {grid.rows} x {grid.cols} grid is {grid.size} ranks; "
                         f"the group has {world}")
    me = dist.get_rank(group)
    m, n, k = _checked_layout(a, b, grid, group, me)
    i, j = grid.position(me)
    rows_i, cols_j = block(m, grid.rows, i), block(n, grid.cols, j)
    result = result_dtype(dtype_name(a.dtype), dtype_name(b.dtype))
    if out_dtype is not None:
        result = contract.checked_out_dtype(out_dtype, result)
    sums = "float32" if result in SIXTEEN_BIT else result
    acc = torch.empty((rows_i.stop - rows_i.start, cols_j.stop - cols_j.start), dtype=getattr(torch, sums),
                      device=a.device)
    if k == 0:                                  # an empty sum
        return acc.zero_().to(getattr(torch, result))
    if grid.rows == 1 or grid.cols == 1:        # one operand is split along K alone: pass it round
        _ring(a, b, acc, grid, group, k, sums)
    else:
        _summa(a, b, acc, grid, group, i, j, k, sums)
    return acc if sums == result else acc.to(getattr(torch, result))


def _summa(a, b, acc, grid: Grid, group, i: int, j: int, k: int, sums: str) -> None:
    """acc += A_row_i @ B_col_j on a 2-D grid: each K panel broadcast along grid row i (A's part)
    and grid column j (B's), the next panel's broadcasts in flight while this one multiplies."""
    import torch
    import torch.distributed as dist
    row_groups, col_groups = _groups(grid, group)
    row_group, col_group = row_groups[i], col_groups[j]
    panels = _panels(k, grid)

    def start(p):
        """Broadcasts of panel p: (A panel, B panel, works to wait for)."""
        k0, k1, owner_col, a_off, owner_row, b_off = p
        works = []
        if owner_col == j:
            a_panel = a[:, k0 - a_off:k1 - a_off].contiguous()
        else:
            a_panel = torch.empty((a.shape[0], k1 - k0), dtype=a.dtype, device=a.device)
        if a_panel.numel():                     # row i's ranks all hold rows_i: all skip an empty panel
            works.append(dist.broadcast(a_panel, src=_global(grid.rank(i, owner_col), group), group=row_group,
                                        async_op=True))
        if owner_row == i:
            b_panel = b[k0 - b_off:k1 - b_off, :].contiguous()
        else:
            b_panel = torch.empty((k1 - k0, b.shape[1]), dtype=b.dtype, device=b.device)
        if b_panel.numel():                     # likewise column j's
            works.append(dist.broadcast(b_panel, src=_global(grid.rank(owner_row, j), group), group=col_group,
                                        async_op=True))
        return a_panel, b_panel, works

    pending = start(panels[0])
    for p in range(len(panels)):
        a_panel, b_panel, works = pending
        if p + 1 < len(panels):
            pending = start(panels[p + 1])     # in flight while this panel multiplies
        for work in works:
            work.wait()
        if acc.numel():
            accumulate(acc, a_panel, b_panel, sums, first=p == 0)


def _ring(a, b, acc, grid: Grid, group, k: int, sums: str) -> None:
    """acc += A_row @ B_col on a 1 x P grid (A's K blocks passed round) or a P x 1 one (B's):
    each rank starts on the block it holds, and while it multiplies one block it sends that block
    to the rank before it and receives the next from the rank after it."""
    import torch
    import torch.distributed as dist
    me = dist.get_rank(group)
    p = grid.size
    k_blocks = blocks(k, p)
    along_k_of_a = grid.rows == 1                          # 1 x P: A's columns are K blocks
    current = (a if along_k_of_a else b).contiguous()
    before, after = _global((me - 1) % p, group), _global((me + 1) % p, group)
    for step in range(p):
        mine = (me + step) % p                              # the K block `current` holds
        requests = []
        if step + 1 < p:
            width = k_blocks[(mine + 1) % p]
            shape = (a.shape[0], width.stop - width.start) if along_k_of_a else (width.stop - width.start, b.shape[1])
            incoming = torch.empty(shape, dtype=current.dtype, device=current.device)
            ops = []
            if current.numel():                             # both ends know the sizes: empty blocks skip
                ops.append(dist.P2POp(dist.isend, current, before, group))
            if incoming.numel():
                ops.append(dist.P2POp(dist.irecv, incoming, after, group))
            requests = dist.batch_isend_irecv(ops) if ops else []
        if acc.numel():
            rows = k_blocks[mine]
            if along_k_of_a:
                accumulate(acc, current, b[rows], sums, first=step == 0)
            else:
                accumulate(acc, a[:, rows], current, sums, first=step == 0)
        for request in requests:
            request.wait()
        if step + 1 < p:
            current = incoming


def _panels(k: int, grid: Grid) -> list[tuple]:
    """(k0, k1, A's owner column, its first K index, B's owner row, its first K index) for each panel
    of K: cut wherever A's K blocks (grid.cols of them) or B's (grid.rows) end; empty panels left out."""
    a_blocks, b_blocks = blocks(k, grid.cols), blocks(k, grid.rows)
    cuts = sorted({0, k} | {s.stop for s in a_blocks} | {s.stop for s in b_blocks})
    panels = []
    for k0, k1 in zip(cuts, cuts[1:]):
        if k1 > k0:
            ca = next(c for c, s in enumerate(a_blocks) if s.start <= k0 < s.stop)
            rb = next(r for r, s in enumerate(b_blocks) if s.start <= k0 < s.stop)
            panels.append((k0, k1, ca, a_blocks[ca].start, rb, b_blocks[rb].start))
    return panels


_GROUPS: dict = {}


def _groups(grid: Grid, group):
    """([row i's group], [column j's group]) of a 2-D grid, made once per grid and group: every rank
    takes part in making every group, in one order, as torch.distributed requires."""
    import torch.distributed as dist
    key = (grid, group)
    if key not in _GROUPS:
        ranks = [_global(r, group) for r in range(grid.size)]
        rows = [dist.new_group([ranks[grid.rank(i, j)] for j in range(grid.cols)]) for i in range(grid.rows)]
        cols = [dist.new_group([ranks[grid.rank(i, j)] for i in range(grid.rows)]) for j in range(grid.cols)]
        _GROUPS[key] = rows, cols
    return _GROUPS[key]


def _global(rank: int, group) -> int:
    import torch.distributed as dist
    return rank if group is None else dist.get_global_rank(group, rank)


def _checked_layout(a, b, grid: Grid, group, me: int) -> tuple[int, int, int]:
    """(M, N, K) from every rank's blocks, gathered once; the same ValueError on every rank if they
    do not form the layout."""
    import torch
    import torch.distributed as dist
    mine = None
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        mine = ("not torch tensors", f"{type(a).__name__}, {type(b).__name__}")
    elif a.ndim != 2 or b.ndim != 2:
        mine = ("not matrices", f"{tuple(a.shape)}, {tuple(b.shape)}")
    else:
        mine = (tuple(a.shape), tuple(b.shape), str(a.dtype), str(b.dtype), a.device.type, b.device.type)
    every = [None] * grid.size
    dist.all_gather_object(every, mine, group=group)
    problems = [f"rank {r}: blocks {s[1]} are {s[0]}" for r, s in enumerate(every) if len(s) == 2]
    if problems:
        raise ValueError("tilemm.distributed.matmul: " + "; ".join(problems))
    kinds = {s[2:] for s in every}
    if len(kinds) > 1:
        raise ValueError(f"tilemm.distributed.matmul: the ranks' blocks differ in dtype or device: {sorted(kinds)}")
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


def _length(s: slice) -> int:
    return s.stop - s.start


__all__ = ["Grid", "block", "blocks", "shard", "matmul"]
