"""tilemm's product on DTensors: a sharding rule for ``torch.ops.tilemm.matmul``.

A DTensor program calls ``tilemm.matmul(a, b)`` (or ``tilemm.distributed.matmul(a, b)``) on
DTensors as it would call ``torch.matmul``: DTensor's dispatcher reads the rule registered here,
redistributes the operands to the cheapest placement it allows (no communication where the
operands already fit one), runs ``torch.ops.tilemm.matmul`` on each rank's local tensors (tilemm's
rungs) and hands back a DTensor. The rule is torch's own for ``mm``, one mesh dimension at a
time, so the result's placement is the one ``torch.matmul`` gives on the same operands:

    A           B            C
    Shard(0)    Replicate    Shard(0)       rows of C: no communication
    Replicate   Shard(1)     Shard(1)       columns of C: no communication
    Shard(1)    Shard(0)     Partial()      K split: each rank's partial sum (``placements=`` to reduce)
    Replicate   Replicate    Replicate
    Partial()   Replicate    Partial()      (a sum is linear in either operand)
    Replicate   Partial()    Partial()

and on a 2-D mesh any pair of these, one per mesh dimension: ``(Shard(0), Replicate())`` x
``(Replicate(), Shard(1))`` gives ``(Shard(0), Shard(1))``, C's 2-D blocks. Operands that match no
row (``Shard(0)`` x ``Shard(0)``) are redistributed first, as torch does (here: B all-gathered).
Stacks and vectors likewise, a dimension of C at a time: a stack dimension sharded where the
operands that hold it are (``Shard(0)`` x ``Shard(0)`` of two stacks gives ``Shard(0)``), K
(partial sums), C's rows, C's columns. Where torch's own matmul must first fold or expand a stack
(a stack times a matrix or a vector, a matrix or a vector times a stack, a stack of one times a
stack, stacks that broadcast) its placement can differ from this rule's, which runs no more
collectives; the values are the same.

Importing this module registers the rule (tilemm's package does it on first use of a DTensor).
"""
from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

from tilemm.torch import ops as torch_ops

_REGISTERED = []


class MixedOperands(TypeError, RuntimeError):
    """A DTensor times a plain tensor: torch.matmul raises RuntimeError."""


class OtherMeshes(ValueError, RuntimeError):
    """DTensors on two meshes: torch.matmul raises RuntimeError."""


def register() -> None:
    """Register the sharding rule of ``torch.ops.tilemm.matmul`` with DTensor (once)."""
    if _REGISTERED:
        return
    try:
        from torch.distributed.tensor.experimental import register_sharding
    except ImportError as e:            # torch before 2.5
        raise RuntimeError("tilemm on DTensors needs torch.distributed.tensor.experimental.register_sharding "
                           f"(torch 2.5 or later); this torch is {torch.__version__}") from e
    register_sharding(torch.ops.tilemm.matmul.default)(matmul_sharding)
    _REGISTERED.append(True)


def matmul_sharding(a, b, kernel, params, out_dtype):
    """The acceptable (output placements, input placements) of one mesh dimension, torch's order for
    mm: DTensor expands them over the mesh and picks the one that costs least to reach. Stacks and
    vectors the same way, one dimension of C at a time (stack_strategies)."""
    extra = [None, None, None]                  # kernel, params, out_dtype: not tensors
    strategies = [([Replicate()], [Replicate(), Replicate()] + extra)]
    if len(a.shape) == 2 and len(b.shape) == 2:
        strategies += [
            ([Partial()], [Shard(1), Shard(0)] + extra),        # K: partial sums
            ([Shard(0)], [Shard(0), Replicate()] + extra),      # rows of A, rows of C
            ([Shard(1)], [Replicate(), Shard(1)] + extra),      # columns of B, columns of C
            ([Partial()], [Partial(), Replicate()] + extra),
            ([Partial()], [Replicate(), Partial()] + extra),
        ]
    elif len(a.shape) and len(b.shape):
        strategies += [([c], [pa, pb] + extra) for c, pa, pb in stack_strategies(tuple(a.shape), tuple(b.shape))]
    return strategies


