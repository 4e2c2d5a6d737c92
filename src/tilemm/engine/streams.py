"""Where a call's GPU work is queued: the caller's stream, as torch, CuPy and Triton do it.

A call runs on, in this order: the ``stream=`` the caller passes (a torch or CuPy stream, a
numba-cuda stream, or a raw ``cudaStream_t`` as an int); torch's current stream for torch CUDA
tensors; CuPy's current stream for CuPy arrays; the legacy default stream (0) for host arrays.
Every rung queues there, so work the caller queued before the call (a copy on a side stream)
is done before the kernel reads its operands, and the call returns without synchronizing the
device (host arrays only wait for their own copy back).

``queued_on`` makes that stream current for the call (torch's and CuPy's, so their allocations
and launches go there, and Triton's, which launches on torch's) and tells the numba-cuda rungs,
which take a stream argument, through a thread-local (threads keep their own streams). It also
makes the operands' GPU the current device for the call, whichever device the caller had current
(tensors on ``cuda:1`` while ``cuda:0`` is current), and puts the caller's back after it: this one
guard is what every rung's launches, allocations and library calls run under.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading

from tilemm.system import compat
from tilemm.numerics import arrays

LEGACY_DEFAULT = 0
_local = threading.local()


def handle_of(stream) -> int:
    """The raw cudaStream_t of a stream object of torch, CuPy or numba-cuda, or of an int."""
    if isinstance(stream, bool):
        raise TypeError("matmul: stream= takes a torch, CuPy or numba-cuda stream, or a cudaStream_t as an "
                        f"int; got {stream!r}")
    if isinstance(stream, int):
        if not 0 <= stream < 2**64:        # (a cudaStream_t is a pointer)
            raise ValueError(f"matmul: stream={stream} is not a cudaStream_t")
        return stream
    for attribute in ("cuda_stream", "ptr"):        # torch.cuda.Stream, cupy.cuda.Stream
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    if type(stream).__module__.startswith("numba"):  # numba-cuda: int() gives the handle
        return int(stream)
    raise TypeError(f"matmul: stream= takes a torch, CuPy or numba-cuda stream, or a cudaStream_t as an int; "
                    f"got a {type(stream).__module__}.{type(stream).__name__}")


def caller_stream(kind: str, device: str, stream=None) -> int:
    """The stream a call on these operands runs on (see the module's docstring)."""
    if stream is not None:
        return handle_of(stream)
    if device == "cpu":
        return LEGACY_DEFAULT
    index = int(device.split(":")[1])
    if kind == "torch":
        return arrays.torch_if_imported()._C._cuda_getCurrentRawStream(index)    # as Triton reads it: no Stream object
    if kind == "cupy":
        cupy = arrays.cupy_if_imported()
        with cupy.cuda.Device(index):
            return cupy.cuda.get_current_stream().ptr
    return LEGACY_DEFAULT


def current() -> int:
    """The stream of the call this thread is running (LEGACY_DEFAULT outside a call)."""
    return getattr(_local, "handle", LEGACY_DEFAULT)


class queued_on:
    """Make `handle` this thread's stream for the call: torch's current stream (Triton launches
    there) and, with `cupy_too`, CuPy's, where they are loaded and differ, and what numba_stream()
    gives the numba-cuda rungs. device: the operands' ("cpu" for host operands: the current CUDA
    device). A class, not a generator: it is entered around every launch, and where nothing
    differs it costs a thread-local and a raw-stream look-up."""
    __slots__ = ("handle", "index", "cupy_too", "before", "stack")

    def __init__(self, handle: int, device: str, cupy_too: bool = True):
        self.handle, self.cupy_too = handle, cupy_too
        self.index = None if device == "cpu" else int(device.split(":")[1])

    def __enter__(self):
        self.before = getattr(_local, "handle", LEGACY_DEFAULT)
        _local.handle = self.handle
        self.stack = None
        if _torch_on_gpu():
            torch = arrays.torch_if_imported()
            if self.index is None:
                index = torch.cuda.current_device()
            else:       # the operands' GPU current for the call, whichever the caller's is (a device guard):
                index = self.index      # Triton, numba-cuda and torch's allocations all follow it
                if torch._C._cuda_getDevice() != index:
                    self._enter(torch.cuda.device(index))
            if torch._C._cuda_getCurrentRawStream(index) != self.handle:   # what Triton reads
                self._enter(torch.cuda.stream(_torch_stream(self.handle, index)))
        if self.cupy_too and _cupy_on_gpu():
            cupy = arrays.cupy_if_imported()
            current = cupy.cuda.runtime.getDevice()
            index = current if self.index is None else self.index
            if cupy.cuda.get_current_stream(index).ptr != self.handle or index != current:
                self._enter(cupy.cuda.Device(index))
                self._enter(_cupy_stream(self.handle, index))
        elif self.index is not None and _numba_alone_on_gpu():
            self._enter(_numba_device(self.index))
        return self

    def _enter(self, context):
        if self.stack is None:
            self.stack = contextlib.ExitStack()
        self.stack.enter_context(context)

    def __exit__(self, *exc):
        try:
            if self.stack is not None:
                self.stack.close()
        finally:
            _local.handle = self.before
        return False


def _numba_alone_on_gpu() -> bool:
    """numba-cuda loaded with neither torch nor CuPy driving the GPU: it follows the driver's current
    context, which no other library sets for it."""
    return "numba.cuda" in sys.modules and not _torch_on_gpu() and not compat.cuda_simulator()


def _numba_device(index: int):
    from numba import cuda
    return cuda.gpus[index]


def _torch_on_gpu() -> bool:
    return "torch" in sys.modules and _gpu_available("torch")


def _cupy_on_gpu() -> bool:
    return "cupy" in sys.modules and _gpu_available("cupy")


@functools.lru_cache(maxsize=None)
def _gpu_available(library: str) -> bool:
    """Whether torch or CuPy drives a real GPU here (not under the interpreter or simulator)."""
    if compat.triton_interpreter() or compat.cuda_simulator():
        return False
    module = arrays.torch_if_imported() if library == "torch" else arrays.cupy_if_imported()
    try:
        return module.cuda.is_available()
    except Exception:       # CuPy without a driver raises instead of answering
        return False


@functools.lru_cache(maxsize=64)
def _torch_stream(handle: int, index: int):
    torch = arrays.torch_if_imported()
    if handle == LEGACY_DEFAULT:
        return torch.cuda.default_stream(index)
    return torch.cuda.ExternalStream(handle, device=torch.device("cuda", index))


@functools.lru_cache(maxsize=64)
def _cupy_stream(handle: int, index: int):
    cupy = arrays.cupy_if_imported()
    if handle == LEGACY_DEFAULT:
        return cupy.cuda.Stream.null
    with cupy.cuda.Device(index):
        return cupy.cuda.ExternalStream(handle)


def numba_stream():
    """This thread's call stream as numba-cuda's launch takes it (0 under the simulator, which
    has no external streams and runs everything in order)."""
    handle = current()
    if handle == LEGACY_DEFAULT or compat.cuda_simulator():
        return 0
    return _numba_stream(handle)


@functools.lru_cache(maxsize=64)
def _numba_stream(handle: int):
    from numba import cuda
    return cuda.external_stream(handle)


def capturing() -> bool:
    """Whether torch is capturing a CUDA graph on this thread's current stream (launches must
    then replay right: nothing that depends on a count kept on the host)."""
    return _torch_on_gpu() and arrays.torch_if_imported().cuda.is_current_stream_capturing()
