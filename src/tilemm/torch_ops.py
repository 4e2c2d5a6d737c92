"""The public name of tilemm's torch operators, which live in tilemm.torch.ops (and
``tilemm::grouped_matmul`` in tilemm.torch.grouped_ops, ``tilemm::linear`` and
``tilemm::matmul_epilogue`` and ``tilemm::epilogue_at_run`` in tilemm.torch.fused_ops):
``import tilemm.torch_ops`` registers them all (a program exported, or a TorchScript module
saved, with them needs it where it is loaded)."""
import sys

from tilemm.torch import fused_ops, grouped_ops, ops  # noqa: F401  (fused_ops, grouped_ops: imported for their ops' registration)

sys.modules[__name__] = ops
