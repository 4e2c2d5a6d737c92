"""A kept plan's repeated calls with an out (Plan.into) on torch tensors: the product written into
the caller's out by the repeated call's own short path, where the plan's path would check and
plan the call again. On the GPU, an out of the result's own layout is written straight (the
library's product by torch.matmul(out=); a Triton rung's recorded launches with out as C,
tilemm.engine.replay_into); else the repeated call's product is copied in, as the plan's path
copies its own."""
from __future__ import annotations

from tilemm.numerics import arrays
from tilemm.numerics.dtypes import dtype_name, is_exact


def out_writer(plan, out):
    """into(a, b, out) -> True, writing the product into out, for the repeated calls of plan,
    kept from a first call with this out; None where they take the plan's path. A repeated call's
    key holds out's layout (kind, dtype, shape, strides, device, whether it records a gradient),
    so this first call's out says what every repeat's is: here a torch tensor of the result's
    dtype and shape that records no gradient. Written straight where it can be (see straight),
    else computed by the repeated call's path (plan.repeat) and copied in: an out in the memory
    of a or b then gets the product of the operands as they were, as from the plan's path."""
    if out is None or plan.operand.kind != "torch" or plan.exact is not None or plan.repeat is None:
        return None
    torch = arrays.torch_of(out)
    if (torch is None or type(out) is not torch.Tensor or out.requires_grad
            or dtype_name(out.dtype) != plan.result or tuple(out.shape) != tuple(plan.shape)):
        return None
    product, copy = plan.repeat, torch.Tensor.copy_

    def copied(a, b, out) -> bool:
        copy(out, product(a, b))
        return True
    write = straight(plan, out, torch)
    if write is None:
        return copied
    storage = torch.Tensor.untyped_storage

    def into(a, b, out) -> bool:
        held = storage(out).data_ptr()
        if held != storage(a).data_ptr() and held != storage(b).data_ptr() and write(a, b, out):
            return True
        return copied(a, b, out)
    return into


def straight(plan, out, torch):
    """write(a, b, out) -> bool, the product written straight into out (False where this call
    can't: the replay's guard), for a contiguous CUDA out; None where no call can."""
    if out.device.type != "cuda" or not out.is_contiguous():
        return None
    from tilemm.engine import replay_guard, replay_into, torch_flags     # (a GPU call has loaded what they import)
    if plan.kernel.backend == "library":
        if plan.fast is None or is_exact(plan.result):     # (integers: the digits' or _int_mm's own buffers)
            return None
        product = torch_flags.torch_product_into(plan.result)
        lazy = replay_guard.lazy

        def by_torch(a, b, out) -> bool:
            if lazy(out):           # a conjugate or negative view: its memory is not its values
                return False
            product(a, b, out)
            return True
        return by_torch
    launch = replay_into.out_writer(plan.replay, plan.shape) if plan.problem.dtype == plan.result else None
    if launch is None:
        return None
    touched = torch.autograd.graph.increment_version

    def replayed(a, b, out) -> bool:
        if not launch(a, b, out):
            return False
        touched(out)            # an in-place write, as out.copy_ counts one (autograd's check)
        return True
    return replayed
