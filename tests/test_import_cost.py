"""What a first call costs in imports: importing tilemm, reading the ladder and a NumPy-array call
load neither numba nor Triton (nor torch nor CuPy); a rung's record reads without its kernel; and the
GPU is described by the library the operands came from, not by numba-cuda. Each check runs in a
fresh process without the CUDA simulator and the Triton interpreter, as a user's program starts."""
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from tilemm.ladder import registry
from tilemm.ladder.rungs import RUNGS
from tilemm.system import machine

SRC = str(Path(__file__).resolve().parents[1] / "src")
HEAVY = ("numba", "triton", "torch", "cupy")


def fresh(code: str) -> dict:
    """The JSON a fresh Python process prints last, running code."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = SRC
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


LOADED = "json.dumps(sorted(m for m in {heavy!r} if m in sys.modules))".format(heavy=HEAVY)


def test_a_numpy_call_imports_neither_numba_nor_triton():
    loaded = fresh(f"""
        import json, sys
        import numpy as np
        import tilemm
        c = tilemm.matmul(np.ones((4, 4)), np.ones((4, 4)))
        assert (c == 4).all()
        print({LOADED})
    """)
    assert loaded == []


def test_the_ladder_reads_without_numba_or_triton():
    loaded = fresh(f"""
        import json, sys
        import tilemm
        tiled = tilemm.kernel("tiled")
        assert [p.name for p in tiled.params] == ["tile"] and tiled.backend == "numba-cuda"
        ladder = tilemm.kernels()
        problem = tilemm.ladder.registry.Problem(64, 64, 64, "float32")
        for k in ladder:    # every record, its parameters resolved (and the SIMT rungs' grids), without its kernel
            assert k.name and k.dtypes and k.seed and k.summary
            params = k.resolve({{}})
            if k.launch_shape:
                k.launch_shape(problem, **params)
        print({LOADED})
    """)
    assert loaded == []


def test_each_rung_is_registered_by_the_module_the_registry_names():
    """kernel(name) imports only RUNGS[name]: that module registers the rung, and the registry's
    map names every rung of the ladder once."""
    found = fresh("""
        import importlib, json
        from tilemm.ladder.record import LADDER
        from tilemm.ladder.rungs import RUNGS
        registered = {}
        for name, module in RUNGS.items():
            importlib.import_module(module)
            registered[name] = name in LADDER
        print(json.dumps(registered))
    """)
    assert found == {name: True for name in RUNGS}
    assert [k.name for k in registry.kernels()] == sorted(RUNGS, key=lambda name: registry.get(name).rung)


def test_asking_for_one_rung_imports_its_module_alone():
    loaded = fresh("""
        import json, sys
        from tilemm.ladder import registry
        from tilemm.ladder.rungs import RUNGS
        registry.get("tiled")
        print(json.dumps(sorted(m for m in set(RUNGS.values()) if m in sys.modules)))
    """)
    assert loaded == ["tilemm.ladder.simt.r06_tiled"]


# torch's properties of an H200, as torch.cuda.get_device_properties reads them
H200 = dict(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, total_memory=150_000_000_000,
            L2_cache_size=60 * 2**20, clock_rate=1_980_000, shared_memory_per_block=48 * 1024,
            shared_memory_per_block_optin=227 * 1024)


def test_a_torch_gpu_is_described_by_torch_without_numba():
    """On torch tensors the first call describes the GPU (the default's table key) from torch's
    device properties, and the default's choice asks torch whether its rungs run: numba.cuda, which
    took ~0.65 s of that call on an H200, is not imported; nor is Triton for a small integer product,
    which the library takes until Triton is loaded."""
    found = fresh(f"""
        import json, sys, types
        import torch
        torch.cuda.is_available = lambda: True             # a GPU as torch would report it
        torch.cuda.current_device = lambda: 0
        torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(**{H200!r})
        torch.cuda.get_device_capability = lambda *device: (9, 0)
        from tilemm.system import machine
        from tilemm.choose import by_shape, default
        gpu = machine.gpu()
        chosen = {{dtype: default.default_kernel("cuda:0", dtype, 64, 64, 64, dtype, (64, 64)).name
                  for dtype in ("float32", "bfloat16", "float64", "int32")}}
        triton_before = "triton" in sys.modules
        import triton                                       # once Triton is loaded: the table's rung for int32
        chosen["int32 after Triton"] = default.default_kernel("cuda:0", "int32", 64, 64, 64, "int32", (64, 64)).name
        print(json.dumps(dict(name=gpu.name, capability=list(gpu.compute_capability), sms=gpu.sms,
                              optin=gpu.max_shared_per_block_optin, clock=gpu.clock_mhz,
                              limits=gpu.max_threads_per_block, grid=list(gpu.max_grid_dim),
                              table=by_shape.capability(), chosen=chosen, numba="numba" in sys.modules,
                              triton=triton_before)))
    """)
    assert found == dict(name="NVIDIA H200", capability=[9, 0], sms=132, optin=227 * 1024, clock=1980.0,
                         limits=1024, grid=[2**31 - 1, 65535, 65535], table=[9, 0],
                         chosen={"float32": "cublas", "bfloat16": "cublas", "float64": "cublas", "int32": "cublas",
                                 "int32 after Triton": "tensorcore-int"},
                         numba=False, triton=False)


@pytest.fixture
def no_gpu_described():
    machine.gpu.cache_clear()
    yield
    machine.gpu.cache_clear()
    machine.described_by_cupy.cache_clear()


def test_a_cupy_gpu_is_described_by_cupy_s_runtime(monkeypatch, no_gpu_described):
    properties = {"name": b"NVIDIA H100 80GB HBM3", "major": 9, "minor": 0, "multiProcessorCount": 132,
                  "maxThreadsPerBlock": 1024, "maxThreadsDim": (1024, 1024, 64),
                  "maxGridSize": (2**31 - 1, 65535, 65535), "sharedMemPerBlock": 49152,
                  "sharedMemPerBlockOptin": 232448, "l2CacheSize": 50 * 2**20, "clockRate": 1_980_000,
                  "totalGlobalMem": 85_000_000_000}
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, getDevice=lambda: 0,
                                    getDeviceProperties=lambda i: properties)
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.delitem(sys.modules, "torch", raising=False)     # (as a CuPy user's program has it)
    monkeypatch.setattr(machine.compat, "cuda_simulator", lambda: False)
    gpu = machine.gpu()
    assert gpu == machine.GPU("NVIDIA H100 80GB HBM3", (9, 0), 132, 1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535),
                              49152, 232448, 50 * 2**20, 1980.0, 85.0)


@pytest.mark.gpu
def test_torch_cupy_and_numba_describe_the_gpu_alike():
    """What a first call reads from torch (or CuPy) is what numba-cuda reads: the limits launches are
    checked against and the table's key."""
    import torch
    by_numba = machine.described_by_numba(0)
    by_torch = machine.described_by_torch(0)
    assert by_torch == by_numba, (by_torch, by_numba)
    try:
        import cupy  # noqa: F401
    except ImportError:
        return
    assert machine.described_by_cupy(0) == by_numba
    assert torch.cuda.current_device() == 0


def test_the_public_names_a_numpy_call_never_needs_load_where_first_named():
    found = fresh("""
        import json, sys
        import tilemm
        before = sorted(m for m in ("tilemm.products.linear", "tilemm.products.grouped", "tilemm.spread.summa")
                        if m in sys.modules)
        import tilemm.multi
        from tilemm import distributed
        print(json.dumps(dict(before=before, multi=tilemm.multi.__name__, grid=distributed.Grid.__name__,
                              linear=tilemm.linear.__module__, grouped=tilemm.grouped_matmul.__name__)))
    """)
    assert found == dict(before=[], multi="tilemm.spread.multi", grid="Grid", linear="tilemm.products_api",
                         grouped="grouped_matmul")


@pytest.mark.gpu
def test_a_first_call_on_torch_cuda_tensors_imports_neither_numba_nor_cupy():
    """torch tensors on the GPU, the default kernel: the GPU is described by torch and the library
    rung multiplies through torch, so numba-cuda and CuPy (~0.65 s and more on an H200) stay unloaded."""
    loaded = fresh("""
        import json, sys
        import torch
        import tilemm
        for dtype in (torch.bfloat16, torch.float32, torch.float64):
            a = torch.ones(256, 256, device="cuda", dtype=dtype)
            assert (tilemm.matmul(a, a) == 256).all()
        print(json.dumps(sorted(m for m in ("numba", "cupy") if m in sys.modules)))
    """)
    assert loaded == []
