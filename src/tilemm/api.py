"""tilemm.matmul: argument checks at the boundary, array interop, dispatch to a rung."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import sys
import threading
from dataclasses import dataclass

import numpy as np

from . import _compat, arrays, choice, contract, machine, registry, streams
from .dtypes import (FLOATS, HOST_ONLY, INTS, SUPPORTED, check_supported, dtype_name, int_width, is_complex, is_exact,
                     is_integer, result_dtype)
from .registry import Problem

_SIGNATURE = contract.SIGNATURE


class KernelUnavailable(ValueError):
    """The chosen kernel can't run this problem on this machine; the message says why."""


def matmul(a, b, /, out=None, *, kernel: str | None = None, out_dtype=None, stream=None, **params):
    """``a @ b`` as numpy.matmul computes it, with the kernel of your choice.

    a, b: NumPy arrays, PyTorch tensors or CuPy arrays (both of one kind, on one device),
        1-D, 2-D or stacks of matrices, any strides. The result is the same kind of array
        on the same device, with numpy.matmul's shape and dtype (torch's for bfloat16); for
        1-D @ 1-D a 0-d tensor or CuPy array, and for NumPy operands a NumPy scalar, as NumPy gives.
        NumPy's dtypes: integers, bool (the OR of ANDs), float16/32/64, complex64/128 on every
        device; longdouble and clongdouble on the host (the numpy rung). For NumPy operands the
        result's dtype object is np.result_type's, char and scalar type included. An ndarray
        subclass (np.matrix) comes back through its __array_wrap__, as from numpy.matmul.
    kernel: a name from ``tilemm.kernels()``; None picks the default for the inputs' device;
        "auto" the fastest of the fast rungs for this problem, timed on the first call and then
        read from the tuning cache (``tilemm.auto``).
    out: an array to write the result into, by keyword or third by position (or a tuple of one),
        as numpy.matmul takes it: computed in the result's dtype and cast into out where
        casting="same_kind" allows (else contract.OutputCastingError, a TypeError); the result's
        shape, or leading dimensions the stack broadcasts to (a (1, 1) out for 1-D @ 1-D). The same
        rules for torch and CuPy outs, of the operands' kind and device (torch.matmul's own would
        resize out and refuse another dtype: tilemm.contract).
    out_dtype: compute in and return this dtype, as ``numpy.matmul(a, b, dtype=...)`` does: int8
        inputs with ``out_dtype="int32"`` give the exact int32 sums instead of int8's wrapped ones.
        It must be a cast NumPy allows ("same_kind": int8 -> int32, float32 -> float64, not float -> int).
    stream: where a GPU kernel's work is queued (a torch, CuPy or numba-cuda stream, or a
        cudaStream_t as an int); None: torch's current stream for torch tensors, CuPy's for CuPy
        arrays, the legacy default stream for host arrays (``tilemm.streams``). The call does not
        synchronize the device; host operands wait for their own result only.
    params: the kernel's parameters, e.g. ``block_m=64`` (see ``tilemm.kernels()``).

    Integers are exact and wrap as NumPy's do; floats lie within the bound documented in
    ``tilemm.accuracy``. Torch tensors that require grad get torch's autograd (float products:
    the operands' gradients computed by tilemm with the same kernel and parameters), and under
    ``torch.compile`` a call is one custom op (``tilemm.torch_ops``). Errors are raised before
    any kernel runs.
    """
    if out is not None:
        out = contract.single_out(out)
    if _compiling():                      # torch.compile: one op in the graph; Dynamo never sees the caches
        from . import torch_ops
        return torch_ops.traced_matmul(a, b, kernel, out, out_dtype, stream, params)
    key = _call_key(a, b, kernel, out, out_dtype, params)
    known = _PLANS.get(key) if key is not None else None
    if known is None:
        if _records_gradient(a, b):       # (its key never meets a plain call's: see _new_key_functions)
            from . import torch_ops
            return torch_ops.differentiable_matmul(a, b, kernel, out, out_dtype, stream, params)
        wrap = contract.subclass_wrap(a, b)   # (ndarray subclasses have no key: never a known plan)
        if wrap is not None:                  # np.matrix and other subclasses: their data, then their wrap
            value = matmul(contract.plain(a), contract.plain(b), out, kernel=kernel, out_dtype=out_dtype,
                           stream=stream, **params)
            return value if out is not None else wrap(value)
        native_a, native_b = arrays.native_order(a), arrays.native_order(b)
        if native_a is not a or native_b is not b:     # a copy each call: no plan to replay on the originals
            key, a, b = None, native_a, native_b
        checked = plan(a, b, kernel=kernel, out=out, out_dtype=out_dtype, stream=stream, **params)
        value = checked.execute()
        if key is not None:
            if len(_PLANS) >= PLAN_CACHE_SIZE:
                _PLANS.clear()
            replay = checked.recorded_launches()
            _PLANS[key] = dataclasses.replace(checked, a=None, b=None, out=None,    # keeps no operand alive
                                              replay=replay, fast=checked.fast or getattr(replay, "quick", None))
        return value
    if known.direct:                       # the numpy rung on NumPy operands of the result's dtype
        return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)
    if out is None and stream is None:     # on torch's current stream, the caller's
        fast = known.fast
        if fast is not None:
            c = fast(a, b)
            if c is not None:
                return c
        elif known.replay is not None:     # (where a quick call refused, its replay would: the same guard)
            c = known.replay(a, b)
            if c is not None:
                return c
    again = object.__new__(Plan)           # dataclasses.replace would run every field's __init__ again
    again.__dict__.update(known.__dict__, a=a, b=b, out=out)
    if known.kernel.device == "cuda":      # the stream is the caller's now, not at the first call
        again.stream = streams.caller_stream(known.operand.kind, known.operand.device, stream)
    return again.execute()


