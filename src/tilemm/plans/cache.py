"""The plans of repeated calls: a call's key (what decides its plan) and the cache it finds them in.

A repeated call (same kinds, devices, dtypes, shapes, strides, kernel, parameters) reuses the
plan its first call checked: a dictionary look-up instead of the checks, the default kernel's
choice and the parameters' resolution (Plan.run_again). What depends on the operands' memory
(alignment, the stream) is worked out at each call, after the look-up.
"""
from __future__ import annotations

import numpy as np

from tilemm.numerics import arrays
from tilemm.numerics.keys import typed_items
from tilemm.contract import numpy_rules as contract

PLAN_CACHE_SIZE = 512
PLANS: dict = {}


def lookup(a, b, kernel, out, out_dtype, params) -> tuple:
    """(key, the plan kept for it or None); key None for a call that is never kept."""
    if out is None and not params and type(a) is type(b):   # the usual call: usual_lookup's
        return USUAL.get(type(a), usual_lookup)(a, b, kernel, out_dtype)
    if not params and type(a) is type(b) is type(out):      # a loop that keeps its out (torch tensors)
        if type(a) not in _KEY_OF:
            try:
                _key_functions(type(a), a)
            except TypeError:
                pass
        with_out = WITH_OUT.get(type(a))
        if with_out is not None:
            return with_out(a, b, kernel, out, out_dtype)
    key = call_key(a, b, kernel, out, out_dtype, params)
    if key is None:
        return None, None
    return key, PLANS.get(key)


def usual_lookup(a, b, kernel, out_dtype) -> tuple:
    """lookup's (key, plan or None) for the usual call: no out, no parameters, a and b of one type.
    USUAL[type(a)] is this in one function of the operands' type (its whole key built and looked
    up in one frame: a repeated call's caller, tilemm.matmul, calls it directly); here, the first
    call of a type, which makes that function."""
    try:
        functions = _key_functions(type(a), a)
    except TypeError:            # (an array kind tilemm does not cache: no key; the checks name it)
        return None, None
    return functions[1](a, b, kernel, out_dtype)


def remember(key, plan, record) -> None:
    """Keep the plan of a first call (run with record from Plan.run) for the repeated calls of key."""
    if len(PLANS) >= PLAN_CACHE_SIZE:
        PLANS.clear()
    PLANS[key] = plan.for_repeats(record)


def call_key(a, b, kernel, out, out_dtype, params):
    """What decides a call's plan, as a hashable key; None for a call not worth caching (an
    unhashable parameter, an array kind plan() will refuse)."""
    try:
        if out is None and not params and type(a) is type(b):     # the usual call: usual_lookup's key
            return USUAL.get(type(a), usual_lookup)(a, b, kernel, out_dtype)[0]
        asked = (kernel, contract.dtype_key(out_dtype), typed_items(params) if params else ())
        hash(asked)              # (a list among the parameters: no key, rather than a TypeError from the cache)
        key_a, key_b = operand_key(a), operand_key(b)
        if key_a is None or key_b is None:
            return None          # (no key for a torch operand while a forward-mode AD level is open)
        return (key_a, key_b,
                None if out is None else (operand_key(out), getattr(getattr(out, "flags", None), "writeable", True)),
                ) + asked
    except (TypeError, AttributeError, RuntimeError):     # (RuntimeError: a sparse or nested tensor's strides)
        return None


def operand_key(x):
    """One operand's part of a call's key (TypeError for an array kind tilemm does not cache)."""
    return _key_functions(type(x), x)[0](x)


def torch_tensors_key(torch, tensors: tuple):
    """One key of several plain torch tensors (the caller checks their type): what operand_key's
    of each would say, the global parts read once; None, as operand_key, while a forward-mode AD
    level is open or torch's autocast is on (the operands are then no part of a key)."""
    if torch.autograd.forward_ad._current_level >= 0 or torch._C._is_any_autocast_enabled():
        return None
    grad = torch.is_grad_enabled()
    return (grad, torch._C._is_tracing() or torch._C._are_functorch_transforms_active(),
            *[(x.dtype, x.shape, x.stride(), x.device, x.requires_grad) for x in tensors])


def _key_functions(kind, x) -> tuple:
    """(one operand's part of the key, the usual call's lookup: (key, plan) of a, b, kernel and
    out_dtype): by the exact type, one look-up (a repeated call's key costs about half of an
    isinstance chain's, and less with both operands and the call's own part in one function).
    The lookup is kept in USUAL too."""
    known = _KEY_OF.get(kind)
    if known is None:
        made = _new_key_functions(x)
        if len(made) > 2:
            WITH_OUT[kind] = made[2]
        known = _KEY_OF[kind] = made[:2]
        USUAL[kind] = known[1]
    return known


# array type -> _key_functions' pair for it; array type -> the usual call's lookup (the pair's second);
# array type -> the lookup of a call with an out of that type too and no parameters (torch tensors)
_KEY_OF: dict = {}
USUAL: dict = {}
WITH_OUT: dict = {}


def _no_key(*operands):
    raise TypeError("not cached")


def _no_plan(a, b, kernel, out_dtype) -> tuple:
    return None, None


