"""torch's reduced-precision flag around F.linear, for tilemm.nn.Linear's library layouts: whether
cuBLAS takes the reduction the flag allows for a layout (same_with_flag), and F.linear recording a
backward that turns the flag off while its product's node runs (linear_with_exact_backward)."""
from __future__ import annotations

import threading

import torch
from torch.nn.functional import linear


# Products of the random operands that same_with_flag compares at the least: a reduction of
# partial sums in 16 bits changes the last bits of most of them
SEEN_PRODUCTS = 4096


def same_with_flag(input: torch.Tensor, weight: torch.Tensor, bias, get, put, gradients: bool) -> bool:
    """Whether torch's F.linear (gradients=False: its value; True: its own backward's gradients,
    dY row-major and column-major), for operands laid out as these (random values of their
    shapes, strides, dtype and device), gives bit for bit the same with torch's reduced-precision
    flag as it is now as with it off: then cuBLAS sums in float32 for this layout whatever the
    flag says (it allows, not asks for, a reduction in 16 bits: a split of K that cuBLAS takes for
    some shapes), and the call need not turn the flag off. Drawn again until SEEN_PRODUCTS
    products have been compared, from a generator of its own (the caller's random streams are
    left as they were). False while a CUDA graph is being captured (the comparison waits on the
    device): the flag is then turned off at each call."""
    out_shape = input.shape[:-1] + weight.shape[:1]
    per_draw = (input.numel() + weight.numel()) if gradients else out_shape.numel()
    if not per_draw or not input.numel() or not weight.numel():
        return False
    if input.is_cuda and torch.cuda.is_current_stream_capturing():
        return False
    state = get()
    generator = torch.Generator(device=input.device).manual_seed(0)

    def agree(compute) -> bool:
        allowed = compute()
        put(False, *state[1:])
        try:
            exact = compute()
        finally:
            put(*state)
        return all(torch.equal(a, b) for a, b in zip(allowed, exact))

    with torch.enable_grad() if gradients else torch.no_grad():
        for _ in range(min(16, -(-SEEN_PRODUCTS // per_draw))):
            x, w = random_laid_out(input, gradients, generator), random_laid_out(weight, gradients, generator)
            b = None if bias is None else random_laid_out(bias, False, generator)
            if not gradients:
                if not agree(lambda: (linear(x, w, b),)):
                    return False
                continue
            rows = torch.randn(out_shape[::-1], generator=generator, dtype=input.dtype, device=input.device).permute(
                tuple(range(len(out_shape)))[::-1])
            for grad in (rows.contiguous(), rows):
                if not agree(lambda: torch.autograd.grad(linear(x, w, b), (x, w), grad)):
                    return False
    return True


def random_laid_out(t: torch.Tensor, requires_grad: bool, generator: torch.Generator) -> torch.Tensor:
    """Normal random values in t's shape, strides, dtype and device."""
    extent = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    base = torch.randn(extent, generator=generator, dtype=t.dtype, device=t.device)
    return base.as_strided(t.shape, t.stride()).requires_grad_(requires_grad)


# torch's nodes that multiply in F.linear's graph (the product itself, or under the view that
# puts a stack of rows back in shape and, for strided rows, the bias's add)
PRODUCT_NODES = ("MmBackward0", "AddmmBackward0")


def linear_with_exact_backward(get, put):
    """F.linear recording torch's own nodes, with hooks before and after its product's node that
    turn torch's reduced-precision flag off while it runs: torch's backward then makes both
    gradient products with float32 sums, and no Python Function stands in the graph (one cost
    15-30 us more a layer's training call on an H200's host). None where F.linear's graph has no
    product node where one is looked for (the caller then takes the Function). get, put: the
    flag's (library.exact_sums_flag). The flag is process-wide, as the forward's toggle is; a
    second derivative's products (create_graph=True) follow torch's flags."""
    saved = threading.local()

    def flag_off(grad_outputs):
        saved.state = state = get()
        if state[0]:
            put(False, *state[1:])
        grad = grad_outputs[0]      # contiguous: the layout whose gradient plans were asked
        return None if grad is None or grad.is_contiguous() else (grad.contiguous(),)

    def flag_back(grad_inputs, grad_outputs):
        state = saved.state
        if state[0]:
            put(*state)

    def product(input, weight, bias):
        y = linear(input, weight, bias)
        node = y.grad_fn
        for _ in range(2):      # a stack of rows: the view over the product (and the bias's add)
            if node is None or node.name() in PRODUCT_NODES:
                break
            node = node.next_functions[0][0]
        if node is None or node.name() not in PRODUCT_NODES:
            return None
        node.register_prehook(flag_off)
        node.register_hook(flag_back)
        return y
    return product
