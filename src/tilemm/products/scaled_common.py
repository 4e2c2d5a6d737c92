"""What the float8 products (tilemm.products.scaled and tilemm.products.block_scaled) share around their programs:
the operands' checks, out='s check, the stream and device their C is made and written on, and the
keys and keeping of their repeated calls' replays."""
from __future__ import annotations

import contextlib
import numbers

from tilemm.engine import streams
from tilemm.numerics.arrays import check_torch_out_memory, torch_of
from tilemm.numerics.keys import typed_items
from tilemm.plans.cache import torch_tensors_key
from tilemm.numerics.dtypes import torch_dtype_name

FP8 = ("float8_e4m3fn", "float8_e5m2")
OUT_DTYPES = ("bfloat16", "float16", "float32")


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
    """What a call's launches depend on, for CUDA torch tensors (the operands, and the scales where
    they are tensors: tilemm.plans.cache.torch_tensors_key); else None (no replay), as while torch's
    autocast is on or a forward-mode AD level is open."""
    torch = torch_of(tensors[0])                  # (traced: no sys.modules)
    if torch is None or any(type(x) is not torch.Tensor for x in tensors) or not tensors[0].is_cuda:
        return None
    operands = torch_tensors_key(torch, tensors)
    if operands is None:
        return None
    try:
        key = (operands, str(out_dtype), bool(fast_accum), typed_items(params))
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


def result_dtype_of(out_dtype, torch):
    """out_dtype as the torch dtype of the ones scaled_matmul gives (TypeError otherwise)."""
    name = torch_dtype_name(out_dtype)
    if name not in OUT_DTYPES:
        raise TypeError(f"scaled_matmul: out_dtype={out_dtype!r}; choose one of {', '.join(OUT_DTYPES)}")
    return getattr(torch, name)


def scale_tensor(s, name: str, device, torch):
    """A one-element float32 tensor on the operands' device. A number's tensor is made once (a
    copy to the GPU costs more than the rest of a small call) and kept apart for scale_a and
    scale_b: a replay needs its inputs in memory of their own. Kept ones are never freed (a
    launch on another stream may still read one), so past SCALE_CACHE_SIZE numbers each call
    makes its own."""
    if isinstance(s, numbers.Real) and not isinstance(s, bool):
        key = (name, float(s), device)
        tensor = _SCALES.get(key)
        if tensor is None:
            tensor = torch.tensor([float(s)], dtype=torch.float32, device=device)
            if len(_SCALES) < SCALE_CACHE_SIZE:
                _SCALES[key] = tensor
        return tensor
    if isinstance(s, torch.Tensor) and s.numel() == 1 and s.dtype.is_floating_point:
        if s.device.type == "meta":       # (its copy to the operands' device failed: no data to copy)
            raise ValueError(f"scaled_matmul: {name} is a meta tensor; a scale needs a value, on the operands' device")
        if s.dtype == torch.float32 and s.device == device:
            return s           # read where it is (the program loads its one element): no view, no cast
        return s.reshape(1).to(device=device, dtype=torch.float32)
    raise ValueError(f"scaled_matmul: {name} must be a number or a one-element float tensor (per-tensor scales); "
                     f"got {type(s).__name__}{' of shape ' + str(tuple(s.shape)) if hasattr(s, 'shape') else ''}")


SCALE_CACHE_SIZE = 64
_SCALES: dict = {}         # (scale_a or scale_b, value, device) -> its one-element float32 tensor


def scaled_blocks(a, b, scale_a, scale_b, block: int) -> tuple:
    """a and b (float8, either of them stacked) in float32, each block times its scale: scale_a one
    a 1 x block run of a row of A (a.shape[:-1] + (K/block,)), scale_b one a block x block tile of
    B (b.shape[:-2] + (K/block, N/block)), K/block and N/block rounded up: the host's products."""
    k, n = b.shape[-2], b.shape[-1]
    a_scales = scale_a.repeat_interleave(block, -1)[..., :k]
    b_scales = scale_b.repeat_interleave(block, -2)[..., :k, :].repeat_interleave(block, -1)[..., :n]
    return a.float() * a_scales, b.float() * b_scales
