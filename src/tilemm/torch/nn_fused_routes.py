"""A fused tilemm.nn.Linear's products (``activation=`` set: its bias and activation in the
epilogue program's pass, tilemm.linear's Triton route), one layout of its input at a time, in the
fewest Python steps: for the fused Linear what tilemm.torch.nn_routes is for the plain one.

tilemm.linear's eager path checks its operands, picks the route and the program, makes two TMA
descriptors and launches through Triton's Python at every call: several times the CPU time of
torch's F.linear and activation, which is a fused Linear's eager cost at a training step's
shapes. A FusedRoute keeps, for one layout, the four launches a fused Linear makes, each the
replay of its first call's launch (tilemm.engine.replay's quick call: the descriptors' expansions
kept by address, Triton's C launcher called directly where tilemm.engine.direct_replay can):
the forward without AUX (no gradient recorded), the forward with AUX (the pre-activation that
gelu's and silu's backward read), dX = dZ @ W and dW = dZ^T @ X's rows. A gradient is recorded by
a Function of its own (FusedLinear, applied through autograd's C apply: nn_routes.direct_apply)
on the Linear's own input, weight and bias: no reshape or transpose node in the graph, the
output made in its shape. Each launch is the one tilemm.linear's path (EpilogueFunction and
tilemm.products.fused.grads) makes on these operands, recorded at its first call; dBias is its
sum of dZ's rows: the answers are the same bits. (tilemm.linear's own training calls take a
FusedRoute of their key's, whose products' first calls are launched alone and recorded at their
second: tilemm.torch.linear_calls.)

Not served (tilemm.linear's path): layouts whose route is the library's (kernel None where
tilemm's default is torch's), a dtype the program does not take, an empty product, tensor
subclasses, autocast; per call, a weight or bias not of the route's shape, strides, dtype or
device, operands on another device. Its caller takes no route under torch.compile, jit.trace,
torch.func's transforms or inside a forward-mode AD dual level. A double backward
(create_graph=True) differentiates tilemm.linear's composite (tilemm.torch.fused_transforms).
A launch whose replay declines a call (its operands aligned otherwise, a lazy view) or that has
none (Triton's interpreter) runs as tilemm.linear's does.
"""
from __future__ import annotations

import functools
from math import prod

import torch

from tilemm.engine import epilogue_launch, replay as replays
from tilemm.engine.epilogue_repeats import repeated_call
from tilemm.engine.jit_lock import JIT_LOCK
from tilemm.numerics.epilogue_math import activation_backward_of, needs_aux
from tilemm.products import fused
from tilemm.torch import batched_grads, fused_transforms
from tilemm.torch.compiled_transforms import eager_only
from tilemm.torch.nn_routes import direct_apply, matrix

Tensor, Parameter = torch.Tensor, torch.nn.Parameter
grad_enabled, empty = torch.is_grad_enabled, torch.empty
autocast_on = torch._C._is_any_autocast_enabled


def learn(input, weight, bias, activation: str, kernel, params: dict) -> tuple:
    """(route, keep): the FusedRoute of input's layout and keep=True; (None, True) where the layout
    has none (tilemm.linear's library route, a dtype the program does not take, an empty product,
    options it refuses: its path raises them); (None, False) where these operands are not served
    now (a tensor subclass, autocast, mixed dtypes or devices: the layout may be served later)."""
    if (type(input) is not Tensor or type(weight) not in (Tensor, Parameter) or autocast_on()
            or bias is not None and type(bias) not in (Tensor, Parameter) or input.device.type not in ("cuda", "cpu")
            or weight.dtype != input.dtype or weight.device != input.device
            or bias is not None and (bias.dtype != input.dtype or bias.device != input.device)):
        return None, False
    if (input.dim() == 0 or weight.dim() != 2 or input.shape[-1] != weight.shape[1] or not input.numel()
            or not weight.numel() or input.dtype not in epilogue_launch.DTYPES
            or bias is not None and tuple(bias.shape) != (weight.shape[0],)):
        return None, True
    try:
        config = epilogue_launch.config_for(input.dtype, params)
        way = fused.route(kernel, input, prod(input.shape[:-1]), weight.shape[0], weight.shape[1],
                          fused.linear_leading_dims(input, weight))
    except (TypeError, ValueError):
        return None, True
    return (FusedRoute(input, weight, bias, activation, config) if way == fused.TRITON else None), True


