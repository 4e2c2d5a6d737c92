"""The pipelines of tilemm.distributed: SUMMA on a 2-D grid of ranks, a ring on a 1-D one, with every
transfer in flight while earlier products run.

Three queues a rank (on a GPU; on the CPU everything runs in order and the events do nothing):

- the caller's current stream issues: it fills the send buffers and waits, on the GPU, for the
  product that last read a buffer before the buffer takes the next panel (never the host);
- NCCL's stream moves the panels: each transfer waits only for what the caller's stream queued
  before it (NCCL's rule), so transfers run ``depth`` panels ahead of the products;
- a compute stream of its own runs the products, each waiting (``work.wait()`` under it: a GPU
  wait) for its panel's transfer. The caller's stream waits for it at the end.

Panels live in ``depth + 1`` buffers a kind, reused in turn: ``depth`` panels in flight while one
multiplies.
"""
from __future__ import annotations

import contextlib
import math

from tilemm.spread.panels import accumulate, block, blocks

# Defaults of the knobs (tilemm.distributed.matmul's keywords) and what they are chosen from
DEPTH = 2                   # panels in flight ahead of the product running
SMALLEST_PANEL = 1024       # K columns: a thinner panel's product is too short for its launch and transfer
LINK_BYTES_PER_S = 350e9    # one GPU's NVLink, one way (H100 / H200: 18 links of 25 GB/s, less overheads)
HBM_BYTES_PER_S = 4.0e12    # what a running sum's extra pass costs: read and write the float32 block


class Lanes:
    """The caller's stream, a compute stream and the events between them, on the device of
    `like`; on the CPU they do nothing."""

    _compute: dict = {}                           # one compute stream a device, made once

    def __init__(self, like):
        import torch
        self.cuda = like.is_cuda
        self.caller = self.compute = None
        if self.cuda:
            self.caller = torch.cuda.current_stream(like.device)
            if like.device not in Lanes._compute:
                Lanes._compute[like.device] = torch.cuda.Stream(like.device)
            self.compute = Lanes._compute[like.device]
            self.compute.wait_stream(self.caller)  # the operands the caller queued

    def computing(self):
        import torch
        return torch.cuda.stream(self.compute) if self.cuda else contextlib.nullcontext()

    def done(self):
        """An event on the compute stream now (None on the CPU)."""
        if not self.cuda:
            return None
        import torch
        event = torch.cuda.Event()
        event.record(self.compute)
        return event

    def caller_waits(self, event):
        if event is not None:
            self.caller.wait_event(event)

    def finish(self):
        if self.cuda:
            self.caller.wait_stream(self.compute)


