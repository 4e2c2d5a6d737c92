"""Small integer constants kept on each device, for ops to take as tensors rather than Python
numbers: an op whose other operand is a tensor runs the kernel its tensor calls run already, so a
process's first call loads fewer kinds of kernels. Made at a device's first call and kept (with the
views a caller shapes them into); while a CUDA graph is captured, where no copy from the host may
run, filled on the device by the graph instead and not kept."""
from __future__ import annotations

from tilemm.engine import streams

KEPT: dict = {}          # (key, device) -> views(the values on the device)


def kept(key: tuple, values: tuple, device, views=lambda tensor: tensor):
    """views(values as an int64 tensor on the device), kept under (key, device) for the next call.
    values: nested tuples of integers, key naming them (and the views) among the callers'."""
    found = KEPT.get((key, str(device)))
    if found is None:
        found = views(on_device(values, device))
        if not streams.capturing():
            KEPT[(key, str(device))] = found
    return found


def on_device(values: tuple, device):
    """values as an int64 tensor on the device: copied from the host, or while a CUDA graph is
    captured, filled on the device an element at a time."""
    import torch
    host = torch.tensor(values, dtype=torch.int64)
    if not streams.capturing():
        return host.to(device)
    filled = torch.empty(host.shape, dtype=torch.int64, device=device)
    for i, value in enumerate(host.view(-1).tolist()):
        filled.view(-1)[i].fill_(value)         # a fill kernel (an item assignment copies from the host)
    return filled
