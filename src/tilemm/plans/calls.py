"""A product beneath the public front: its plan found (a repeated call: Plan.run_again) or made
(the checks, once) and run, the plan then kept for the call's repeats (tilemm.plans.cache).

tilemm.matmul (tilemm.api) decides first what is not a plain plan's to run (NumPy's keywords,
torch.compile, autograd, several devices, ndarray subclasses); the torch layer's operators
(tilemm.torch.ops) run their products here.
"""
from __future__ import annotations

import math

from tilemm.choose import default as dispatch
from tilemm.numerics import arrays
from tilemm.plans import cache, checks


def matmul(a, b, out=None, *, kernel: str | None = None, out_dtype=None, stream=None, **params):
    """``a @ b`` by its plan, in core (a call that goes out of core is tilemm.matmul's): the
    operands' kinds as tilemm.plan takes them; torch tensors that record no gradient."""
    key, known = cache.lookup(a, b, kernel, out, out_dtype, params)
    if known is not None:
        if out is None and stream is None:
            return known.repeat(a, b)
        return known.run_again(a, b, out, stream)
    return first_call(key, a, b, kernel, out, out_dtype, stream, params, checks.check)


def first_call(key, a, b, kernel, out, out_dtype, stream, params: dict, make):
    """A call with no plan kept: make(a, b, ...) checks it into a Plan (tilemm.plans.checks.check,
    or tilemm.plan, which may go out of core); run, and kept under key for its repeats (where key
    is not None, the operands needed no copy and the plan is repeatable)."""
    native_a, native_b = arrays.native_order(a), arrays.native_order(b)
    if native_a is not a or native_b is not b:     # a copy each call: no plan to replay on the originals
        key, a, b = None, native_a, native_b
    before = getattr(out, "shape", None)        # (an out that is no array: the checks refuse it)
    checked = make(a, b, kernel=kernel, out=out, out_dtype=out_dtype, stream=stream, **params)
    if out is not None and tuple(out.shape) != tuple(before):   # a torch out resized (torch's rule): its key held
        key = None                                              # the shape it had, which a later call must resize
    value, record = checked.run(checked.a, checked.b, checked.out, checked.stream)
    if not checked.repeatable:        # the library before Triton: this problem's next call takes the rung
        dispatch.first_call_served(checked.result, checked.problem.m, checked.problem.n, checked.problem.k)
    elif key is not None:
        cache.remember(key, checked, record)
    return value


def repeated(a, b, kernel: str | None, params: dict):
    """The repeated call of ``a @ b``'s plan, kept by a first call on operands of this layout (a
    caller that holds it skips the cache's key at each call): fast(a, b) gives C, or None where
    this call can't take it (Plan.fast: the library's product, or one program's replay, which
    declines operands of another alignment, on another device); else the plan's run_again.
    None where no plan is kept for the layout."""
    _, known = cache.lookup(a, b, kernel, None, None, params)
    if known is None:
        return None
    return known.fast or known.run_again


def replayed(a, b, kernel: str | None, params: dict, shape=None):
    """The repeated call of ``a @ b``'s plan where it is one program's replay (Replay.quick), which
    reads its operands' addresses alone (and their negative and conjugate bits): a caller may
    pass it any tensors that start where a and b do (a weight W for the W.T it was planned on).
    shape: C's shape, where not (M, N) (as many elements; C is written row by row). None where
    the plan's repeated call is another (calls.repeated) or no plan is kept."""
    _, known = cache.lookup(a, b, kernel, None, None, params)
    replay = None if known is None else known.replay
    if replay is None or replay.quick is None or known.fast is not replay.quick:
        return None
    if shape is None or tuple(shape) == replay.c_shape:
        return replay.quick
    return replay.quick_call(tuple(shape)) if math.prod(shape) == math.prod(replay.c_shape) else None
