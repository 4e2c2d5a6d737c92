"""Seeded products on every CUDA rung with operands in odd layouts, for the GPU tests of
test_gpu_layouts.py (and, run as a script, a process of its own: python -m tests.odd_layouts
SEED CASES GPU). Stacks with broadcast dimensions, vectors, a stack's .mT, every other element,
an expanded (stride 0) dimension, a storage offset, negative strides (CuPy) and conjugate views
(torch); torch tensors and CuPy arrays; out= C- or F-ordered or sliced; each case run twice, the second
time on fresh values in the same layout (a repeated call's replay). Answers against float64 or
exact references (tilemm.numerics.accuracy.compare)."""
from __future__ import annotations

import random
import sys

import numpy as np

RUNGS = {None: ["int8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "complex64", "complex128"],
         "naive": ["int32", "int64", "float32", "float64"], "naive-global": ["int32", "float64"],
         "uncoalesced": ["int32", "float32"], "tiled": ["int32", "int64", "float32", "float64"],
         "rect": ["int64", "float32"], "regblock": ["int32", "float32", "float64"],
         "tensorcore": ["float16", "bfloat16"], "tensorcore-int": ["int8", "int16", "int32", "int64"],
         "tensorcore-f64": ["float64"], "tensorcore-f32": ["float32"], "tensorcore-complex": ["complex64", "complex128"],
         "cublas": ["int32", "float16", "bfloat16", "float32", "float64", "complex64"]}
LAYOUTS = ["plain", "mT", "sliced", "expanded", "offset", "negative", "conj"]


def values(rng, shape, dtype):
    """Host values of dtype (bfloat16: float32 values that bfloat16 holds)."""
    import torch
    if dtype.startswith("int"):
        hi = 8 if dtype == "int8" else 50
        return rng.integers(-hi, hi, shape).astype(dtype)
    x = rng.standard_normal(shape)
    if dtype == "bfloat16":
        return torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    if dtype.startswith("complex"):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def on_device(x, dtype, kind, gpu):
    """x as a torch tensor on GPU gpu (None: the host's, for torch) or a CuPy array there."""
    import torch
    if kind == "cupy":
        import cupy
        with cupy.cuda.Device(gpu):
            return cupy.asarray(x)
    t = torch.from_numpy(np.ascontiguousarray(x)).to("cpu" if gpu is None else f"cuda:{gpu}")
    return t.to(torch.bfloat16) if dtype == "bfloat16" else t


def laid_out(rng, shape, dtype, kind, how, gpu):
    """(host values, the operand on the GPU) of shape, laid out as how says (plain where how does
    not apply: a vector's .mT, CuPy's conjugate view, torch's negative strides)."""
    swap = (lambda d: d.mT) if kind == "torch" else (lambda d: d.swapaxes(-1, -2))
    if how == "mT" and len(shape) >= 2:
        h = values(rng, shape[:-2] + shape[:-3:-1], dtype)
        return np.swapaxes(h, -1, -2), swap(on_device(h, dtype, kind, gpu))
    if how == "sliced" and shape:
        h = values(rng, tuple(2 * s for s in shape), dtype)
        cut = tuple(slice(None, None, 2) for _ in shape)
        return h[cut], on_device(h, dtype, kind, gpu)[cut]
    if how == "expanded" and len(shape) >= 2:
        h = values(rng, (1,) + shape[1:], dtype)
        d = on_device(h, dtype, kind, gpu)
        if kind == "torch":
            return np.broadcast_to(h, shape), d.expand(shape)
        import cupy
        return np.broadcast_to(h, shape), cupy.broadcast_to(d, shape)
    if how == "offset" and shape:
        h = values(rng, (shape[0] + 1,) + shape[1:], dtype)
        return h[1:], on_device(h, dtype, kind, gpu)[1:]
    if how == "negative" and kind == "cupy" and shape:
        h = values(rng, shape, dtype)
        return h[::-1], on_device(h, dtype, kind, gpu)[::-1]
    if how == "conj" and kind == "torch" and dtype.startswith("complex"):
        h = values(rng, shape, dtype)
        return h.conj(), on_device(h, dtype, kind, gpu).conj()
    h = values(rng, shape, dtype)
    return h, on_device(h, dtype, kind, gpu)


def cases(seed: int, count: int, rungs=None):
    """count cases: (kernel, dtype, kind, A's shape, B's shape, A's and B's layouts, out's order
    or None, out_dtype)."""
    pick = random.Random(seed)
    rungs = rungs or list(RUNGS)
    found = []
    for _ in range(count):
        kernel = pick.choice(rungs)
        dtype = pick.choice(RUNGS[kernel])
        kind = "torch" if dtype == "bfloat16" else pick.choice(["torch", "cupy"])
        m, n, k = (pick.choice([0, 1, 1, 2, 3, 5, 16, 17, 31, 33, 64, 65, 100, 129, 200]) for _ in range(3))
        batch_a = tuple(pick.choice([1, 2, 3]) for _ in range(pick.choice([0, 0, 1, 2])))
        batch_b = tuple(pick.choice([1, d]) for d in batch_a[len(batch_a) - pick.choice(range(len(batch_a) + 1)):])
        sa = (k,) if pick.random() < 0.1 else batch_a + (m, k)
        sb = (k,) if pick.random() < 0.1 else batch_b + (k, n)
        out_dtype = "int32" if kernel == "tensorcore-int" and dtype == "int8" and pick.random() < 0.5 else None
        out = pick.choice("CF") if pick.random() < 0.25 else None
        if out and random.Random(f"{seed}-{len(found)}").random() < 1 / 3:   # (drawn apart: pick's
            out = "sliced"                                                    # draws stay as they were)
        found.append((kernel, dtype, kind, sa, sb, pick.choice(LAYOUTS), pick.choice(LAYOUTS), out, out_dtype))
    return found


def empty_out(shape, dtype, kind, order, gpu):
    """An out of shape filled with 7s: C- or F-ordered, or "sliced" (every other element of its
    last dimension, neither)."""
    import torch
    if order == "sliced":
        wide = shape[:-1] + (2 * shape[-1],)
        return empty_out(wide, dtype, kind, "C", gpu)[..., ::2]
    if kind == "cupy":
        import cupy
        with cupy.cuda.Device(gpu):
            return cupy.full(shape, 7, dtype=dtype, order=order)
    made = torch.full(shape if order == "C" else shape[::-1], 7, dtype=getattr(torch, dtype), device=f"cuda:{gpu}")
    return made if order == "C" else made.permute(*reversed(range(len(shape))))


def run(case, seed: int, gpu: int = 0) -> list:
    """The case's two calls, checked: a list of what went wrong (empty when both are right)."""
    import tilemm
    from tilemm.numerics import arrays
    from tilemm.numerics.accuracy import compare
    kernel, dtype, kind, sa, sb, how_a, how_b, order, out_dtype = case
    rng = np.random.default_rng(seed)
    result = out_dtype or dtype
    shape = np.matmul(np.zeros(sa, "int8"), np.zeros(sb, "int8")).shape
    out = empty_out(shape, result, kind, order, gpu) if order and shape else None
    wrong = []
    for _ in range(2):                  # the second: fresh values in the same layout
        a_h, a = laid_out(rng, sa, dtype, kind, how_a, gpu)
        b_h, b = laid_out(rng, sb, dtype, kind, how_b, gpu)
        c = tilemm.matmul(a, b, kernel=kernel, out_dtype=out_dtype, **({"out": out} if out is not None else {}))
        if out is not None and c is not out:
            return [f"{case}: the out was not returned"]
        host = "float32" if result == "bfloat16" else result
        verdict = compare(np.asarray(arrays.to_host(c, host)), np.ascontiguousarray(a_h).astype(host),
                          np.ascontiguousarray(b_h).astype(host), host)
        if not verdict.ok and not (dtype == "bfloat16" and bfloat16_close(c, a_h, b_h)):
            wrong.append(f"{case}: {verdict.message}")
    return wrong


def bfloat16_close(c, a_h, b_h) -> bool:
    """A bfloat16 result within bfloat16's rounding of the float64 product (compare holds it to
    float32's)."""
    ref = np.matmul(a_h.astype(np.float64), b_h.astype(np.float64))
    got = c.float().cpu().numpy().astype(np.float64)
    scale = np.matmul(np.abs(a_h.astype(np.float64)), np.abs(b_h.astype(np.float64)))
    return got.shape == ref.shape and bool(np.all(np.abs(got - ref) <= 2.0 ** -7 * np.abs(ref) + 1e-5 * scale + 1e-30))


if __name__ == "__main__":
    seed, count, gpu = (int(x) for x in sys.argv[1:4])
    rungs = sys.argv[4].split(",") if len(sys.argv) > 4 else None
    failures = [w for i, case in enumerate(cases(seed, count, rungs)) for w in run(case, seed * 100_003 + i, gpu)]
    print("\n".join(failures) or f"{count} cases right", flush=True)
    sys.exit(1 if failures else 0)
