"""The launcher of tilemm's fused-epilogue program (epilogue_kernel.py) on torch tensors: its tiles
by dtype (configurations are data: EPILOGUE_CONFIGS), the grid, and the launch. The checks of the
operands are the caller's (tilemm.epilogue_args); this module only launches."""
from __future__ import annotations

import functools

import torch

from tilemm.system import compat

ACTIVATION_CODES = {None: 0, "identity": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}

# Tiles, warps and stages by the operands' dtype; benchmarks/fused_linear.py --quick times the
# candidates (CANDIDATE_CONFIGS) at MLP shapes on a GPU and prints the winner in this form.
EPILOGUE_CONFIGS = {
    "16-bit": dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3),   # fused_linear.py --quick, H200
    "float32": dict(block_m=64, block_n=64, block_k=32, group_m=8, num_warps=4, num_stages=3),
    "float64": dict(block_m=32, block_n=32, block_k=16, group_m=8, num_warps=4, num_stages=2),
}
CANDIDATE_CONFIGS = [dict(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=w, num_stages=s)
                     for bm, bn, bk, w, s in ((128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3),
                                             (128, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
                                             (256, 128, 64, 8, 3), (128, 128, 32, 4, 5), (64, 256, 32, 4, 4))]
CONFIG_KEYS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def dtype_group(dtype: torch.dtype) -> str:
    return "16-bit" if dtype in (torch.float16, torch.bfloat16) else str(dtype).removeprefix("torch.")


def config_for(dtype: torch.dtype, params: dict | None = None) -> dict:
    """The program's tiles for operands of this dtype: EPILOGUE_CONFIGS', any of them replaced by
    params (block_m=..., num_warps=...). ValueError for a name not a tile parameter or a tile
    that is not a power of two of 16 or more (tl.dot's smallest). The dict is shared: read it only."""
    try:
        return checked_config(dtype, tuple(sorted((params or {}).items())))
    except TypeError as e:
        if "unhashable" not in str(e):
            raise
        return checked_config.__wrapped__(dtype, tuple(sorted(params.items())))


@functools.lru_cache(maxsize=256)
def checked_config(dtype: torch.dtype, params: tuple) -> dict:
    config = dict(EPILOGUE_CONFIGS.get(dtype_group(dtype), EPILOGUE_CONFIGS["16-bit"]))
    for name, value in params:
        if name not in CONFIG_KEYS:
            raise TypeError(f"epilogue: unknown parameter {name!r}; the fused-epilogue program takes "
                            f"{', '.join(CONFIG_KEYS)}")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"epilogue: {name}={value!r}; a positive int")
        config[name] = value
    for name in ("block_m", "block_n", "block_k"):
        size = config[name]
        if size < 16 or size & (size - 1):
            raise ValueError(f"epilogue: {name}={size}; tiles are powers of two, 16 or more (tl.dot's smallest)")
    return config


def launch_epilogue(a, b, y, aux, bias, bias_over_m: bool, c, residual, activation, alpha: float, beta: float,
                    config: dict, wrap=None) -> None:
    """y = activation(alpha * a @ b + beta * c + bias) + residual, written into y (and the
    pre-activation into aux): 2-D torch tensors of one dtype on one device, bias 1-D (over y's
    columns, or its rows where bias_over_m), aux, bias, c, residual None where absent. wrap:
    torch.library.wrap_triton inside a triton_op (the compiled graph then holds the program), None
    to launch it directly (eager)."""
    from tilemm.engine.epilogue_kernel import matmul_epilogue_kernel    # Triton loads on first use
    if wrap is None and a.is_cuda and a.device.index != torch.cuda.current_device():
        with torch.cuda.device(a.device):      # Triton launches on the current GPU: the operands' for the call
            return launch_epilogue(a, b, y, aux, bias, bias_over_m, c, residual, activation, alpha, beta, config)
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    grid = (-(-m // config["block_m"]) * -(-n // config["block_n"]),)
    wide = {torch.float32: 1, torch.float64: 2}.get(a.dtype, 0)
    program = matmul_epilogue_kernel if wrap is None else wrap(matmul_epilogue_kernel)

    def strides(x):
        return (x.stride(0), x.stride(1)) if x is not None else (0, 0)

    program[grid](a, b, y, aux, bias, c, residual, m, n, k, *strides(a), *strides(b), *strides(y), *strides(aux),
                  bias.stride(0) if bias is not None else 0, *strides(c), *strides(residual),
                  float(alpha), float(beta), BIAS_OVER_M=bool(bias_over_m), ACTIVATION=ACTIVATION_CODES[activation],
                  WIDE=wide, UPCAST=compat.triton_interpreter() and wide == 0, EVEN_K=bool(k % config["block_k"] == 0),
                  BLOCK_M=config["block_m"],
                  BLOCK_N=config["block_n"], BLOCK_K=config["block_k"], GROUP_M=config["group_m"],
                  num_warps=config["num_warps"], num_stages=config["num_stages"])
