"""`tilemm check`: every runnable kernel x dtype x awkward shape against the reference."""
from __future__ import annotations

from dataclasses import dataclass

from tilemm.system import compat
from tilemm import api
from tilemm.numerics import arrays
from tilemm.ladder import registry
from tilemm.numerics.accuracy import compare_on_device
from tilemm.numerics.data import operands
from tilemm.numerics.dtypes import INTS, compute_dtype

# 1, primes, ragged past every tile, K much larger than M and N, an empty product.
SHAPES = [(1, 1, 1), (17, 33, 9), (40, 7, 65), (3, 2, 300), (67, 70, 33), (5, 6, 0)]
DTYPES = ["int8", "uint8", "int16", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]
LAYOUTS = ["nn", "tn", "nt", "ss"]


@dataclass
class Outcome:
    kernel: str
    dtype: str
    shape: tuple
    layout: str
    ok: bool
    worst: float
    message: str


def run(kernel_names=None, dtypes=None, shapes=None, on_device: bool = True):
    """Yield an Outcome per (kernel, dtype, shape, layout) that the kernel claims and can run here."""
    for kernel in registry.kernels():
        if kernel_names and kernel.name not in kernel_names:
            continue
        if kernel.available() is not None:
            continue
        for dtype in dtypes or DTYPES:
            if compute_dtype(dtype, kernel.dtypes) is None:
                continue
            for i, (m, n, k) in enumerate(shapes or SHAPES):
                layout = LAYOUTS[i % len(LAYOUTS)]
                a, b = operands(i, m, n, k, dtype, layout)
                da, db = a, b
                # device copies where there is a GPU; under the CUDA simulator or Triton's
                # interpreter the host arrays go in (tilemm runs them there itself)
                if kernel.device == "cuda" and on_device and not compat.emulated(kernel.backend):
                    da, db = arrays.to_device(a, dtype), arrays.to_device(b, dtype)
                c = api.plan(da, db, kernel=kernel.name).execute(poison=True)
                v = compare_on_device(c, a, b, dtype)
                yield Outcome(kernel.name, dtype, (m, n, k), layout, v.ok, v.worst if dtype not in INTS else 0.0,
                              v.message)