def stack_strategies(sa: tuple, sb: tuple) -> list:
    """(C, A, B) placements of one mesh dimension for numpy.matmul's stacks and vectors: each stack
    dimension of C sharded with the operands' own (an operand that broadcasts it, or lacks it,
    replicated), then K (partial sums), C's rows (A's), C's columns (B's), and a Partial operand
    times a replicated one. A vector has no rows or columns: C lacks that dimension."""
    ra, rb = len(sa), len(sb)
    stack = max(ra, rb, 2) - 2
    rows, cols = (stack if ra > 1 else None), (stack + (ra > 1) if rb > 1 else None)
    found = []
    for d in range(stack):
        pa = _stack_place(sa, d - stack + max(ra - 2, 0), ra)
        pb = _stack_place(sb, d - stack + max(rb - 2, 0), rb)
        if isinstance(pa, Shard) or isinstance(pb, Shard):
            found.append((Shard(d), pa, pb))
    found.append((Partial(), Shard(ra - 1), Shard(rb - 2 if rb > 1 else 0)))        # K: partial sums
    if rows is not None:
        found.append((Shard(rows), Shard(ra - 2), Replicate()))
    if cols is not None:
        found.append((Shard(cols), Replicate(), Shard(rb - 1)))
    return found + [(Partial(), Partial(), Replicate()), (Partial(), Replicate(), Partial())]


def _stack_place(shape: tuple, d: int, rank: int):
    """An operand's placement for C's stack dimension d (counted in the operand's own stack, from its
    front: negative where the operand lacks it): Shard where it holds it whole, else Replicate."""
    if rank <= 2 or d < 0 or shape[d] == 1:
        return Replicate()
    return Shard(d)


def is_dtensor(x) -> bool:
    return isinstance(x, DTensor)


def matmul(a, b, out=None, *, kernel: str | None = None, out_dtype=None, stream=None, placements=None, **params):
    """C = A @ B of DTensors on one DeviceMesh, each rank's local product by tilemm (``kernel`` and
    ``params`` as tilemm.matmul takes them), returned as a DTensor with the placement torch.matmul
    gives (the module's table). placements: redistribute C to these afterwards, e.g. ``[Shard(0)]``
    after ``Shard(1)`` x ``Shard(0)``: one reduce-scatter instead of the Partial sums."""
    if not (isinstance(a, DTensor) and isinstance(b, DTensor)):     # torch's RuntimeError (a TypeError too)
        raise MixedOperands(f"tilemm.matmul got mixed torch.Tensor and DTensor ({type(a).__name__} and "
                            f"{type(b).__name__}), need to convert all torch.Tensor to DTensor before calling "
                            "distributed operators (DTensor.from_local or distribute_tensor makes one)")
    if a.device_mesh != b.device_mesh:
        raise OtherMeshes(f"tilemm.matmul on DTensors: the operands lie on different meshes ({a.device_mesh} and "
                         f"{b.device_mesh})")
    if out is not None or stream is not None:
        raise TypeError("tilemm.matmul on DTensors takes neither out= nor stream= (each rank's product runs on "
                        "its current stream; DTensor allocates the result)")
    if placements is not None:
        placements = _checked_placements(placements, a.device_mesh.ndim, _result_dims(a.ndim, b.ndim))
    register()
    c = torch.ops.tilemm.matmul(a, b, kernel, torch_ops.encode_params(params), torch_ops.dtype_text(out_dtype))
    if placements is not None and tuple(placements) != tuple(c.placements):
        c = c.redistribute(placements=placements)
    return c


def _checked_placements(placements, mesh_dims: int, result_dims: int | None) -> list:
    """placements as a list, or a ValueError before the product: one a mesh dimension, each Shard of
    a dimension C has (result_dims; None: not known, an operand is 0-d and the product refuses it)."""
    placements = list(placements)
    if len(placements) != mesh_dims or not all(isinstance(p, (Shard, Replicate, Partial)) for p in placements):
        raise ValueError(f"tilemm.matmul on DTensors: placements={placements!r}; one Shard, Replicate or Partial "
                         f"for each of the mesh's {mesh_dims} dimensions")
    outside = [p for p in placements if isinstance(p, Shard) and result_dims is not None
               and not -result_dims <= p.dim < result_dims]
    if outside:
        raise ValueError(f"tilemm.matmul on DTensors: placements={placements!r}; C has {result_dims} dimensions, "
                         f"so {outside[0]} shards none of them")
    return placements


def _result_dims(ra: int, rb: int) -> int | None:
    """The dimensions of numpy.matmul's result for operands of ra and rb dimensions (a 1-D operand's
    own dimension leaves); None where an operand is 0-d."""
    if not ra or not rb:
        return None
    return max(ra, rb) - (ra == 1) - (rb == 1) if ra == 1 or rb == 1 else max(ra, rb)


register()      # on import, as the docstring says: a first product traced by torch.compile never calls matmul()
