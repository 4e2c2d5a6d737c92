"""A numba-cuda rung's compiled kernel launched again without its dispatcher.

numba-cuda types every argument at each launch (a DeviceNDArray made from each operand's
__cuda_array_interface__, its numba type, the overload looked up, then the arguments flattened):
many times the Python of a whole torch.matmul, which dominates a small product's call.
A repeated call (same shapes, strides, dtypes, parameters: the plan cache's key) launches the
kernel its first call compiled, with the arguments flattened as numba-cuda flattens them (an array:
meminfo, parent, size, itemsize, data pointer, shape, strides in bytes; an integer: its ctypes
value), on the caller's stream, through cuda.core as numba-cuda does.

Only 2-D torch CUDA tensors already of the compute dtype, with the first call's 16-byte
alignment (it picks the kernel's vector loads), on its device and outside CUDA-graph capture;
a numba-cuda without these internals gives no replay, and calls take the usual path.
"""
from __future__ import annotations

import ctypes

from tilemm.engine.replay_guard import elsewhere, fits, on_device


class SimtReplay:
    def __init__(self, kernel, config, arguments, c_shape, dtype, device, alignment):
        self.kernel, self.config = kernel, config
        self.arguments = arguments    # [("operand", index, flat) or ("value", ctypes value)]
        self.c_shape, self.dtype, self.device, self.alignment = c_shape, dtype, device, alignment
        self.streams: dict = {}

    def __call__(self, a, b):
        """C = a @ b by the first call's kernel, or None where this call can't be replayed."""
        if not on_device(self.device):
            return elsewhere(self.device.index, self, a, b)
        return self.run(a, b) if fits((a, b), self.device, self.alignment) else None

    def run(self, a, b):
        import torch
        from cuda.core import launch
        c = torch.empty(*self.c_shape, dtype=self.dtype, device=self.device)
        operands = (a, b, c)
        values = []
        for kind, *what in self.arguments:
            if kind == "operand":
                values += _flattened(operands[what[0]], what[1])
            else:
                values.append(what[0])
        launch(self._stream(torch._C._cuda_getCurrentRawStream(self.device.index)), self.config, self.kernel, *values)
        return c

    def _stream(self, handle: int):
        stream = self.streams.get(handle)
        if stream is None:
            from cuda.core import Stream
            stream = self.streams[handle] = Stream.from_handle(handle)
        return stream


def recorded(dispatcher, grid, block, args: tuple, operands: tuple, c_tensor) -> SimtReplay | None:
    """The SimtReplay of dispatcher[grid, block](*args), launched once, where args are numba-cuda
    views of the operands (a, b, c; their flat views for a flat kernel) and integers; c_tensor
    is C as torch holds it. None where this numba-cuda's internals are not the ones known here."""
    try:
        from cuda.core import LaunchConfig
        from numba.core import types as nbtypes
        compiled = dispatcher.overloads[tuple(dispatcher.typeof_pyval(v) for v in args)]
        kernel = compiled._codelibrary.get_cufunc().kernel
        config = LaunchConfig(grid=_dims(grid), block=_dims(block), shmem_size=0)
        types = compiled.argument_types
    except (AttributeError, KeyError, ImportError, TypeError):
        return None
    pointers = [_pointer(x) for x in operands]
    arguments = []
    for ty, arg in zip(types, args):
        if isinstance(ty, nbtypes.Array) and hasattr(arg, "__cuda_array_interface__"):
            ptr = _pointer(arg)
            if ptr not in pointers or arg.size != operands[pointers.index(ptr)].size:
                return None
            arguments.append(("operand", pointers.index(ptr), arg.ndim == 1))
        elif isinstance(ty, nbtypes.Integer) and isinstance(arg, int):
            arguments.append(("value", getattr(ctypes, f"c_{ty}")(arg)))
        else:
            return None
    if len(set(pointers)) < 3:     # a and b views of one tensor: a new call's may not be
        return None
    return SimtReplay(kernel, config, arguments, tuple(c_tensor.shape), c_tensor.dtype, c_tensor.device,
                      (pointers[0] % 16, pointers[1] % 16))     # replay.alignment of the first call


def _pointer(x) -> int:
    return x.__cuda_array_interface__["data"][0]


def _dims(d) -> tuple:
    return tuple(d) if isinstance(d, (tuple, list)) else (d,)


def _flattened(t, flat: bool) -> list:
    size, itemsize = t.numel(), t.element_size()
    if flat:
        return [0, 0, size, itemsize, t.data_ptr(), size, itemsize]
    rows, cols = t.shape
    row_stride, col_stride = t.stride()
    return [0, 0, size, itemsize, t.data_ptr(), rows, cols, row_stride * itemsize, col_stride * itemsize]
