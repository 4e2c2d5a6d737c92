"""The public name of tilemm's DTensor sharding rule, which lives in tilemm.spread.dtensor:
``import tilemm.dtensor`` registers it (it imports torch, so tilemm loads it when first named)."""
import sys

from tilemm.spread import dtensor

sys.modules[__name__] = dtensor
