"""What the float8 products (tilemm.scaled and tilemm.block_scaled) share around their programs:
out='s check, and the stream and device their C is made and written on."""
from __future__ import annotations

import contextlib

from . import streams


def check_out(out, m: int, n: int, result_dtype, device) -> None:
    """out is None or an (m, n) torch tensor of result_dtype on device (ValueError otherwise)."""
    import torch
    if out is not None and not (isinstance(out, torch.Tensor) and tuple(out.shape) == (m, n)
                                and out.dtype == result_dtype and out.device == device):
        raise ValueError(f"scaled_matmul: out must be a ({m}, {n}) tensor of {result_dtype} on {device}; got "
                         f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))} {getattr(out, 'dtype', '')} "
                         f"{getattr(out, 'device', '')}")


def device_name(device) -> str:
    """A torch device as the streams module names it: "cpu" or "cuda:N"."""
    return "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"


def on_stream(queue: int, device: str):
    """The call's stream (and its GPU) current while C is made and written; nothing on the CPU."""
    return streams.queued_on(queue, device, cupy_too=False) if device != "cpu" else contextlib.nullcontext()
