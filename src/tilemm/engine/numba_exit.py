"""numba-cuda's compiled modules left loaded when the process ends.

At the interpreter's exit numba-cuda unloads the modules of its kernels from weakref finalizers.
A process that ran a few hundred SIMT products on a GPU that was not the current one, with torch
and CuPy alongside (the second of two H200s), crashed there, in cuLibraryUnload, after all its
work was done: a segmentation fault or glibc's "double free". The driver frees a process's
modules when it ends, so tilemm has numba-cuda defer that clean-up for every context it holds,
from an atexit hook that runs before the finalizers: atexit runs its hooks last registered first,
and weakref registers the finalizers' hook with the first finalizer the process makes, so one is
made (on this module's function, which lives as long as the process) before tilemm's hook is."""
from __future__ import annotations

import atexit
import weakref

_hooked = False
_deferred = []      # the entered defer_cleanup()s, held: a dropped one is closed and undoes itself


def keep_modules_at_exit() -> None:
    """Register the hook once, at the first kernel numba-cuda runs on a GPU."""
    global _hooked
    if not _hooked:
        _hooked = True
        weakref.finalize(defer_cleanup_everywhere, int)    # the finalizers' hook registered first
        atexit.register(defer_cleanup_everywhere)


def defer_cleanup_everywhere() -> None:
    """numba-cuda's deferred clean-up (its defer_cleanup, entered and never left) for each
    device's context numba-cuda holds: its pending unloads wait for a flush that never comes."""
    try:
        from numba.cuda.cudadrv.driver import driver
        for device in driver.list_devices():
            context = device.primary_context
            if context is not None:
                deferred = context.deallocations.disable()
                deferred.__enter__()
                _deferred.append(deferred)
    except Exception:       # the process is ending: nothing here may raise
        pass
