"""An eager fused product's repeated calls: the launch its key's earlier call made, replayed.

Called eagerly (no torch.compile), the fused-epilogue program is launched through Triton's JIT at
every call: the program's choice and arguments (epilogue_launch.parts_arguments: TMA or
pointers, tiles, the rows apart, descriptors), then Triton's binding and specialization of each
argument, its cache look-up and its launcher: several times F.linear's CPU time, which is a small
product's whole time. A call whose key was seen before makes the same launches on other memory:
they are bound and recorded once (epilogue_launch.bound_epilogue, tilemm.engine.replay) and
replayed (the replay's quick call: the compiled program's C launcher given the operands'
addresses, a TMA descriptor's expansion kept by its address).

The key (product_key) holds what the launches depend on: each operand's kind, shape, strides and
where it starts within 16 bytes (Triton specializes each pointer on its 16-byte alignment and
each int on its value; the shapes and strides are the ints), the dtype and device, which
operands are absent (a None is a constexpr), the epilogue (activation, alpha, beta, the bias over
rows or columns), whether AUX is written, and the configuration (the dict itself, kept with the
entry: config_for's dicts are read only). A replay checks again, at each call, what the
operands' memory decides (their alignment, a lazy view, the current device) and declines
(None) where they differ: that call then launches as before.

A key's first call launches as before and is only noted (a shape met once pays no recording);
its second call records (a replay reads nothing of the first call's tensors), the later ones
replay. A key whose launches cannot be replayed (operands overlapping in memory, an empty
product, Triton's interpreter without a C launcher) launches as before at every call.
"""
from __future__ import annotations

import torch

from tilemm.engine import epilogue_launch, replay as replays
from tilemm.engine.jit_lock import JIT_LOCK

Tensor, Parameter = torch.Tensor, torch.nn.Parameter

# Keys kept; past them the cache starts afresh (an entry is a few closures and ints, no tensor)
KEYS_KEPT = 512
REPEATS: dict = {}        # key -> Entry


class Entry:
    """What a key's calls take: `call` is None (one call made, none recorded), declined (never
    replayed), or the repeated call (*inputs) -> Y or None; `config` is held so that its id in
    the key names it alone."""
    __slots__ = ("call", "config")

    def __init__(self, call, config):
        self.call, self.config = call, config


def declined(*inputs):
    """A key whose launches are not replayed: the caller launches as before."""
    return None


class NotServed(Exception):
    """An operand the key does not describe (a tensor subclass, a tensor with no memory)."""


def layout(t):
    """One operand's part of a key: None where absent."""
    if t is None:
        return None
    if type(t) is not Tensor and type(t) is not Parameter:
        raise NotServed
    return t.shape, t.stride(), t.data_ptr() % 16


def product_key(a, b, bias, bias_over_m: bool, c, residual, activation: str, alpha: float, beta: float, config: dict,
                save_aux: bool):
    """tilemm.products.fused.forward's call as a key (the module's docstring), or None where it is
    not served (an operand of another kind, or without memory: a functorch wrapper's)."""
    try:
        return (layout(a), layout(b), layout(bias), layout(c), layout(residual), a.dtype, a.device, bool(bias_over_m),
                activation, alpha, beta, id(config), save_aux)
    except (NotServed, RuntimeError):
        return None


def entry(key, config) -> Entry | None:
    """key's Entry; None at its first call, which notes it (an Entry with no call yet)."""
    found = REPEATS.get(key)
    if found is None:
        if len(REPEATS) >= KEYS_KEPT:
            REPEATS.clear()
        REPEATS[key] = Entry(None, config)
    return found


def product(a, b, bias, bias_over_m: bool, c, residual, activation: str, alpha: float, beta: float, config: dict,
            save_aux: bool):
    """(Y, AUX or None) of tilemm.products.fused.forward's Triton route, eager, by its key's replay
    (its recording at the key's second call); None where the caller launches as before."""
    key = product_key(a, b, bias, bias_over_m, c, residual, activation, alpha, beta, config, save_aux)
    found = None if key is None else entry(key, config)
    if found is None or found.call is declined:
        return None
    if found.call is None and a.is_cuda and a.get_device() != torch.cuda.current_device():
        return None              # (Triton launches on the current GPU: recorded at a later call)
    m, n = a.shape[0], b.shape[1]
    aux = torch.empty(m, n, dtype=a.dtype, device=a.device) if save_aux else None
    inputs = tuple(t for t in (a, b, bias, c, residual, aux) if t is not None)
    if found.call is None:
        y = a.new_empty((m, n))
        found.call = recorded_call((a, b, y, aux, bias, bias_over_m, c, residual, activation, alpha, beta, config),
                                   inputs, y)
        return y, aux
    y = found.call(*inputs)
    return None if y is None else (y, aux)


def recorded_call(arguments: tuple, inputs: tuple, y):
    """Launch epilogue_launch's bound launch of arguments (launch_epilogue's, writing y) on the
    current GPU, and give its replay's repeated call on inputs (C: y), or declined where it has
    none."""
    bound = epilogue_launch.bound_epilogue(*arguments)
    if bound is None:            # an empty product: nothing to launch
        return declined
    with JIT_LOCK:               # (its first launch is Triton's JIT's)
        bound()
    return repeated_call(replays.recorded(bound, (*inputs, y))) or declined


def repeated_call(replay):
    """What a product's repeated calls run (a key's here, a Linear's fused route's), or None: the
    replay's quick call; a replay without one (several launches: the rows apart of
    epilogue_launch.row_parts, two programs on views of the operands) only where it keeps no
    memory of its own, not operand copies into kept scratch."""
    if replay is None:
        return None
    if replay.quick is not None:
        return replay.quick
    return None if replay.reuses_memory else replay


def release() -> None:
    """Forget every key (their replays hold no memory of the GPU's: for tests and a fresh start)."""
    REPEATS.clear()
