"""`tilemm.warmup` and `tilemm warmup`: compile ahead of time what later calls will need.

A rung's first call in a process compiles its program (`regblock`: a few seconds a dtype),
or loads it from the disk caches numba, numba-cuda and Triton keep (NUMBA_CACHE_DIR,
TRITON_CACHE_DIR; each defaults to a folder of its own): from there a first call takes well under
a second. Warming up runs each program a call would need once, on random operands, and checks
each answer, so that this process and every later one on this machine finds it compiled:

    GPU   the rungs the default takes for each shape class the shipped tables list for this GPU
          and dtype (one shape a class, operands row-major and with B transposed, as x @ W.T),
          and the rungs named, at an aligned and an unaligned shape in both layouts;
    host  cpu-tiled for integer dtypes (the default's choice for large integer products), and
          the host rungs named. NumPy compiles nothing.

Nothing a later call computes changes: the programs are the ones those calls would compile. On a
machine without a GPU the GPU steps are reported as skipped, with the reason.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

from tilemm.choose import by_shape as choice
from tilemm.system import compat, machine
from tilemm.ladder import registry
from tilemm.numerics.dtypes import NUMERIC, is_integer

DEVICES = ("cpu", "cuda")
# Shapes of the default's shape classes (tilemm.choose.by_shape) are looked for on this grid, at most
# LARGEST elements in A, B and C together; +1 on N or K makes rows unaligned.
SIDES = (1, 2, 16, 64, 256, 1024, 2048, 4096, 8192, 16384)
DEPTHS = (64, 96, 1024, 4096, 16384, 65536)
WORK_TARGETS = (2e9, 3e10, 2e11)     # flops a representative aims at in each work class
LARGEST = 2**28
GPU_LAYOUTS = ("nn", "nt")
NAMED_SHAPES = ((512, 512, 512), (509, 515, 511))   # rows aligned to 16 bytes, and not
HOST_SHAPES = ((512, 512, 512),)     # 2^27 multiply-adds: where the default takes cpu-tiled for integers
EMULATED_SHAPES = ((8, 8, 8),)       # the CUDA simulator and Triton's interpreter compile nothing: the path only
WIDE_RESULTS = {"int8": "int32"}     # operands also warmed with this out_dtype (quantized products)


@dataclass(frozen=True)
class Job:
    """One call to make: kernel None is the default's choice."""
    device: str
    dtype: str
    kernel: str | None
    shape: tuple = ()
    layout: str = "nn"
    out_dtype: str | None = None
    skip: str | None = None          # why this call is not made here


@dataclass(frozen=True)
class Step:
    """What one call did: status "ok", "skipped: why" or "FAILED: why"."""
    device: str
    dtype: str
    kernel: str               # the rung that ran (for the default: the one it took), or the one named
    default: bool
    shape: tuple
    layout: str
    out_dtype: str | None
    seconds: float
    status: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Report:
    steps: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list:
        return [s for s in self.steps if s.status.startswith("FAILED")]

    @property
    def skipped(self) -> list:
        return [s for s in self.steps if s.status.startswith("skipped")]

    def compiled(self) -> dict:
        """{(device, rung, dtype): seconds of its calls}, for the calls that ran and were right."""
        total: dict = {}
        for s in self.steps:
            if s.ok:
                key = (s.device, s.kernel, s.dtype)
                total[key] = total.get(key, 0.0) + s.seconds
        return total

    def __str__(self) -> str:
        lines = [f"{device:4} {kernel:20} {dtype:9} {seconds:7.2f} s"
                 for (device, kernel, dtype), seconds in self.compiled().items()]
        lines += [f"{s.device:4} {s.kernel:20} {s.dtype:9} {s.status}" for s in self.failed + self.skipped]
        lines.append(f"{len(self.steps) - len(self.failed) - len(self.skipped)} calls ran, {len(self.failed)} failed, "
                     f"{len(self.skipped)} skipped, {self.seconds:.1f} s")
        return "\n".join(lines)


