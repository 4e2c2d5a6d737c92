"""When a call goes out of core, and the plan that takes it there: a GPU rung on host matrices
whose A, B and C would pass the GPU's free memory if copied in whole runs through
tilemm.outofcore, a panel at a time (the library's products)."""
from __future__ import annotations

import dataclasses

from tilemm.numerics import arrays
from tilemm.numerics.dtypes import FLOATS, INTS, dtype_name
from tilemm.plans.plan import KernelUnavailable, Plan


def goes_out_of_core(plan: Plan) -> bool:
    """Whether a checked plan (no out_dtype, no stream) goes out of core: a GPU rung, host matrices
    (not stacks), a float or integer result, past the GPU's free memory."""
    return (plan.kernel.device == "cuda" and plan.operand.device == "cpu" and not plan.batch
            and len(plan.a.shape) == len(plan.b.shape) == 2 and plan.result in FLOATS + INTS
            and past_device_memory(plan.problem))


def past_device_memory(problem) -> bool:
    """Whether A, B and C of a product on host operands would pass the GPU's free memory if copied
    in whole: then they go through tilemm.outofcore, a panel at a time."""
    p = problem
    from tilemm.spread import outofcore      # (torch's and the pipeline's: loaded where a GPU rung meets host operands)
    try:
        free = outofcore.free_device_bytes()
    except (ImportError, RuntimeError, AssertionError):   # no torch, or a torch without CUDA: in core, as before
        return False
    return (p.m * p.k + p.k * p.n + p.m * p.n) * p.itemsize > free


class OutOfCorePlan(Plan):
    """A plan of host matrices past the GPU's free memory: execute() and run() multiply them with
    tilemm.outofcore; prepare() refuses (it gives in-core launches only)."""

    @classmethod
    def of(cls, plan: Plan) -> OutOfCorePlan:
        return cls(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)} | {"out_of_core": True})

    def run(self, a, b, out, stream, poison: bool = False):
        """(result, None): a and b multiplied out of core (no replay)."""
        from tilemm.spread import outofcore
        whole = out is not None and tuple(out.shape) == self.shape and dtype_name(out.dtype) == self.result
        if out is None or whole:
            return outofcore.matmul(a, b, out=out), None
        arrays.assign(out, outofcore.matmul(a, b))     # cast or repeated into out
        return out, None

    def prepare(self, poison: bool = False, copy: bool = False):
        raise KernelUnavailable(f"matmul: {self.problem.m}x{self.problem.n}x{self.problem.k} on host matrices "
                                "passes the GPU's free memory: execute() runs it out of core (tilemm.outofcore), "
                                "a panel at a time; prepare() gives in-core launches only")
