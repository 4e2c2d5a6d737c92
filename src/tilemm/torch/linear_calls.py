"""tilemm.linear's repeated eager calls, in the fewest Python steps.

An eager call checks its operands (kinds, dtypes, devices, shapes), picks the route and the
program's configuration, views the input as rows and the weight transposed, launches, and views
Y back in the input's leading shape. A call whose key (call_key: the operands' kinds, dtypes,
devices, shapes and strides, the activation, kernel and parameters: all those depend on) was
seen before passes the checks its first call passed and takes the route and configuration it
took, which a LinearCall keeps. On the Triton route with no gradient recorded, from the key's
second call on, it is the replay of that launch on the operands as they come (the input, the
weight, the bias: the replay puts their addresses where the rows and weight.T stood and makes Y
in the output's shape, no view made; as tilemm.torch.nn_fused_routes' route does for a Linear);
where a gradient is recorded, from the key's first such call (the general path's too, so that
a key's calls record one kind of node: activation checkpointing's recomputation saves what its
forward saved), the key's FusedRoute (tilemm.torch.nn_fused_routes, kept with the LinearCall):
one FusedLinear node on the input, weight and bias as they come, whose forward (with the
pre-activation its backward reads) and two backward products (dX = dZ @ W, dW = dZ^T @ X) each
make the launch EpilogueFunction's path makes for those operands (launched at their first call,
recorded at their second, replayed from their third), dBias its sum of dZ's rows: the same
bits, without the rows' and weight.T's views in the graph or a key made for each product; on the
library route, torch's functions, as before. An empty product's gradients, and those of an input
whose rows are a copy (a 3-D input transposed: the replays would decline it), are
EpilogueFunction's on the rows.

Not served here (tilemm.torch.fused_autograd's general path): a residual, autocast,
torch.compile, jit.trace, torch.func's transforms and forward-mode AD, tensor subclasses. A replay that
declines a call (its operands aligned otherwise, a lazy view, another GPU's operands) gives
way to the general launch, which takes the same program.
"""
from __future__ import annotations

from math import prod

import torch
import torch.nn.functional as F

from tilemm.engine import epilogue_repeats
from tilemm.numerics.arrays import as_rows
from tilemm.numerics.epilogue_math import activate_torch
from tilemm.products import fused
from tilemm.system import compat
from tilemm.torch import nn_fused_routes

KINDS = (torch.Tensor, torch.nn.Parameter)       # (a subclass: its own dispatch, no key)
grad_enabled, empty = torch.is_grad_enabled, torch.empty

# Keys kept; past them the cache starts afresh (a LinearCall holds no tensor)
CALLS_KEPT = 512
CALLS: dict = {}          # call_key -> LinearCall


def call_key(x, weight, bias, activation: str, kernel, params: dict):
    """What a call's checks, route and configuration depend on, as a key (unhashable where the
    kernel or a parameter is: TypeError at the look-up); None for operands not served (a tensor
    subclass)."""
    if type(x) not in KINDS or type(weight) not in KINDS or bias is not None and type(bias) not in KINDS:
        return None
    device = x.device
    return (x.dtype, device, x.shape, x.stride(), weight.dtype, weight.device, weight.shape, weight.stride(),
            None if bias is None else (bias.dtype, bias.device, bias.shape, bias.stride()), activation, kernel,
            tuple(sorted(params.items())) if params else (),
            device.type == "cuda" or compat.triton_interpreter())       # (a host tensor's route asks the interpreter)


def learn(key, x, weight, activation: str, way: str, config: dict, apply) -> None:
    """Keep key's LinearCall: a call of the key passed the checks and took route `way` with
    config; apply(rows, weight.T, bias, None, None, spec) records a gradient (EpilogueFunction's)
    where the key has no route."""
    keep(key, LinearCall(x, weight, activation, way, config, apply))


