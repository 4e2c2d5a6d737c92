"""tilemm: tiled matrix multiplication on NVIDIA GPUs and the CPU, rung by rung.

    import tilemm
    c = tilemm.matmul(a, b)                        # NumPy, CuPy or torch in, same kind out
    c = tilemm.matmul(a, b, kernel="cpu-tiled", block_m=32)
    c = tilemm.scaled_matmul(a8, b8, scale_a, scale_b)  # float8 torch tensors, as torch._scaled_mm
    c = tilemm.grouped_matmul(x, w, offs)          # experts' products in one launch, as torch._grouped_mm
    tilemm.kernels()                               # the ladder
    tilemm.release_memory()                        # let go of what repeated calls keep on the GPU
    tilemm.warmup(dtypes=["float16", "int8"])      # compile ahead of time what calls will need
    tilemm.nn.swap_linears(model)                  # a torch model's Linears through tilemm (autograd, compile)
    y = tilemm.linear(x, w, b, activation="gelu")   # the product and its epilogue in one pass
    c = tilemm.matmul(a, b, devices=[0, 1, 2, 3])  # one product over several GPUs, from this process
"""
import sys

from tilemm.system import compat  # noqa: F401  (before anything imports numba.cuda)
from tilemm.api import KernelUnavailable, matmul, plan, release_memory
from tilemm.products_api import grouped_matmul, linear, matmul_epilogue, scaled_matmul
from tilemm.ladder.registry import Kernel, get as kernel, kernels
from tilemm.warmup import warmup     # the function: tilemm.warmup(...); its module is sys.modules["tilemm.warmup"]
from tilemm.spread import distributed, multi, outofcore  # noqa: E402  (over torch.distributed ranks; several GPUs; past GPU memory)

__version__ = "0.1.0"
__all__ = ["matmul", "linear", "matmul_epilogue", "plan", "scaled_matmul", "grouped_matmul", "kernels", "kernel",
           "Kernel", "KernelUnavailable", "release_memory", "warmup", "nn", "torch_ops", "__version__"]

# The public modules that import torch: loaded when first named, as tilemm.nn
TORCH_MODULES = {"nn": "tilemm.nn", "torch_ops": "tilemm.torch_ops", "dtensor": "tilemm.spread.dtensor"}

# Public module names kept where their modules now live in a layer's folder: tilemm.distributed,
# tilemm.multi and tilemm.outofcore (import tilemm.outofcore works too).
for _public in (distributed, multi, outofcore):
    sys.modules[f"{__name__}.{_public.__name__.rpartition('.')[2]}"] = _public
del _public


def __getattr__(name):
    if name in TORCH_MODULES:
        import importlib
        module = importlib.import_module(TORCH_MODULES[name])
        sys.modules.setdefault(f"{__name__}.{name}", module)
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
