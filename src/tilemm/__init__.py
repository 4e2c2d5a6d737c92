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
import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING

from tilemm.system import compat  # noqa: F401  (before anything imports numba.cuda)
from tilemm.api import KernelUnavailable, matmul, plan, release_memory
from tilemm.ladder.registry import Kernel, get as kernel, kernels
from tilemm.warmup import warmup     # the function: tilemm.warmup(...); its module is sys.modules["tilemm.warmup"]

if TYPE_CHECKING:     # what the names below are (the docs' reference reads them here); at run time each
    # loads where first named (LAZY, PUBLIC_MODULES): a NumPy call never needs them
    from tilemm.products_api import grouped_matmul, linear, matmul_epilogue, scaled_matmul
    from tilemm.spread import distributed, multi, outofcore  # (over torch.distributed ranks; several GPUs; past GPU memory)

__version__ = "0.1.0"
__all__ = ["matmul", "linear", "matmul_epilogue", "plan", "scaled_matmul", "grouped_matmul", "kernels", "kernel",
           "Kernel", "KernelUnavailable", "release_memory", "warmup", "nn", "torch_ops", "__version__"]

# The public modules that import torch: loaded when first named, as tilemm.nn
TORCH_MODULES = {"nn": "tilemm.nn", "torch_ops": "tilemm.torch_ops", "dtensor": "tilemm.dtensor"}

# The public functions a NumPy call never needs: their modules load when first named
# (tilemm.linear, ...), so that importing tilemm stays cheap.
LAZY = {"linear": "tilemm.products_api", "matmul_epilogue": "tilemm.products_api",
        "scaled_matmul": "tilemm.products_api", "grouped_matmul": "tilemm.products_api"}


def public_module(name: str, where: str):
    """tilemm.<name> for the module `where` (tilemm.multi is tilemm.spread.multi), so that both
    `tilemm.multi` and `import tilemm.multi` work: the module itself where it is loaded already,
    else one that loads at its first use (importlib's LazyLoader)."""
    module = sys.modules.get(where)
    if module is None:
        spec = importlib.util.find_spec(where)
        spec.loader = importlib.util.LazyLoader(spec.loader)
        module = sys.modules[where] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        parent, _, child = where.rpartition(".")
        setattr(importlib.import_module(parent), child, module)     # as an import would: tilemm.spread.multi
    sys.modules[f"{__name__}.{name}"] = module
    return module


# Public module names kept where their modules now live in a layer's folder: tilemm.distributed
# (over torch.distributed ranks), tilemm.multi (several GPUs) and tilemm.outofcore (past GPU memory).
PUBLIC_MODULES = {"distributed": "tilemm.spread.distributed", "multi": "tilemm.spread.multi",
                  "outofcore": "tilemm.spread.outofcore"}
globals().update((name, public_module(name, where)) for name, where in PUBLIC_MODULES.items())


def __getattr__(name):
    if name in TORCH_MODULES:
        module = importlib.import_module(TORCH_MODULES[name])
        sys.modules.setdefault(f"{__name__}.{name}", module)
        return module
    if name in LAZY:
        value = globals()[name] = getattr(importlib.import_module(LAZY[name]), name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