def _looked_up(key_of):
    """The usual call's lookup of the key key_of(a, b, kernel, out_dtype) gives."""
    def lookup(a, b, kernel, out_dtype) -> tuple:
        try:
            key = key_of(a, b, kernel, out_dtype)
            return key, PLANS.get(key)
        except (TypeError, AttributeError, RuntimeError):   # (an unhashable kernel or dtype: no key, and
            return None, None                              # plan() names what is wrong)
    return lookup


# The usual call's key ends with the call's own part: kernel, out_dtype and its char (None, None
# for out_dtype=None), as call_key's other keys hold contract.dtype_key(out_dtype); flat, in one
# tuple: a tuple in a key is made and hashed again at each call.
def _new_key_functions(x) -> tuple:
    if type(x).__name__ == "DTensor":  # spread over ranks (tilemm.spread.route): never a plan of its own
        return _no_key, _no_plan
    if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
        return _no_key, _no_plan  # a subclass (np.matrix): its result through its own wrap, uncached
    if isinstance(x, np.ndarray):      # the char too: np.dtype('l') == np.dtype('q'), NumPy returns either
        return (lambda x: (np.ndarray, x.dtype, x.dtype.char, x.shape, x.strides)), numpy_lookup
    torch = arrays.torch_of(x)          # (from x's type: a traced frame reads no sys.modules)
    if torch is not None:
        if contract.torch_function_subclass(torch, x):
            return _no_key, _no_plan  # a subclass whose __torch_function__ takes the call (tilemm.api)
        return torch_key_functions(torch, type(x))
    cupy = arrays.cupy_of(x)
    if cupy is not None:
        return ((lambda x: (cupy.ndarray, x.dtype, x.dtype.char, x.shape, x.strides, x.device.id)),
                _looked_up(lambda a, b, kernel, out_dtype: (
                    cupy.ndarray, a.dtype, a.dtype.char, a.shape, a.strides, a.device.id, b.dtype, b.dtype.char,
                    b.shape, b.strides, b.device.id, kernel, out_dtype, getattr(out_dtype, "char", None))))
    raise TypeError("not an array tilemm takes")


def numpy_lookup(a, b, kernel, out_dtype) -> tuple:
    """The usual call's (key, plan) for ndarrays: the whole key and its plan in this one frame
    (the key _looked_up would make of the operands' parts, each dtype read once)."""
    try:
        da, db = a.dtype, b.dtype
        key = (np.ndarray, da, da.char, a.shape, a.strides, db, db.char, b.shape, b.strides, kernel, out_dtype,
               None if out_dtype is None else getattr(out_dtype, "char", None))
        return key, PLANS.get(key)
    except (TypeError, AttributeError, RuntimeError):   # (an unhashable kernel or dtype: no key, and
        return None, None                              # plan() names what is wrong)


def torch_key_functions(torch, kind) -> tuple:
    """_key_functions' pair for torch tensors of type kind. What a plan can't serve never meets a
    plain call's key: a tensor that would record a gradient (autograd), a call under jit tracing or
    a torch.func transform (tilemm.torch.ops), a FakeTensor (its own type); and there is no key at
    all while a forward-mode AD level is open (a dual tensor's tangent is no part of its key) or
    while torch's autocast is on (the operands are cast first). A conjugate or negative view may
    meet a plain tensor's plan: the plan's paths read its values (to_host, the GPU backends) or
    refuse it (a replay's guard: engine.replay_guard.lazy)."""
    grad_enabled, forward_ad = torch.is_grad_enabled, torch.autograd.forward_ad
    tracing, transformed = torch._C._is_tracing, torch._C._are_functorch_transforms_active
    autocast = torch._C._is_any_autocast_enabled

    def lookup(a, b, kernel, out_dtype) -> tuple:
        # a repeated call's whole key and its plan in this one frame (no key function called)
        try:
            if forward_ad._current_level >= 0 or autocast():
                return None, None
            key = (kind, a.dtype, a.shape, a.stride(), a.device, b.dtype, b.shape, b.stride(), b.device,
                   (a.requires_grad or b.requires_grad) and grad_enabled(), tracing() or transformed(),
                   kernel, out_dtype, None if out_dtype is None else getattr(out_dtype, "char", None))
            return key, PLANS.get(key)
        except (TypeError, AttributeError, RuntimeError):   # (an unhashable kernel or dtype, a sparse or nested
            return None, None                              # tensor's strides: no key; the checks name it)

    def out_lookup(a, b, kernel, out, out_dtype) -> tuple:
        # lookup's key and out's layout after it, in one frame: a loop that keeps its out
        try:
            if forward_ad._current_level >= 0 or autocast():
                return None, None
            grad = grad_enabled()
            key = (kind, a.dtype, a.shape, a.stride(), a.device, b.dtype, b.shape, b.stride(), b.device,
                   (a.requires_grad or b.requires_grad) and grad, tracing() or transformed(),
                   kernel, out_dtype, None if out_dtype is None else getattr(out_dtype, "char", None),
                   out.dtype, out.shape, out.stride(), out.device, out.requires_grad and grad)
            return key, PLANS.get(key)
        except (TypeError, AttributeError, RuntimeError):
            return None, None
    return ((lambda x: None if forward_ad._current_level >= 0 or autocast() else (
                kind, x.dtype, x.shape, x.stride(), x.device, x.requires_grad and grad_enabled(),
                tracing() or transformed())),
            lookup, out_lookup)
