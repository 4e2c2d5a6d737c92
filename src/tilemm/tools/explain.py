"""`tilemm explain`: what a rung does to memory, and what bounds its speed.

For a kernel and a problem: the launch (grid, block, threads and shared memory per block)
and the limits it meets; the global-memory traffic the kernel's model predicts against the
minimum (each input read once); the arithmetic intensity and the roofline bound on this GPU
(on a machine without one, a typical GPU's limits and peaks are assumed). For the numba-cuda rungs it also counts, in the CUDA simulator, every
global load a launch really makes at a small size, and sets the count beside the model.
With Nsight Compute installed, ``--ncu`` reads the DRAM bytes of a real launch.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np

from tilemm.system import machine
from tilemm.ladder import registry
from tilemm.ladder.simt import launch as simt_launch
from tilemm.ladder.registry import Problem

def explain(name: str, m: int, n: int, k: int, dtype: str = "float32", params: dict | None = None,
            simulate: int | None = 32, assume_gpu: str = "H100") -> dict:
    """The launch, traffic model and roofline of kernel `name` on an (m, k) @ (k, n) product.

    The limits and peaks are this machine's GPU's; where there is none, those of the GPU named by
    `assume_gpu` (a key of `machine.ASSUMED`), and the result says so (``gpu_assumed``)."""
    kernel = registry.get(name)
    p = kernel.resolve(params or {})
    computed_in = kernel.compute_dtype(dtype)
    if computed_in is None:
        raise ValueError(f"kernel {name!r} does not compute {dtype} (it computes {', '.join(kernel.dtypes)})")
    if computed_in != dtype:     # the model and the count are of the kernel's own dtype
        raise ValueError(f"kernel {name!r} computes {', '.join(kernel.dtypes)}; tilemm.matmul runs a {dtype} "
                         f"product on it in {computed_in}: explain that with --dtype {computed_in}")
    problem = Problem(m, n, k, dtype)
    itemsize = problem.itemsize
    gpu = machine.limits(assume_gpu)
    on_gpu = kernel.device == "cuda"
    out = {"kernel": kernel.name, "summary": kernel.summary, "seed": kernel.seed, "params": p,
           "problem": {"m": m, "n": n, "k": k, "dtype": dtype},
           "device": gpu.name if on_gpu else f"CPU: {machine.cpu()['model']}",
           "gpu_assumed": on_gpu and machine.gpu() is None}   # no GPU here: a typical one's limits and peaks
    if kernel.launch_shape:
        shape = kernel.launch_shape(problem, **p)
        out["launch"] = {"grid": shape.grid, "block": shape.block, "threads_per_block": shape.threads,
                         "blocks": shape.grid[0] * shape.grid[1], "shared_bytes_per_block": shape.shared_bytes,
                         "outputs_per_thread": shape.per_thread,
                         "limit": simt_launch.check(shape) or "within every limit"}
    t = kernel.traffic(problem, **p)
    minimum = (m * k + k * n + m * n) * itemsize
    flops = 2.0 * m * n * k
    out["traffic"] = {"elements_read": t.read, "elements_written": t.written, "bytes": t.bytes(itemsize),
                      "minimum_bytes": minimum, "times_minimum": t.bytes(itemsize) / minimum if minimum else None}
    out["flops"] = flops
    out["intensity_flop_per_byte"] = flops / t.bytes(itemsize) if t.bytes(itemsize) else None
    # the unit the products run on: the dtype's own, or (tensor-core rungs that emulate a type)
    # TF32 or int8 tensor cores doing several products for each product of the problem
    unit, work = kernel.unit(problem, p)
    peak = gpu.peak(unit) if kernel.device == "cuda" else None
    bw = gpu.bandwidth_gbs() if kernel.device == "cuda" else None
    if peak and bw:
        peak = peak / work                   # in products of the problem
        t_compute, t_memory = flops / (peak * 1e12), t.bytes(itemsize) / (bw * 1e9)
        out["roofline"] = {"peak_tflops": peak, "unit": unit, "products_per_product": work,
                           "bandwidth_gbs": bw, "compute_ms": t_compute * 1e3,
                           "memory_ms": t_memory * 1e3, "bound_ms": max(t_compute, t_memory) * 1e3,
                           "bound_by": "memory (if every load went to DRAM)" if t_memory > t_compute else "compute"}
    if simulate and kernel.backend == "numba-cuda":
        out["simulated"] = count_loads(name, simulate, simulate, simulate, dtype, p)
    return out


def count_loads(name: str, m: int, n: int, k: int, dtype: str, params: dict) -> dict:
    """Global loads and stores of one launch, counted in the CUDA simulator (a subprocess:
    the simulator must be switched on before numba-cuda is imported), beside the model."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    code = "import sys, json; from tilemm.tools.explain import _count_here; print(json.dumps(_count_here(*json.loads(sys.argv[1]))))"
    res = subprocess.run([sys.executable, "-c", code, json.dumps([name, m, n, k, dtype, params])],
                         env=env, capture_output=True, text=True)
    if res.returncode != 0:          # the count is an addition to the model: say why it is missing
        last = (res.stderr.strip().splitlines() or ["no message"])[-1]
        return {"error": f"the count in the simulator failed: {last}"}
    return json.loads(res.stdout.strip().splitlines()[-1])


