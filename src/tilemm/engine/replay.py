"""A repeated call's launches, replayed on its new operands.

A call that repeats an earlier one (same shapes, strides, dtypes, kernel, parameters: the plan
cache's key) would work out the same tiles, descriptors and scratch buffers, and Triton would bind
and look up the same compiled programs: several times the Python of a whole torch.matmul call.
A Replay keeps what the first call's launches were (each a compiled program and
its argument values) with the operands, their views and the scratch buffers marked; a repeated
call allocates C afresh (torch's caching allocator: stream-safe and cheap), puts the new
operands in their places and launches the programs directly.

The scratch (operands copied into aligned rows, split parts) is kept per thread and stream, up to
SCRATCH_KEPT_UP_TO bytes, with the launches' values that point into it filled in once: a call on
a stream runs after that stream's previous call has read it, and a thread's calls are queued one
after the other. Each scratch allocation, and each view into it, cost CPU time comparable to a
whole small call; a larger product's scratch is allocated at each call as before, where those microseconds are lost
in its GPU time.

Only steps a rung declares to be the whole of its work (a ``Steps`` of ``BoundLaunch``es and
``CopyInto``s, an operand copied into aligned rows: no value read on the host in between) are
replayed, only on 2-D torch CUDA tensors already of the compute dtype, with the first call's
alignment (Triton specializes on each pointer's 16 bytes) on the same device, and outside CUDA-graph
capture where the launches reuse memory (kept scratch, a workspace); anything else takes the plan's
usual path. A single program's replay, the usual small call, is taken in the fewest steps, which
brings a small call's CPU time level with torch.matmul's.
"""
from __future__ import annotations

import copy
import threading
import weakref

from tilemm.engine.launches import BoundLaunch, CopyInto, Steps, all_arguments, copy_as, raw_stream
from tilemm.engine.replay_guard import alignment, capturing, elsewhere, lazy
from tilemm.engine.replay_slots import Address, DescriptorMaker, OperandAddress, Whole  # noqa: F401  (Address: tests')
from tilemm.engine import direct_replay
from tilemm.engine.workspaces import WorkspaceLaunch

COPY = "copy"          # a recorded CopyInto: its values are (dst, src, word)

# Bytes of scratch a replay keeps per thread and stream; past them it allocates its scratch at each call
SCRATCH_KEPT_UP_TO = 64 << 20
SCRATCH_ALIGN = 256    # bytes: each scratch buffer's start in the kept scratch (TMA wants 16, 128 reads faster)
_KEPT = threading.local()     # .holder: this thread's KeptScratch
_HOLDERS = weakref.WeakSet()  # every live thread's KeptScratch (a thread's goes with it), for release()
_HOLDERS_LOCK = threading.Lock()


class KeptScratch:
    """One thread's kept scratch: {(device index, stream): uint8 tensor}."""
    def __init__(self):
        self.scratch: dict = {}


def kept_scratch() -> dict:
    """This thread's kept scratch, by device index and stream."""
    holder = getattr(_KEPT, "holder", None)
    if holder is None:
        holder = _KEPT.holder = KeptScratch()
        with _HOLDERS_LOCK:
            _HOLDERS.add(holder)
    return holder.scratch


def release() -> None:
    """Let go of every thread's kept scratch (a call running meanwhile keeps its own until it ends;
    the next call allocates anew)."""
    with _HOLDERS_LOCK:
        for holder in _HOLDERS:
            holder.scratch = {}