def _torch_compiling() -> bool:
    """Whether torch.compile or torch.export is tracing this call. Once torch is imported,
    torch.compiler.is_compiling takes this function's place as _compiling: the cheapest check
    that sees both (Dynamo reads it as True; torch.export without Dynamo sets what it returns)."""
    compiler = getattr(sys.modules.get("torch"), "compiler", None)    # (None while torch is still importing)
    if compiler is None:
        return False
    if compiler.is_compiling():            # bound by an eager call: Dynamo would replay a traced one's binding
        return True
    global _compiling
    _compiling = compiler.is_compiling
    return False


_compiling = _torch_compiling


# A repeated call (same kinds, devices, dtypes, shapes, strides, kernel, parameters) reuses the
# plan its first call checked: a dictionary look-up instead of the checks, the default kernel's
# choice and the parameters' resolution. What depends on the operands' memory (alignment, the
# stream) is worked out at each call, after the look-up.
PLAN_CACHE_SIZE = 512
_PLANS: dict = {}


def release_memory() -> None:
    """Let go of the GPU memory tilemm keeps between calls: the repeated calls' plans and replays
    (and the scratch of their operand copies, kept per thread and stream, up to 64 MiB each), and
    the stream-K and split-K workspaces. Later calls plan and allocate anew. The memory goes back
    to torch's caching allocator; ``torch.cuda.empty_cache()`` then returns it to the driver."""
    from . import scaled
    from .ladder import _tensorcore_support, replay
    _PLANS.clear()
    scaled.release_replays()
    replay.release()
    _tensorcore_support.release_workspaces()


def _call_key(a, b, kernel, out, out_dtype, params):
    """What decides a call's plan, as a hashable key; None for a call not worth caching (an
    unhashable parameter, an array kind plan() will refuse)."""
    try:
        if out is None and not params and type(a) is type(b):     # the usual call, in the fewest steps
            return ((_KEY_OF.get(type(a)) or _key_functions(type(a), a))[1](a, b), kernel,
                    out_dtype if out_dtype is None else contract.dtype_key(out_dtype))
        return (_operand_key(a), _operand_key(b), kernel,
                None if out is None else (_operand_key(out), getattr(getattr(out, "flags", None), "writeable", True)),
                contract.dtype_key(out_dtype), tuple(sorted(params.items())) if params else ())
    except (TypeError, AttributeError):
        return None


def _operand_key(x):
    return _key_functions(type(x), x)[0](x)


def _key_functions(kind, x) -> tuple:
    """(one operand's part of the key, two operands' of that kind): by the exact type, one look-up
    (a repeated call's key costs about half of an isinstance chain's, and a third less with both
    operands in one function)."""
    known = _KEY_OF.get(kind)
    if known is None:
        known = _KEY_OF[kind] = _new_key_functions(x)
    return known


# array type -> _key_functions' pair for it
_KEY_OF: dict = {}


