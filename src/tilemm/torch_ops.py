"""The public name of tilemm's torch operators, which live in tilemm.torch.ops (and
``tilemm::grouped_matmul`` in tilemm.torch.grouped_ops): ``import tilemm.torch_ops`` registers
them (a program exported with them needs it where it is loaded)."""
import sys

from tilemm.torch import grouped_ops, ops  # noqa: F401  (grouped_ops: imported for its op's registration)

sys.modules[__name__] = ops
