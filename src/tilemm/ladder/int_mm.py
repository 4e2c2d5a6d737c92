"""int8 x int8 -> int32 through torch._int_mm (cuBLASLt's int8 GEMM, int32 sums), for the library rung.

_int_mm takes 2-D int8 CUDA tensors with M above 16 and K and N multiples of 8, and is fast in one
layout alone: A's rows and B's columns contiguous (B given as (N, K).T, as torch.nn.Linear keeps a
weight). Elsewhere cuBLASLt takes a kernel several times slower, or refuses some shapes
(CUBLAS_STATUS_NOT_SUPPORTED, e.g. a column-major A at 17 x 28672 x 4096, a row-major B at 40 x 48 x
64). So operands in another layout are copied into that one, the copy counted in the call (for a
column-major A far cheaper in all than the slow kernel; a row-major B's transposing copy costs
more). Up to 16 rows, A is padded with zero rows to PADDED_ROWS.
Operands at 4- and 8-byte offsets gave exact answers. The int32 sums wrap as NumPy's int32 do:
exact modulo 2^32 (17 x 8 x (2^17 + 64) of all -128s gave 2^31 + 2^20, wrapped).
"""
from __future__ import annotations

from tilemm.numerics import arrays
from tilemm.engine import streams

# _int_mm's least M; fewer rows are padded to this many with zeros
PADDED_ROWS = 17


def why_not(m: int, n: int, k: int) -> str | None:
    """Why torch._int_mm can't multiply an M x N x K int8 product here (A padded where M is 16 or
    less), or None."""
    torch = arrays.torch_if_imported()
    if torch is None or not hasattr(torch, "_int_mm") or not torch.cuda.is_available():
        return "needs torch with CUDA and torch._int_mm"
    if m < 1 or n < 1 or k < 1 or n % 8 or k % 8:
        return f"torch._int_mm needs K and N multiples of 8 (K = {k}, N = {n})"
    return None


def k_major(a, b) -> bool:
    """Whether A's rows and B's columns are contiguous, with leading dimensions of whole 8-element
    groups: _int_mm's fast layout, no copy needed."""
    return a.stride(-1) == 1 and a.stride(-2) % 8 == 0 and b.stride(-2) == 1 and b.stride(-1) % 8 == 0


def takes(a, b, c) -> bool:
    """Whether run() multiplies these tensors through _int_mm: int8 CUDA matrices into a contiguous
    int32 C, at sizes _int_mm takes."""
    torch = arrays.torch_if_imported()
    return (torch is not None and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            and isinstance(c, torch.Tensor) and a.dtype == b.dtype == torch.int8 and c.dtype == torch.int32
            and a.dim() == b.dim() == c.dim() == 2 and a.is_cuda and b.is_cuda and c.is_contiguous()
            and why_not(a.shape[0], b.shape[1], a.shape[1]) is None)


def fast_a(a):
    """A in _int_mm's fast layout (rows contiguous), copied where it is not."""
    if a.stride(-1) != 1 or a.stride(-2) % 8:
        import torch
        return a.clone(memory_format=torch.contiguous_format)
    return a


def fast_b(b):
    """B in _int_mm's fast layout (columns contiguous: (N, K).T), copied where it is not."""
    return fast_a(b.T).T


def run(a, b, c) -> None:
    """c = a @ b for takes()'s tensors, on torch's current stream."""
    import torch
    m, b = a.shape[0], fast_b(b)
    if m >= PADDED_ROWS:
        torch._int_mm(fast_a(a), b, out=c)
        return
    padded = torch.cat((a, a.new_zeros(PADDED_ROWS - m, a.shape[1])))     # (a copy: any layout of A)
    c.copy_(torch._int_mm(padded, b)[:m])


def product(a, b):
    """A repeated call's product for operands shaped and laid out as these (a plan's fast path):
    (a, b) -> a @ b as a new int32 tensor (None during a CUDA graph's capture before the first
    padded call: the plan's path then). None instead of a function where _int_mm can't take them."""
    import torch
    m, k = a.shape
    if why_not(m, b.shape[1], k) is not None:
        return None
    int_mm, as_is = torch._int_mm, k_major(a, b)
    if m >= PADDED_ROWS:
        return int_mm if as_is else (lambda a, b: int_mm(fast_a(a), fast_b(b)))
    zeros = []       # the padding rows, made at the first call and kept with the plan (read only)

    def padded(a, b):
        if not zeros:
            if streams.capturing():
                return None
            rows = torch.zeros(PADDED_ROWS - m, k, dtype=torch.int8, device=a.device)
            torch.cuda.current_stream(a.device).synchronize()     # ready for a call on any stream
            zeros.append(rows)
        return int_mm(torch.cat((a, zeros[0])), b if as_is else fast_b(b))[:m]
    return padded