def _no_key(*operands):
    raise TypeError("not cached")


def _new_key_functions(x) -> tuple:
    if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
        return _no_key, _no_key        # a subclass (np.matrix): its result goes through its own wrap, uncached
    if isinstance(x, np.ndarray):      # the char too: np.dtype('l') == np.dtype('q'), NumPy returns either
        return ((lambda x: (np.ndarray, x.dtype, x.dtype.char, x.shape, x.strides)),
                (lambda a, b: (np.ndarray, a.dtype, a.dtype.char, a.shape, a.strides, b.dtype, b.dtype.char, b.shape,
                               b.strides)))
    torch = arrays._torch()
    if torch is not None and isinstance(x, torch.Tensor):
        # a tensor that would record a gradient goes through autograd: its key never meets a plain one's
        return ((lambda x: (torch.Tensor, x.dtype, x.shape, x.stride(), x.device,
                            x.requires_grad and torch.is_grad_enabled())),
                (lambda a, b: (torch.Tensor, a.dtype, a.shape, a.stride(), a.device, b.dtype, b.shape, b.stride(),
                               b.device, (a.requires_grad or b.requires_grad) and torch.is_grad_enabled())))
    cupy = arrays._cupy()
    if cupy is not None and isinstance(x, cupy.ndarray):
        return ((lambda x: (cupy.ndarray, x.dtype, x.dtype.char, x.shape, x.strides, x.device.id)),
                (lambda a, b: (cupy.ndarray, a.dtype, a.dtype.char, a.shape, a.strides, a.device.id, b.dtype,
                               b.dtype.char, b.shape, b.strides, b.device.id)))
    raise TypeError("not an array tilemm takes")


# Numba-cuda and Triton load a compiled program into the context on its first launch, and neither
# does that safely from two threads at once (numba-cuda: "key already in dictionary: <CUlibrary>").
# Their plans are prepared and launched under this lock: held for the microseconds of a launch,
# and for the compile on a first one.
_JIT_LOCK = threading.RLock()


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
                                 # program's replay, Replay.quick
    replay: object = None        # a Triton or numba-cuda rung on such tensors: the first call's launches, which
                                 # a repeated call with no out or stream replays (ladder/replay.py, simt/direct.py)
    out_of_core: bool = False    # a GPU rung on host matrices past the GPU's free memory: tilemm.outofcore
                                 # multiplies them a panel at a time (the library's products)
    exact: object = None         # NumPy and CuPy operands: the result's np.dtype as np.result_type gives it
                                 # (its char: 'q', not 'l', for longlong operands); None: the name `result`

    def execute(self, poison: bool = False):
        """Run the kernel and return the result as matmul does. ``poison`` fills the output
        with NaN (or 0xA5 bytes) first, so an entry the kernel never writes can't pass a check."""
        if self.out_of_core:
            from . import outofcore
            whole = self.out is not None and tuple(self.out.shape) == self.shape and \
                dtype_name(self.out.dtype) == self.result
            if self.out is None or whole:
                return outofcore.matmul(self.a, self.b, out=self.out)
            arrays.assign(self.out, outofcore.matmul(self.a, self.b))     # cast or repeated into out
            return self.out
        with self._on_stream():
            launch, result = self._prepare(poison, False)
            launch()
            value = arrays.convert(result().reshape(self.shape), self.operand, self.exact or self.result)
            if self.out is None:
                return value[()] if self.operand.kind == "numpy" and not self.shape else value  # NumPy's scalar
            arrays.assign(self.out, value)
            return self.out

    def recorded_launches(self):
        """After execute(): its launches as a Replay, where they can be replayed (else None)."""
        launched = getattr(self, "_launched", None)
        try:
            return launched() if launched else None
        except (AttributeError, KeyError, TypeError, ValueError):   # another Triton or numba-cuda's internals:
            return None                                                # repeated calls take the usual path

    def prepare(self, poison: bool = False, copy: bool = False):
        """(launch, result): operands moved and cast for the kernel, the output allocated.
        ``launch()`` runs the kernel alone, as often as a benchmark likes; ``result()`` gives C
        in the compute dtype with shape batch + (m, n). ``copy`` gives the kernel operands of its
        own (benchmarks rotate several such sets so the inputs do not sit in cache). Both run on
        the plan's stream, whatever stream is current when they are called."""
        if self.out_of_core:
            raise KernelUnavailable(f"matmul: {self.problem.m}x{self.problem.n}x{self.problem.k} on host matrices "
                                    "passes the GPU's free memory: execute() runs it out of core (tilemm.outofcore), "
                                    "a panel at a time; prepare() gives in-core launches only")
        with self._on_stream():
            launch, result = self._prepare(poison, copy)
        if self.kernel.device == "cpu":
            return launch, result

        def launch_on_stream():
            with self._on_stream():
                launch()

        def result_on_stream():
            with self._on_stream():
                return result()
        return launch_on_stream, result_on_stream

    def _on_stream(self):
        if self.kernel.device == "cpu":
            return contextlib.nullcontext()
        # CuPy's current stream matters where CuPy does the work: its arrays, and the library rung
        cupy_too = self.operand.kind == "cupy" or (self.kernel.backend == "library" and is_integer(self.problem.dtype))
        return streams.queued_on(self.stream, self.operand.device, cupy_too)

    def _prepare(self, poison: bool, copy: bool):
        a2, b2 = self._as_result_dtype(self.a), self._as_result_dtype(self.b)
        a2 = a2 if len(a2.shape) > 1 else a2[None, :]
        b2 = b2 if len(b2.shape) > 1 else b2[:, None]
        prepare = _PREPARE.get(self.kernel.backend) or _PREPARE[self.kernel.device]
        if self.kernel.backend not in ("numba-cuda", "triton"):
            return prepare(self, a2, b2, poison, copy)
        with _JIT_LOCK:
            launch, result = prepare(self, a2, b2, poison, copy)

        def locked_launch():
            with _JIT_LOCK:
                launch()
        return locked_launch, result

    def _as_result_dtype(self, x):
        """x cast to the result's dtype where the rung would skip that rounding: numpy.matmul casts
        its operands to the result's dtype before it multiplies, and a float result a rung computes
        in a wider dtype (float16 in float32) must see those values (float64 operands with
        out_dtype="float16": their float16 roundings; int32 ones: inf past 65504). An integer
        result wraps the same either way, and a rung computing the result's own dtype casts."""
        if self.result == self.problem.dtype or is_exact(self.result) or dtype_name(x.dtype) == self.result:
            return x
        return arrays.convert(x, self.operand, self.result)


