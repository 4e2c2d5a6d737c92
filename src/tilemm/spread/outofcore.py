"""Products larger than GPU memory: the seeds' tiling one level up, host memory to the GPU.

C (M x N) is cut into blocks of BLOCK_M x BLOCK_N and K into chunks of BLOCK_K, sized from the
device's free memory (or ``memory_limit``) so that two A panels, two B panels, the block's running
sum and two result blocks fit, and shaped for the product to end first (plan_blocks). The panels
of the next step are copied host -> device on a copy stream while this step multiplies (pinned
operands with contiguous rows as one 2-D copy a panel, others through pinned staging buffers: a
host copy that can run asynchronously), a panel already on the device is not copied again (with K
whole, block row i's A panel serves every block of the row), and each finished block goes device
-> host on a third stream while the next one multiplies. Products by the library
(tilemm.spread.panels.product for K in one pass, tilemm.spread.panels.accumulate for a split K: float32 sums for
16-bit floats).

    c = tilemm.outofcore.matmul(a, b)                  # NumPy or torch CPU tensors in, host C out
    tilemm.outofcore.matmul(a, b, out=c, memory_limit=8 << 30, progress=True)

With no GPU (or device="cpu") the same code runs on the CPU, which is how the tests run it with a
small memory_limit.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from tilemm.numerics.arrays import torch_needs_copy
from tilemm.numerics.dtypes import dtype_name, result_dtype
from tilemm.spread.outofcore_args import (DTYPES, checked_device, checked_limit, checked_out, host_tensor,  # noqa: F401
                                         may_overlap)
from tilemm.spread.panels import SIXTEEN_BIT, accumulate, product

SMALLEST_BLOCK = 16
# The GPU's products against the host -> device copies, in flops per byte copied: a Hopper's
# in-core bf16 rate (the "in core" rows of benchmarks/results/h100/outofcore.jsonl) over what 2-D
# copies of pinned panels move through PCIe. Only the ratio matters, to weigh copies against work.
FLOP_PER_BYTE = 38000
HBM_PER_COPIED_BYTE = 150      # HBM's rate over the copies': a pass over device memory is that much cheaper
STEP_BYTES = 2 << 20           # a step's own cost (launches, events), in bytes copied meanwhile
# A pinned A panel is copied in up to ARRIVAL_PIECES pieces of ARRIVAL_ROWS rows or more, and the
# product of each piece's rows of C starts once that piece is in: the first panel (16 GB at 128000^3,
# with nothing to hide its copy behind) no longer holds the GPU idle until it is whole.
ARRIVAL_PIECES, ARRIVAL_ROWS = 8, 4096
HEADROOM = 0.85            # of the free memory: the library's workspace and the allocator's rounding


@dataclass(frozen=True)
class Blocks:
    block_m: int
    block_n: int
    block_k: int
    device_bytes: int

    def count(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        return -(-m // self.block_m), -(-n // self.block_n), -(-k // self.block_k)


def device_bytes(bm: int, bn: int, bk: int, in_bytes: int, sum_bytes: int, out_bytes: int) -> int:
    """Two A and two B panels, the running sum, two result blocks."""
    return 2 * (bm * bk + bk * bn) * in_bytes + bm * bn * sum_bytes + 2 * bm * bn * out_bytes


def plan_blocks(m: int, n: int, k: int, in_bytes: int, sum_bytes: int, out_bytes: int, limit: int) -> Blocks:
    """The blocks that fit `limit` bytes (each of M, N, K whole or halved, down to SMALLEST_BLOCK)
    whose product should end first: the first panels load before anything multiplies, then the
    rest of the copies overlap the products and a split K's running sums (FLOP_PER_BYTE,
    HBM_PER_COPIED_BYTE), and each step costs STEP_BYTES. With K whole a block row's A panel
    serves the whole row, so A crosses once and B once a block row (once, if it has two block
    columns: both stay resident); with K split each step loads both panels. Among plans as fast,
    the fewest steps. A ValueError says what even the smallest needs."""
    def sizes(d):
        d = max(d, 1)
        found = [d]
        while d > SMALLEST_BLOCK:
            d = -(-d // 2)
            found.append(d)
        return found
    best = None
    for bm in sizes(m):
        for bn in sizes(n):
            for bk in sizes(k):
                if device_bytes(bm, bn, bk, in_bytes, sum_bytes, out_bytes) > limit:
                    continue
                rows, cols, chunks = -(-m // bm), -(-n // bn), -(-k // bk)
                steps = rows * cols * chunks
                b_crossings = 1 if chunks == 1 and cols <= 2 else rows      # two B panels stay in their slots
                moved = (m * k * (cols if chunks > 1 else 1) + k * n * b_crossings) * in_bytes
                first = (bm * bk + bk * bn) * in_bytes          # loaded before anything multiplies
                sums = 2 * (chunks - 1) * rows * cols * bm * bn * sum_bytes   # a split K's running sums, in HBM
                work = 2 * m * n * k / FLOP_PER_BYTE + sums / HBM_PER_COPIED_BYTE
                cost = (first + max(work, moved - first) + steps * STEP_BYTES, steps)
                if best is None or cost < best[0]:
                    best = cost, Blocks(bm, bn, bk, device_bytes(bm, bn, bk, in_bytes, sum_bytes, out_bytes))
    if best is None:
        bm, bn, bk = sizes(m)[-1], sizes(n)[-1], sizes(k)[-1]
        raise ValueError(f"tilemm.outofcore: even {bm} x {bn} blocks of C with K in chunks of {bk} need "
                         f"{device_bytes(bm, bn, bk, in_bytes, sum_bytes, out_bytes)} bytes of device memory "
                         f"(two A and two B panels, the sum, two result blocks); {limit} are available")
    return best[1]


def matmul(a, b, out=None, *, memory_limit: int | None = None, device=None, progress: bool = False):
    """C = A @ B for host matrices however large, through the GPU a panel at a time.

    Parameters
    ----------
    a, b : numpy.ndarray or torch.Tensor
        2-D host operands (NumPy arrays or torch CPU tensors).
    out : numpy.ndarray or torch.Tensor, optional
        A host array of the result's shape and dtype to write into.
    memory_limit : int, optional
        Bytes of device memory to plan for; None: 85% of what is free.
    device : str, optional
        ``"cuda"``, ``"cuda:N"`` or ``"cpu"``; None: cuda if present.
    progress : bool, default False
        Show the panels' progress.

    Returns
    -------
    numpy.ndarray or torch.Tensor
        out, or a new host array of NumPy's result dtype (a torch CPU tensor for bfloat16 or
        torch operands).

    Raises
    ------
    TypeError
        An operand that is not a NumPy array or torch tensor, or of a dtype it does not take; a
        memory_limit that is not a number.
    ValueError
        Operands on a GPU, not 2-D, or whose shapes do not multiply; a bad out (read-only, or
        elements sharing memory) or device.
    KernelUnavailable
        device="cuda" where torch sees no GPU.
    """
    import torch
    a_t, b_t = host_tensor(a, "0"), host_tensor(b, "1")
    (m, k), (k2, n) = a_t.shape, b_t.shape
    if k != k2:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature "
                         f"(n?,k),(k,m?)->(n?,m?) (size {k2} is different from {k}); shapes {tuple(a_t.shape)} and "
                         f"{tuple(b_t.shape)}")
    result = result_dtype(dtype_name(a_t.dtype), dtype_name(b_t.dtype))
    sums = "float32" if result in SIXTEEN_BIT else result
    as_numpy = isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and result != "bfloat16"
    c = checked_out(out, (m, n), result, as_numpy)
    dev, memory_limit = checked_device(device), checked_limit(memory_limit)
    if memory_limit is None:
        memory_limit = free_device_bytes(dev) if dev.type == "cuda" else 8 << 30
    itemsize = torch.empty((), dtype=getattr(torch, result)).element_size()
    plan = plan_blocks(m, n, k, itemsize, 4 if sums == "float32" else itemsize, itemsize, memory_limit)
    if isinstance(c, np.ndarray) and torch_needs_copy(c):   # an out torch can't view (out=c[::-1]):
        target, c_t = None, torch.empty((m, n), dtype=getattr(torch, result))   # a buffer, then NumPy's copy
    else:
        target = c_t = torch.from_numpy(c) if isinstance(c, np.ndarray) else c
        if m and n and k and (may_overlap(c_t, a_t) or may_overlap(c_t, b_t)):   # out is (a view of) an operand:
            c_t = torch.empty((m, n), dtype=c_t.dtype)          # its blocks would overwrite panels not yet read
    if m and n:
        if k == 0:
            c_t.zero_()
        else:
            with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():   # its events and streams
                _run(a_t.to(getattr(torch, result)) if dtype_name(a_t.dtype) != result else a_t,
                     b_t.to(getattr(torch, result)) if dtype_name(b_t.dtype) != result else b_t,
                     c_t, plan, dev, sums, progress)
    if target is None:
        np.copyto(c, c_t.numpy())
    elif c_t is not target:
        target.copy_(c_t)
    return c


def free_device_bytes(device=None) -> int:
    """What an out-of-core plan may use of the GPU's memory: HEADROOM (85%) of what is free now.

    Parameters
    ----------
    device : torch.device, str or int, optional
        The GPU; None: torch's current one.

    Returns
    -------
    int
        Bytes.
    """
    import torch
    return int(torch.cuda.mem_get_info(device)[0] * HEADROOM)


class Lanes:
    """A copy-in stream, a stream for products (the caller's, or with ``own_compute`` one of its
    own) and a copy-out stream on a GPU, with events between them; on the CPU everything runs in
    order and these do nothing."""

    def __init__(self, device, own_compute: bool = False):
        import torch
        self.cuda = device.type == "cuda"
        self.compute = self.copy_in = self.copy_out = None
        if self.cuda:
            self.compute = torch.cuda.Stream(device) if own_compute else torch.cuda.current_stream(device)
            self.copy_in, self.copy_out = torch.cuda.Stream(device), torch.cuda.Stream(device)

    def on(self, stream):
        import torch
        return torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def mark(self, stream):
        """An event recorded on stream now (None on the CPU)."""
        if not self.cuda:
            return None
        import torch
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def wait(self, stream, event):
        if self.cuda and event is not None:
            stream.wait_event(event)


def _run(a, b, c, plan: Blocks, device, sums: str, progress: bool):
    import torch
    m, k = a.shape
    n = b.shape[1]
    bm, bn, bk = plan.block_m, plan.block_n, plan.block_k
    lanes = Lanes(device)
    pinned = lanes.cuda
    # Pinned host operands with contiguous rows go to the device panel by panel as one 2-D DMA
    # each, and result blocks straight into a pinned C: no staging copy on the host, whose
    # memcpy (a B column panel is strided) set the pace otherwise.
    direct_in = pinned and all(x.is_pinned() and x.stride(1) == 1 for x in (a, b))
    direct_out = pinned and c.is_pinned() and c.stride(1) == 1
    dtype, sum_dtype = a.dtype, getattr(torch, sums)
    # device buffers: two slots for A panels, two for B panels, the sum, two result blocks
    a_dev = [torch.empty((bm, bk), dtype=dtype, device=device) for _ in range(2)]
    b_dev = [torch.empty((bk, bn), dtype=dtype, device=device) for _ in range(2)]
    whole_k = bk >= k
    acc = None if whole_k else torch.empty((bm, bn), dtype=sum_dtype, device=device)
    c_dev = [torch.empty((bm, bn), dtype=c.dtype, device=device) for _ in range(2)]
    staging = dict(a=[torch.empty((0 if direct_in else bm, bk), dtype=dtype, pin_memory=pinned) for _ in range(2)],
                   b=[torch.empty((0 if direct_in else bk, bn), dtype=dtype, pin_memory=pinned) for _ in range(2)],
                   c=[torch.empty((0 if direct_out else bm, bn), dtype=c.dtype, pin_memory=pinned) for _ in range(2)])
    held = dict(a=[None, None], b=[None, None])          # which panel each slot holds
    loaded = dict(a=[None, None], b=[None, None])        # [(rows so far, event)]: the slot's copy is on the device
    freed = dict(a=[None, None], b=[None, None])         # event: the last product reading the slot is done
    staged = dict(a=[None, None], b=[None, None], c=[None, None])   # event: a staging buffer's copy is done
    pending = [None, None]                               # (rows, cols, event) of a result block on its way out
    sent = [None, None]                                  # event: a result block's direct copy into C is done

    steps = [(i, j, kc) for i in range(-(-m // bm)) for j in range(-(-n // bn)) for kc in range(-(-k // bk))]

    def fetch(which, key, avoid):
        """The slot holding panel `key` of A or B, copied in now if no slot holds it (not into the
        slot `avoid`, which the current step reads)."""
        if key in held[which]:
            return held[which].index(key)
        slot = 1 - avoid if avoid is not None else 0
        i, kc = key if which == "a" else (key[1], key[0])
        rows = slice(i * bm, min(m, (i + 1) * bm)) if which == "a" else slice(kc * bk, min(k, (kc + 1) * bk))
        cols = slice(kc * bk, min(k, (kc + 1) * bk)) if which == "a" else slice(i * bn, min(n, (i + 1) * bn))
        source = (a if which == "a" else b)[rows, cols]
        r, q = source.shape
        dev = _part((a_dev if which == "a" else b_dev)[slot], r, q)
        if direct_in:
            pieces = max(1, min(ARRIVAL_PIECES, r // ARRIVAL_ROWS)) if which == "a" else 1
            bounds = [r * p // pieces for p in range(pieces + 1)]
            with lanes.on(lanes.copy_in):
                lanes.wait(lanes.copy_in, freed[which][slot])
                arrived = []
                for start, stop in zip(bounds, bounds[1:]):
                    copy_2d(dev[start:stop], source[start:stop], lanes.copy_in)
                    arrived.append((stop, lanes.mark(lanes.copy_in)))
                loaded[which][slot] = arrived
        else:
            host = _part(staging[which][slot], r, q)
            if staged[which][slot] is not None:
                staged[which][slot].synchronize()        # the staging buffer's last copy has left it
            host.copy_(source)
            with lanes.on(lanes.copy_in):
                lanes.wait(lanes.copy_in, freed[which][slot])
                dev.copy_(host, non_blocking=pinned)
                staged[which][slot] = lanes.mark(lanes.copy_in)
                loaded[which][slot] = [(r, staged[which][slot])]
        held[which][slot] = key
        return slot

    def drain(slot):
        """Write result block `slot`, once its copy to the host is done, into C."""
        if pending[slot] is not None:
            rows, cols, event = pending[slot]
            if event is not None:
                event.synchronize()
            c[rows, cols].copy_(_part(staging["c"][slot], rows.stop - rows.start, cols.stop - cols.start))
            pending[slot] = None

    def claim(slot):
        """Result buffer `slot` free for the next block: its last block is in C (staged) or on its way
        there (a direct copy the compute stream waits for)."""
        drain(slot)
        lanes.wait(lanes.compute, sent[slot])

    bar = _progress(len(steps)) if progress else contextlib.nullcontext()
    with bar as advance:
        a_slot = b_slot = None
        block_number = 0
        for i, j, kc in steps:
            a_slot = fetch("a", (i, kc), a_slot)
            b_slot = fetch("b", (kc, j), b_slot)
            rows = slice(i * bm, min(m, (i + 1) * bm))
            cols = slice(j * bn, min(n, (j + 1) * bn))
            ks = min(k, (kc + 1) * bk) - kc * bk
            r, q = rows.stop - rows.start, cols.stop - cols.start
            out = block_number % 2
            if kc == 0 and whole_k:                      # C's block written straight into its buffer
                claim(out)
            lanes.wait(lanes.compute, loaded["b"][b_slot][0][1])
            start = 0
            for stop, arrived in loaded["a"][a_slot]:   # rows of C as the rows of A they need arrive
                lanes.wait(lanes.compute, arrived)
                a_rows, b_panel = _part(a_dev[a_slot], r, ks)[start:stop], _part(b_dev[b_slot], ks, q)
                if whole_k:                              # one pass over K: sums rounded once, no running sum
                    product(_part(c_dev[out], r, q)[start:stop], a_rows, b_panel)
                else:
                    accumulate(_part(acc, r, q)[start:stop], a_rows, b_panel, sums, first=kc == 0)
                start = stop
            freed["a"][a_slot] = freed["b"][b_slot] = lanes.mark(lanes.compute)
            if (kc + 1) * bk >= k:                       # the block's last chunk: send it home
                if not whole_k:
                    claim(out)
                    _part(c_dev[out], r, q).copy_(_part(acc, r, q))   # rounded once (16-bit), on the compute stream
                done = lanes.mark(lanes.compute)
                with lanes.on(lanes.copy_out):
                    lanes.wait(lanes.copy_out, done)
                    if direct_out:
                        copy_2d(c[rows, cols], _part(c_dev[out], r, q), lanes.copy_out)
                        sent[out] = lanes.mark(lanes.copy_out)
                    else:
                        _part(staging["c"][out], r, q).copy_(_part(c_dev[out], r, q), non_blocking=pinned)
                        pending[out] = (rows, cols, lanes.mark(lanes.copy_out))
                block_number += 1
            if progress:
                advance()
        drain(0)
        drain(1)
        if direct_out:
            lanes.copy_out.synchronize()                 # C is the caller's when this returns


def copy_2d(dst, src, stream) -> None:
    """dst.copy_(src) as one 2-D copy queued on stream, between a device tensor and pinned host
    memory, both 2-D views with contiguous rows (a panel of a larger matrix: rows a stride apart).
    torch would first gather a strided host view into contiguous memory on the CPU."""
    from cuda.bindings import driver as cu
    params = cu.CUDA_MEMCPY2D()
    for side, t in (("src", src), ("dst", dst)):
        pitch = t.stride(0) * t.element_size() if t.shape[0] > 1 else t.shape[1] * t.element_size()
        setattr(params, side + "Pitch", pitch)
        if t.is_cuda:
            setattr(params, side + "MemoryType", cu.CUmemorytype.CU_MEMORYTYPE_DEVICE)
            setattr(params, side + "Device", t.data_ptr())
        else:
            setattr(params, side + "MemoryType", cu.CUmemorytype.CU_MEMORYTYPE_HOST)
            setattr(params, side + "Host", t.data_ptr())
    params.WidthInBytes = src.shape[1] * src.element_size()
    params.Height = src.shape[0]
    if params.WidthInBytes and params.Height:
        err, = cu.cuMemcpy2DAsync(params, cu.CUstream(stream.cuda_stream))
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"tilemm.outofcore: a 2-D copy of {tuple(src.shape)} failed: {err}")


def _part(buffer, rows: int, cols: int):
    """The first rows * cols elements of a buffer as a contiguous (rows, cols) matrix: an edge
    block's panel stays one contiguous copy."""
    return buffer.view(-1)[:rows * cols].view(rows, cols)


@contextlib.contextmanager
def _progress(total: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    with Progress(TextColumn("out of core"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()) as bar:
        task = bar.add_task("steps", total=total)
        yield lambda: bar.advance(task)
