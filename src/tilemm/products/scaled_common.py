"""What the float8 products (tilemm.products.scaled and tilemm.products.block_scaled) share around their programs:
the operands' checks, out='s check, the stream and device their C is made and written on, and the
keys and keeping of their repeated calls' replays."""
from __future__ import annotations

import contextlib

from tilemm.engine import streams
from tilemm.numerics.arrays import check_torch_out_memory, torch_of
from tilemm.numerics.keys import typed_items
from tilemm.plans.cache import operand_key
from tilemm.numerics.dtypes import torch_dtype_name

FP8 = ("float8_e4m3fn", "float8_e5m2")


def check_operands(a, b, torch) -> None:
    """a (M, K) and b (K, N): float8 torch matrices on one device (TypeError, ValueError otherwise)."""
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"scaled_matmul: operand {name} is {type(x).__name__}; float8 data comes as torch "
                            f"tensors (NumPy has no float8 dtype)")
        dtype = torch_dtype_name(x.dtype)
        if dtype not in FP8:
            raise TypeError(f"scaled_matmul: operand {name} has dtype {dtype}; it multiplies {' and '.join(FP8)} "
                            f"(tilemm.matmul takes the other dtypes)")
        if x.ndim != 2:
            raise ValueError(f"scaled_matmul: operand {name} has shape {tuple(x.shape)}; it takes matrices (2-D)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not line up "
                         f"(a's {a.shape[1]} columns vs b's {b.shape[0]} rows)")
    if a.device != b.device:
        raise ValueError(f"scaled_matmul: a is on {a.device} and b on {b.device}; put both on one device")


def check_out(out, m: int, n: int, result_dtype, device) -> None:
    """out is None or an (m, n) torch tensor of result_dtype on device (ValueError otherwise)."""
    import torch
    if out is not None and not (isinstance(out, torch.Tensor) and tuple(out.shape) == (m, n)
                                and out.dtype == result_dtype and out.device == device):
        raise ValueError(f"scaled_matmul: out must be a ({m}, {n}) tensor of {result_dtype} on {device}; got "
                         f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))} {getattr(out, 'dtype', '')} "
                         f"{getattr(out, 'device', '')}")
    check_torch_out_memory("scaled_matmul", out)


def device_name(device) -> str:
    """A torch device as the streams module names it: "cpu" or "cuda:N"."""
    return "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"


def on_stream(queue: int, device: str):
    """The call's stream (and its GPU) current while C is made and written; nothing on the CPU."""
    return streams.queued_on(queue, device, cupy_too=False) if device != "cpu" else contextlib.nullcontext()


# Repeated calls' launches (tilemm.engine.replay) each float8 front keeps, by the call's key, as
# tilemm.matmul's plans are kept
REPLAY_CACHE_SIZE = 512


def replay_key(tensors: tuple, out_dtype, fast_accum, params: dict):
    """What a call's launches depend on, for CUDA torch tensors (tilemm.api's operand keys of the
    operands, and of the scales where they are tensors); else None (no replay)."""
    torch = torch_of(tensors[0])                  # (traced: no sys.modules)
    if torch is None or any(type(x) is not torch.Tensor for x in tensors) or not tensors[0].is_cuda:
        return None
    try:
        key = (*map(operand_key, tensors), str(out_dtype), bool(fast_accum), typed_items(params))
        hash(key)
    except TypeError:                      # a parameter of an unhashable value: checked on the usual path
        return None
    return key


def remember_replay(replays: dict, key, launched, operands: tuple) -> None:
    """Keep in `replays` the replay of a first call's launches (if they can be replayed) for key."""
    from tilemm.engine.replay import recorded
    replay = recorded(launched, operands)
    if replay is not None:
        if len(replays) >= REPLAY_CACHE_SIZE:
            replays.clear()
        replays[key] = replay
