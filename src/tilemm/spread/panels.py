"""What the products past one GPU share: cutting a range into near-equal blocks, and adding one K
panel's product into a running sum (tilemm.distributed over ranks, tilemm.outofcore over pieces
of host memory)."""
from __future__ import annotations

from tilemm.ladder import registry
from tilemm.plans import checks as planning
from tilemm.numerics.dtypes import dtype_name

SIXTEEN_BIT = ("float16", "bfloat16")


def block(n: int, parts: int, index: int) -> slice:
    """Block `index` of `parts` near-equal blocks of range(n) (the first n % parts one longer)."""
    base, extra = divmod(n, parts)
    start = index * base + min(index, extra)
    return slice(start, start + base + (index < extra))


def blocks(n: int, parts: int) -> list[slice]:
    return [block(n, parts, i) for i in range(parts)]


def accumulate(acc, a, b, sums: str, first: bool) -> None:
    """acc += a @ b (first: acc = a @ b, so acc needs no zeros) with sums of dtype `sums`. 16-bit
    floats on the GPU: the library (cuBLAS through torch's mm / addmm with float32 C) where torch has
    it, else the tensorcore rung adding into float32 acc in its epilogue; no float32 copies of the
    operands, no partial product to add either way. Everything else by tilemm's default rung, in
    the dtype of the sums where it is not the operands' (an out_dtype that widens: int32 operands
    summed in int64 multiply in int64, as tilemm.matmul's out_dtype does, not in int32 that wraps)."""
    if dtype_name(a.dtype) in SIXTEEN_BIT and sums == "float32" and a.is_cuda:
        if _library_adds_into_float32(a):
            import torch
            if first:
                torch.mm(a, b, out_dtype=torch.float32, out=acc)
            else:
                torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
            return
        registry.get("tensorcore").accumulate(a, b, acc, first)
        return
    product = planning.check(a, b, out_dtype=sums if dtype_name(a.dtype) != sums else None).execute()
    if first:
        acc.copy_(product)
    else:
        acc += product


def product(c, a, b) -> None:
    """c = a @ b in c's dtype, 16-bit floats summed in float32 and rounded once: cuBLAS through
    torch with the reduced-precision reductions off (what a K in one pass needs: no running sum)."""
    if dtype_name(a.dtype) in SIXTEEN_BIT:
        if a.is_cuda:
            from tilemm.engine.torch_flags import EXACT_FLAGS, torch_matmul_flags
            with torch_matmul_flags(**EXACT_FLAGS) as torch:
                torch.matmul(a, b, out=c)
        else:
            c.copy_(planning.check(a, b, out_dtype="float32").execute())
        return
    accumulate(c, a, b, dtype_name(c.dtype), first=True)


_LIBRARY_FLOAT32_C: dict = {}


def _library_adds_into_float32(a) -> bool:
    """Whether torch's mm and addmm take out_dtype=float32 for 16-bit operands on this device (newer
    torch releases; 2.11 and 2.13 have them), tried once on a small product and checked."""
    import torch
    key = (str(a.device), a.dtype)
    if key not in _LIBRARY_FLOAT32_C:
        x = torch.ones((16, 16), dtype=a.dtype, device=a.device)
        acc = torch.ones((16, 16), dtype=torch.float32, device=a.device)
        try:
            fresh = torch.mm(x, x, out_dtype=torch.float32)
            torch.addmm(acc, x, x, out_dtype=torch.float32, out=acc)
            _LIBRARY_FLOAT32_C[key] = bool((acc == 17).all() and (fresh == 16).all())
        except (RuntimeError, TypeError, NotImplementedError):
            _LIBRARY_FLOAT32_C[key] = False
    return _LIBRARY_FLOAT32_C[key]
