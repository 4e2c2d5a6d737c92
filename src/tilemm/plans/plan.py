"""A checked call (Plan): which kernel, dtypes and shapes; run on its stream through its backend."""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import numpy as np

from tilemm.contract import numpy_layout
from tilemm.numerics import arrays
from tilemm.engine import backends, jit_lock, streams
from tilemm.engine.backends import host as host_backend
from tilemm.plans import out_writes
from tilemm.ladder import registry
from tilemm.numerics.dtypes import dtype_name, is_exact, is_integer
from tilemm.ladder.registry import Problem


class KernelUnavailable(ValueError):
    """The chosen kernel can't run this problem on this machine; the message says why.

    A subclass of ValueError, raised before any work: no GPU, a launch over the GPU's limits, a
    dtype or shape the rung refuses. `Kernel.why_not` gives the same reason without raising.
    """



# (plans are prepared and launched under the engine's JIT_LOCK: tilemm.engine.jit_lock)
JIT_LOCK = jit_lock.JIT_LOCK


@dataclass
class Plan:
    """A checked call: which kernel, which dtypes and shapes. ``execute`` runs it."""
    a: object
    b: object
    operand: arrays.Operand      # what operand 0 is (kind, device, dtype)
    kernel: registry.Kernel
    params: dict
    problem: Problem             # one matrix of the stack, in the compute dtype
    batch: tuple
    shape: tuple                 # the result's shape
    result: str                  # the result's dtype
    out: object = None
    stream: int = streams.LEGACY_DEFAULT   # the raw stream a GPU kernel is queued on
    direct: bool = False         # the numpy rung on NumPy operands already of the result's dtype: numpy.matmul
    fast: object = None          # a repeated call with no out or stream, in the fewest steps: fast(a, b) gives C,
                                 # or None where it can't (then the plan's path): the library on torch CUDA
                                 # float matrices or stacks of the compute dtype, library.torch_product(dtype); one
                                 # program's replay, Replay.quick; a host rung on CPU torch tensors, the host
                                 # backend's repeated_product (which never gives None)
    replay: object = None        # a Triton or numba-cuda rung on such tensors: the first call's launches, which
                                 # a repeated call with no out or stream replays (ladder/replay.py, simt/direct.py)
    out_of_core: bool = False    # a GPU rung on host matrices past the GPU's free memory: an OutOfCorePlan
                                 # (tilemm.spread.outofcore_plan) multiplies them a panel at a time
    exact: object = None         # NumPy and CuPy operands: the result's np.dtype as np.result_type gives it
                                 # (its char: 'q', not 'l', for longlong operands); None: the name `result`
    repeatable: bool = True      # False: a plan for its first call only, which repeated calls plan afresh (the
                                 # library chosen before Triton was loaded: choose.default.library_for_first_call_only)
    repeat: object = dataclasses.field(default=None, repr=False, compare=False)
                                 # a kept plan's repeated call with no out or stream: repeat(a, b) gives what
                                 # run_again(a, b) gives, in the fewest steps (for_repeats: repeated_call)
    into: object = dataclasses.field(default=None, repr=False, compare=False)
                                 # a kept plan's repeated call with a torch out and no stream: into(a, b, out)
                                 # writes the product into out by the repeated call's short path (True); None:
                                 # the plan's path (tilemm.plans.out_writes)

    def execute(self, poison: bool = False):
        """Run the kernel and return the result as matmul does. ``poison`` fills the output
        with NaN (or 0xA5 bytes) first, so an entry the kernel never writes can't pass a check."""
        return self.run(self.a, self.b, self.out, self.stream, poison)[0]

    def run(self, a, b, out, stream, poison: bool = False):
        """(result, record): the kernel run on operands a and b of this plan's layout (into out,
        on stream), and record() giving its launches as a Replay where a repeated call may
        replay them (else record is None)."""
        with self.on_stream(stream):
            launch, result, record = self.prepared(a, b, poison, False)
            launch()
            c = result()
            value = arrays.convert(c if c.shape == self.shape else c.reshape(self.shape), self.operand,
                                   self.exact or self.result)
            if out is None and self.operand.kind == "numpy":   # NumPy's scalar for 1-D @ 1-D, its stacks' order
                if len(self.batch) > 1:
                    value = numpy_layout.stack_ordered(value, (a, b))
                return (arrays.owned(value) if self.shape else value[()]), record
            if out is None:
                return value, record
            arrays.assign(out, value)
            return out, record

    def run_again(self, a, b, out=None, stream=None):
        """This plan's product on new operands of the same kinds, dtypes, shapes and strides (a
        repeated call, tilemm.plans.calls): in the fewest steps where it has them, numpy.matmul
        (direct), the library's product (fast) or the first call's launches replayed (replay), and
        for a torch out written into it (into); else run through the backend again, on the
        caller's stream. A plan that keeps its own
        operands (tilemm.plan's) refuses others of another layout, and an out of another, before
        any work (ValueError); a repeated call's kept plan has none: its key matched them."""
        if self.a is not None:
            self.check_layout(a, b, out)
        if stream is not None and self.kernel.device != "cuda":   # a host plan runs on its own stream:
            streams.handle_of(stream)      # the caller's checked as a first call checks it (stream=1.5 once ran)
        if self.direct:                    # the numpy rung on NumPy operands of the result's dtype
            return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)
        if out is not None and stream is None and self.into is not None and self.into(a, b, out):
            return out
        if out is None and stream is None:     # on torch's current stream, the caller's
            fast = self.fast
            if fast is not None:
                c = fast(a, b)
                if c is not None:
                    return c
            elif self.replay is not None:  # (where a quick call refused, its replay would: the same guard)
                c = self.replay(a, b)
                if c is not None:
                    return c
        return self.run_planned(a, b, out, stream)

    def check_layout(self, a, b, out) -> None:
        """ValueError where a, b or out differ from the plan's own (their kind, dtype, shape,
        strides and device: what a repeated call's key holds); an out where the plan has none:
        of the operands' kind and device, the result's dtype and shape."""
        for name, new, own in (("a", a, self.a), ("b", b, self.b)):
            if not same_layout(new, own):
                raise ValueError(f"run_again: operand {name} is not laid out as the plan's (its kind, dtype, shape, "
                                 f"strides and device); plan it with tilemm.plan")
        if out is None:
            return
        if self.out is not None:
            fits = same_layout(out, self.out)
        else:
            given = arrays.describe(out, "out")
            fits = ((given.kind, given.device, given.dtype, tuple(given.shape))
                    == (self.operand.kind, self.operand.device, self.result, tuple(self.shape)))
        if not fits:
            raise ValueError("run_again: out is not laid out as the plan's (its kind, dtype, shape and device: "
                             f"{self.operand.kind} {self.result} {tuple(self.shape)} on {self.operand.device}, or as the "
                             "out it was planned with); plan it with tilemm.plan")

    def run_planned(self, a, b, out=None, stream=None):
        """A repeated call through the backend, as a first call runs (what run_again runs where
        no shorter step takes the call), on the caller's stream."""
        if self.kernel.device == "cuda":   # the stream is the caller's now, not at the first call
            stream = streams.caller_stream(self.operand.kind, self.operand.device, stream)
        else:
            stream = self.stream
        return self.run(a, b, out, stream)[0]

    def for_repeats(self, record) -> Plan:
        """The plan that repeated calls run (run_again, and repeat for those with no out or
        stream): no operand kept alive, and the first call's launches (record()) as its replay
        where they can be replayed."""
        try:
            replay = record() if record is not None else None
        except (AttributeError, KeyError, TypeError, ValueError):   # another Triton or numba-cuda's internals:
            replay = None                                              # repeated calls take the usual path
        kept = dataclasses.replace(self, a=None, b=None, out=None, replay=replay,
                                   fast=self.fast or getattr(replay, "quick", None))
        if kept.fast is None and self.kernel.device == "cpu":   # a host rung on CPU torch tensors: in one step
            kept.fast = host_backend.repeated_product(kept, self.a.dtype, self.b.dtype)
        kept.repeat = kept.repeated_call()
        kept.into = out_writes.out_writer(kept, self.out)
        return kept

    def repeated_call(self):
        """run_again(a, b) as one function of the operands, in the fewest steps: numpy.matmul
        (direct); one program's replay, the quick call with the plan's path where its guard
        declines (Replay.quick_call's declined, a frame fewer than the quick call and run_again's
        test of what it gives); else fast or the replay, then the plan's path where they give None."""
        if self.direct:
            return np.matmul
        declined, fast, replay = self.run_planned, self.fast, self.replay
        if fast is not None and self.kernel.device == "cpu":   # the host's product, which never declines
            return fast
        if fast is not None and fast is getattr(replay, "quick", None) and hasattr(replay, "quick_call"):
            repeat = replay.quick_call(declined=declined)
            if repeat is not None:
                return repeat
        first = fast if fast is not None else replay
        if first is None:
            return declined

        def repeat(a, b):
            c = first(a, b)
            return c if c is not None else declined(a, b)
        return repeat

    def prepare(self, poison: bool = False, copy: bool = False):
        """(launch, result): operands moved and cast for the kernel, the output allocated.
        ``launch()`` runs the kernel alone, as often as a benchmark likes; ``result()`` gives C
        in the compute dtype with shape batch + (m, n). ``copy`` gives the kernel operands of its
        own (benchmarks rotate several such sets so the inputs do not sit in cache). Both run on
        the plan's stream, whatever stream is current when they are called."""
        with self.on_stream(self.stream):
            launch, result, _ = self.prepared(self.a, self.b, poison, copy)
        if self.kernel.device == "cpu":
            return launch, result

        def launch_on_stream():
            with self.on_stream(self.stream):
                launch()

        def result_on_stream():
            with self.on_stream(self.stream):
                return result()
        return launch_on_stream, result_on_stream

    def on_stream(self, stream):
        """Where this plan's work is queued: stream made current (a GPU kernel's), else nothing."""
        if self.kernel.device == "cpu":
            return contextlib.nullcontext()
        # CuPy's current stream matters where CuPy does the work: its arrays, and the library rung
        cupy_too = self.operand.kind == "cupy" or (self.kernel.backend == "library" and is_integer(self.problem.dtype))
        return streams.queued_on(stream, self.operand.device, cupy_too)

    def prepared(self, a, b, poison: bool, copy: bool):
        """The backend's (launch, result, record) for operands a and b (tilemm.engine.backends)."""
        a2, b2 = self._as_result_dtype(a), self._as_result_dtype(b)
        a2 = a2 if len(a2.shape) > 1 else a2[None, :]
        b2 = b2 if len(b2.shape) > 1 else b2[:, None]
        prepare = backends.prepare_for(self.kernel.backend, self.kernel.device)
        if self.kernel.backend not in ("numba-cuda", "triton"):
            return prepare(self, a2, b2, poison, copy)
        with JIT_LOCK:
            launch, result, record = prepare(self, a2, b2, poison, copy)

        def locked_launch():
            with JIT_LOCK:
                launch()
        return locked_launch, result, record

    def _as_result_dtype(self, x):
        """x cast to the result's dtype where the rung would skip that rounding: numpy.matmul casts
        its operands to the result's dtype before it multiplies, and a float result a rung computes
        in a wider dtype (float16 in float32) must see those values (float64 operands with
        out_dtype="float16": their float16 roundings; int32 ones: inf past 65504). An integer
        result wraps the same either way, and a rung computing the result's own dtype casts."""
        if self.result == self.problem.dtype or is_exact(self.result) or dtype_name(x.dtype) == self.result:
            return x
        return arrays.convert(x, self.operand, self.result)


def same_layout(new, own) -> bool:
    """Whether new is laid out as own: its kind, dtype, shape, strides and device (what a repeated
    call's key holds), whatever torch's modes: under autocast or a forward-mode AD level a torch
    tensor's key holds none of them, so they are read from the tensors themselves there."""
    from tilemm.plans import cache      # (the keys' own functions)
    if type(new) is not type(own):
        return False
    key_new, key_own = cache.operand_key(new), cache.operand_key(own)
    if key_new is None or key_own is None:
        return (new.dtype, new.shape, new.stride(), new.device) == (own.dtype, own.shape, own.stride(), own.device)
    return key_new == key_own
