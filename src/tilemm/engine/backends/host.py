"""The host backend: NumPy and the numba CPU rungs, a matrix of the stack a call."""
from __future__ import annotations

from tilemm.numerics import arrays
from tilemm.engine.backends.common import poisoned, run_over_stack


def prepare(plan, a, b, poison: bool, copy: bool):
    """Copy to the host if needed; the kernel runs once per matrix of the stack (NumPy once)."""
    p = plan.problem
    a_h, b_h = arrays.to_host(a, p.dtype), arrays.to_host(b, p.dtype)
    if copy:
        a_h, b_h = a_h.copy(), b_h.copy()
    c = poisoned(plan.batch + (p.m, p.n), p.dtype, poison)

    def launch():
        if p.m and p.n:  # an empty output needs no launch
            run_over_stack(plan, a_h, b_h, c)
    return launch, lambda: c, None       # (no replay on the host)
