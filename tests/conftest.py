"""Test set-up. The CUDA simulator and the Triton interpreter must be switched on
before numba.cuda or triton is first imported, so this runs before any test module
imports tilemm. On the GPU machine, TILEMM_TEST_GPU=1 leaves them off and runs the
tests marked ``gpu`` too."""
import os

ON_GPU = os.environ.get("TILEMM_TEST_GPU") == "1"
if not ON_GPU:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=10, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    if ON_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run with TILEMM_TEST_GPU=1 on the device machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def no_eager_call_remembered():
    """Each test starts with no eager fused call remembered (tilemm.engine.epilogue_repeats,
    tilemm.torch.linear_calls): a launch recorded under one test's patches (a stand-in C launcher,
    a rule monkeypatched) is not replayed in another's."""
    import sys
    for name in ("tilemm.engine.epilogue_repeats", "tilemm.torch.linear_calls"):
        module = sys.modules.get(name)
        if module is not None:
            module.release()
    yield


@pytest.fixture(autouse=True)
def same_draws_every_run():
    """Each test draws the same random operands on every run and in every worker, so a tolerance
    that a rare draw would break (a sum cancelling near zero) breaks on every run or on none."""
    import sys
    import numpy as np
    np.random.seed(0)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(0)
    yield
