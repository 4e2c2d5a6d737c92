"""Counting what a kernel does to memory, in the CUDA simulator (and on the host, for the CPU rung).

- Global arrays (A, B, C) count their loads and stores, and for each warp-wide access the 32-byte
  sectors it touches (one or two when neighbouring threads read neighbouring elements: coalesced).
- Shared arrays count theirs, and see races: an element one thread writes and another reads (or
  writes) with no ``cuda.syncthreads()`` between them.
- In Triton's interpreter, the elements each masked load and store moves, by operand; an access
  past every operand raises IndexError, as the simulator does for an index past an array's edge.

The simulator runs each CUDA thread as a Python thread, so a count is made where the access is
made, attributed to the thread doing it. Used only where the simulator is on: the module imports
numba-cuda's simulator classes on first use.
"""
from __future__ import annotations

import contextlib
import linecache
import re
import sys
import threading
from collections import defaultdict
from dataclasses import dataclass, field

SECTOR = 32          # bytes: the unit a warp's global access is served in
MAX_RACES = 3        # races reported: the first few say what is missing


@dataclass
class Tally:
    """Everything counted during one launch (or a run of launches)."""
    learner_file: str = ""
    loads: dict = field(default_factory=lambda: defaultdict(int))        # "A", "B", "C" -> count
    stores: dict = field(default_factory=lambda: defaultdict(int))
    shared_loads: dict = field(default_factory=lambda: defaultdict(int))  # shared array name -> count
    shared_stores: dict = field(default_factory=lambda: defaultdict(int))
    sectors: dict = field(default_factory=dict)     # (block, warp, array, op, n) -> set of sectors
    races: list = field(default_factory=list)
    per_element: dict = field(default_factory=dict)   # "A" -> array of loads per element, where asked
    watched_block: tuple | None = None                 # per_element counts only this block's loads
    barriers: dict = field(default_factory=dict)       # (block, thread) -> barriers it passed, at its end
    lock: threading.Lock = field(default_factory=threading.Lock)

    def line(self) -> int | None:
        """The learner's line making the current access (the deepest frame in their file)."""
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename == self.learner_file:
                return frame.f_lineno
            frame = frame.f_back
        return None

    def sectors_per_access(self) -> dict:
        """Per global array, the mean number of 32-byte sectors a warp's access touches."""
        total, count = defaultdict(int), defaultdict(int)
        for (_, _, name, _, _), sectors in self.sectors.items():
            total[name] += len(sectors)
            count[name] += 1
        return {name: total[name] / count[name] for name in total}

    def divergent_barriers(self) -> dict | None:
        """A block whose threads passed different numbers of barriers (a cuda.syncthreads() inside a
        branch some threads skip: the simulator lets the others through, a GPU may hang), or None."""
        by_block = defaultdict(dict)
        for (block, thread), passed in self.barriers.items():
            by_block[block][thread] = passed
        for block, threads in by_block.items():
            if len(set(threads.values())) > 1:
                few = min(threads, key=threads.get)
                many = max(threads, key=threads.get)
                return {"block": list(block[:2]), "thread": list(few[:2]), "passed": threads[few],
                        "other": list(many[:2]), "other_passed": threads[many]}
        return None

    def summary(self) -> dict:
        return {"loads": dict(self.loads), "stores": dict(self.stores),
                "shared_loads": sum(self.shared_loads.values()), "shared_stores": sum(self.shared_stores.values()),
                "shared_by_array": {k: [self.shared_loads[k], self.shared_stores[k]]
                                    for k in set(self.shared_loads) | set(self.shared_stores)},
                "sectors_per_access": self.sectors_per_access(), "races": self.races,
                "divergent_barriers": self.divergent_barriers()}


def simulator_thread():
    """(block, thread, warp, barriers passed) of the simulated CUDA thread running now."""
    t = threading.current_thread()
    block = tuple(getattr(t, "blockIdx", (0, 0, 0)))
    thread = tuple(getattr(t, "threadIdx", (0, 0, 0)))
    return block, thread, getattr(t, "thread_id", 0) // 32, getattr(t, "barriers_passed", 0)