def _count_here(name, m, n, k, dtype, params):
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    from tilemm.numerics.data import operands

    class Counting(FakeCUDAArray):
        def __init__(self, ary, tally=None):
            super().__init__(ary)
            self.tally = tally if tally is not None else {"loads": 0, "stores": 0}

        loads = property(lambda self: self.tally["loads"])
        stores = property(lambda self: self.tally["stores"])

        def reshape(self, *shape):        # a flat view (the flat form of a rung) counts for its array
            return Counting(self._ary.reshape(*shape), self.tally)

        def __getitem__(self, idx):
            self.tally["loads"] += 1
            return super().__getitem__(idx)

        def __setitem__(self, idx, value):
            self.tally["stores"] += 1
            return super().__setitem__(idx, value)

    kernel = registry.get(name)
    a, b = operands(0, m, n, k, dtype)
    ca, cb, cc = Counting(a), Counting(b), Counting(np.zeros((m, n), dtype))
    kernel.run(ca, cb, cc, **params)
    model = kernel.traffic(Problem(m, n, k, dtype), **params)
    return {"size": [m, n, k], "loads_a": ca.loads, "loads_b": cb.loads, "loads_c": cc.loads,
            "stores_c": cc.stores, "counted_read": ca.loads + cb.loads + cc.loads, "model_read": model.read,
            "counted_written": cc.stores, "model_written": model.written,
            "agree": ca.loads + cb.loads + cc.loads == model.read and cc.stores == model.written}


def ncu_bytes(name: str, m: int, n: int, k: int, dtype: str, params: dict) -> dict:
    """DRAM bytes read and written by one launch, read by Nsight Compute."""
    ncu = shutil.which("ncu")
    if not ncu:
        return {"error": "Nsight Compute (ncu) is not on the PATH"}
    code = ("import sys, json, cupy; import tilemm; from tilemm.numerics.data import operands; "
            "name, m, n, k, dtype, params = json.loads(sys.argv[1]); a, b = operands(0, m, n, k, dtype); "
            "tilemm.matmul(cupy.asarray(a), cupy.asarray(b), kernel=name, **params); cupy.cuda.Device().synchronize()")
    res = subprocess.run([ncu, "--csv", "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum",
                          "-k", f"regex:{name.replace('-', '_')}", sys.executable, "-c", code,
                          json.dumps([name, m, n, k, dtype, params])], capture_output=True, text=True)
    got = {}
    for line in res.stdout.splitlines():
        cells = [c.strip('"') for c in line.split('","')]
        if len(cells) > 3 and cells[-3].startswith("dram__bytes"):
            scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(cells[-2], 1)
            got[cells[-3]] = float(cells[-1].replace(",", "")) * scale
    return got or {"error": (res.stderr or res.stdout)[-400:]}