class Replay:
    def __init__(self, launches, slots, groups, c_shape, dtype, device, aligned):
        self.launches = launches      # [(BoundLaunch or COPY, values with the slots' entries left stale)]
        self.groups = groups          # (elements, dtype) of each scratch storage
        self.c_shape, self.dtype, self.device, self.aligned = c_shape, dtype, device, aligned
        self.offsets, self.scratch_bytes = scratch_layout(groups)
        self.filled = None            # (kept scratch, values with the places in it filled) last used
        # slots: [(launch index, value index, make(operands, scratch), of scratch alone)]
        self.scratch_slots = [(i, j, make) for i, j, make, of_scratch in slots if of_scratch]       # once a scratch
        # made each call: an operand itself, passed to a program as its address (Triton's launcher
        # takes an int as it is, where a tensor costs a data_ptr() call and a driver query), else made
        made = [(i, j, make) for i, j, make, of_scratch in slots if not of_scratch]
        as_address = [isinstance(make, Whole) and takes_addresses(launches[i][0]) for i, _, make in made]
        self.address_slots = [(i, j, make.which) for (i, j, make), yes in zip(made, as_address) if yes]
        self.operand_slots = [slot for slot, yes in zip(made, as_address) if not yes]
        # one program's launch with nothing in scratch (most small calls): the launch and its values,
        # taken in the fewest steps (a small call's CPU time is its time)
        self.single = None
        if len(launches) == 1 and not groups and isinstance(launches[0][0], BoundLaunch):
            self.single = launches[0][0], list(launches[0][1])
        # memory a later call reuses (scratch, workspaces), which a CUDA graph being captured would keep
        self.reuses_memory = bool(groups) or any(isinstance(launch, WorkspaceLaunch) for launch, _ in launches)
        self.device_index = device.index if device.type == "cuda" else -1
        if self.device_index >= 0:
            import torch
            self.allocate, self.current_device = torch.empty, torch._C._cuda_getDevice
            self.current_stream = torch._C._cuda_getCurrentRawStream
        else:                  # recorded on the CPU (as tests do): run() alone runs it, a call never replays
            self.current_device = lambda: None
        self.quick = self.quick_call()

    def __call__(self, *inputs):
        """C from inputs (a, b, and any others the first call had) by the recorded launches, on
        torch's current stream (the caller's), or None where this call can't be replayed. Under
        CUDA graph capture a replay that reuses no memory is captured as torch's own launches are
        (C comes from the graph's pool)."""
        if self.current_device() != self.device_index and self.device_index >= 0:
            return elsewhere(self.device_index, self, *inputs)
        pointers = [x.data_ptr() for x in inputs]         # the guard's and the launches' (read once)
        if (tuple([p % 16 for p in pointers]) != self.aligned or self.current_device() != self.device_index
                or (self.reuses_memory and capturing()) or any(lazy(x) for x in inputs)):
            return None
        c = self.allocate(*self.c_shape, dtype=self.dtype, device=self.device)   # (a tuple: measured slower)
        self.launch(inputs, c, pointers, self.current_stream(self.device_index))
        return c

    def quick_call(self, shape: tuple | None = None, declined=None):
        """The usual small call, one program's launch on its inputs (a and b; or more, as a fused
        product's bias and AUX), in the fewest steps: a function (*inputs) -> C, or None where
        this call can't be replayed (__call__'s guard); None where the replay has more steps.
        Each step it leaves out is a few tenths of a microsecond of a call whose CPU time is its
        time. shape: C's, where not the recording's (as many elements: the program writes C's
        memory row by row). declined(*inputs): what a call the guard refuses gives instead of
        None (a plan's own path: Plan.repeated_call)."""
        if self.single is None or len(self.aligned) < 2 or self.device_index < 0:
            return None
        launch, template = self.single[0], list(self.single[1])
        addressed = [(j, which) for _, j, which in self.address_slots]
        made = [(j, make) for _, j, make in self.operand_slots]
        workspace = isinstance(launch, WorkspaceLaunch)        # memory a CUDA graph being captured would keep
        runner = launch.run_replayed if workspace else launch.runner
        aligned = self.aligned
        index, dtype = self.device_index, self.dtype
        shape = self.c_shape if shape is None else shape
        get_device, stream_of = self.current_device, self.current_stream
        import torch
        # a conjugate or negative view (lazy): its values are not its memory; a conjugate bit only on complex operands
        neg, conj, complex_ = torch.Tensor.is_neg, torch.Tensor.is_conj, dtype.is_complex
        make_c, c_arguments = direct_replay.c_allocation(torch, self, shape)     # C, on the current device

        if len(aligned) == 2:        # a @ b, the usual call: its two operands checked inline
            align_a, align_b = aligned

            def prepared(a, b):
                """(C, the operands' and C's addresses, the launch's values with them in place), or
                None where a and b can't be replayed: not aligned as the recording's operands, a
                lazy view, or a workspace while a CUDA graph is captured."""
                pa, pb = a.data_ptr(), b.data_ptr()
                if (pa % 16 != align_a or pb % 16 != align_b or (workspace and capturing())
                        or neg(a) or neg(b) or complex_ and (conj(a) or conj(b))):
                    return None
                c = make_c(*c_arguments)
                pointers = (pa, pb, c.data_ptr())
                values = template.copy()
                for j, which in addressed:
                    values[j] = pointers[which]
                return c, pointers, values
        else:
            def prepared(*inputs):
                """As the two operands' prepared, for any number of inputs."""
                pointers = [x.data_ptr() for x in inputs]
                if (tuple([p % 16 for p in pointers]) != aligned or (workspace and capturing())
                        or any([neg(x) or complex_ and conj(x) for x in inputs])):
                    return None
                c = make_c(*c_arguments)
                pointers.append(c.data_ptr())
                values = template.copy()
                for j, which in addressed:
                    values[j] = pointers[which]
                return c, pointers, values

        def call(*inputs):
            if get_device() != index:
                return elsewhere(index, call, *inputs)
            ready = prepared(*inputs)
            if ready is None:
                return None
            c, _, values = ready
            if made:                   # TMA descriptors of the operands
                operands = (*inputs, c)
                for j, make in made:
                    values[j] = make(operands, None)
            if workspace:
                runner(values, index, stream_of(index))
            else:
                runner(*values, stream=stream_of(index))
            return c
        direct = direct_replay.quick(self, launch, prepared, made, call, shape, declined, (make_c, c_arguments))
        if direct is not None or declined is None:
            return direct or call

        def call_or_declined(*inputs):
            c = call(*inputs)
            return c if c is not None else declined(*inputs)
        return call_or_declined

    def run(self, *inputs, stream=None):
        """C by the recorded launches on stream (a raw handle; None: torch's current), unguarded.
        Copies go on torch's current stream: stream is that one, or None."""
        if stream is None:
            stream = raw_stream(self.device_index, None)
        c = inputs[0].new_empty(self.c_shape, dtype=self.dtype)
        self.launch(inputs, c, [x.data_ptr() for x in inputs], stream)
        return c

    def launch(self, inputs: tuple, c, pointers: list, stream) -> None:
        """The recorded launches on inputs and c (pointers: the inputs' data_ptr(), which this
        extends with C's) on stream (a raw handle)."""
        pointers.append(c.data_ptr())
        if self.single is not None:
            launch, values = self.single
            values = values.copy()
            self.put_operands([values], (*inputs, c), pointers)
            if isinstance(launch, WorkspaceLaunch):
                launch.run_replayed(values, self.device_index, stream)
            else:
                launch.runner(*values, stream=stream)
            return
        values = [list(v) for v in self.scratch_filled(stream)]
        self.put_operands(values, (*inputs, c), pointers)
        for (launch, _), v in zip(self.launches, values):
            if launch is COPY:
                copy_as(*v)
            elif isinstance(launch, WorkspaceLaunch):
                launch.run_replayed(v, self.device_index, stream)
            else:
                launch.run(tuple(v), stream)

    def put_operands(self, values: list, operands: tuple, addresses: list) -> None:
        """Each launch's values (a list a launch) with this call's operands in their places:
        addresses, the operands' data_ptr(), for those passed as such."""
        for i, j, which in self.address_slots:
            values[i][j] = addresses[which]
        for i, j, make in self.operand_slots:
            values[i][j] = make(operands, None)

    def scratch_filled(self, stream) -> list:
        """Each launch's values with the places in scratch filled: in this thread's kept scratch
        for the stream (a raw handle, None on the CPU), or in scratch allocated now (past
        SCRATCH_KEPT_UP_TO)."""
        if not self.groups:
            return [v for _, v in self.launches]
        if self.scratch_bytes > SCRATCH_KEPT_UP_TO:
            return self.fill(self.buffers(self.allocated(self.scratch_bytes)))     # this call's alone
        kept = kept_scratch()
        key = (self.device.index, stream)
        scratch = kept.get(key)
        if scratch is None or scratch.numel() < self.scratch_bytes:      # grown at least twofold, to the limit
            grown = max(self.scratch_bytes, 0 if scratch is None else 2 * scratch.numel())
            scratch = kept[key] = self.allocated(min(grown, SCRATCH_KEPT_UP_TO))
        filled = self.filled
        if filled is None or filled[0] is not scratch:
            filled = self.filled = (scratch, self.fill(self.buffers(scratch)))
        return filled[1]

    def allocated(self, nbytes: int):
        import torch
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def buffers(self, scratch) -> list:
        """Each scratch storage's tensor (elements, dtype) in bytes of scratch."""
        return [scratch[at:at + elements * dtype.itemsize].view(dtype)
                for at, (elements, dtype) in zip(self.offsets, self.groups)]

    def fill(self, buffers) -> list:
        values = [list(v) for _, v in self.launches]
        for i, j, make in self.scratch_slots:
            values[i][j] = make(None, buffers)
        return values


