"""A kept plan's repeated calls with an out (Plan.into): the product written straight into the
caller's out, where the plan's path computes C into a buffer of its own and copies it (for torch
CUDA tensors, a loop of ``matmul(a, b, out=y)`` then costs the CPU what a call without out does).
The library's product by torch.matmul(out=); a Triton rung's recorded launches with out as C
(tilemm.engine.replay_into)."""
from __future__ import annotations

from tilemm.numerics import arrays
from tilemm.numerics.dtypes import dtype_name, is_exact


def out_writer(plan, out):
    """into(a, b, out) -> bool for the repeated calls of plan, kept from a first call with this
    out, or None where they can't write into one: True once the product is launched into out on
    torch's current stream, False where this call must take the plan's path. A repeated call's
    key holds out's layout (kind, dtype, shape, strides, device, whether it records a gradient),
    so this first call's out says what every repeat's is: a torch CUDA tensor of the result's
    dtype and shape, contiguous. At each call, an out in the memory of a or b is declined (the
    plan's path reads the operands before it writes), as the replay's guard declines operands."""
    if out is None or plan.operand.kind != "torch" or plan.exact is not None:
        return None
    torch = arrays.torch_of(out)
    if (torch is None or type(out) is not torch.Tensor or out.device.type != "cuda" or out.requires_grad
            or dtype_name(out.dtype) != plan.result or tuple(out.shape) != tuple(plan.shape)
            or not out.is_contiguous()):
        return None
    from tilemm.engine import replay_into, torch_flags      # (loaded by then: a GPU call has run)
    if plan.kernel.backend == "library":
        if plan.fast is None or is_exact(plan.result):     # (integers: the digits' or _int_mm's own buffers)
            return None
        product = torch_flags.torch_product_into(plan.result)

        def write(a, b, out) -> bool:
            product(a, b, out)
            return True
        written_by_torch = True
    else:
        write = replay_into.out_writer(plan.replay, plan.shape) if plan.problem.dtype == plan.result else None
        written_by_torch = False
        if write is None:
            return None
    storage, touched = torch.Tensor.untyped_storage, torch.autograd.graph.increment_version

    def into(a, b, out) -> bool:
        held = storage(out).data_ptr()
        if held == storage(a).data_ptr() or held == storage(b).data_ptr() or not write(a, b, out):
            return False
        if not written_by_torch:        # an in-place write, as out.copy_ counts one (autograd's check)
            touched(out)
        return True
    return into
