"""The public name of tilemm's torch operators, which live in tilemm.torch.ops: ``import
tilemm.torch_ops`` registers them (a program exported with them needs it where it is loaded)."""
import sys

from tilemm.torch import ops

sys.modules[__name__] = ops
