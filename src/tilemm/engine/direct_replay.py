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
"""
from __future__ import annotations

from tilemm.engine.direct_launch import KEPT_ADDRESSES
from tilemm.engine.replay_slots import DescriptorMaker, OperandAddress, Whole
from tilemm.engine.workspaces import WorkspaceLaunch


def quick(replay, launch, prepared, made: list, standard):
    """A function (*inputs) -> C (None where the quick call's guard refuses the inputs: a and b,
    or more) launching replay's one program (launch; prepared: the quick call's (*inputs) -> (C,
    addresses, the values with the operands' addresses in place) or None; made: the values it
    makes a call, [(index, make)]) through the C launcher past the direct runner; standard: the
    quick call it stands in for. None where it can't."""
    parts = getattr(launch.runner, "parts", None)
    if parts is None:
        return None
    workspace = isinstance(launch, WorkspaceLaunch)       # split K's or stream-K's, taken at each launch
    at, taken = (launch.at, len(launch.WORKSPACE)) if workspace else (0, 0)
    c_launch, (grid_x, grid_y, grid_z), function, packed, cooperative, pdl, descriptors, expand, runtime = parts
    metas = dict(descriptors)
    offsets, slots = [], []         # [(index, which, bytes)], [(index, which, bytes, make, meta, kept)]
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
    index, get_device, stream_of = replay.device_index, replay.current_device, replay.current_stream

    def call(*inputs):
        enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
        if (get_device() != index or enter is not None and getattr(enter, "calls", True)
                or leave is not None and getattr(leave, "calls", True)):
            return standard(*inputs)   # another GPU current (its guard), or launch hooks: Triton's runner
        ready = prepared(*inputs)
        if ready is None:
            return None
        c, pointers, values = ready
        for j, which, delta in offsets:
            values[j] = pointers[which] + delta
        stream = stream_of(index)
        if workspace:
            values[at:at + taken] = launch.replayed_workspace(index, stream)
        for j, which, delta, make, meta, kept in slots:
            address = pointers[which] + delta
            expanded = kept.get(address)
            if expanded is None:
                if len(kept) >= KEPT_ADDRESSES:
                    kept.clear()
                expanded = kept[address] = expand(make((*inputs, c), None), meta)
            values[j:j + 1] = expanded
        c_launch(grid_x, grid_y, grid_z, stream, function, cooperative, pdl, None, None, packed, None, None, None,
                 *values)
        return c
    return call
