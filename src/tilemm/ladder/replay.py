"""A repeated call's launches, replayed on its new operands.

A call that repeats an earlier one (same shapes, strides, dtypes, kernel, parameters: the plan
cache's key) would work out the same tiles, descriptors and scratch buffers, and Triton would bind
and look up the same compiled programs: ~130 µs of Python a call on the H100's host, against ~20 µs
for torch.matmul. A Replay keeps what the first call's launches were (each a compiled program and
its argument values) with the operands, their views and the scratch buffers marked; a repeated
call allocates C and the scratch afresh (torch's caching allocator: stream-safe, a few µs), puts
the new operands in their places and launches the programs directly.

Only steps a rung declares to be the whole of its work (a ``Steps`` of ``BoundLaunch``es and
``CopyInto``s, an operand copied into aligned rows: no value read on the host in between) are
replayed, only on 2-D torch CUDA tensors already of the compute dtype, with the first call's
alignment (Triton specializes on each pointer's 16 bytes) on the same device, outside CUDA-graph
capture; anything else takes the plan's usual path.
"""
from __future__ import annotations

import copy

from ._tensorcore_support import BoundLaunch, CopyInto, Steps, WorkspaceLaunch, all_arguments, copy_as

COPY = "copy"          # a recorded CopyInto: its values are (dst, src, word)


def alignment(*inputs) -> tuple:
    """Where each input's data starts within 16 bytes: compiled programs are specialized on it
    (Triton on each pointer's 16-byte alignment, regblock's vector loads on the rows')."""
    return tuple(x.data_ptr() % 16 for x in inputs)


def fits(inputs: tuple, device, aligned: tuple) -> bool:
    """Whether a call on inputs (a, b, ...) may replay launches recorded on `device` with inputs
    aligned as `aligned`: the same alignment, a and the current device that device, no CUDA graph
    being captured."""
    import torch
    return (alignment(*inputs) == aligned and inputs[0].get_device() == device.index
            and torch._C._cuda_getDevice() == device.index and not torch._C._cuda_isCurrentStreamCapturing())


class Replay:
    def __init__(self, launches, slots, groups, c_shape, dtype, device, aligned):
        self.launches = launches      # [(BoundLaunch or COPY, values with the slots' entries left stale)]
        self.slots = slots            # [(launch index, value index, make(operands, scratch))]
        self.groups = groups          # (elements, dtype) of each scratch storage
        self.c_shape, self.dtype, self.device, self.aligned = c_shape, dtype, device, aligned

    def __call__(self, *inputs):
        """C from inputs (a, b, and any others the first call had) by the recorded launches, or
        None where this call can't be replayed."""
        if not fits(inputs, self.device, self.aligned):
            return None
        import torch
        return self.run(*inputs, stream=torch._C._cuda_getCurrentRawStream(self.device.index))   # the caller's

    def run(self, *inputs, stream=None):
        """C by the recorded launches on stream (a raw handle; None: torch's current), unguarded.
        Copies go on torch's current stream: stream is that one, or None."""
        import torch
        c = torch.empty(self.c_shape, dtype=self.dtype, device=self.device)
        operands = (*inputs, c)
        scratch = [torch.empty(size, dtype=dtype, device=self.device) for size, dtype in self.groups]
        values = [list(v) for _, v in self.launches]
        for i, j, make in self.slots:
            values[i][j] = make(operands, scratch)
        for (launch, _), v in zip(self.launches, values):
            if launch is COPY:
                copy_as(*v)
            else:
                launch.run(tuple(v), stream)
        return c


def recorded(bound, operands: tuple) -> Replay | None:
    """The Replay of bound (a Steps or a BoundLaunch that has launched once, on operands = (a, b,
    c) or (a, b, other inputs..., c): C last), or None if it can't be replayed."""
    launches = [bound] if isinstance(bound, BoundLaunch) else bound.launches if isinstance(bound, Steps) else None
    if not launches or any(not isinstance(x, CopyInto) and (not isinstance(x, BoundLaunch) or x.runner is None)
                           for x in launches):
        return None
    c = operands[-1]
    storages = {t.untyped_storage().data_ptr(): (i, t) for i, t in enumerate(operands)}
    if len(storages) < len(operands):      # a and b views of one tensor: a new call's may not be
        return None
    groups: dict = {}              # scratch storage pointer -> (index, (elements, dtype))
    recipe, slots = [], []
    for i, launch in enumerate(launches):
        if isinstance(launch, CopyInto):
            values = [launch.dst, launch.src, launch.word]
        else:
            values = list(launch.values or all_arguments(launch.program, launch.args, launch.options))
        if isinstance(launch, WorkspaceLaunch):    # its workspace is taken at each launch
            values[launch.at:launch.at + len(launch.WORKSPACE)] = (None,) * len(launch.WORKSPACE)
        for j, v in enumerate(values):
            make = _slot(v, storages, groups)
            if make is False:
                return None
            if make is not None:
                slots.append((i, j, make))
                values[j] = None                     # no tensor of this call is kept
        recipe.append((COPY if isinstance(launch, CopyInto) else _unbound(launch), tuple(values)))
    return Replay(recipe, slots, [size for _, size in sorted(groups.values())], tuple(c.shape), c.dtype,
                  c.device, alignment(*operands[:-1]))


def _unbound(launch: BoundLaunch) -> BoundLaunch:
    """launch without its arguments (tensors of the first call): what run() needs alone."""
    light = copy.copy(launch)
    light.args = light.values = None
    light.__dict__.pop("fallback", None)
    return light


def _slot(v, storages: dict, groups: dict):
    """How to make value v for a new call: None (a constant, kept), a function of (operands,
    scratch), or False (can't be replayed: a tensor or descriptor of an unknown kind)."""
    import torch
    if isinstance(v, torch.Tensor):
        return _view(v, storages, groups)
    if type(v).__name__ == "TensorDescriptor" and hasattr(v, "base"):
        view = _view(v.base, storages, groups)
        if view is False:
            return False
        fields = {name: value for name, value in vars(v).items() if name != "base"}
        kind = type(v)

        def descriptor(operands, scratch):
            d = object.__new__(kind)
            d.__dict__.update(fields, base=view(operands, scratch))
            return d
        return descriptor
    return None if v is None or isinstance(v, (bool, int, float, str)) else False


def _view(t, storages: dict, groups: dict):
    """A function giving, for a new call, the tensor that stands where t stood: the same view of
    the new operand t was a view of, or of this call's scratch buffer."""
    ptr = t.untyped_storage().data_ptr()
    size, stride, offset, dtype = tuple(t.shape), t.stride(), t.storage_offset(), t.dtype
    if ptr in storages:
        which, operand = storages[ptr]
        if dtype != operand.dtype:
            return False
        if t is operand:
            return lambda operands, scratch: operands[which]
        delta = offset - operand.storage_offset()     # where the view starts, from the operand's start
        return lambda operands, scratch: operands[which].as_strided(size, stride,
                                                                    operands[which].storage_offset() + delta)
    if ptr not in groups:
        groups[ptr] = (len(groups), (t.untyped_storage().nbytes() // t.element_size(), dtype))
    index, (_, group_dtype) = groups[ptr]
    if group_dtype != dtype:       # two dtypes over one scratch buffer
        return False
    return lambda operands, scratch: scratch[index].as_strided(size, stride, offset)
