"""Planning any shape answers, never raises: each kernel's limits, traffic model and launch shape,
and the default's choice, for sizes from 0 (empty products) past 2^31 elements (K = 0, and M = N = 0,
are where the tensor-core rung's tile choice could divide by zero)."""
import pytest
from hypothesis import given, settings, strategies as st

import tilemm
from tilemm.choose import by_shape as choice
from tilemm.ladder.registry import Problem
from tilemm.choose import default as dispatch

# Sizes where tile arithmetic turns: empty, 1, tile edges and one past them, skinny bounds, large.
EDGES = [0, 1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4096, 8191, 20000, 70000,
         2**20 + 1]
SIZE = st.one_of(st.sampled_from(EDGES), st.integers(0, 3 * 2**20))
CLAIMS = [(k, d) for k in tilemm.kernels() for d in k.dtypes]


@settings(max_examples=500, deadline=None)
@given(case=st.sampled_from(CLAIMS), m=SIZE, n=SIZE, k=SIZE)
def test_each_kernel_plans_any_shape(case, m, n, k):
    kernel, dtype = case
    problem, params = Problem(m, n, k, dtype), kernel.resolve({})
    reason = kernel.limits(problem, **params)
    assert reason is None or (isinstance(reason, str) and reason)
    traffic = kernel.traffic(problem, **params)
    assert traffic.read >= 0 and traffic.written >= 0
    if reason is None and kernel.launch_shape is not None:
        kernel.launch_shape(problem, **params)


@settings(max_examples=300, deadline=None)
@given(dtype=st.sampled_from(["bfloat16", "float16", "float32", "float64", "int8", "int32", "int64"]),
       m=SIZE, n=SIZE, k=SIZE, aligned=st.booleans())
def test_the_default_chooses_for_any_shape(dtype, m, n, k, aligned):
    lds = (k, n) if aligned else (k + 1, n + 3)
    with pytest.MonkeyPatch.context() as patch:       # the H100's table
        patch.setattr(choice, "capability", lambda: (9, 0))
        chosen = dispatch.default_kernel("cuda:0", dtype, m, n, k, dtype, lds)
    assert chosen.name in [kern.name for kern in tilemm.kernels()]