def keep(key, call) -> None:
    """Keep LinearCall call as key's (its first call done)."""
    if len(CALLS) >= CALLS_KEPT:
        CALLS.clear()
    CALLS[key] = call


class LinearCall:
    """One key's calls: activation(x @ weight.T + bias) by the route and configuration its first
    call took (the module's docstring); a call on operands of the key."""

    __slots__ = ("library", "activation", "config", "spec", "apply", "out_shape", "two_d", "in_features",
                 "out_features", "forward", "route")

    def __init__(self, x, weight, activation: str, way: str, config: dict, apply):
        self.library, self.activation, self.config, self.apply = way == fused.LIBRARY, activation, config, apply
        self.spec = (False, activation, 1.0, 0.0, config)             # EpilogueFunction's
        self.out_shape = x.shape[:-1] + weight.shape[:1]
        self.two_d, self.in_features, self.out_features = x.dim() == 2, weight.shape[1], weight.shape[0]
        self.forward = self.first
        # the gradient's route: made at the key's first call that records one; False (EpilogueFunction
        # on the rows) for an empty product and for rows that are a copy of the input (its replays
        # would decline: they read the operands given, not a copy made in the call)
        self.route = None if x.numel() and weight.numel() and rows_are_a_view(x) else False

    def __call__(self, x, weight, bias):
        if self.library:         # torch's own functions, its own graph
            return activate_torch(F.linear(x, weight, bias), self.activation)
        if grad_enabled() and (x.requires_grad or weight.requires_grad or bias is not None and bias.requires_grad):
            route = self.route
            if route:
                return record(x, weight, bias, route)
            if route is None:        # (each product's first launch not recorded: a key met once pays none)
                route = self.route = nn_fused_routes.FusedRoute(x, weight, bias, self.activation, self.config, False)
                return record(x, weight, bias, route)
            rows = x if self.two_d else as_rows(x, self.in_features)
            y = self.apply(rows, weight.mT, bias, None, None, self.spec)
            return y if self.two_d else y.reshape(self.out_shape)
        y = self.forward(x, weight) if bias is None else self.forward(x, weight, bias)
        return y if y is not None else self.launched(x, weight, bias)

    def first(self, *inputs):
        """The key's first call with no gradient recorded after its first call (the general
        path's): the launch bound and made, its replay's repeated call (on inputs: x, weight[,
        bias]) kept as forward. None where the
        operands' GPU is not the current one (the general launch guards it; recorded later)."""
        x, weight = inputs[0], inputs[1]
        if x.is_cuda and x.get_device() != torch.cuda.current_device():
            return None
        y = empty(self.out_shape, dtype=x.dtype, device=x.device)
        rows, rows_y = (x, y) if self.two_d else (as_rows(x, self.in_features),
                                                                  y.view(prod(y.shape[:-1]), self.out_features))
        arguments = (rows, weight.mT, rows_y, None, inputs[2] if len(inputs) == 3 else None, False, None, None,
                     self.activation, 1.0, 0.0, self.config)
        self.forward = epilogue_repeats.recorded_call(arguments, inputs, y)
        return y

    def launched(self, x, weight, bias):
        """Y by the general path's launch (tilemm.products.fused.forward on the rows and weight.T)."""
        rows = x if self.two_d else as_rows(x, self.in_features)
        y = fused.forward(rows, weight.mT, bias, False, None, None, self.activation, 1.0, 0.0, fused.TRITON,
                          self.config, False)[0]
        return y if self.two_d else y.reshape(self.out_shape)


def rows_are_a_view(x) -> bool:
    """Whether x's matrix of rows (as_rows(x)) is a view of x, not a copy."""
    try:
        x.view(prod(x.shape[:-1]), x.shape[-1])
    except RuntimeError:
        return False
    return True


record = nn_fused_routes.record       # FusedLinear's apply (autograd's C apply)


def release() -> None:
    """Forget every key."""
    CALLS.clear()
