"""tensorcore-f32's B written in panels of columns on a second stream while the product of the
panels before runs (copy_panels): when it pays, where the panels fall, and the two streams."""
from __future__ import annotations

from tilemm.engine import launches

# The product's multiply-adds a panel from which copying B in panels pays (copy_panels=None),
# and the most panels: 4 ran faster than 2 at 4096³ and than 8 at 8192³
PANEL_WORK = 2**34
MAX_PANELS = 4
# B's K-major copy over the TF32 product's time at M = 4096 (ncu at 4096³: 42.5 µs against 406 µs);
# the copy goes as K N and the product as M K N, so the share goes as 1 / M
COPY_SHARE_4096 = 0.105


def panel_bounds(n: int, panels: int, block_n: int) -> list[tuple[int, int]]:
    """[(n0, n1), ...]: B's columns in `panels` panels of whole tiles of C (the last narrower)."""
    width = -(-n // panels // block_n) * block_n
    return [(n0, min(n0 + width, n)) for n0 in range(0, n, width)]


def panels_pay(m: int, n: int, k: int, block_m: int, block_n: int, sms: int) -> int:
    """How many column panels TF32 copies B K-major in (copy_panels=None). In rounds of the SMs
    (a round: one tile a program), the product copying first takes R(1) (1 + share) and in P
    panels sum R(panel) + share R(1) / P (only the first panel's copy is waited for; each panel
    ends in a round of its own); the P that takes least, up to one panel a PANEL_WORK
    multiply-adds and MAX_PANELS: each panel costs launches of CPU time, which its product must
    outlast for the copies to stay hidden. The rounds decide, as measured against cuBLAS TF32:
    panels too narrow to fill the SMs (8 at 4096³: half the SMs idle) or that add a round (3 at
    5000³: 7 rounds become 8) lose to copying first."""
    def rounds(columns):
        return -(-(-(-m // block_m) * -(-columns // block_n)) // sms)
    share = COPY_SHARE_4096 * 4096 / m
    whole = rounds(n)

    def time(panels):
        return sum(rounds(n1 - n0) for n0, n1 in panel_bounds(n, panels, block_n)) + share * whole / panels
    most = max(1, min(MAX_PANELS, m * n * k // PANEL_WORK))
    return min(range(1, most + 1), key=time)


def overlapped(copies: list, products: list, buffers: list, c):
    """A launcher without arguments running each copy on a side stream and each product, once its
    copy is done, on a stream of the highest priority (so that the SMs take the products' programs
    before the copies'); both streams start from the calling stream's work so far, and the calling
    stream waits for the products. buffers: the copies' targets, kept from reuse until both
    streams are done with them. Off the GPU (Triton's interpreter), in turn."""
    import torch
    if not c.is_cuda:
        return lambda: [step() for pair in zip(copies, products) for step in pair]
    side, first = launches.side_stream(c.device), launches.side_stream(c.device, priority=True)
    ready = [torch.cuda.Event() for _ in copies]
    for buffer in buffers:        # used on the two streams: not handed out again before their work is done
        buffer.record_stream(side)
        buffer.record_stream(first)

    def go():
        caller = torch.cuda.current_stream(c.device)
        side.wait_stream(caller)  # A's parts, B itself and C are written on the calling stream
        first.wait_stream(caller)
        with torch.cuda.stream(side):
            for copy, event in zip(copies, ready):
                copy()
                event.record(side)
        with torch.cuda.stream(first):
            for product, event in zip(products, ready):
                first.wait_event(event)
                product()
        caller.wait_stream(first)
    return go
