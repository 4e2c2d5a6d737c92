"""The one lock of Triton's and numba-cuda's first launches.

Numba-cuda and Triton load a compiled program into the context on its first launch, and neither
does that safely from two threads at once (numba-cuda: "key already in dictionary: <CUlibrary>");
Triton's interpreter runs a program by patching module-wide state. Their launches through the
JIT (a plan's, a fused epilogue's, a grouped product's, a launch bound for a replay's
recording) are made under this lock: held for the microseconds of a launch, and for the compile
on a first one."""
from __future__ import annotations

import threading

JIT_LOCK = threading.RLock()