def flat_offset(array, idx) -> int:
    """The byte offset of element idx of a NumPy array."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    return sum(int(i) * s for i, s in zip(idx, array.strides))


def global_array(ary, name: str, tally: Tally):
    """ary wrapped so that the simulator counts each load and store of it under `name`."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    class Counted(FakeCUDAArray):
        def note(self, idx, op):
            block, _, warp, _ = simulator_thread()
            t = threading.current_thread()
            seen = t.__dict__.setdefault("tilemm_accesses", defaultdict(int))
            n = seen[(name, op)]
            seen[(name, op)] = n + 1
            sector = flat_offset(self._ary, idx) // SECTOR
            with tally.lock:
                (tally.loads if op == "load" else tally.stores)[name] += 1
                if op == "load" and name in tally.per_element and tally.watched_block in (None, block):
                    tally.per_element[name][idx] += 1
                tally.sectors.setdefault((block, warp, name, op, n), set()).add(sector)

        def __getitem__(self, idx):
            self.note(idx, "load")
            return super().__getitem__(idx)

        def __setitem__(self, idx, value):
            self.note(idx, "store")
            return super().__setitem__(idx, value)

    return Counted(ary)


class SharedArray:
    """A shared array of the simulator that counts its accesses and sees races between threads."""

    def __init__(self, ary, name: str, tally: Tally):
        self.ary, self.name, self.tally = ary, name, tally
        self.shape, self.dtype, self.ndim, self.size = ary.shape, ary.dtype, ary.ndim, ary.size
        self.block = None
        self.writer = {}     # element -> (thread, barriers passed, line)
        self.readers = {}    # element -> (barriers passed, {thread: line})

    def element(self, idx):
        return flat_offset(self.ary, idx) // self.ary.itemsize

    def access(self, idx, write: bool):
        block, thread, _, epoch = simulator_thread()
        line = self.tally.line()
        el = self.element(idx)
        with self.tally.lock:
            if block != self.block:            # the simulator reuses a shared array for the next block
                self.block, self.writer, self.readers = block, {}, {}
            (self.tally.shared_stores if write else self.tally.shared_loads)[self.name] += 1
            w = self.writer.get(el)
            if w and w[0] != thread and w[1] == epoch:
                self.race("wrote" if write else "read", thread, line, idx, "wrote", w[0], w[2], block)
            if write:
                r = self.readers.get(el)
                if r and r[0] == epoch:
                    other = next(((t, ln) for t, ln in r[1].items() if t != thread), None)
                    if other:
                        self.race("wrote", thread, line, idx, "read", other[0], other[1], block)
                self.writer[el] = (thread, epoch, line)
            else:
                r = self.readers.get(el)
                if not r or r[0] != epoch:
                    r = self.readers[el] = (epoch, {})
                r[1].setdefault(thread, line)

    def race(self, did, thread, line, idx, other_did, other, other_line, block):
        if len(self.tally.races) >= MAX_RACES:
            return
        index = ", ".join(str(int(i)) for i in (idx if isinstance(idx, tuple) else (idx,)))
        self.tally.races.append({
            "array": self.name, "element": index, "block": list(block[:2]),
            "thread": list(thread[:2]), "did": did, "line": line, "code": self.code(line),
            "other": list(other[:2]), "other_did": other_did, "other_line": other_line,
            "other_code": self.code(other_line)})

    def code(self, line):
        return linecache.getline(self.tally.learner_file, line).split("  #")[0].strip() if line else ""

    def __getitem__(self, idx):
        self.access(idx, False)
        return self.ary[idx]

    def __setitem__(self, idx, value):
        self.access(idx, True)
        self.ary[idx] = value

    def __len__(self):
        return len(self.ary)


def shared_name(filename: str, lineno: int) -> str:
    """The variable a shared array is assigned to on its line (`tile_a = cuda.shared.array(...)`)."""
    match = re.match(r"\s*(\w+)\s*=", linecache.getline(filename, lineno))
    return match.group(1) if match else f"line {lineno}"


