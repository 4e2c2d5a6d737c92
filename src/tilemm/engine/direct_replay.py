"""One program's replay (tilemm.engine.replay's quick call) launched through the C launcher itself,
with each TMA descriptor's expansion kept by its operand's address.

The quick call hands the compiled program's direct runner (tilemm.engine.direct_launch) a
descriptor object a TMA operand, made afresh at each call, which the runner looks up among the
expansions it keeps and splices into the arguments. Where the runner is a direct one and every
value the replay makes is an operand's address or a descriptor over one, what the replay knows
does that work once: a descriptor argument is identified by its operand and offset (its shape,
strides and block are the recording's), so its expansion (Triton's CUtensorMap, shape and
strides) is kept by the address it starts at, and a call goes from the operands' addresses to
the C launcher's arguments with no object made (with a stand-in C launcher, on a shared
2-core CPU, a TMA product's replay took 16.5 µs this way and 31 µs through the runner, C's
allocation included; benchmarks/linear_profile.py --parts stages times both parts on a GPU's
host). A launch that takes a workspace (split K, stream-K) is given it as addresses, as the
quick call gives it. While Triton's launch hooks are set (a profiler's) and on another device
than the recording's, the quick call as it is.

a @ b, the usual call, is one function (pair_call), where the quick call's steps were a function
each: its guard read inline (the operands' alignment, a conjugate or negative view, a CUDA graph
captured where the launch takes a workspace), the C launcher's whole argument list kept for each
stream (split K's workspace in place while the workspaces stay as they are:
workspaces.generation), and for a call the guard turns away, what declined gives (a repeated
tilemm.matmul's: the plan's own path).
"""
from __future__ import annotations

from tilemm.engine import workspaces
from tilemm.engine.direct_launch import KEPT_ADDRESSES, KNOWN_BASE_FORMAT, idle_hook
from tilemm.engine.replay_slots import DescriptorMaker, OperandAddress, Whole
from tilemm.engine.workspaces import WorkspaceLaunch


def quick(replay, launch, prepared, made: list, standard, shape: tuple, declined=None, allocation=None):
    """A function (*inputs) -> C (None where the quick call's guard refuses the inputs: a and b,
    or more) launching replay's one program (launch; prepared: the quick call's (*inputs) -> (C,
    addresses, the values with the operands' addresses in place) or None; made: the values it
    makes a call, [(index, make)]) through the C launcher past the direct runner; standard: the
    quick call it stands in for; shape: C's. declined(*inputs): what a call the guard refuses
    gives instead of None. allocation: pair_call's C (c_allocation's), where the caller has it.
    Two inputs: pair_call's. None where it can't."""
    found = launch_arguments(launch, made)
    if found is None:
        return None
    if len(replay.aligned) == 2:
        return pair_call(replay, found, standard, shape, declined, allocation)
    (c_launch, (grid_x, grid_y, grid_z), function, packed, cooperative, pdl, _, expand, runtime), offsets, slots = found
    workspace = isinstance(launch, WorkspaceLaunch)       # split K's or stream-K's, taken at each launch
    at, taken = (launch.at, len(launch.WORKSPACE)) if workspace else (0, 0)
    index, get_device, stream_of = replay.device_index, replay.current_device, replay.current_stream
    (enter, enter_chain), (leave, leave_chain) = map(idle_hook, (runtime.launch_enter_hook, runtime.launch_exit_hook))

    def call(*inputs):
        if (runtime.launch_enter_hook is not enter or enter_chain.calls or runtime.launch_exit_hook is not leave
                or leave_chain.calls or get_device() != index):
            c = standard(*inputs)      # launch hooks (pair_call's), or another GPU current (its guard): Triton's runner
            return c if c is not None or declined is None else declined(*inputs)
        ready = prepared(*inputs)
        if ready is None:
            return None if declined is None else declined(*inputs)
        c, pointers, values = ready
        for j, which, delta in offsets:
            values[j] = pointers[which] + delta
        stream = stream_of(index)
        if workspace:
            values[at:at + taken] = launch.replayed_workspace(index, stream)
        for j, which, delta, make, meta, expansions in slots:
            address = pointers[which] + delta
            expanded = expansions.get(address)
            if expanded is None:
                if len(expansions) >= KEPT_ADDRESSES:
                    expansions.clear()
                expanded = expansions[address] = expand(make((*inputs, c), None), meta)
            values[j:j + 1] = expanded
        c_launch(grid_x, grid_y, grid_z, stream, function, cooperative, pdl, None, None, packed, None, None, None,
                 *values)
        return c
    return call


