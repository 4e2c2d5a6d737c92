"""How a rung is prepared and launched, by backend: each module's prepare(plan, a, b, poison, copy)
gives (launch, result, record) for a Plan (tilemm.plans.plan): record() the launches as a Replay
(tilemm.engine.replay) that the plan's repeated calls run, or record None where they can't. A
backend's module loads with the first plan that needs it (a NumPy call loads the host's only)."""
import importlib

# a kernel's backend, else its device -> the module whose prepare() it takes
MODULES = {"cpu": "tilemm.engine.backends.host", "cuda": "tilemm.engine.backends.numba_cuda",
           "triton": "tilemm.engine.backends.triton", "library": "tilemm.engine.backends.library"}

# (backend, device) -> its prepare(), found once: a repeated call looks it up in this dictionary alone
PREPARES: dict = {}


def prepare_for(backend: str, device: str):
    """The prepare() of a kernel of this backend (else of this device)."""
    prepare = PREPARES.get((backend, device))
    if prepare is None:
        prepare = PREPARES[backend, device] = importlib.import_module(MODULES.get(backend) or MODULES[device]).prepare
    return prepare
