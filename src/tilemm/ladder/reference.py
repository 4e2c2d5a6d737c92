"""The anchor `numpy` (listed first): NumPy itself, the reference and the CPU anchor (OpenBLAS for floats
and complex numbers, an exact wrapping loop for integers, the OR of ANDs for bool, NumPy's loops for
longdouble and for object arrays, which no other rung computes).

float16 is computed in float32 and rounded once, which is what NumPy's own float16 loop sums in:
the same answers within the bound, through OpenBLAS's SGEMM (1024³ on a 2-core host: 12 ms a call
against the loop's 5.0 s)."""
import numpy as np

from tilemm.numerics.dtypes import BOOL, COMPLEX, FLOATS, HOST_ONLY, INTS, OBJECT
from tilemm.ladder.record import Kernel, Traffic, register


# --8<-- [start:kernel]
def run_numpy(a, b, c):
    np.matmul(a, b, out=c)
# --8<-- [end:kernel]


register(Kernel(
    name="numpy", rung=0, device="cpu", backend="numpy",
    dtypes=tuple(d for d in FLOATS + INTS if d not in ("float16", "bfloat16")) + BOOL + COMPLEX + HOST_ONLY + OBJECT,
    seed="anchor", summary="numpy.matmul: OpenBLAS for floats and complex, NumPy's exact loop for integers and bool, "
                           "its longdouble and object loops",
    run=run_numpy, run_stack=run_numpy,
    traffic=lambda p: Traffic(read=p.m * p.k + p.k * p.n, written=p.m * p.n),
))