def takes_addresses(launch) -> bool:
    """Whether a recorded launch may be given its tensors as addresses: a program's launch (not a
    copy), whose arguments go to Triton's launcher alone (a workspace launch is given its device
    and stream apart: WorkspaceLaunch.run_replayed)."""
    return isinstance(launch, BoundLaunch)


def scratch_layout(groups) -> tuple:
    """(byte offset of each scratch storage, total bytes), each start SCRATCH_ALIGN-aligned."""
    offsets, at = [], 0
    for elements, dtype in groups:
        offsets.append(at)
        at += -(-elements * dtype.itemsize // SCRATCH_ALIGN) * SCRATCH_ALIGN
    return offsets, at


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
            slot = _slot(v, storages, groups, program=not isinstance(launch, CopyInto))
            if slot is False:
                return None
            if slot is not None:
                slots.append((i, j, *slot))
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


def _slot(v, storages: dict, groups: dict, program: bool = False):
    """How to make value v for a new call: None (a constant, kept), (make(operands, scratch),
    whether it is of scratch alone), or False (can't be replayed: a tensor or descriptor of an
    unknown kind). program: v is a compiled program's argument, of which its launcher reads a
    tensor's address alone (a view of an operand is made as that address, an int)."""
    import torch
    if isinstance(v, torch.Tensor):
        return _view(v, storages, groups, address_only=program, as_int=program)
    if type(v).__name__ == "TensorDescriptor" and hasattr(v, "base"):
        view = _view(v.base, storages, groups, address_only=True)     # Triton reads the base's address alone
        if view is False:
            return False
        make_base, of_scratch = view
        return DescriptorMaker(type(v), {name: value for name, value in vars(v).items() if name != "base"},
                               make_base), of_scratch
    return None if constant(v) else False


def constant(v) -> bool:
    """Whether v is a value a replay keeps as it is: None, a number, a string, a Triton function
    (a constexpr such as matmul_persistent's STEPS), or a tuple of them (a constexpr such as
    matmul_kernel's ALIGN)."""
    if isinstance(v, tuple):
        return all(constant(x) for x in v)
    return v is None or isinstance(v, (bool, int, float, str)) or type(v).__name__ in TRITON_FUNCTIONS


# A @triton.jit function's type, compiled and under Triton's interpreter
TRITON_FUNCTIONS = ("JITFunction", "InterpretedFunction")


def _view(t, storages: dict, groups: dict, address_only: bool = False, as_int: bool = False):
    """(make, of scratch): make(operands, scratch) gives, for a new call, the tensor that stands
    where t stood: the same view of the new operand t was a view of, or of that call's scratch.
    address_only: a view of an operand is made as the Address of its place alone (as_int: as
    that address itself)."""
    ptr = t.untyped_storage().data_ptr()
    size, stride, offset, dtype = tuple(t.shape), t.stride(), t.storage_offset(), t.dtype
    if ptr in storages:
        which, operand = storages[ptr]
        if dtype != operand.dtype:
            return False
        if t is operand:
            return Whole(which), False
        delta = offset - operand.storage_offset()     # where the view starts, from the operand's start
        if address_only:
            delta *= t.element_size()
            return OperandAddress(which, delta, as_int), False
        return (lambda operands, scratch: operands[which].as_strided(size, stride,
                                                                     operands[which].storage_offset() + delta)), False
    if ptr not in groups:
        groups[ptr] = (len(groups), (t.untyped_storage().nbytes() // t.element_size(), dtype))
    index, (_, group_dtype) = groups[ptr]
    if group_dtype != dtype:       # two dtypes over one scratch buffer
        return False
    def in_scratch(operands, scratch):
        buffer = scratch[index]           # a buffer of the kept scratch starts within it
        return buffer.as_strided(size, stride, buffer.storage_offset() + offset)
    return in_scratch, True
