"""tilemm.scaled_matmul on torch CPU tensors outside Triton's interpreter (a CPU-only user, or CPU
tensors on a GPU machine): the product on the host, as torch._scaled_mm computes it on the CPU:
each operand in float32 times its per-tensor or row-wise scales, then their float32 product,
rounded once to out_dtype (torch's answer, to the order of the float32 sums, which torch's CPU
kernels choose by shape). Block scales (1 x 128 of A, 128 x 128 of B), which torch's CPU
_scaled_mm does not take, scale each block of the operands the same way. fast_accum changes
nothing here."""
from __future__ import annotations

from tilemm.numerics import arrays
from tilemm.products import block_scaled, scaled_common as scaled_out
from tilemm.system import compat


def takes(a, b) -> bool:
    """Whether the call runs here: torch CPU tensors, Triton's interpreter off."""
    return arrays.torch_of(a) is not None and a.device.type == "cpu" and not compat.triton_interpreter()


def scaled_matmul(a, b, scale_a, scale_b, out_dtype, out, stream, library, params: dict):
    """``scaled_matmul``'s product on the host (the public function's arguments), checks first."""
    import torch
    if params:
        raise TypeError(f"scaled_matmul: parameter(s) {', '.join(sorted(params))} are the GPU program's; CPU "
                        "tensors are multiplied on the host")
    if library:
        raise ValueError("scaled_matmul: library=True asks for torch's block-scaled _scaled_mm, which runs on a CUDA "
                         "GPU; CPU tensors are multiplied on the host")
    if stream is not None:
        raise ValueError("scaled_matmul: stream= is for CUDA tensors; CPU tensors are multiplied on the host")
    scaled_out.check_operands(a, b, torch)
    m, k = a.shape
    n = b.shape[1]
    result_dtype = scaled_out.result_dtype_of(out_dtype, torch)
    kind = "per-tensor"
    if block_scaled.vector_scales(scale_a, scale_b):
        kind = block_scaled.scale_kind(scale_a, scale_b, a.device, m, n, k, torch)
    else:
        scale_a = scaled_out.scale_tensor(scale_a, "scale_a", a.device, torch)
        scale_b = scaled_out.scale_tensor(scale_b, "scale_b", a.device, torch)
    scaled_out.check_out(out, m, n, result_dtype, a.device)
    if kind == "block":          # each block's scale over its elements
        a_scaled, b_scaled = scaled_out.scaled_blocks(a, b, scale_a, scale_b, block_scaled.PROGRAM.SCALE_BLOCK)
    else:
        a_scaled, b_scaled = a.float() * scale_a, b.float() * scale_b
    product = a_scaled @ b_scaled     # as torch's CPU _scaled_mm: scaled, then multiplied
    if out is None:
        return product.to(result_dtype)
    return out.copy_(product)