def plan(a, b, *, kernel: str | None = None, out=None, out_dtype=None, stream=None, **params) -> Plan:
    """Check everything about ``matmul(a, b, ...)`` and return what would run."""
    if contract.subclass_wrap(a, b) is not None:     # an ndarray subclass's wrap is matmul()'s: its data here
        a, b = contract.plain(a), contract.plain(b)
    out = contract.single_out(out)
    a, b = arrays.native_order(a), arrays.native_order(b)
    da, db = arrays.describe(a, "0"), arrays.describe(b, "1")
    if stream is not None:
        streams.handle_of(stream)      # a bad stream= is refused before anything else
    check_supported(da.dtype, "0")
    check_supported(db.dtype, "1")
    if da.kind != db.kind:
        raise TypeError(f"matmul: operand 0 is a {da.kind} array and operand 1 a {db.kind} array; "
                        "pass both as the same kind")
    if da.device != db.device:
        raise ValueError(f"matmul: operand 0 is on {da.device} and operand 1 on {db.device}; "
                         "move them to one device")
    if da.kind == "torch":
        _check_no_gradient(a, b)
        a, b = a.detach(), b.detach()     # grad mode is off: numba-cuda cannot view a tensor that requires grad
    result = result_dtype(da.dtype, db.dtype)
    if out_dtype is not None:         # before the shapes, as NumPy resolves dtype= first
        result = _checked_out_dtype(out_dtype, result)
        if result == "bfloat16" and da.kind != "torch":
            raise TypeError(f"matmul: out_dtype=bfloat16 needs torch tensors: {da.kind} has no bfloat16 "
                            "to return the result in")
    exact = None
    if da.kind in ("numpy", "cupy"):  # the dtype object NumPy returns, not merely one equal to it
        exact = contract.result_type(a.dtype, b.dtype, None if out_dtype is None else (out_dtype, result))
    for i, d in enumerate((da, db)):
        if len(d.shape) == 0:
            raise ValueError(f"matmul: Input operand {i} does not have enough dimensions "
                             f"(has 0, gufunc core with signature {_SIGNATURE} requires 1)")
    m, k = (1, da.shape[0]) if len(da.shape) == 1 else da.shape[-2:]
    k2, n = (db.shape[0], 1) if len(db.shape) == 1 else db.shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
                         f"signature {_SIGNATURE} (size {k2} is different from {k}); "
                         f"shapes {da.shape} and {db.shape}")
    batch = _broadcast_batch(da.shape[:-2], db.shape[:-2], da.shape, db.shape)
    core = ((m,) if len(da.shape) > 1 else ()) + ((n,) if len(db.shape) > 1 else ())
    shape = batch + core
    if out is not None:               # NumPy's rules for out, before any kernel is looked at
        contract.check_out(out, arrays.describe(out, "out"), da, batch, core, result)

    if kernel == "auto":
        if params:
            raise TypeError(f"matmul: kernel='auto' takes no kernel parameters (got {', '.join(sorted(params))}); "
                            "name a kernel to set them")
        from . import auto
        chosen = auto.choose(lambda name: plan(a, b, kernel=name, out_dtype=out_dtype, stream=stream), da.device,
                             result, m, n, k,
                             auto.layout(a) + auto.layout(b), _leading_dims(a, b, k, n))
    else:
        chosen = (registry.get(kernel) if kernel is not None else
                  _default_kernel(da.device, result, m, n, k, da.dtype if da.dtype == db.dtype else None,
                                  _leading_dims(a, b, k, n) if da.device != "cpu" else None, math.prod(batch) > 1))
    resolved = chosen.resolve(params)
    compute = chosen.compute_dtype(result)
    if compute is None:
        host_only = " (longdouble: NumPy's own, on the host)" if result in HOST_ONLY else ""
        raise TypeError(f"matmul: kernel {chosen.name!r} does not compute {result}{host_only} "
                        f"(it computes {', '.join(chosen.dtypes)}); try kernel='numpy'")
    if result == "bool" and k >= 2**31 and int_width(compute) < 64:   # the count of true pairs must fit
        compute = chosen.compute_dtype("int64")
        if compute is None:
            raise KernelUnavailable(f"matmul: kernel {chosen.name!r} counts bool products in "
                                    f"{chosen.compute_dtype('bool')}, which K = {k} could pass; try kernel='numpy'")
    problem = Problem(m, n, k, compute)
    reason = chosen.why_not(problem, resolved)
    if reason:
        raise KernelUnavailable(f"matmul: kernel {chosen.name!r} can't run this problem: {reason}")
    queue = streams.caller_stream(da.kind, da.device, stream) if chosen.device == "cuda" else streams.LEGACY_DEFAULT
    out_of_core = (chosen.device == "cuda" and da.device == "cpu" and not batch and len(da.shape) == len(db.shape) == 2
                   and out_dtype is None and stream is None and result in FLOATS + INTS and _past_device_memory(problem))
    direct = (chosen.name == "numpy" and da.kind == db.kind == "numpy" and da.dtype == db.dtype == result == compute
              and (out_dtype is None or exact.char == np.result_type(a.dtype, b.dtype).char))
    fast = None
    if (chosen.name == "cublas" and da.kind == db.kind == "torch" and da.device != "cpu" and not is_exact(result)
            and len(da.shape) >= 2 and len(db.shape) >= 2 and da.dtype == db.dtype == result == compute):
        from .ladder.library import torch_product
        fast = torch_product(result)
    return Plan(a, b, da, chosen, resolved, problem, batch, shape, result, out, queue, direct, fast,
                out_of_core=out_of_core, exact=exact)


