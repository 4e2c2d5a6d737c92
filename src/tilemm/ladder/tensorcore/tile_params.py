"""The tile parameters of the Triton GEMM rungs (9-14), as their Kernel records list them."""
from __future__ import annotations

from tilemm.ladder.record import Param

BLOCKS = (16, 32, 64, 128, 256)


def tile_params(block_m, block_n, block_k, num_warps, num_stages, group_m=8, chosen_by="shape"):
    """The tile parameters of a Triton GEMM rung, with these defaults (None: chosen by shape, or
    by what chosen_by names)."""
    def doc(default, text):
        return text + (f" (None: chosen by {chosen_by})" if default is None else "")

    def none(default):
        return (None,) * (default is None)
    return (Param("block_m", block_m, none(block_m) + BLOCKS, doc(block_m, "rows of C per program")),
            Param("block_n", block_n, none(block_n) + BLOCKS, doc(block_n, "columns of C per program")),
            Param("block_k", block_k, none(block_k) + (16, 32, 64, 128), doc(block_k, "depth of one K step")),
            Param("group_m", group_m, (1, 2, 4, 8, 16), "block rows walked before the next column (L2 reuse)"),
            Param("num_warps", num_warps, none(num_warps) + (1, 2, 4, 8, 16), doc(num_warps, "warps per program")),
            Param("num_stages", num_stages, none(num_stages) + (1, 2, 3, 4, 5),
                  doc(num_stages, "software-pipelining depth (shared-memory stages)")))
