"""What this machine is: library versions, the CPU, the GPU and its limits and peaks."""
from __future__ import annotations

import functools
import os
import sys
from dataclasses import asdict, dataclass, replace

from tilemm.system import compat

LIBRARIES = ("tilemm", "numpy", "numba", "numba-cuda", "triton", "torch", "cupy-cuda13x", "cupy-cuda12x",
             "rich", "matplotlib")

# Datasheet peaks (dense, TFLOP/s or TOPS) and memory bandwidth (GB/s), keyed by a name fragment.
# The H100 figures are the SXM5 datasheet's; a measured ceiling is better, and bench reports one.
DATASHEET = {
    "H100": {"float64": 67.0, "float32": 67.0, "int32": 33.5, "tf32": 494.7, "float16": 989.4,
             "bfloat16": 989.4, "int8": 1978.9, "float8": 1978.9, "bandwidth_gbs": 3350.0},
    "H200": {"float64": 67.0, "float32": 67.0, "int32": 33.5, "tf32": 494.7, "float16": 989.4,
             "bfloat16": 989.4, "int8": 1978.9, "float8": 1978.9, "bandwidth_gbs": 4800.0},
    "A100": {"float64": 19.5, "float32": 19.5, "int32": 9.7, "tf32": 156.0, "float16": 312.0,
             "bfloat16": 312.0, "int8": 624.0, "bandwidth_gbs": 2039.0},
}


@dataclass(frozen=True)
class GPU:
    """The limits a launch must respect and what the chip can do."""
    name: str
    compute_capability: tuple
    sms: int
    max_threads_per_block: int
    max_block_dim: tuple
    max_grid_dim: tuple
    max_shared_per_block: int          # static __shared__ arrays (what numba-cuda kernels get)
    max_shared_per_block_optin: int    # dynamic shared memory after opting in
    l2_bytes: int
    clock_mhz: float
    memory_gb: float
    simulated: bool = False

    def peak(self, dtype: str) -> float | None:
        """Datasheet TFLOP/s for SIMT arithmetic in this dtype (None if the chip is unknown)."""
        return (datasheet(self.name) or {}).get(dtype)

    def bandwidth_gbs(self) -> float | None:
        return (datasheet(self.name) or {}).get("bandwidth_gbs")


def datasheet(device_name: str) -> dict | None:
    """The datasheet figures for a GPU named like this, or None."""
    return next((table for key, table in DATASHEET.items() if key in device_name), None)


# A typical Hopper part: the limits that apply when no GPU is here (or under the simulator).
H100 = GPU("NVIDIA H100 80GB HBM3 (assumed)", (9, 0), 132, 1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535),
           48 * 1024, 227 * 1024, 50 * 2**20, 1980.0, 80.0, simulated=True)
# The H200 is the same chip with more and faster memory: its limits are the H100's, its bandwidth its own.
ASSUMED = {"H100": H100, "H200": replace(H100, name="NVIDIA H200 (assumed)", memory_gb=141.0)}


# What CUDA has allowed every GPU since compute capability 3.0 (the Programming Guide's table of
# technical specifications): the limits torch's device properties do not carry.
CUDA_LIMITS = {"max_threads_per_block": 1024, "max_block_dim": (1024, 1024, 64),
               "max_grid_dim": (2**31 - 1, 65535, 65535), "max_shared_per_block": 48 * 1024}


@functools.lru_cache(maxsize=None)
def gpu() -> GPU | None:
    """The real CUDA GPU this process works on (its current device), or None (no GPU, or running
    under the simulator). Described by the library already loaded to run there, so that a first
    call imports nothing more: torch (the operands are torch tensors), else CuPy, else numba-cuda."""
    if compat.cuda_simulator():
        return None
    try:
        for describe in (torch_gpu, cupy_gpu, numba_gpu):
            found = describe()
            if found is not False:
                return found
        return None
    except Exception:  # a broken driver is "no GPU" for dispatch; `tilemm info` shows why
        return None


def torch_gpu() -> GPU | bool:
    """torch's current CUDA device, described from its device properties; False where torch is not
    imported (nor worth importing for this) or sees no GPU (a CPU build, say)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return False
    return described_by_torch(torch.cuda.current_device())


def cupy_gpu() -> GPU | bool:
    """CuPy's current device, described by the CUDA runtime; False where CuPy is not imported or
    sees no GPU."""
    cupy = sys.modules.get("cupy")
    if cupy is None or cupy.cuda.runtime.getDeviceCount() == 0:
        return False
    return described_by_cupy(cupy.cuda.runtime.getDevice())


def numba_gpu() -> GPU | None:
    """numba-cuda's current device, or None (no numba-cuda, or no GPU)."""
    try:
        from numba import cuda
    except ImportError:
        return None
    if not cuda.is_available():
        return None
    return described_by_numba(cuda.get_current_device().id)