# The C launcher's leading arguments before the program's, a character each of direct_launch's
# KNOWN_BASE_FORMAT; the stream is the fourth
LEADING = len(KNOWN_BASE_FORMAT)
STREAM_AT = 3
KEPT_STREAMS = 64      # streams a quick call keeps its arguments for (a thread's or a side stream's each)


def pair_call(replay, found: tuple, standard, shape: tuple, declined=None, allocation=None):
    """quick's function for two inputs, c = a @ b, in one frame: the guard (the first call's
    alignment of each operand, neither a negative view nor, complex, a conjugate one, no CUDA
    graph being captured where the launch takes a workspace) read inline, what does not change
    worked out once (C's shape, dtype and device, the torch functions the call reads, and the C
    launcher's whole argument list for the stream, split K's workspace in place while the
    workspaces stay as they are), the operands' and C's addresses put in at each call;
    declined(a, b) for operands the guard refuses (None: None); allocation: c_allocation's (None:
    made here)."""
    import torch            # (the operands are torch tensors: loaded)
    (c_launch, (grid_x, grid_y, grid_z), function, packed, cooperative, pdl, _, expand, runtime), offsets, slots = found
    launch = replay.single[0]
    # the C launcher's arguments, Triton's leading ones first (the stream's place filled for each stream)
    template = [grid_x, grid_y, grid_z, None, function, cooperative, pdl, None, None, packed, None, None, None,
                *replay.single[1]]
    addressed = [(LEADING + j, which) for _, j, which in replay.address_slots]
    offsets = [(LEADING + j, which, delta) for j, which, delta in offsets]
    slots = [(LEADING + j, *rest) for j, *rest in slots]
    # the usual program: A, B and C passed once each as addresses, set in three stores
    at_a, at_b, at_c = ([j for j, which in addressed if which == w] for w in range(3))
    each_once = len(at_a) == len(at_b) == len(at_c) == 1 and len(addressed) == 3
    at_a, at_b, at_c = (at_a[0], at_b[0], at_c[0]) if each_once else (None, None, None)
    workspace = isinstance(launch, WorkspaceLaunch)      # memory a CUDA graph being captured would keep
    steady = workspace and launch.STEADY                 # its addresses kept for the stream (split K's)
    at, taken = (LEADING + launch.at, len(launch.WORKSPACE)) if workspace else (0, 0)
    align_a, align_b = replay.aligned
    index, get_device, stream_of = replay.device_index, replay.current_device, replay.current_stream
    make_c, c_arguments = allocation or c_allocation(torch, replay, shape)      # C = make_c(*c_arguments)
    capturing = torch._C._cuda_isCurrentStreamCapturing
    # a conjugate or negative view (lazy): its values are not its memory; a conjugate bit only on complex operands
    neg, conj, complex_ = torch.Tensor.is_neg, torch.Tensor.is_conj, replay.dtype.is_complex
    by_address = bool(offsets or slots)                  # views into the operands, descriptors over them
    # the usual program's call, its three addresses its only values made a call: no more steps
    three_stores = each_once and not by_address and not (workspace and not steady)
    kept: dict = {}               # stream -> (workspaces' generation, the arguments for that stream)
    if declined is None:
        declined = declining
    # Triton's launch hooks, read at each call against their values now (idle_hook): another hook, or
    # a chain given calls (a profiler's), takes Triton's runner
    (enter, enter_chain), (leave, leave_chain) = map(idle_hook, (runtime.launch_enter_hook, runtime.launch_exit_hook))

    def for_stream(stream) -> tuple:
        """kept[stream]: the template with the stream, and split K's workspace, in place."""
        generation = workspaces.generation       # (read first: a change meanwhile leaves it stale)
        arguments = template.copy()
        arguments[STREAM_AT] = stream
        if steady:
            arguments[at:at + taken] = launch.replayed_workspace(index, stream)
        if len(kept) >= KEPT_STREAMS:
            kept.clear()
        kept[stream] = generation, arguments
        return generation, arguments

    def call(a, b):
        if (runtime.launch_enter_hook is not enter or enter_chain.calls or runtime.launch_exit_hook is not leave
                or leave_chain.calls or get_device() != index):
            c = standard(a, b)       # launch hooks, or another GPU current (its guard): Triton's runner
            return c if c is not None else declined(a, b)
        pa, pb = a.data_ptr(), b.data_ptr()
        if (pa % 16 != align_a or pb % 16 != align_b or neg(a) or neg(b) or complex_ and (conj(a) or conj(b))
                or workspace and capturing()):
            return declined(a, b)
        c = make_c(*c_arguments)
        stream = stream_of(index)
        arguments = kept.get(stream)
        if arguments is None or steady and arguments[0] != workspaces.generation:
            arguments = for_stream(stream)
        values = arguments[1].copy()
        if three_stores:
            values[at_a], values[at_b], values[at_c] = pa, pb, c.data_ptr()
            c_launch(*values)
            return c
        if each_once:
            values[at_a], values[at_b], values[at_c] = pa, pb, c.data_ptr()
            pointers = None
        else:
            pointers = (pa, pb, c.data_ptr())
            for j, which in addressed:
                values[j] = pointers[which]
        if by_address:
            pointers = pointers or (pa, pb, values[at_c])
            for j, which, delta in offsets:
                values[j] = pointers[which] + delta
        if workspace and not steady:             # (stream-K's: an epoch of its own at each launch)
            values[at:at + taken] = launch.replayed_workspace(index, stream)
        for j, which, delta, make, meta, expansions in slots:     # (the last first)
            address = pointers[which] + delta
            expanded = expansions.get(address)
            if expanded is None:
                if len(expansions) >= KEPT_ADDRESSES:
                    expansions.clear()
                expanded = expansions[address] = expand(make((a, b, c), None), meta)
            values[j:j + 1] = expanded
        c_launch(*values)
        return c
    return call


