"""The products beyond the plain matmul: fused epilogues (linear, fused), float8 with scales (scaled,
block_scaled), grouped products for mixtures of experts (grouped)."""