class FusedRoute:
    """One layout of a fused Linear's input (its shape, strides and dtype: the Products' key) with
    the module's weight and bias of one shape, strides, dtype and device: activation(input @
    weight.T + bias) in the fewest steps, and its gradients (FusedLinear). Each product (PRODUCTS)
    is first made as tilemm.linear makes it, its launch bound (epilogue_launch.bound_epilogue)
    and recorded, and then repeated by the replay's quick call on the operands as they come (the
    input, the weight, dZ: their addresses alone), which allocates C in the shape wanted; where it
    has none, or it declines a call, the launch is made as tilemm.linear's. A call checks what the
    key does not hold and gives None where the operands are not this route's."""

    __slots__ = ("activation", "config", "save_aux", "activation_backward", "weight_shape", "weight_stride", "dtype",
                 "cuda", "index", "device", "bias_shape", "bias_stride", "out_shape", "out_stride", "in_shape", "usual",
                 "forward_fast", "forward_aux_fast", "input_fast", "weight_fast")
    PRODUCTS = ("forward_fast", "forward_aux_fast", "input_fast", "weight_fast")

    def __init__(self, input, weight, bias, activation: str, config: dict, record_first: bool = True):
        """record_first False: each product's first call is launched alone (a layout met once pays
        no recording), its second recorded (tilemm.linear's keys: tilemm.torch.linear_calls)."""
        self.activation, self.config = activation, config
        self.save_aux = needs_aux(activation, False)      # (relu's backward reads Y, identity's nothing)
        self.activation_backward = activation_backward_of(activation)      # (grad, saved) -> dZ
        self.weight_shape, self.weight_stride, self.dtype = weight.shape, weight.stride(), weight.dtype
        self.cuda, self.index, self.device = weight.is_cuda, weight.get_device(), weight.device
        self.bias_shape, self.bias_stride = (None, None) if bias is None else (bias.shape, bias.stride())
        self.in_shape, self.out_shape = input.shape, input.shape[:-1] + weight.shape[:1]
        self.out_stride = empty(self.out_shape, device="meta").stride()     # dZ's as the products were recorded
        # dW as dZ^T @ rows (weight's own layout), dX as dZ @ weight: tilemm.linear's gradients for a
        # row-major weight (fused.grads); for any other, its own rule
        self.usual = weight.stride(1) == 1 and weight.stride(0) != 1
        for name in self.PRODUCTS:      # each product's first call learns its repeated call (first)
            setattr(self, name, functools.partial(self.first if record_first else self.noted, name))

    def __call__(self, input, weight, bias):
        """activation(input @ weight.T + bias), recording its gradient where autograd would; None
        where this route does not serve these operands."""
        if (weight.shape != self.weight_shape or weight.stride() != self.weight_stride or weight.dtype != self.dtype
                or type(input) is not Tensor or type(weight) is not Parameter and type(weight) is not Tensor):
            return None
        if bias is None:
            if self.bias_shape is not None:
                return None
        elif (bias.shape != self.bias_shape or bias.stride() != self.bias_stride or bias.dtype != self.dtype
              or type(bias) is not Parameter and type(bias) is not Tensor):
            return None
        if self.cuda:
            if not (input.is_cuda and weight.is_cuda and input.get_device() == self.index == weight.get_device()
                    and (bias is None or bias.get_device() == self.index)):
                return None
        elif not (input.is_cpu and weight.is_cpu and (bias is None or bias.is_cpu)):
            return None
        if autocast_on():
            return None
        if grad_enabled() and (input.requires_grad or weight.requires_grad or bias is not None and bias.requires_grad):
            return record(input, weight, bias, self)
        return self.forward(input, weight, bias, False)[0]

    def forward(self, input, weight, bias, with_aux: bool) -> tuple:
        """(Y, AUX or None): Y in the output's shape, and where with_aux the pre-activation Z."""
        aux = empty(*self.out_shape, dtype=self.dtype, device=self.device) if with_aux else None   # (ints: faster)
        operands = (input, weight) if bias is None else (input, weight, bias)
        if with_aux:
            operands += (aux,)
            y = self.forward_aux_fast(*operands)
            return (y if y is not None else self.product("forward_aux_fast", operands, False)), aux
        y = self.forward_fast(*operands)
        return (y if y is not None else self.product("forward_fast", operands, False)), None

    def gradients(self, grad, input, weight, saved, need_input: bool, need_weight: bool, need_bias: bool) -> tuple:
        """(dX, dW, dBias) given dY = grad and what the forward saved (Z, or Y for relu): dZ from
        dY, then dZ @ W and dZ^T @ rows by their repeated calls where dZ is laid out as they
        were recorded (else, and for a weight not row-major, tilemm.linear's own rule)."""
        dz = self.activation_backward(grad, saved)
        if not self.usual or dz.stride() != self.out_stride:
            return self.general_gradients(grad, input, weight, saved, (need_input, need_weight, need_bias))
        d_input = d_weight = d_bias = None
        if need_input:
            d_input = self.input_fast(dz, weight)
            if d_input is None:
                d_input = self.product("input_fast", (dz, weight), False)
        if need_weight:
            d_weight = self.weight_fast(dz, input)
            if d_weight is None:
                d_weight = self.product("weight_fast", (dz, input), False)
        if need_bias:
            d_bias = matrix(dz).sum(0)
        return d_input, d_weight, d_bias

    def general_gradients(self, grad, input, weight, saved, needs: tuple, product=None) -> tuple:
        """(dX, dW, dBias) by tilemm.linear's rule (fused.grads on rows and weight.T), of the
        shapes of input, weight and bias; product(x, y, alpha): the program's, unless given."""
        def program_product(x, y, scale):
            return fused.plain_product(x, y, scale, fused.TRITON, self.config)
        product = product or program_product
        d_rows, d_weight_t, d_bias, _, _ = fused.grads(
            matrix(grad), None if saved is None else matrix(saved), matrix(input), weight.mT, self.bias_shape, False,
            False, False, self.activation, 1.0, 0.0, (*needs, False, False), product)
        return (None if d_rows is None else d_rows.reshape(self.in_shape),
                None if d_weight_t is None else d_weight_t.mT, d_bias)

    def first(self, name: str, *operands):
        """A product's first call: made as tilemm.linear makes it, its launch recorded; its replay's
        quick call is then this product's repeated call (else declined: made so at each call)."""
        return self.product(name, operands, True)

    def noted(self, name: str, *operands):
        """A product's first call where its first is not recorded: made as tilemm.linear makes it;
        the next call records (first)."""
        setattr(self, name, functools.partial(self.first, name))
        return self.product(name, operands, False)

    @staticmethod
    def declined(*operands):
        return None

    def product(self, name: str, operands: tuple, record_it: bool):
        """C of product `name` on operands (as its repeated call takes them: (input, weight[,
        bias][, aux]), (dZ, weight), (dZ, input)) by the launch tilemm.linear makes for them; where
        record_it, that launch bound and recorded, its replay's quick call kept as the product's."""
        bias = aux = None
        if name in ("forward_fast", "forward_aux_fast"):
            x, w = operands[0], operands[1]
            if self.bias_shape is not None:
                bias = operands[2]
            c = empty(self.out_shape, dtype=self.dtype, device=self.device)
            if name == "forward_aux_fast":
                aux = matrix(operands[-1])
            a, b, y, activation = matrix(x), w.mT, matrix(c), self.activation
        elif name == "input_fast":
            c = empty(self.in_shape, dtype=self.dtype, device=self.device)
            a, b, y, activation = matrix(operands[0]), operands[1], matrix(c), "identity"
        else:
            c = empty(self.weight_shape, dtype=self.dtype, device=self.device)
            a, b, y, activation = matrix(operands[0]).mT, matrix(operands[1]), c, "identity"
        args = (a, b, y, aux, bias, False, None, None, activation, 1.0, 0.0, self.config)
        bound = None
        if record_it and (not self.cuda or torch.cuda.current_device() == self.index):   # (launched on the GPU current)
            bound = epilogue_launch.bound_epilogue(*args)
        if bound is None:
            epilogue_launch.launch_epilogue(*args)
        else:
            with JIT_LOCK:           # (its first launch is Triton's JIT's)
                bound()
        if bound is not None:        # (not recorded with another GPU current: tried again at the next call)
            replay = replays.recorded(bound, (*operands, c))
            setattr(self, name, repeated_call(replay) or self.declined)
        return c