def panel_width(k: int, rows: int, cols: int, sum_bytes: int, item_bytes: int) -> int:
    """K columns a SUMMA panel: the first panel's transfer has nothing to hide behind (it grows
    with the width), and each panel adds a pass over the float32 running sum (it shrinks with the
    width); the width that makes the two equal, (first transfer) = (rows + cols) * width * item /
    LINK, (sum passes) = k / width * rows * cols * 2 * sum_bytes / HBM, at least SMALLEST_PANEL."""
    if rows + cols == 0 or k == 0:
        return max(k, 1)
    per_column = (rows + cols) * item_bytes / LINK_BYTES_PER_S
    passes = k * rows * cols * 2 * sum_bytes / HBM_BYTES_PER_S
    width = math.sqrt(passes / per_column) if per_column else k
    return max(SMALLEST_PANEL, -(-int(width) // 256) * 256)


def summa(a, b, acc, panels, row_group, col_group, a_source, b_source, sums: str, depth: int) -> None:
    """acc += A_row @ B_col: panel p = (k0, k1, A's owner column, its first K, B's owner row, its
    first K, whether this rank owns A's panel, whether it owns B's); broadcast from a_source(p) along
    the grid row, b_source(p) along the column."""
    import torch
    import torch.distributed as dist
    lanes = Lanes(a)
    slots = depth + 1
    widest = max(p[1] - p[0] for p in panels)
    a_buffers = [torch.empty((a.shape[0] * widest,), dtype=a.dtype, device=a.device) for _ in range(slots)]
    b_buffers = [torch.empty((widest * b.shape[1],), dtype=b.dtype, device=b.device) for _ in range(slots)]
    freed = [None] * slots                       # the product that last read the slot
    issued = {}

    def issue(p):
        k0, k1, _, a_off, _, b_off, own_a, own_b = panels[p]
        slot = p % slots
        lanes.caller_waits(freed[slot])
        a_panel = a_buffers[slot][:a.shape[0] * (k1 - k0)].view(a.shape[0], k1 - k0)
        b_panel = b_buffers[slot][:(k1 - k0) * b.shape[1]].view(k1 - k0, b.shape[1])
        works = []
        if own_a:
            a_panel.copy_(a[:, k0 - a_off:k1 - a_off])
        if a_panel.numel():                      # the grid row's ranks all hold these rows: all skip an empty one
            works.append(dist.broadcast(a_panel, src=a_source(p), group=row_group, async_op=True))
        if own_b:
            b_panel.copy_(b[k0 - b_off:k1 - b_off, :])
        if b_panel.numel():
            works.append(dist.broadcast(b_panel, src=b_source(p), group=col_group, async_op=True))
        issued[p] = a_panel, b_panel, works

    for p in range(min(depth, len(panels))):
        issue(p)
    for p in range(len(panels)):
        a_panel, b_panel, works = issued.pop(p)
        with lanes.computing():
            for work in works:
                work.wait()                      # on the GPU: the compute stream waits for the transfer
            if acc.numel():
                accumulate(acc, a_panel, b_panel, sums, first=p == 0)
            freed[p % slots] = lanes.done()
        if p + depth < len(panels):
            issue(p + depth)
    lanes.finish()


def ring(a, b, acc, k: int, along_a: bool, me: int, size: int, before: int, after: int, group, sums: str,
         depth: int, both_ways: bool) -> None:
    """acc += A_row @ B_col on a 1 x P grid (along_a: A's K blocks go round) or a P x 1 one (B's), `me` of
    `size` ranks in ring order; `before` and `after` are the neighbours' global ranks.

    Each rank starts on the block it holds. With both_ways the travelling block is cut in two along
    its other dimension (A's rows, B's columns: each half feeds its own part of acc, no extra sums):
    the first half goes to the rank before and the second to the rank after, so each step moves
    half as much each way over both directions of the links. Step s multiplies the first half of
    block me + s and the second half of block me - s."""
    import torch
    import torch.distributed as dist
    lanes = Lanes(a)
    k_blocks = blocks(k, size)
    moving = a if along_a else b
    cut = moving.shape[0] if along_a else moving.shape[1]      # the dimension the halves split
    halves = [block(cut, 2, h) for h in range(2)] if both_ways else [slice(0, cut)]
    ways = [(before, after, +1), (after, before, -1)][:len(halves)]    # (send to, receive from, block step)
    slots = depth + 1                            # step s + depth + 1 is received into step s's slot once s is done

    def piece_of(x, h):
        return x[halves[h]] if along_a else x[:, halves[h]]

    def shape(t, h):
        width = k_blocks[t].stop - k_blocks[t].start
        part = halves[h].stop - halves[h].start
        return (part, width) if along_a else (width, part)

    # buffers: per half, `slots` of the widest block; step s's piece of half h is in slot s % slots
    widest = max(s.stop - s.start for s in k_blocks)
    buffers = [[torch.empty((_length(halves[h]) * widest,), dtype=moving.dtype, device=moving.device)
                for _ in range(slots if size > 1 else 0)] for h in range(len(halves))]
    own = [piece_of(moving, h) for h in range(len(halves))]
    sendable = [x if x.is_contiguous() else x.contiguous() for x in own]   # (B's column halves: a copy)
    held = {(0, h): sendable[h] for h in range(len(halves))}
    freed = [None] * slots
    sent = {}                                   # step -> works that read that step's pieces
    waited = set()                              # gloo's works the host has waited for (once each)
    received = {}                               # step -> works that fill them

    def block_at(step, h):
        return (me + ways[h][2] * step) % size

    def issue(step):
        """Receive step's pieces (sending step - 1's on)."""
        slot = step % slots
        lanes.caller_waits(freed[slot])
        for work in sent.pop(step - slots, []):     # the slot's last pieces have left
            _caller_wait(lanes, work, waited)
        for work in received.get(step - 1, []):     # what is sent on must be in
            _caller_wait(lanes, work, waited)
        ops = []
        for h, (to, source, _) in enumerate(ways):
            outgoing = held[(step - 1, h)]
            incoming = buffers[h][slot][:math.prod(shape(block_at(step, h), h))].view(shape(block_at(step, h), h))
            held[(step, h)] = incoming
            if outgoing.numel():                    # both ends know the sizes: empty pieces skip
                ops.append(dist.P2POp(dist.isend, outgoing, to, group))
            if incoming.numel():
                ops.append(dist.P2POp(dist.irecv, incoming, source, group))
        works = dist.batch_isend_irecv(ops) if ops else []
        sent[step - 1] = received[step] = works

    for step in range(1, min(depth, size - 1) + 1):
        issue(step)
    for step in range(size):
        with lanes.computing():
            for work in received.get(step, []):
                if lanes.cuda:
                    work.wait()
                else:
                    _caller_wait(lanes, work, waited)
            for h in range(len(halves)):
                t = block_at(step, h)
                piece = own[h] if step == 0 else held[(step, h)]
                if along_a:
                    target, a_part, b_part = acc[halves[h]], piece, b[k_blocks[t]]
                else:
                    target, a_part, b_part = acc[:, halves[h]], a[:, k_blocks[t]], piece
                if target.numel():
                    accumulate(target, a_part, b_part, sums, first=step == 0)
            freed[step % slots] = lanes.done()
        for h in range(len(halves)):
            held.pop((step - 1, h), None)
        if step + depth + 1 < size:
            issue(step + depth + 1)
    for works in sent.values():                   # the last sends are done before their buffers go
        for work in works:
            _caller_wait(lanes, work, waited)
    lanes.finish()


def _caller_wait(lanes: Lanes, work, waited: set) -> None:
    """work done before what the caller's stream queues next: on the GPU a stream wait; on the CPU the
    host waits, once a work (gloo's point-to-point works wait for ever the second time)."""
    if lanes.cuda:
        import torch
        with torch.cuda.stream(lanes.caller):
            work.wait()
    elif id(work) not in waited:
        work.wait()
        waited.add(id(work))


def _length(s: slice) -> int:
    return s.stop - s.start
