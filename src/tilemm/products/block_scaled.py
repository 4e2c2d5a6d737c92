"""tilemm.scaled_matmul with DeepGEMM's block scales ((M, ceil(K/128)) for 1 x 128 blocks of A,
(ceil(K/128), ceil(N/128)) for 128 x 128 blocks of B), on the `tensorcore-block-scaled` rung, and
the check of every scale tensor's kind (scale_kind: row-wise ones, (M, 1) and (1, N), run on
tilemm.products.scaled's program). tilemm.products.scaled passes a call here when a scale is a
tensor of more than one element and the two are not row-wise; its arguments are checked here
before any work. Where this torch offers DeepGEMM's block scales in torch._scaled_mm (cuBLASLt,
Hopper) and the call is one it takes, the product is torch's (tilemm.products.block_scaled_torch:
faster than rung 16's program on most shapes measured); ``library`` forces either way. A call that
repeats an earlier one (the same shapes, strides, dtypes and parameters) replays its launches
(tilemm.engine.replay), or calls torch's product straight away: Triton's binding and the checks
are done once."""
from __future__ import annotations

from tilemm.system import compat
from tilemm.products import block_scaled_torch as torch_route, scaled_common as scaled_out
from tilemm.engine import streams
from tilemm.engine import availability
from tilemm.ladder import registry
from tilemm.plans.plan import JIT_LOCK, KernelUnavailable
from tilemm.numerics.dtypes import torch_dtype_name

PROGRAM = registry.program("block-scaled")    # rung 16: its checks and its launch (Triton loads at the launch)


def vector_scales(scale_a, scale_b) -> bool:
    """Whether a call's scales are row-wise or block scales (a tensor of more than one element)."""
    return any(hasattr(s, "numel") and hasattr(s, "shape") and s.numel() != 1 for s in (scale_a, scale_b))


def block_scaled_matmul(a, b, scale_a, scale_b, *, out_dtype="bfloat16", fast_accum: bool = False, out=None,
                        stream=None, library=None, **params):
    """``scaled_matmul``'s product with block scales (see its docstring); scales of any other
    shapes refused (a ValueError that names the shapes it takes). library: None, torch's
    block-scaled _scaled_mm where this torch offers it and takes the call, else rung 16's
    program; True: torch's or an error saying why not; False: rung 16's program."""
    key = (replay_key(a, b, scale_a, scale_b, out_dtype, fast_accum, params, library)
           if out is None and stream is None else None)
    c = replayed(key, a, b, scale_a, scale_b)
    if c is not None:
        return c
    import torch
    check_library(library)
    scaled_out.check_operands(a, b, torch)
    m, k = a.shape
    n = b.shape[1]
    if scale_kind(scale_a, scale_b, a.device, m, n, k, torch) != "block":
        raise ValueError("scaled_matmul: row-wise scales run on tilemm.products.scaled's program")
    result_dtype = scaled_out.result_dtype_of(out_dtype, torch)
    name = torch_dtype_name(result_dtype)
    if library is not False:
        if params:                   # unknown or bad ones named first, as rung 16's program names them
            PROGRAM.resolve(params, m, n)
        refusal = torch_route.call_refusal(a, b, name, fast_accum, params)
        unavailable = torch_route.device_refusal(a.device) if refusal is None else None
        if refusal is None and unavailable is None:
            scaled_out.check_out(out, m, n, result_dtype, a.device)
            if stream is not None:
                streams.handle_of(stream)          # a bad stream named before any work
            c = torch_route.product(a, b, scale_a, scale_b, out, stream)
            if key is not None:
                if len(_REPLAYS) >= scaled_out.REPLAY_CACHE_SIZE:
                    _REPLAYS.clear()
                _REPLAYS[key] = torch_route.repeated
            return c
        if library:
            if refusal is not None:
                raise ValueError(f"scaled_matmul: library=True asks for torch's block-scaled _scaled_mm, but {refusal}")
            raise KernelUnavailable(f"scaled_matmul: library=True asks for torch's block-scaled _scaled_mm, but "
                                    f"{unavailable}")
    config = PROGRAM.resolve(params, m, n)
    problem = device_problem(a.device) or availability.dimension_limit(m, n, k) or PROGRAM.limits(
        config, compat.triton_interpreter())
    if problem:
        raise problem if isinstance(problem, Exception) else KernelUnavailable(f"scaled_matmul: {problem}")
    scaled_out.check_out(out, m, n, result_dtype, a.device)
    device = scaled_out.device_name(a.device)
    queue = streams.handle_of(stream) if stream is not None else streams.caller_stream("torch", device)
    with scaled_out.on_stream(queue, device):
        c = torch.empty((m, n), dtype=result_dtype, device=a.device) if out is None else out
        if m and n:
            if k == 0:
                c.zero_()                                      # an empty sum
            else:
                with JIT_LOCK:
                    launched = PROGRAM.launch(a, b, c, scale_a, scale_b, **config)
                if key is not None and launched is not None:
                    scaled_out.remember_replay(_REPLAYS, key, launched, (a, b, scale_a, scale_b, c))
    return c