def gradients(ctx, grad) -> tuple:
    """FusedLinear's backward: the route's gradients of input, weight and bias (autograd's
    batched dY: by torch's products, tilemm.torch.batched_grads)."""
    input, weight, saved, _ = ctx.saved_tensors
    needs = ctx.needs_input_grad
    if batched_grads.batched(grad):
        return ctx.route.general_gradients(grad, input, weight, saved, needs[:3], batched_grads.product) + (None,)
    return ctx.route.gradients(grad, input, weight, saved, needs[0], needs[1], needs[2]) + (None,)


def differentiable_gradients(ctx, grad) -> tuple:
    """FusedLinear's backward under create_graph=True: the gradients of tilemm.linear's composite
    (tilemm.torch.fused_transforms), a graph of their own, as tilemm.linear's node gives them."""
    input, weight, _, bias = ctx.saved_tensors
    route = ctx.route

    def compose(input, weight, bias):
        return fused_transforms.linear(input, weight, bias, route.activation, None, route.config)
    return fused_transforms.double_backward(grad, (input, weight, bias), ctx.needs_input_grad[:3], compose) + (None,)


@eager_only
class FusedLinear(torch.autograd.Function):
    """activation(input @ weight.T + bias) by a FusedRoute, with its gradients (FusedRoute.gradients);
    a node of its own name in the graph, on the Linear's own input, weight and bias. forward takes
    ctx (no setup_context): applied through autograd's own apply (record)."""

    @staticmethod
    def forward(ctx, input, weight, bias, route):
        y, aux = route.forward(input, weight, bias, route.save_aux)
        ctx.save_for_backward(input, weight, aux if aux is not None else y if route.activation == "relu" else None,
                              bias)       # (bias: for a double backward's composite)
        ctx.route = route
        return y

    @staticmethod
    def backward(ctx, grad):
        # without create_graph (grad mode off) the route's products; with it, the composite's gradients
        return differentiable_gradients(ctx, grad) if grad_enabled() and not batched_grads.batched(grad) else \
            gradients(ctx, grad)


record = direct_apply(FusedLinear)
