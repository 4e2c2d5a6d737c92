"""tilemm.scaled_matmul's product: float8 matrices with per-tensor or row-wise scales (torch._scaled_mm's
contract), on the `scaled-fp8` program (row-wise scales applied to the float32 sums as C is
written, at the per-tensor product's cost); block scales go to tilemm.products.block_scaled.
Arguments are checked here, before any kernel runs; the public function (tilemm.products_api)
sends calls that record a gradient or that torch.compile traces to tilemm.torch.ops first."""
from __future__ import annotations

import functools
import numbers

from tilemm.products import block_scaled, scaled_common as scaled_out, scaled_host
from tilemm.system import compat
from tilemm.engine import streams
from tilemm.engine import availability
from tilemm.ladder import registry
from tilemm.plans.plan import JIT_LOCK, KernelUnavailable
from tilemm.numerics import arrays

def scaled_matmul(a, b, scale_a=1.0, scale_b=1.0, *, out_dtype="bfloat16", fast_accum: bool = False, out=None,
                  stream=None, library=None, **params):
    """tilemm.scaled_matmul's product (its docstring: tilemm.products_api), recording no gradient
    and not traced by torch.compile (tilemm.products_api decides those first)."""
    if fast_accum is not True and fast_accum is not False:    # (1, "yes", None: once taken as bool(fast_accum))
        raise TypeError(f"scaled_matmul: fast_accum must be True or False, as torch._scaled_mm's use_fast_accum; "
                        f"got {type(fast_accum).__name__} {fast_accum!r}")
    if scaled_host.takes(a, b):        # torch CPU tensors, no interpreter: the host's product
        return scaled_host.scaled_matmul(a, b, scale_a, scale_b, out_dtype, out, stream, library, params)
    vector = block_scaled.vector_scales(scale_a, scale_b)
    if vector and not row_wise_shapes(a, b, scale_a, scale_b):     # block scales (or wrong ones): their rung
        return block_scaled.block_scaled_matmul(a, b, scale_a, scale_b, out_dtype=out_dtype, fast_accum=fast_accum,
                                                out=out, stream=stream, library=library, **params)
    if library is not None:
        block_scaled.check_library(library)
        if library:
            raise ValueError("scaled_matmul: library=True asks for torch's block-scaled _scaled_mm, which takes block "
                             "scales; per-tensor and row-wise scales run tilemm's fp8 program")
    row_wise = vector          # (scales of more than one element left here are of row-wise shapes)
    key = None
    if out is None and stream is None:
        key = (scaled_out.replay_key((a, b, scale_a, scale_b), out_dtype, fast_accum, params) if row_wise
               else replay_key(a, b, out_dtype, fast_accum, params))
    replay = _REPLAYS.get(key) if key is not None else None
    if replay is not None:
        import torch
        c = replay(a, b, scale_a, scale_b) if row_wise else replay(a, b, *_scales(scale_a, scale_b, a.device, torch))
        if c is not None:
            return c
    try:
        import torch
    except ImportError:
        raise KernelUnavailable("scaled_matmul needs PyTorch (pip install 'tilemm[triton]')") from None
    scaled_out.check_operands(a, b, torch)
    if row_wise:      # float32 tensors on the operands' device (the shapes are row-wise_shapes')
        block_scaled.scale_kind(scale_a, scale_b, a.device, a.shape[0], b.shape[1], a.shape[1], torch)
    result_dtype = scaled_out.result_dtype_of(out_dtype, torch)
    queue = streams.handle_of(stream) if stream is not None else None
    scaled_fp8 = registry.program("scaled-fp8")
    config = scaled_fp8.resolve(_config(params), bool(fast_accum), a.shape[0], b.shape[1], a.shape[1])
    _check_device(a.device, torch)
    reason = availability.dimension_limit(a.shape[0], b.shape[1], a.shape[1]) or scaled_fp8.limits(
        config["block_m"], config["block_n"], config["block_k"], config["num_stages"], compat.triton_interpreter(),
        bool(fast_accum), config["warp_specialized"], config["cluster"], row_wise)
    if reason:
        raise KernelUnavailable(f"scaled_matmul: {reason}")
    device = scaled_out.device_name(a.device)
    if queue is None:
        queue = streams.caller_stream("torch", device)
    m, k = a.shape
    n = b.shape[1]
    scaled_out.check_out(out, m, n, result_dtype, a.device)
    with scaled_out.on_stream(queue, device):
        scales = (scale_a, scale_b) if row_wise else _scales(scale_a, scale_b, a.device, torch)
        c = torch.empty((m, n), dtype=result_dtype, device=a.device) if out is None else out
        if m and n:
            if k == 0:
                c.zero_()                                      # an empty sum
            else:
                with JIT_LOCK:
                    launched = scaled_fp8.launch(a, b, c, *scales, bool(fast_accum), row_wise=row_wise, **config)
                if key is not None and launched is not None:
                    scaled_out.remember_replay(_REPLAYS, key, launched, (a, b, *scales, c))
    return c