@contextlib.contextmanager
def instrumented(tally: Tally):
    """While inside: the simulator's shared arrays count and watch for races, and each thread counts
    the barriers it passes."""
    from numba.cuda.simulator import kernel, kernelapi
    from numba.np import numpy_support
    from numba.core import types

    original_array, original_sync = kernelapi.FakeCUDAShared.array, kernel.BlockThread.syncthreads
    original_run = kernel.BlockThread.run

    def array(self, shape, dtype, alignment=None):
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        if shape == 0:                          # dynamic shared memory: left as the simulator has it
            return original_array(self, shape, dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)   # one array a line, as the simulator does
        with tally.lock:              # the block's threads ask at once: exactly one of them makes it
            found = self.__dict__.setdefault("tilemm_arrays", {}).get(key)
            if found is None:
                import numpy as np
                found = SharedArray(np.zeros(shape, dtype), shared_name(*key), tally)
                self.tilemm_arrays[key] = found
        return found

    def syncthreads(self):
        original_sync(self)
        self.barriers_passed = getattr(self, "barriers_passed", 0) + 1

    def run(self):
        original_run(self)
        with tally.lock:
            tally.barriers[(tuple(self.blockIdx), tuple(self.threadIdx))] = getattr(self, "barriers_passed", 0)

    kernelapi.FakeCUDAShared.array, kernel.BlockThread.syncthreads = array, syncthreads
    kernel.BlockThread.run = run
    try:
        yield tally
    finally:
        kernelapi.FakeCUDAShared.array, kernel.BlockThread.syncthreads = original_array, original_sync
        kernel.BlockThread.run = original_run


class HostArray:
    """A NumPy array that counts its element loads and stores: the CPU rung's function, run as
    plain Python (its `py_func`), reads and writes through these."""

    def __init__(self, ary, name: str, tally: Tally):
        self.ary, self.name, self.tally = ary, name, tally
        self.shape, self.dtype = ary.shape, ary.dtype

    def __getitem__(self, idx):
        self.tally.loads[self.name] += 1
        if self.name in self.tally.per_element:
            self.tally.per_element[self.name][idx] += 1
        return self.ary[idx]

    def __setitem__(self, idx, value):
        self.tally.stores[self.name] += 1
        self.ary[idx] = value


@contextlib.contextmanager
def triton_counted(tally: Tally, operands: dict):
    """While inside: the elements each load and store of Triton's interpreter moves, counted under
    the name of the operand (a torch tensor) its addresses fall in."""
    import numpy as np
    from triton.runtime import interpreter

    spans = {name: (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for name, t in operands.items()}

    def tally_by_operand(counts, ptrs, mask):
        """Each element the mask lets through, under the operand its address falls in ("outside": none)."""
        moved = ptrs.data[mask.data] if mask.data.shape == ptrs.data.shape else ptrs.data
        inside = np.zeros(moved.shape, bool)
        for name, (lo, hi) in spans.items():
            hit = (moved >= lo) & (moved < hi)
            counts[name] += int(hit.sum())
            inside |= hit
        if not inside.all():      # on a GPU a fault or garbage; here, the same as the simulator's IndexError
            raise IndexError(f"{int((~inside).sum())} elements of this access lie outside A, B and C")

    builder = interpreter.InterpreterBuilder
    original_load, original_store = builder.create_masked_load, builder.create_masked_store

    def load(self, ptrs, mask, *args, **kwargs):
        tally_by_operand(tally.loads, ptrs, mask)
        return original_load(self, ptrs, mask, *args, **kwargs)

    def store(self, ptrs, value, mask, *args, **kwargs):
        tally_by_operand(tally.stores, ptrs, mask)
        return original_store(self, ptrs, value, mask, *args, **kwargs)

    builder.create_masked_load, builder.create_masked_store = load, store
    try:
        yield tally
    finally:
        builder.create_masked_load, builder.create_masked_store = original_load, original_store
