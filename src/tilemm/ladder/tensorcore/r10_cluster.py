"""cluster=True of rung `tensorcore`: the Gluon program of r10_cluster_kernel (on Hopper, clusters
of two CTAs that load each B tile once for both), asked for only: why it is refused, its operands
as it reads them, its launch.

It runs only where Triton's Gluon routes mbarrier arrivals between the CTAs of a cluster
(availability.gluon_multicast: Triton 3.9, not 3.7 or 3.6), on a Hopper GPU, outside Triton's
interpreter; anywhere else, and with any of the rung's tile parameters changed (the program has
its own tiles), the plan is refused before any work.
"""
from __future__ import annotations

from tilemm.engine import availability, operand_copies
from tilemm.engine import launches

# the rung's parameters at their defaults: the cluster program takes none of them (its tiles,
# stages and tile order are its own; operands are copied only where TMA needs it)
OWN_DEFAULTS = dict(block_m=None, block_n=None, block_k=None, group_m=8, num_warps=None, num_stages=None,
                    persistent=True, stream_k=False, split_k=None, align_rows=None, tma=None, autotune=False)
CLUSTER_TILE = dict(block_m=256, block_n=256, block_k=64)     # r10_cluster_kernel's


def limits(p, **params) -> str | None:
    """Why cluster=True can't compute problem p here, or None."""
    refusal = availability.gluon_multicast_refusal("cluster=True")
    if refusal:
        return refusal
    if p.dtype not in ("bfloat16", "float16"):
        return f"cluster=True multiplies bfloat16 or float16, not {p.dtype}"
    changed = [f"{name}={params[name]!r}" for name, value in OWN_DEFAULTS.items()
               if name in params and params[name] != value]
    if changed:
        return (f"cluster=True runs a program of its own tiles and takes none of the rung's tile parameters "
                f"(got {', '.join(changed)}); leave them at their defaults")
    return availability.dimension_limit(p.m, p.n, p.k)


def reads_b_k_major(b) -> bool:
    """Whether the program reads B as B^T's rows (K-major): where B's rows are not contiguous and
    16-byte aligned but its columns are (B given as (N, K).T), or neither are (copied into
    B^T's rows); else B's own rows, copied into aligned ones where they are not."""
    return not operand_copies.k_major(b) and (operand_copies.k_major(b.T) or b.stride(1) != 1)


def bind(a, b, c):
    """c = a @ b by the cluster program as a Steps (any operand copied into aligned rows first,
    then the product), which tilemm.engine.replay can run again on other operands."""
    from tilemm.ladder.tensorcore import r10_cluster_kernel as program     # Triton loads on first use
    m, k = a.shape
    n = b.shape[1]
    if k == 0:                       # an empty sum (and no tensor to describe)
        return c.zero_
    if m == 0 or n == 0:
        return lambda: None
    a_rows, a_fill = operand_copies.aligned_rows(a)
    b_k_major = reads_b_k_major(b)
    b_rows, b_fill = operand_copies.aligned_rows(b.T if b_k_major else b)
    # C through TMA stores where its rows are contiguous and aligned (a fresh C's are)
    tma_c = c if operand_copies.k_major(c) and str(c.dtype) in program.ELEMENTS else None
    a_desc, b_desc, *c_desc = program.descriptors(a_rows, b_rows, b_k_major, tma_c)
    product = program.launcher(a_desc, b_desc, c_desc[0] if c_desc else None, c, m, n, k,
                               availability.multiprocessors())
    return launches.Steps([a_fill, b_fill, product])
