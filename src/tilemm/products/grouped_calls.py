"""Repeated calls of tilemm.grouped_matmul on torch tensors: the checks a call's key decides, done
once, and its launch replayed.

A grouped call's checks (the layout, the parameters, the devices, out's shape and dtype, the
shared memory of the tiles, the persistent grid) and its launch's arguments (TMA descriptors,
Triton's binding of two dozen arguments) took five times torch._grouped_mm's CPU time, which is a
MoE layer's whole time wherever its GPU work is short. The key (call_key) holds what those depend
on: each tensor's kind, dtype, shape, strides and device (a, b, offs or counts, out, the block
scales), which of offs and counts is given and how (a GPU tensor, a host tensor or array, a
list), out_dtype and the parameters. A key's first call takes every check (its errors as
before) and keeps its GroupedPlan; its second records its launch (tilemm.engine.replay: the
compiled program and its arguments with the operands' places marked); the later ones replay it
on their operands.

What depends on the operands' memory or values is still worked out at every call: offsets or
counts on the host are checked (their values; those on a GPU are never read), C is out or a new
result, zeroed where rows are left uncovered (a host offs[-1] short of the end, the masked
layout), and the replay is taken only with the recording's 16-byte alignment of every operand and
C (what Triton specializes on, and TMA's eligibility) and with the operands' GPU current; else the
plan's launch goes through Triton's JIT (tilemm.engine.jit_repeats), as it does throughout under
Triton's interpreter. A call that records a gradient, or runs under torch.func transforms, jit
tracing or forward-mode AD, is not served here: it takes the usual path. (A call that
torch.compile traces never reaches this module: the public function makes it the op of
tilemm.torch.grouped_ops, whose body, run with the compiled graph, calls here.)
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from tilemm.engine import replay as replays
from tilemm.numerics.keys import typed_items
from tilemm.plans.plan import JIT_LOCK
from tilemm.products.grouped import torch_plan
from tilemm.products.grouped_launch import cut_ready, launch, new_result, run, zeroed_result

# Keys kept; past them the cache starts afresh (an entry is a plan and a replay: no tensor)
CALLS_KEPT = 256
CALLS: dict = {}          # key -> Entry
NOT_SERVED = object()     # call()'s answer for a call the usual path takes
DECLINED = object()       # an Entry's replay where its launch is not replayed

SERVED_TYPES = (torch.Tensor, torch.nn.Parameter)
grad_enabled, functorch_active = torch.is_grad_enabled, torch._C._are_functorch_transforms_active
jit_tracing, forward_ad = torch._C._is_tracing, torch.autograd.forward_ad


class Entry:
    """A key's plan (grouped_launch.GroupedPlan), its launch's Replay (None before the key's second
    call; DECLINED where there is none), where C started within 16 bytes when it was recorded, and
    the replay's quick call (tilemm.engine.replay: (*inputs) -> a new C, or None) where a call
    with a new, unzeroed C may take it."""
    __slots__ = ("plan", "replay", "c_aligned", "quick")

    def __init__(self, plan):
        self.plan, self.replay, self.c_aligned, self.quick = plan, None, None, None


def call(a, b, offs, counts, scale_a, scale_b, out_dtype, out, params):
    """tilemm.grouped_matmul(a, b, offs, counts=..., ...) by its key's plan, or NOT_SERVED."""
    key = call_key(a, b, offs, counts, scale_a, scale_b, out_dtype, out, params)
    if key is None:
        return NOT_SERVED
    entry = CALLS.get(key)
    if entry is None:
        plan, cut, scales = torch_plan(a, b, offs, counts, scale_a, scale_b, out_dtype, out, params)
        c = run(plan, a, b, cut, out, scales)
        if len(CALLS) >= CALLS_KEPT:
            CALLS.clear()
        CALLS[key] = Entry(plan)
        return c
    plan = entry.plan
    if plan.rung is None:          # (torch CPU tensors: the host's loop, nothing to replay)
        return run(plan, a, b, offs if counts is None else counts, out, None if scale_a is None else (scale_a, scale_b))
    cut, values = offs if counts is None else counts, None
    if cut is not None and not (type(cut) in SERVED_TYPES and cut.is_cuda):
        cut, values = cut_ready(plan, a, cut)      # (on the host: its values checked; copied to a GPU)
    inputs = (a, b) if cut is None else (a, b, cut)
    scales = None
    if scale_a is not None:
        scales = (scale_a, scale_b)
        inputs += scales
    quick = entry.quick
    if quick is not None and out is None and not zeroed_result(plan, values):
        c = quick(*inputs)           # (C allocated as the recording's, launched in the fewest steps)
        if c is not None:
            return c
    c = out if out is not None else new_result(plan, a, values)
    if plan.programs:
        launch_again(entry, a, b, c, cut, scales, inputs)
    return c