@functools.lru_cache(maxsize=None)
def described_by_torch(device_id: int) -> GPU:
    """GPU device_id's attributes as torch reads them (cudaGetDeviceProperties), read once."""
    import torch
    p = torch.cuda.get_device_properties(device_id)
    return GPU(p.name, (p.major, p.minor), p.multi_processor_count, CUDA_LIMITS["max_threads_per_block"],
               CUDA_LIMITS["max_block_dim"], CUDA_LIMITS["max_grid_dim"],
               getattr(p, "shared_memory_per_block", CUDA_LIMITS["max_shared_per_block"]),
               getattr(p, "shared_memory_per_block_optin", None) or optin_of_capability((p.major, p.minor)),
               p.L2_cache_size, getattr(p, "clock_rate", 0) / 1000.0, p.total_memory / 1e9)


@functools.lru_cache(maxsize=None)
def described_by_cupy(device_id: int) -> GPU:
    """GPU device_id's attributes as CuPy's runtime reads them (cudaGetDeviceProperties), read once."""
    import cupy
    p = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    return GPU(name, (p["major"], p["minor"]), p["multiProcessorCount"], p["maxThreadsPerBlock"],
               tuple(p["maxThreadsDim"]), tuple(p["maxGridSize"]), p["sharedMemPerBlock"],
               p.get("sharedMemPerBlockOptin") or optin_of_capability((p["major"], p["minor"])),
               p["l2CacheSize"], p["clockRate"] / 1000.0, p["totalGlobalMem"] / 1e9)


@functools.lru_cache(maxsize=None)
def described_by_numba(device_id: int) -> GPU:
    """GPU device_id's attributes as numba-cuda reads them, read once: every plan checks its launch
    against them."""
    from numba import cuda
    d = cuda.get_current_device()
    free, total = cuda.current_context().get_memory_info()
    name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
    return GPU(name, d.compute_capability, d.MULTIPROCESSOR_COUNT, d.MAX_THREADS_PER_BLOCK,
               (d.MAX_BLOCK_DIM_X, d.MAX_BLOCK_DIM_Y, d.MAX_BLOCK_DIM_Z),
               (d.MAX_GRID_DIM_X, d.MAX_GRID_DIM_Y, d.MAX_GRID_DIM_Z),
               d.MAX_SHARED_MEMORY_PER_BLOCK, d.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d.L2_CACHE_SIZE,
               d.CLOCK_RATE / 1000.0, total / 1e9)


# Dynamic shared memory a block may opt into, by compute capability (CUDA Programming Guide), for a
# torch too old to report it.
OPTIN_SHARED = {(7, 0): 96 * 1024, (7, 5): 64 * 1024, (8, 0): 163 * 1024, (8, 6): 99 * 1024, (8, 7): 163 * 1024,
                (8, 9): 99 * 1024, (9, 0): 227 * 1024}


def optin_of_capability(capability: tuple) -> int:
    return OPTIN_SHARED.get(tuple(capability), CUDA_LIMITS["max_shared_per_block"])


def limits(assume: str = "H100") -> GPU:
    """The GPU whose limits a launch is checked against: the real one, else the one named in
    ASSUMED (a typical H100 unless told)."""
    if assume not in ASSUMED:
        raise ValueError(f"no figures for a GPU named {assume!r}: one of {', '.join(ASSUMED)}")
    return gpu() or ASSUMED[assume]


# (platform, importlib.metadata and datetime load where a record is written, not at import: a call
# never needs them, and importlib.metadata alone brings email, zipfile, csv and socket)
def versions() -> dict:
    import platform
    from importlib import metadata
    out = {"python": platform.python_version()}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            pass
    return out


def cpu() -> dict:
    import platform
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"model": model, "cores": os.cpu_count()}


def describe() -> dict:
    """Everything a result record needs to say where it was measured."""
    g = gpu()
    return {"device": g.name if g else f"CPU: {cpu()['model']}", "cpu": cpu(),
            "gpu": asdict(g) if g else None, "versions": versions(),
            "simulator": compat.cuda_simulator(), "interpreter": compat.triton_interpreter()}


def stamp(command: str) -> dict:
    """What every result record carries: the device, the library versions, the date (UTC) and
    the command that measured it."""
    import datetime
    info = describe()
    return {"device": info["device"], "versions": info["versions"],
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "command": command}


def command_line(prefix: str, args) -> str:
    """`prefix --name value ...` from an argparse namespace (lists spaced out, flags bare; --out and
    options left unset are left out)."""
    def option(k, v):
        name = f" --{k.replace('_', '-')}"
        if isinstance(v, bool):
            return name if v else ""
        return f"{name} {' '.join(map(str, v)) if isinstance(v, list) else v}"
    return prefix + "".join(option(k, v) for k, v in vars(args).items() if k != "out" and v is not None)