def warmup(dtypes=("float32",), kernels=None, shapes=None, device=None, progress: bool = True) -> Report:
    """Compile ahead of time what the default (and the rungs named) will need.

    Each call is run once on random operands and its answer checked; later processes load the
    programs from numba's and Triton's disk caches.

    Parameters
    ----------
    dtypes : str or sequence of str, default ("float32",)
        The operands' dtypes.
    kernels : str or sequence of str, optional
        Rungs to warm besides the default.
    shapes : sequence of (m, n, k), optional
        Products to warm instead of the typical shapes.
    device : {"cpu", "cuda"}, optional
        Only the host's or only the GPU's programs; None: both, where present.
    progress : bool, default True
        Show a progress bar on the terminal.

    Returns
    -------
    Report
        ``.steps``: each call's device, rung, dtype, shape, seconds and status (``"ok"``,
        ``"skipped: why"`` or ``"FAILED: why"``); ``.seconds``: the whole warm-up.

    Raises
    ------
    TypeError
        dtypes, kernels or shapes of the wrong type.
    ValueError
        An unsupported dtype, an unknown kernel, a bad shape or device.
    """
    jobs = plan_jobs(dtypes, kernels, shapes, device)
    report = Report()
    start = time.perf_counter()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    columns = (TextColumn("warmup {task.description:42}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task("", total=len(jobs))
        for job in jobs:
            bar.update(task, description=describe(job))
            report.steps.append(run_job(job))
            bar.advance(task)
    report.seconds = time.perf_counter() - start
    return report


def nothing_to_warm(jobs: list[Job], dtypes) -> str:
    """What `tilemm warmup` says where every job is skipped: nothing to compile, and why."""
    lines = [f"tilemm warmup: nothing to warm here for {' '.join(_names(dtypes, 'dtypes'))}:"]
    lines += [f"  {job.device} {job.kernel or 'default'}: {job.skip.removeprefix('skipped: ')}" for job in jobs]
    if any(job.device == "cpu" and job.kernel == "numpy" for job in jobs):
        lines.append("The host's default compiles for integers only (cpu-tiled): tilemm warmup --dtypes int32 int64")
    return "\n".join(lines)


def describe(job: Job) -> str:
    shape = "x".join(map(str, job.shape)) if job.shape else ""
    out = f"->{job.out_dtype}" if job.out_dtype else ""
    return f"{job.device} {job.kernel or 'default'} {job.dtype}{out} {shape} {job.layout if job.shape else ''}"


def plan_jobs(dtypes, kernels=None, shapes=None, device=None) -> list[Job]:
    """The calls warmup makes, after checking every argument (ValueError, TypeError)."""
    dtypes = _names(dtypes, "dtypes")
    for dtype in dtypes:
        if dtype not in NUMERIC:
            raise ValueError(f"warmup: dtype {dtype!r} is not supported; choose from {', '.join(NUMERIC)}")
    named = [registry.get(name) for name in _names(kernels or (), "kernels")]    # an unknown name: ValueError
    if device not in (None,) + DEVICES:
        raise ValueError(f"warmup: device must be 'cpu', 'cuda' or None (both), not {device!r}")
    shapes = None if shapes is None else [_shape(s) for s in shapes]
    devices = DEVICES if device is None else (device,)
    jobs = []
    for dtype in dtypes:
        for where in devices:
            jobs += default_jobs(where, dtype, shapes)
        for kernel in named:
            jobs += named_jobs(kernel, dtype, shapes, devices)
    return jobs


def default_jobs(device: str, dtype: str, shapes) -> list[Job]:
    """The default's calls for dtype on device."""
    if device == "cpu":
        if not is_integer(dtype):
            return [Job("cpu", dtype, "numpy", skip="skipped: the host default is NumPy, which compiles nothing")]
        return [Job("cpu", dtype, None, shape) for shape in shapes or HOST_SHAPES]
    gpu = machine.gpu()
    if gpu is None:
        return [Job("cuda", dtype, None, skip="skipped: the GPU default needs a CUDA GPU (none here)")]
    jobs = []
    for out_dtype in (None,) + ((WIDE_RESULTS[dtype],) if dtype in WIDE_RESULTS else ()):
        for shape in shapes or typical_shapes(gpu.compute_capability, out_dtype or dtype):
            jobs += [Job("cuda", dtype, None, shape, layout, out_dtype) for layout in GPU_LAYOUTS]
    return jobs


def named_jobs(kernel, dtype: str, shapes, devices) -> list[Job]:
    """The calls of one named rung for dtype (none where it does not compute dtype)."""
    if kernel.compute_dtype(dtype) is None:
        return []
    if kernel.device not in devices:
        return [Job(kernel.device, dtype, kernel.name, skip=f"skipped: a {kernel.device} rung, and only "
                                                              f"{' and '.join(devices)} was asked for")]
    why = kernel.available()
    if why:
        return [Job(kernel.device, dtype, kernel.name, skip=f"skipped: {why}")]
    if compat.emulated(kernel.backend):
        return [Job(kernel.device, dtype, kernel.name, shape) for shape in shapes or EMULATED_SHAPES]
    layouts = GPU_LAYOUTS if kernel.device == "cuda" else ("nn",)
    return [Job(kernel.device, dtype, kernel.name, shape, layout)
            for shape in shapes or (NAMED_SHAPES if kernel.device == "cuda" else HOST_SHAPES) for layout in layouts]


def typical_shapes(capability, result: str) -> list[tuple]:
    """A shape of each class the shipped table for this GPU and result dtype lists (tilemm.choose.by_shape),
    or a few common ones where there is no table."""
    table = choice.MEASURED_WINNERS.get((tuple(capability), result))
    if not table:
        return [(1024, 1024, 1024), (16, 4096, 4096), (4096, 4096, 4096)]
    found = (representative(c) for c in sorted(table))
    return [shape for shape in found if shape is not None]


def representative(shape_class: tuple) -> tuple | None:
    """(m, n, k) of this shape class (choice.shape_class, row-major operands) whose work is nearest
    the class's target, in at most LARGEST elements; None where the grid has none."""
    best = None
    for m, n, k, dn, dk in itertools.product(SIDES, SIDES, DEPTHS, (0, 1), (0, 1)):
        n, k = n + dn, k + dk
        size = m * k + k * n + m * n
        if size > LARGEST or choice.shape_class(m, n, k) != tuple(shape_class):
            continue
        rank = (abs(math.log(2 * m * n * k / WORK_TARGETS[shape_class[0]])), size)
        if best is None or rank < best[0]:
            best = (rank, (m, n, k))
    return best[1] if best else None


def run_job(job: Job) -> Step:
    """Make one call, time it (compile, launch and the device's work), check its answer."""
    def step(kernel, seconds, status):
        return Step(job.device, job.dtype, kernel, job.kernel is None, job.shape, job.layout, job.out_dtype,
                    seconds, status)
    if job.skip:
        return step(job.kernel or "default", 0.0, job.skip)
    from tilemm import api
    from tilemm.numerics import arrays
    from tilemm.numerics.accuracy import compare_on_device
    from tilemm.numerics.data import operands
    a, b = operands(0, *job.shape, job.dtype, job.layout)
    da, db = a, b
    kernel = registry.get(job.kernel) if job.kernel else None
    if job.device == "cuda" and not (kernel and compat.emulated(kernel.backend)):
        da, db = arrays.to_device(a, job.dtype), arrays.to_device(b, job.dtype)
    start = time.perf_counter()
    try:
        call = api.plan(da, db, kernel=job.kernel, out_dtype=job.out_dtype)
    except (api.KernelUnavailable, ValueError, TypeError) as e:     # this rung can't take this call here
        return step(job.kernel or "default", 0.0, f"skipped: {' '.join(str(e).split())}")
    try:
        c = call.execute()
        arrays.synchronize(c)
    except Exception as e:        # a compiler's or a driver's error: reported, the other steps still run
        return step(call.kernel.name, time.perf_counter() - start,
                    f"FAILED: {type(e).__name__}: {' '.join(str(e).split())}")
    seconds = time.perf_counter() - start
    verdict = compare_on_device(c, a, b, call.result)
    name = call.kernel.name
    return step(name, seconds, "ok" if verdict.ok else f"FAILED: wrong answer: {verdict.message}")


def _names(value, what: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    try:
        names = list(value)
    except TypeError:
        raise TypeError(f"warmup: {what} must be a name or a list of names, not {type(value).__name__}") from None
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"warmup: {what} must be names (str), not {type(name).__name__}")
    return names


def _shape(shape) -> tuple:
    try:
        m, n, k = shape
    except (TypeError, ValueError):
        raise ValueError(f"warmup: a shape is (m, n, k), not {shape!r}") from None
    for x in (m, n, k):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"warmup: a shape's m, n and k are whole numbers of 1 or more, not {shape!r}")
    return (m, n, k)