def launch_again(entry: Entry, a, b, c, cut, scales, inputs: tuple) -> None:
    """The plan's launch on a repeated call's operands (inputs: a, b and those of offs or counts
    and the block scales that are given): replayed where the recording's alignment and device
    hold, recorded at the key's second call, else through Triton's JIT."""
    replay = entry.replay
    if replay is None:
        return record(entry, a, b, c, cut, scales, inputs)
    if replay is not DECLINED:
        pointers = [x.data_ptr() for x in inputs]
        index = a.get_device()
        if (tuple([p % 16 for p in pointers]) == replay.aligned and c.data_ptr() % 16 == entry.c_aligned
                and (index < 0 or torch._C._cuda_getDevice() == index)):
            replay.launch(inputs, c, pointers, torch._C._cuda_getCurrentRawStream(index) if index >= 0 else None)
            return
    launch(entry.plan, a, b, c, cut, scales)


def record(entry: Entry, a, b, c, cut, scales, inputs: tuple) -> None:
    """The key's second call: its launch bound, launched and recorded as the entry's replay (or
    DECLINED where the rung binds none, or the launch can't be replayed)."""
    plan = entry.plan
    bound = plan.rung.bound_launch(a, b, c, cut, plan.lay.split, plan.lay.extent, plan.programs, **plan.config,
                                   scales=scales)
    if bound is None:
        entry.replay = DECLINED
        return launch(plan, a, b, c, cut, scales)
    with torch.cuda.device(a.device) if a.device.type == "cuda" else contextlib.nullcontext(), JIT_LOCK:
        bound()
    entry.c_aligned = c.data_ptr() % 16
    replay = entry.replay = replays.recorded(bound, (*inputs, c)) or DECLINED
    if replay is not DECLINED and entry.c_aligned == 0 and plan.programs:
        entry.quick = replay.quick   # (its C a new allocation, 16-byte aligned as the recording's)


def call_key(a, b, offs, counts, scale_a, scale_b, out_dtype, out, params):
    """What decides a call's checks and launch, as a hashable key; None for a call not served
    here (the module's docstring)."""
    if type(a) not in SERVED_TYPES or type(b) not in SERVED_TYPES or (offs is not None and counts is not None):
        return None
    if scale_a is None and scale_b is None and grad_enabled() and (a.requires_grad or b.requires_grad):
        return None          # (autograd's: tilemm.torch.grouped_autograd)
    if functorch_active() or jit_tracing() or forward_ad._current_level >= 0:
        return None
    try:
        if params or out_dtype is not None:
            asked = (out_dtype, typed_items(params))
            hash(asked)      # (an unhashable value: no key, and the checks name what is wrong)
        else:
            asked = None
        cut = offs if counts is None else counts
        return (type(a), a.dtype, a.shape, a.stride(), a.device, type(b), b.dtype, b.shape, b.stride(), b.device,
                counts is None, None if cut is None else cut_key(cut), None if out is None else tensor_key(out),
                None if scale_a is None and scale_b is None else (tensor_key(scale_a), tensor_key(scale_b)), asked)
    except (NotKeyed, TypeError):
        return None


class NotKeyed(Exception):
    """A value call_key does not describe: the call takes the usual path, whose checks name it."""


def tensor_key(x):
    """A torch tensor's part of a key (None: absent)."""
    if x is None:
        return None
    if type(x) not in SERVED_TYPES:
        raise NotKeyed
    return type(x), x.dtype, x.shape, x.stride(), x.device


def cut_key(cut):
    """offs' or counts' part of a key: a tensor's, a NumPy array's dtype and shape, a list's length
    (its values are read at every call)."""
    if cut is None or type(cut) in SERVED_TYPES:
        return tensor_key(cut)
    if type(cut) is np.ndarray:
        return np.ndarray, cut.dtype, cut.shape
    if type(cut) is list or type(cut) is tuple:
        return type(cut), len(cut)
    raise NotKeyed


def release() -> None:
    """Forget every key (for tests and a fresh start)."""
    CALLS.clear()
