"""The stream-K and split-K workspaces, kept per device and stream, and the launches that take them."""
from __future__ import annotations

import itertools
import weakref

from tilemm.engine import streams
from tilemm.engine.launches import BoundLaunch, all_arguments, raw_stream, signature


class WorkspaceLaunch(BoundLaunch):
    """A BoundLaunch whose program also takes a workspace (the arguments named in WORKSPACE, in
    the signature's order), taken at each launch for the stream current then (launches on one
    stream never overlap); while a CUDA graph is captured, `fallback` instead: a program that
    needs none (a graph would keep this launch's workspace). block_m x block_n: the program's
    tiles, which size its workspace."""
    WORKSPACE: tuple = ()
    STEADY = False         # whether replayed_workspace gives one stream the same addresses while the kept
                           # workspaces stay as they are (one generation): split K's, not stream-K's (its epoch)

    def __init__(self, program, grid, args, options, fallback, block_m: int, block_n: int):
        super().__init__(program, grid, args, options)
        self.fallback, self.block_m, self.block_n = fallback, block_m, block_n
        names = list(signature(program).parameters)
        self.at = names.index(self.WORKSPACE[0])

    def __call__(self):
        if streams.capturing():
            return self.fallback()
        super().__call__()

    def workspace(self, device: int, stream) -> tuple:
        """The workspace's arguments for a launch on device (an index; -1: the CPU) and stream (a
        raw handle, None on the CPU)."""
        raise NotImplementedError

    def with_workspace(self, values: tuple, stream=None) -> tuple:
        """values with the workspace of C's device and the launch's stream (None: torch's current
        one) in place."""
        device = values[2].get_device()
        at = self.at
        return values[:at] + self.workspace(device, raw_stream(device, stream)) + values[at + len(self.WORKSPACE):]

    def launch(self):
        """The program through Triton's JIT, its workspace in place (every argument positional)."""
        parameters = signature(self.program).parameters
        values = self.with_workspace(all_arguments(self.program, self.args, self.options))
        return self.program[self.grid](*values, **{k: v for k, v in self.options.items() if k not in parameters})

    def run(self, values: tuple, stream=None):
        self.runner(*self.with_workspace(values, stream), stream=stream)

    def run_replayed(self, values: list, device: int, stream) -> None:
        """A replay's launch (tilemm.engine.replay): values, a list with the operands as addresses,
        launched on stream (a raw handle, None on the CPU: the replay has resolved it) with the
        workspace of device and stream in place, as addresses too (Triton's launcher asks the
        driver about each tensor it is given)."""
        workspace = self.replayed_workspace(device, stream)
        values[self.at:self.at + len(workspace)] = workspace
        self.runner(*values, stream=stream)

    def replayed_workspace(self, device: int, stream) -> list:
        """workspace()'s arguments with its tensors as their addresses."""
        return [x.data_ptr() if hasattr(x, "data_ptr") else x for x in self.workspace(device, stream)]



class StreamKLaunch(WorkspaceLaunch):
    """matmul_persistent with stream-K: its partials, flags and epoch (stream_k_workspace)."""
    WORKSPACE = ("ws_ptr", "flags_ptr", "epoch")

    def workspace(self, device: int, stream) -> tuple:
        return stream_k_workspace(device, stream, self.grid[0], self.block_m, self.block_n)


class SplitKLaunch(WorkspaceLaunch):
    """matmul_kernel or matmul_tma with split K: a slot of block_m x block_n float32 partial sums
    a program, and a count a tile (split_k_workspace)."""
    WORKSPACE = ("ws_ptr", "counts_ptr")
    STEADY = True

    def workspace(self, device: int, stream) -> tuple:
        return split_k_workspace(device, stream, self.grid[0], self.grid[1], self.block_m, self.block_n)

    def replayed_workspace(self, device: int, stream) -> list:
        """The workspace's addresses, kept for the device and stream while the tensors kept there
        are the ones they were taken from (weakly: a launch does not keep a released workspace
        alive), which serve this launch as long as they are not replaced: a replay of a small
        product saves a microsecond of its few."""
        key = ("split-k", device, stream)
        kept = self.__dict__.setdefault("addresses", {}).get(key)
        current = WORKSPACES.get(key)
        if kept is not None and current is not None and current[0] is kept[0]() and current[1] is kept[1]():
            return kept[2]
        partials, counts = self.workspace(device, stream)
        addresses = [partials.data_ptr(), counts.data_ptr()]
        self.addresses[key] = (weakref.ref(partials), weakref.ref(counts), addresses)
        return addresses


# (kind, device, stream) -> (partials, counts): workspace()'s
WORKSPACES: dict = {}
_EPOCHS = itertools.count(1)
_CHANGES = itertools.count(1)   # (next() of a count: one step a change, whatever thread makes it)
# WORKSPACES' latest change, a new number after any workspace is replaced or let go: addresses taken from
# WORKSPACES while it holds one value are the workspaces' own (a replay keeps split K's so: direct_replay)
generation = 0


def changed() -> None:
    """A new generation: called after WORKSPACES changed (so that addresses taken before are stale)."""
    global generation
    generation = next(_CHANGES)


def release_workspaces() -> None:
    """Let go of the stream-K and split-K workspaces (the next launch that needs one allocates it)."""
    WORKSPACES.clear()
    changed()


def stream_k_workspace(device: int, stream, programs: int, block_m: int, block_n: int):
    """(partials, flags, epoch) for the stream-K share of matmul_persistent on device and stream:
    two float32 slots of block_m x block_n a program and a flag a program (workspace). The flags
    are never cleared: a helper raises its flag to the launch's epoch, a number no earlier launch
    used."""
    partials, flags = workspace("stream-k", device, stream, 2 * programs * block_m * block_n, programs)
    return partials, flags, next(_EPOCHS) % (2**31 - 2) + 1


def split_k_workspace(device: int, stream, tiles: int, runs: int, block_m: int, block_n: int):
    """(partials, counts) for split K's hand-over on device and stream: a float32 slot of block_m x
    block_n for each run of each tile and an int32 count a tile (workspace). Counts start at 0 and
    every launch leaves them at 0 (the last run of a tile resets its count)."""
    return workspace("split-k", device, stream, tiles * runs * block_m * block_n, tiles)


def workspace(kind: str, device: int, stream, floats: int, flags: int):
    """(float32 tensor of `floats` elements or more, int32 tensor of `flags` zeros or more) on
    device (an index; -1: the CPU), kept per kind, device and stream (launches on one stream never
    overlap; the caching allocator reuses a replaced one's memory on that stream alone, after its
    last launch) and grown when needed."""
    key = (kind, device, stream)
    partials, counts = WORKSPACES.get(key, (None, None))
    if partials is None or partials.numel() < floats or counts.numel() < flags:
        import torch
        where = torch.device("cuda", device) if device >= 0 else torch.device("cpu")
        partials = torch.empty(max(floats, 0 if partials is None else partials.numel()), dtype=torch.float32,
                               device=where)
        counts = torch.zeros(max(flags, 0 if counts is None else counts.numel()), dtype=torch.int32, device=where)
        WORKSPACES[key] = partials, counts
        changed()
    return partials, counts
