"""How a rung is prepared and launched, by backend: each module's prepare(plan, a, b, poison, copy)
gives (launch, result, record) for a Plan (tilemm.plans.plan): record() the launches as a Replay
(tilemm.engine.replay) that the plan's repeated calls run, or record None where they can't."""
from tilemm.engine.backends import host, library, numba_cuda, triton

# a kernel's backend, else its device -> its prepare
PREPARE = {"cpu": host.prepare, "cuda": numba_cuda.prepare, "triton": triton.prepare, "library": library.prepare}
