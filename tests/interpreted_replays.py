"""Replays whose launches run under Triton's interpreter on the host: a stand-in for the compiled
program's C launcher (tilemm.engine.direct_launch's layout, as tests/test_direct_replay.py's) that
runs the program on the values it is given, each address made again a tensor over that memory
(laid out as the first call's argument there), each descriptor again a descriptor over one. A
replay's answers are then the program's on the memory its addresses name: a stale or wrong
address gives a wrong answer."""
import ctypes
import types

import torch

from tilemm.engine import launches, replay as replays
from tilemm.engine.direct_launch import make_runner
from tilemm.engine.launches import all_arguments, signature
from tilemm.engine.workspaces import WORKSPACES, WorkspaceLaunch


def at(address: int, like: torch.Tensor) -> torch.Tensor:
    """A host tensor over the memory at address, of like's shape, strides and dtype."""
    elements = 1 + sum((s - 1) * st for s, st in zip(like.shape, like.stride())) if like.numel() else 0
    memory = (ctypes.c_char * max(1, elements * like.element_size())).from_address(address)
    return torch.frombuffer(memory, dtype=torch.uint8).view(like.dtype).as_strided(like.shape, like.stride())


def interpreted_runner(bound, c_launches: list, streams: list | None = None):
    """A direct runner for BoundLaunch bound (after its first launch) whose C launcher runs its
    program under the interpreter; each launch appends its values to c_launches (and the stream
    it was given to streams). A workspace launch's workspace (its addresses) is found among
    tilemm.engine.workspaces' kept ones."""
    first = all_arguments(bound.program, bound.args, bound.options)
    names = list(signature(bound.program).parameters)
    tensors = {i: v for i, v in enumerate(first) if isinstance(v, torch.Tensor)}
    descriptors = {i: v for i, v in enumerate(first) if type(v).__name__ == "TensorDescriptor"}
    options = {k: v for k, v in bound.options.items() if k not in names}
    taken = range(bound.at, bound.at + len(bound.WORKSPACE)) if isinstance(bound, WorkspaceLaunch) else ()

    def c_launch(*given):
        values = list(given[13:])       # (after the grid, stream, function and Triton's other leading arguments)
        c_launches.append(tuple(values))
        if streams is not None:
            streams.append(given[3])
        kept = {t.data_ptr(): t for pair in WORKSPACES.values() for t in pair if hasattr(t, "data_ptr")}
        for i in taken:
            values[i] = kept.get(values[i], values[i])
        for i, like in tensors.items():
            values[i] = at(values[i], like)
        for i, like in descriptors.items():
            d = object.__new__(type(like))
            d.__dict__.update(vars(like), base=at(values[i].base.data_ptr(), like.base))
            values[i] = d
        bound.program[bound.grid](*values, **options)
    runtime = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    grid3 = tuple(bound.grid) + (1,) * (3 - len(bound.grid))
    return make_runner(c_launch, grid3, "fn", "packed", False, False, [(i, "meta") for i in descriptors],
                       lambda d, meta: [d], None, runtime, lambda: 0)


def replayed_on_the_host(monkeypatch) -> list:
    """Bound launches get interpreted_runner after their first launch, and replays recorded on
    the host are made as on GPU 0 (its quick calls, past the runner); returns the C launches' log."""
    c_launches = []
    plain_call, plain_recorded = launches.BoundLaunch.__call__, replays.recorded

    def call(self):
        if self.runner is not None:
            return self.run(self.values or all_arguments(self.program, self.args, self.options))
        plain_call(self)
        self.runner = interpreted_runner(self, c_launches)

    def recorded(bound, operands):
        replay = plain_recorded(bound, operands)
        if replay is not None:
            replay.device_index, replay.current_device, replay.current_stream = 0, lambda: 0, lambda index: 0
            replay.allocate = torch.empty
            replay.quick = replay.quick_call()
        return replay
    monkeypatch.setattr(launches.BoundLaunch, "__call__", call)
    monkeypatch.setattr(replays, "recorded", recorded)
    return c_launches


def linear_replays(monkeypatch) -> list:
    """Each launch tilemm.linear's eager calls replay (tilemm.engine.epilogue_repeats' repeated
    calls) appends its inputs' count to the list returned: C launches of their own, next to a
    module route's."""
    from tilemm.engine import epilogue_repeats
    made, replayed = epilogue_repeats.repeated_call, []

    def counting(replay):
        call = made(replay)
        if call is None:
            return None

        def counted(*inputs):
            y = call(*inputs)
            if y is not None:
                replayed.append(len(inputs))
            return y
        return counted
    monkeypatch.setattr(epilogue_repeats, "repeated_call", counting)
    return replayed