def _records_gradient(a, b) -> bool:
    """Whether torch.matmul(a, b) would record an autograd graph: torch tensors, one requiring
    grad, grad mode on."""
    torch = arrays._torch()
    return (torch is not None and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            and (a.requires_grad or b.requires_grad) and torch.is_grad_enabled())


def _check_no_gradient(a, b) -> None:
    """A plan records no autograd graph: where torch.matmul would give a result that carries a
    gradient, a plan's would silently carry none, so it refuses (tilemm.matmul records one)."""
    import torch
    for i, x in enumerate((a, b)):
        if x.requires_grad and torch.is_grad_enabled():
            raise TypeError(f"plan: operand {i} requires grad, and a plan records no autograd graph (its result "
                            "would carry no gradient); call tilemm.matmul, or plan under torch.no_grad()")


def _past_device_memory(problem: Problem) -> bool:
    """Whether A, B and C of a product on host operands would pass the GPU's free memory if copied
    in whole: then they go through tilemm.outofcore, a panel at a time."""
    from . import outofcore
    p = problem
    try:
        free = outofcore.free_device_bytes()
    except (ImportError, RuntimeError, AssertionError):   # no torch, or a torch without CUDA: in core, as before
        return False
    return (p.m * p.k + p.k * p.n + p.m * p.n) * p.itemsize > free


