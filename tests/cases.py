"""The conformance table: shapes, dtypes and data every kernel that claims them must pass."""
from tilemm.numerics.data import operands, random_operand  # noqa: F401  (shared with the benchmarks)

# (m, n, k): empty, 1, primes, ragged past every tile, K much larger than M and N.
SHAPES = [(0, 5, 3), (4, 0, 3), (3, 5, 0), (1, 1, 1), (7, 13, 11), (17, 33, 9), (40, 7, 65),
          (3, 2, 1000), (70, 67, 33)]
NUMPY_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64"]