def c_allocation(torch, replay, shape: tuple) -> tuple:
    """(make, arguments): make(*arguments) gives a new C of the replay's dtype and this shape,
    contiguous as torch.empty lays it out, on the replay's device, which must be the current one
    (pair_call checks it first). make is torch's own allocation for the device without the
    argument parser and the dispatcher (Inductor's empty_strided_cuda or _cpu: under half of
    torch.empty_like's CPU time); where this torch has none, torch.empty_like of C's shape over
    one element (expanded: no memory kept; one tensor to parse, where torch.empty parses sizes,
    dtype and device). A C is made here once, to check that torch's function gives it."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    empty_strided = getattr(guards, "_empty_strided_" + replay.device.type, None)
    arguments = (tuple(shape), tuple(torch.empty(shape, device="meta").stride()), replay.dtype)   # (torch.empty's)
    try:                     # (a torch private function: used where it gives what it gave when written)
        c = empty_strided(*arguments)
        if type(c) is torch.Tensor and (c.shape, c.stride(), c.dtype, c.device.type) == (*arguments,
                                                                                        replay.device.type):
            return empty_strided, arguments
    except (TypeError, RuntimeError, ValueError):
        pass
    c_like = replay.allocate(*shape, dtype=replay.dtype, device=replay.device) if 0 in shape else \
        replay.allocate(1, dtype=replay.dtype, device=replay.device).expand(*shape)
    return torch.empty_like, (c_like,)


def declining(*inputs):
    """What a quick call gives for inputs its guard refuses, where no other path is named: None."""
    return None


def launch_arguments(launch, made: list):
    """(the direct runner's parts: the C launcher and its leading arguments; [(index, which
    operand, bytes into it)] of the values that are an address within an operand; [(index,
    which operand, bytes into it, make, descriptor metadata, {address: expansion})] of the TMA
    descriptors, the last first) for launch's values made a call (made: [(index, make)]), or
    None where a value is made otherwise, or the runner is not a direct one."""
    parts = getattr(launch.runner, "parts", None)
    if parts is None:
        return None
    descriptors = parts[6]
    metas = dict(descriptors)
    offsets, slots = [], []
    for j, make in made:
        base = getattr(make, "make_base", None)
        if isinstance(make, OperandAddress) and make.as_int:
            offsets.append((j, make.which, make.delta))
        elif isinstance(make, DescriptorMaker) and metas.get(j) is not None and isinstance(base, (Whole, OperandAddress)):
            slots.append((j, base.which, base.delta, make, metas[j], {}))
        else:
            return None
    if len(slots) != len(descriptors):     # a descriptor argument the replay does not make: not this path
        return None
    slots.sort(key=lambda slot: -slot[0])  # spliced from the last, so that the earlier indices hold
    return parts, offsets, slots