def _checked_out_dtype(out_dtype, result: str) -> str:
    """numpy.matmul's rule for dtype=: the operands are cast to it with casting='same_kind'."""
    name = dtype_name(out_dtype)
    if name not in SUPPORTED:
        try:
            name = np.dtype(out_dtype).name     # np.int32, np.dtype("i4"), ...
        except TypeError:
            pass
    check_supported(name, "out_dtype")
    if not contract.castable(result, name):     # (torch's bfloat16 as a float of NumPy's)
        raise TypeError(f"matmul: out_dtype={name} would cast the {result} operands to {name}, which "
                        "numpy.matmul refuses (casting='same_kind'); cast the operands yourself")
    return name


def _broadcast_batch(sa, sb, full_a, full_b) -> tuple:
    try:
        return tuple(np.broadcast_shapes(sa, sb))
    except ValueError:
        raise ValueError(f"matmul: the stacks of matrices can't be broadcast together: "
                         f"shapes {full_a} and {full_b} (batch dimensions {sa} and {sb})") from None


# NumPy multiplies integers with a plain loop: 0.16-1.4 G multiply-adds a second on the 2-core host
# (16 x 4096 x 4096 int32: 1.65 s). cpu-tiled, once compiled, ran 2-4x it at 64³ and 11-60x from
# 256³ up (whole calls, int8 / int32 / int64). Its compile takes ~2 s a dtype once per machine
# (then cached on disk: ~0.12 s to load in a new process), so a process that has not compiled it yet
# takes it where NumPy's loop costs about that load or more (2^27 multiply-adds: 0.1-0.8 s), and one
# that has, wherever it is faster (2^18).
HOST_INTEGER_TILED_FROM = 2**27
HOST_INTEGER_TILED_WHEN_COMPILED_FROM = 2**18


# A stack of matrices on the GPU: the library multiplies it in one batched call, a rung of ours a
# launch a matrix. Measured on an H200 (h200-2026-11-26-s27/stacks.jsonl, whole calls): int8 / int32
# 100 x 256³ 0.36 / 0.35 ms batched against 9.7 / 17.7 ms a launch a matrix, 64 x 1000³ 7.4 / 7.3
# against 9.7 / 11.7, 8 x 1024³ 1.06 / 1.02 against 0.90 / 1.32. From 2^32 multiply-adds a matrix
# a launch is a small share of each matrix's time, and the rung the table names for the shape runs.
STACK_PER_MATRIX_FROM = 2**32


def _default_kernel(device: str, result: str, m: int, n: int, k: int, operands: str | None = None,
                    lds: tuple | None = None, stacked: bool = False) -> registry.Kernel:
    """Host arrays: NumPy, or cpu-tiled for integer products past HOST_INTEGER_TILED_FROM (or
    HOST_INTEGER_TILED_WHEN_COMPILED_FROM where this process has compiled it). Device arrays: the rung
    tilemm.choice lists for this shape class (lds: the operands' leading dimensions) on this GPU,
    else the highest rung of the ladder that can run this problem here at its default parameters
    (NumPy, with copies, if none can); a stack of them (stacked) the library's batched call, but for
    matrices of STACK_PER_MATRIX_FROM multiply-adds and more. Complex results: tensorcore-complex
    where r14_complex.preferred measured it faster, else the library."""
    if device != "cpu":
        if is_complex(result):        # the complex rung's own rule (the library where it has not measured faster)
            from .ladder.tensorcore import r14_complex
            gpu = machine.gpu()
            preferred = r14_complex.preferred(result, m, n, k, gpu.compute_capability if gpu else None)
        else:
            preferred = choice.preferred(result, m, n, k, operands, lds)
        if stacked and m * n * k < STACK_PER_MATRIX_FROM:
            preferred = "cublas"
        kernels = ([registry.get(preferred)] if preferred else []) + list(reversed(registry.kernels("cuda")))
        for kern in kernels:
            compute = kern.compute_dtype(result)
            if compute and kern.why_not(Problem(m, n, k, compute), kern.resolve({})) is None:
                return kern
    if is_integer(result) and m * n * k >= HOST_INTEGER_TILED_WHEN_COMPILED_FROM:
        tiled = registry.get("cpu-tiled")
        from .ladder import r02_cpu_tiled as cpu
        if m * n * k >= HOST_INTEGER_TILED_FROM or cpu.tiled_compiled_for(tiled.compute_dtype(result)):
            return tiled
    return registry.get("numpy")