def row_wise_shapes(a, b, scale_a, scale_b) -> bool:
    """Whether the scales have row-wise shapes, scale_a (M, 1) and scale_b (1, N), for matrices a
    (M, K) and b (K, N) (the rest is checked later); False for anything else."""
    shape_a, shape_b = getattr(a, "shape", ()), getattr(b, "shape", ())
    if len(shape_a) != 2 or len(shape_b) != 2:
        return False
    given = (tuple(getattr(scale_a, "shape", ())), tuple(getattr(scale_b, "shape", ())))
    return given == block_scaled.PROGRAM.scale_shapes(shape_a[0], shape_b[1], shape_a[1])["row-wise"]


def records_gradient(a, b, scale_a, scale_b) -> bool:
    """Whether autograd records this call: an input requires grad, grad mode on (its node's backward
    then raises, as torch._scaled_mm's: tilemm.torch.ops.not_differentiable)."""
    torch = next(filter(None, map(arrays.torch_of, (a, b, scale_a, scale_b))), None)   # (traced: no sys.modules)
    return (torch is not None and torch.is_grad_enabled()
            and any(getattr(x, "requires_grad", False) for x in (a, b, scale_a, scale_b)))


def under_transform(*tensors) -> bool:
    """Whether torch.func's transforms (vmap, grad, jacrev, ...) are active and one of tensors is
    a torch tensor: its batched or wrapped tensors have no memory a launch could read."""
    torch = next(filter(None, map(arrays.torch_of, tensors)), None)      # (traced: no sys.modules)
    return torch is not None and torch._C._are_functorch_transforms_active()


# Repeated calls' launches (tilemm.engine.replay), by the call's key (scaled_common.replay_key)
_REPLAYS: dict = {}


def release_replays() -> None:
    """Forget the repeated calls' replays (tilemm.release_memory), row-wise and block scales' too."""
    _REPLAYS.clear()
    block_scaled.release_replays()


def replay_key(a, b, out_dtype, fast_accum, params):
    """What a call's plan depends on, for CUDA torch tensors a and b; else None (no replay)."""
    return scaled_out.replay_key((a, b), out_dtype, fast_accum, params)


def _config(params: dict) -> dict:
    DEFAULTS = registry.program("scaled-fp8").DEFAULTS
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"scaled_matmul: unknown parameter(s) {', '.join(sorted(unknown))}; "
                        f"it takes {', '.join(DEFAULTS)}")
    config = {**DEFAULTS, **params}
    if not isinstance(config["stream_k"], bool):
        raise ValueError(f"scaled_matmul: stream_k={config['stream_k']!r} must be True or False")
    if config["warp_specialized"] is not None and not isinstance(config["warp_specialized"], bool):
        raise ValueError(f"scaled_matmul: warp_specialized={config['warp_specialized']!r} must be None, True or False")
    if not isinstance(config["cluster"], bool):
        raise ValueError(f"scaled_matmul: cluster={config['cluster']!r} must be True or False")
    for name, value in config.items():
        if (value is None and name in ("block_m", "block_n")) or name in ("stream_k", "warp_specialized", "cluster"):
            continue
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            raise ValueError(f"scaled_matmul: {name}={value!r} must be a positive integer")
        config[name] = int(value)          # (a NumPy integer as Python's, as Triton takes it)
    for name in ("block_m", "block_n", "block_k"):
        if config[name] is not None and (config[name] < 16 or config[name] & (config[name] - 1)):
            raise ValueError(f"scaled_matmul: {name}={config[name]} must be a power of two, 16 or more")
    return config


def _check_device(device, torch) -> None:
    problem = _device_problem(device.type, device.index, compat.triton_interpreter())
    if problem:
        error, message = problem
        raise error(message.format(device=device))


@functools.lru_cache(maxsize=None)
def _device_problem(kind: str, index, interpreter: bool):
    """(exception, message) if float8 products can't run on this device, else None; the same
    answer for every call on a device, so it is worked out once (it is a fifth of a call's cost)."""
    import torch
    reason = availability.available()
    if reason:      # the Triton rungs' reason, less its advice to pass another kernel: scaled_matmul takes none
        return KernelUnavailable, f"scaled_matmul {reason.partition(', or a CPU rung')[0]}"
    if interpreter:
        if kind != "cpu":
            return ValueError, "scaled_matmul: under TRITON_INTERPRET=1 the operands must be CPU tensors"
        return None
    if kind != "cuda":
        return ValueError, "scaled_matmul: the operands are on {device}; move them to a CUDA GPU"
    if torch.cuda.get_device_capability(torch.device(kind, index)) < (8, 9):
        return KernelUnavailable, "scaled_matmul needs float8 tensor cores (compute capability 8.9 or newer)"
    return None


def _scales(scale_a, scale_b, device, torch) -> tuple:
    """(scale_a, scale_b) as _scale makes each."""
    return (scaled_out.scale_tensor(scale_a, "scale_a", device, torch),
            scaled_out.scale_tensor(scale_b, "scale_b", device, torch))