# Repeated calls' launches (tilemm.engine.replay), by the call's key (scaled_common.replay_key)
_REPLAYS: dict = {}


def release_replays() -> None:
    """Forget the repeated calls' replays (tilemm.release_memory, through tilemm.products.scaled)."""
    _REPLAYS.clear()


def repeated_call(a, b, scale_a, scale_b, out_dtype, fast_accum, library, params: dict):
    """The product of a call that repeats an earlier one with block scales (replay_key's key: the
    same shapes, strides, dtypes, device, parameters and library, no gradient recorded, no
    transform), by its replay or torch's product at once, with none of the checks and choices
    made again; else None. (For a call with no out and no stream, outside torch.compile.)"""
    if not _REPLAYS:
        return None
    return replayed(replay_key(a, b, scale_a, scale_b, out_dtype, fast_accum, params, library), a, b, scale_a, scale_b)


def replayed(key, a, b, scale_a, scale_b):
    """The product of key's replay (or torch's product) on these operands, or None: no key, no
    replay kept for it, or a replay that declines them (the usual path then decides)."""
    replay = _REPLAYS.get(key) if key is not None else None
    return None if replay is None else replay(a, b, scale_a, scale_b)


def replay_key(a, b, scale_a, scale_b, out_dtype, fast_accum, params, library=None):
    """What a call's launches (or torch's product) depend on, for CUDA torch tensors (operands
    and scales); else None."""
    key = scaled_out.replay_key((a, b, scale_a, scale_b), out_dtype, fast_accum, params)
    return key if key is None else (*key, library)


def check_library(library) -> None:
    """library is None, True or False (a ValueError otherwise)."""
    if library is not None and library is not True and library is not False:
        raise ValueError(f"scaled_matmul: library={library!r} must be None (torch's block-scaled product where it "
                         "runs and takes the call), True (torch's, or an error) or False (tilemm's program)")


def scale_kind(scale_a, scale_b, device, m: int, n: int, k: int, torch) -> str:
    """"row-wise" or "block", from the scales' shapes; a ValueError naming what is wrong otherwise."""
    shapes = PROGRAM.scale_shapes(m, n, k)
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(s, torch.Tensor):
            raise ValueError(f"scaled_matmul: {name} is {type(s).__name__} while the other scale is a tensor of "
                             f"several elements; per-tensor scales are one element each, and row-wise and block scales "
                             f"come as two float32 tensors of shapes {describe(shapes)}")
        if s.dtype != torch.float32:
            raise ValueError(f"scaled_matmul: {name} has dtype {str(s.dtype).removeprefix('torch.')}; row-wise and "
                             "block scales are float32")
        if s.device != device:
            raise ValueError(f"scaled_matmul: {name} is on {s.device} and the operands on {device}; put them on one "
                             "device")
    given = (tuple(scale_a.shape), tuple(scale_b.shape))
    for kind, wanted in shapes.items():
        if given == wanted:
            return kind
    raise ValueError(f"scaled_matmul: scales of shapes {given[0]} and {given[1]} for a ({m}, {k}) @ ({k}, {n}) "
                     f"product; it takes per-tensor scales (one element each) or {describe(shapes)}")


def describe(shapes: dict) -> str:
    return " or ".join(f"{kind} {a} and {b}" for kind, (a, b) in shapes.items())


def device_problem(device):
    """Why float8 products can't run on the operands' device (an exception to raise), or None."""
    reason = availability.available()
    if reason:
        return KernelUnavailable(f"scaled_matmul {reason.partition(', or a CPU rung')[0]}")
    if compat.triton_interpreter():
        return None if device.type == "cpu" else ValueError(
            "scaled_matmul: under TRITON_INTERPRET=1 the operands must be CPU tensors")
    if device.type != "cuda":
        return ValueError(f"scaled_matmul: the operands are on {device}; move them to a CUDA GPU")
    import torch
    if torch.cuda.get_device_capability(device) < (8, 9):
        return KernelUnavailable("scaled_matmul needs float8 tensor cores (compute capability 8.9 or newer)")
    return None