def _leading_dims(a, b, k: int, n: int) -> tuple:
    """A's and B's leading dimensions in elements, as the library would be given them
    (tilemm.choice.shape_class): the row stride of contiguous rows, the column stride of a
    transposed view; K and N for a vector or an operand of neither (copied into rows first)."""
    return _leading_dim(a, k), _leading_dim(b, n)


def _leading_dim(x, cols: int) -> int:
    if len(x.shape) < 2:
        return cols
    strides = x.stride() if callable(getattr(x, "stride", None)) else tuple(s // x.itemsize for s in x.strides)
    if strides[-1] == 1:
        return strides[-2]
    return strides[-1] if strides[-2] == 1 else cols


def poisoned(shape, dtype, poison: bool) -> np.ndarray:
    c = np.empty(shape, dtype)
    return arrays.poison(c) if poison else c


def _prepare_host(plan: Plan, a, b, poison: bool, copy: bool):
    """Copy to the host if needed; the kernel runs once per matrix of the stack (NumPy once)."""
    p = plan.problem
    a_h, b_h = arrays.to_host(a, p.dtype), arrays.to_host(b, p.dtype)
    if copy:
        a_h, b_h = a_h.copy(), b_h.copy()
    c = poisoned(plan.batch + (p.m, p.n), p.dtype, poison)

    def launch():
        if p.m and p.n:  # an empty output needs no launch
            _run_over_stack(plan, a_h, b_h, c)
    return launch, lambda: c


def _run_over_stack(plan: Plan, a, b, c):
    """c = a @ b over the plan's stack: in one call where the rung's library takes stacks, else a
    matrix a call."""
    if plan.batch and plan.kernel.run_stack:
        plan.kernel.run_stack(a, b, c)
        return
    for idx, a_i, b_i in arrays.matrices(plan.batch, a, b):
        plan.kernel.run(a_i, b_i, c[idx] if idx else c, **plan.params)


def _replayable(plan: Plan, copy: bool, poison: bool, a, b, used_a, used_b) -> bool:
    """Whether a prepared call's launches may be recorded for repeated calls to replay: a plain
    call (no copies, no poison) on 2-D torch tensors that the kernel took as they are (used_a is
    a: no cast, no copy) with a result of the compute dtype."""
    return (not copy and not poison and plan.operand.kind == "torch" and len(plan.a.shape) == len(plan.b.shape) == 2
            and used_a is a and used_b is b and plan.result == plan.problem.dtype)


def _prepare_cuda(plan: Plan, a, b, poison: bool, copy: bool):
    """Operands cast on the device (host arrays copied in), C allocated in the inputs' kind;
    numba-cuda sees torch and CuPy memory through __cuda_array_interface__, with no copy."""
    from numba import cuda
    p = plan.problem
    host = plan.operand.device == "cpu"  # NumPy arrays or CPU tensors: copy in and out
    stream = streams.numba_stream()
    if host:
        a_d = cuda.to_device(np.ascontiguousarray(arrays.to_host(a, p.dtype)), stream=stream)
        b_d = cuda.to_device(np.ascontiguousarray(arrays.to_host(b, p.dtype)), stream=stream)
        c_d = cuda.to_device(poisoned(plan.batch + (p.m, p.n), p.dtype, poison), stream=stream)
        keep = ()
    else:   # no sync with the producer's stream: the kernels are queued on the caller's stream
        keep = (arrays.device_cast(a, p.dtype, copy), arrays.device_cast(b, p.dtype, copy),
                arrays.device_empty(plan.operand, plan.batch + (p.m, p.n), p.dtype, poison))
        a_d, b_d, c_d = (cuda.as_cuda_array(x, sync=False) for x in keep)

    if plan.kernel.replay and not host and p.m and p.n and p.k and _replayable(plan, copy, poison, a, b, *keep[:2]):
        plan._launched = functools.partial(plan.kernel.replay, a, b, keep[2], **plan.params)   # a repeated call's

    def launch():
        if p.m and p.n and p.k:
            _run_over_stack(plan, a_d, b_d, c_d)
        elif p.m and p.n:  # K = 0: an empty sum, zeros with no launch (a zero-size operand
            if host:       # can't even be sliced on the device)
                c_d.copy_to_device(np.zeros(c_d.shape, c_d.dtype), stream=streams.numba_stream())
            else:
                keep[2].zero_() if hasattr(keep[2], "zero_") else keep[2].fill(0)

    def result():
        if not host:
            return keep[2]
        stream = streams.numba_stream()
        c_h = c_d.copy_to_host(stream=stream)
        if stream:
            stream.synchronize()
        return c_h
    return launch, result


def _prepare_library(plan: Plan, a, b, poison: bool, copy: bool):
    """The library takes torch tensors as they are (numba-cuda has no bfloat16), as Triton does,
    but always on the GPU; with no torch here (CuPy alone), numba-cuda's views as the SIMT rungs."""
    if arrays._torch() is None:
        try:
            import torch  # noqa: F401  (installed, not imported yet)
        except ImportError:
            return _prepare_cuda(plan, a, b, poison, copy)
    return _prepare_triton(plan, a, b, poison, copy, where="cuda")


def _prepare_triton(plan: Plan, a, b, poison: bool, copy: bool, where: str | None = None):
    """Triton takes torch tensors: host arrays are copied to the GPU (to CPU tensors under
    Triton's interpreter), CuPy arrays are viewed through __cuda_array_interface__."""
    import torch
    p = plan.problem
    where = where or ("cpu" if _compat.triton_interpreter() else "cuda")
    dtype = getattr(torch, p.dtype)

    def tensor(x):
        if isinstance(x, torch.Tensor) and x.dtype == dtype and x.is_cuda == (where == "cuda"):
            return x.clone() if copy else x            # as it is: the usual call, and the cheapest
        if isinstance(x, np.ndarray):
            # torch takes no negative strides (a[::-1]) and warns on a read-only array: a copy of those
            x = torch.from_numpy(x if x.flags.writeable and min(x.strides, default=0) >= 0 else np.array(x))
        elif not isinstance(x, torch.Tensor):
            x = arrays.torch_view(x)
        narrow = (plan.kernel.narrow_operands and not x.dtype.is_floating_point and x.is_signed()
                  and x.element_size() < dtype.itemsize)
        y = x.to(where, x.dtype if narrow else dtype)
        return y.clone() if copy and y is x else y
    a_t, b_t = tensor(a), tensor(b)
    c = torch.empty(plan.batch + (p.m, p.n), dtype=dtype, device=where)
    if poison:
        arrays.poison(c)

    calls = []
    # A bound launch keeps its scratch buffers (operands' split parts, aligned copies) for the
    # plan's life: a stack of matrices would keep one set a matrix, so stacks run unbound.
    bind = plan.kernel.bind if math.prod(plan.batch) == 1 else None
    if p.m and p.n and plan.batch and plan.kernel.run_stack:
        calls.append(functools.partial(plan.kernel.run_stack, a_t, b_t, c))
    elif p.m and p.n:
        for idx, a_i, b_i in arrays.matrices(plan.batch, a_t, b_t):
            c_i = c[idx] if idx else c
            bound = bind and bind(a_i, b_i, c_i, **plan.params)
            calls.append(bound or functools.partial(plan.kernel.run, a_i, b_i, c_i, **plan.params))
    if len(calls) == 1 and bind and where == "cuda" and _replayable(plan, copy, poison, a, b, a_t, b_t):
        from .ladder.replay import recorded
        plan._launched = functools.partial(recorded, calls[0], (a_t, b_t, c))   # for a repeated call's replay

    def launch():
        for call in calls:
            call()

    def result():
        if plan.operand.device == "cpu":
            return c.cpu().numpy() if p.dtype != "bfloat16" else c.cpu()
        if plan.operand.kind == "cupy":
            import cupy
            return cupy.asarray(c)
        return c
    return launch, result


_PREPARE = {"cpu": _prepare_host, "cuda": _prepare_cuda, "triton": _prepare_triton, "library": _prepare_library}
