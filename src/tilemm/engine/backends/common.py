"""What the backends share: a poisoned output, a kernel run over a stack of matrices, and whether
a prepared call's launches may be recorded for replay."""
from __future__ import annotations

import numpy as np

from tilemm.numerics import arrays


def poisoned(shape, dtype, poison: bool) -> np.ndarray:
    c = np.empty(shape, dtype)
    return arrays.poison(c) if poison else c



def run_over_stack(plan, a, b, c, view=None):
    """c = a @ b over the plan's stack: in one call where the rung's library takes stacks, else a
    matrix a call. view, given, makes the kernel's view of each matrix after a, b and c's own
    library has cut it out of the stack (numba-cuda cuts a stack of F-ordered matrices wrongly)."""
    if plan.batch and plan.kernel.run_stack:
        plan.kernel.run_stack(a, b, c)
        return
    for idx, a_i, b_i in arrays.matrices(plan.batch, a, b):
        c_i = c[idx] if idx else c
        if view is not None:
            a_i, b_i, c_i = view(a_i), view(b_i), view(c_i)
        plan.kernel.run(a_i, b_i, c_i, **plan.params)


def replayable(plan, copy: bool, poison: bool, a, b, used_a, used_b) -> bool:
    """Whether a prepared call's launches may be recorded for repeated calls to replay: a plain
    call (no copies, no poison) on 2-D torch tensors that the kernel took as they are (used_a is
    a: no cast, no copy) with a result of the compute dtype."""
    return (not copy and not poison and plan.operand.kind == "torch" and not plan.batch and len(plan.shape) == 2
            and used_a is a and used_b is b and plan.result == plan.problem.dtype)   # (both operands 2-D)
