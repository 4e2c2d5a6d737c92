"""Seeded gradients of tilemm.matmul and tilemm.linear on operands in odd layouts (a stack's .mT,
every other element, an expanded dimension, conjugate views), against torch's own autograd of the
same product in float64 (complex128), for the GPU tests of test_gpu_layouts.py."""
from __future__ import annotations

import random

import numpy as np

from .odd_layouts import laid_out

TOLERANCE = {"bfloat16": 3e-2, "float16": 5e-3, "float32": 1e-4, "float64": 1e-10, "complex64": 1e-4,
             "complex128": 1e-10}
MATMUL_RUNGS = {None: ["float32", "float64", "bfloat16", "complex64"], "tensorcore": ["bfloat16", "float16"],
                "tensorcore-f32": ["float32"], "tensorcore-f64": ["float64"],
                "tensorcore-complex": ["complex64", "complex128"], "cublas": ["float32", "float64", "complex64"],
                "tiled": ["float32", "float64"]}
LINEAR_RUNGS = {None: ["float32", "bfloat16", "float16", "float64"], "tensorcore": ["bfloat16", "float16"],
                "tensorcore-f32": ["float32"], "cublas": ["float32", "bfloat16"]}
LAYOUTS = ["plain", "mT", "sliced", "expanded", "conj"]
ACTIVATIONS = [None, "relu", "gelu", "gelu_tanh", "silu"]


def operand(rng, shape, dtype, how, gpu):
    """A torch operand of shape laid out as how says (odd_layouts.laid_out), on GPU gpu (None: the host)."""
    return laid_out(rng, shape, dtype, "torch", how, gpu)[1]


def relative(x, ref) -> float:
    import torch
    x = x.detach().to(ref.dtype).cpu()
    ref = ref.detach().cpu()
    return 0.0 if not ref.numel() else float((x - ref).abs().max() / max(float(ref.abs().max()), 1e-30))


def dim(pick):
    return pick.choice([1, 2, 3, 5, 16, 17, 33, 64, 65, 129])


def drawn(seed: int, gpu, rungs: dict) -> tuple:
    """A case's draws, from seed: (the picker, NumPy's generator, the device, a rung of rungs, one
    of its dtypes, (M, N, K)); torch's generator seeded too."""
    import torch
    pick, rng = random.Random(seed), np.random.default_rng(seed)
    torch.manual_seed(seed)
    kernel = pick.choice(list(rungs))
    dtype = pick.choice(rungs[kernel])
    return (pick, rng, "cpu" if gpu is None else f"cuda:{gpu}", kernel, dtype,
            (dim(pick), dim(pick), dim(pick)))


def matmul_case(seed: int, gpu) -> list:
    """One seeded tilemm.matmul with A (and B, mostly) requiring grad: what went wrong, or []."""
    import torch
    import tilemm
    pick, rng, device, kernel, dtype, (m, n, k) = drawn(seed, gpu, MATMUL_RUNGS)
    batch = tuple(pick.choice([1, 2]) for _ in range(pick.choice([0, 0, 1, 2])))
    sa = (k,) if pick.random() < 0.1 else batch + (m, k)
    sb = (k,) if pick.random() < 0.1 else batch[len(batch) - pick.choice(range(len(batch) + 1)):] + (k, n)
    how_a, how_b = pick.choice(LAYOUTS), pick.choice(LAYOUTS)
    a = operand(rng, sa, dtype, how_a, gpu).requires_grad_()
    b = operand(rng, sb, dtype, how_b, gpu).requires_grad_(pick.random() < 0.7)
    wide = torch.complex128 if a.is_complex() else torch.float64
    a64, b64 = a.detach().to(wide).requires_grad_(), b.detach().to(wide).requires_grad_(b.requires_grad)
    y, y64 = tilemm.matmul(a, b, kernel=kernel), torch.matmul(a64, b64)
    g = torch.randn(y.shape, dtype=y.dtype, device=device)
    for out, grad in ((y, g), (y64, g.to(wide))):
        ((out * grad.conj()).real if out.is_complex() else out * grad).sum().backward()
    errors = [relative(y, y64), relative(a.grad, a64.grad)] + ([relative(b.grad, b64.grad)] if b.requires_grad else [])
    bound = TOLERANCE[dtype] * (4 if kernel == "tensorcore-f32" else 1)
    shapes = a.grad.shape == a.shape and (not b.requires_grad or b.grad.shape == b.shape)
    if shapes and max(errors) < bound and y.dtype == a.dtype:
        return []
    return [f"matmul seed {seed}: kernel={kernel} {dtype} A{sa} {how_a} B{sb} {how_b} "
            f"B.grad={b.requires_grad}: errors {errors}, shapes {shapes}, {y.dtype}"]


def linear_case(seed: int, gpu) -> list:
    """One seeded tilemm.linear (bias, activation, residual) and, half the time, its backward."""
    import torch
    import tilemm
    functional = torch.nn.functional
    pick, rng, device, kernel, dtype, (m, n, k) = drawn(seed, gpu, LINEAR_RUNGS)
    lead = tuple(pick.choice([1, 2, 3]) for _ in range(pick.choice([0, 1, 2])))
    activation = pick.choice(ACTIVATIONS)
    how_x, how_w = pick.choice(LAYOUTS[:4]), pick.choice(LAYOUTS[:4])
    x = (operand(rng, lead + (m, k), dtype, how_x, gpu) * 0.5).detach()
    w = (operand(rng, (n, k), dtype, how_w, gpu) / k ** 0.5).detach()
    bias = operand(rng, (n,), dtype, pick.choice(["plain", "sliced"]), gpu) if pick.random() < 0.7 else None
    residual = operand(rng, lead + (m, n), dtype, pick.choice(LAYOUTS[:4]), gpu) if pick.random() < 0.3 else None
    grad = pick.random() < 0.5
    x.requires_grad_(grad), w.requires_grad_(grad)
    if bias is not None:
        bias.requires_grad_(grad)
    y = tilemm.linear(x, w, bias, activation, residual=residual, kernel=kernel)
    x64, w64 = (t.detach().double().requires_grad_(grad) for t in (x, w))
    b64 = bias.detach().double().requires_grad_(grad) if bias is not None else None
    z = functional.linear(x64, w64, b64)
    z = {None: z, "relu": functional.relu(z), "gelu": functional.gelu(z), "silu": functional.silu(z),
         "gelu_tanh": functional.gelu(z, approximate="tanh")}[activation]
    z = z + residual.double() if residual is not None else z
    errors = [relative(y, z)]
    if grad:
        g = torch.randn(y.shape, dtype=y.dtype, device=device)
        (y * g).sum().backward()
        (z * g.double()).sum().backward()
        errors += [relative(x.grad, x64.grad), relative(w.grad, w64.grad)]
        errors += [relative(bias.grad, b64.grad)] if bias is not None else []
    if max(errors) < TOLERANCE[dtype] * 4 and y.dtype == x.dtype and y.shape == z.shape and y.device == x.device:
        return []
    return [f"linear seed {seed}: kernel={kernel} {dtype} x{lead + (m, k)} {how_x} w({n}, {k}) {how_w} "
            f"bias={bias is not None} residual={residual is not None} activation={activation} grad={grad}: "
            f"errors {errors}, {y.dtype} {tuple(y.shape)}"]
