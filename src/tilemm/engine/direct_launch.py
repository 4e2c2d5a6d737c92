"""A compiled Triton program launched through its C launcher, Triton's Python layers worked out once.

A launch through ``compiled[grid](*args)`` passes three layers of Python before the C launcher
that calls cuLaunchKernelEx: the runner (stream look-up, launch metadata for hooks), the
CudaLauncher (scratch allocation the program may need) and, for TMA descriptors, a loop that
expands each descriptor into the CUtensorMap it fills and its shape and strides: with two
descriptors, about the CPU time of a whole torch.matmul for one launch. What those
layers decide is the same at every launch of one program on one grid, so it is decided here once,
and a descriptor over memory it was filled for before (a prepared plan's, a replay's of operands
at an address seen before) is not filled again.

This leans on Triton's launcher layout, which changes between versions: it is taken only where
that layout is the one it was written against (Triton 3.6's, checked by its argument format) and
the program needs no scratch of Triton's; anywhere else, or while launch hooks are set (a
profiler's), the runner does the launch as before.
"""
from __future__ import annotations

# The C launcher's leading arguments in the layout this module knows: grid x, y, z, stream,
# function, cooperative grid, PDL, global scratch, profile scratch, packed metadata, launch
# metadata, enter hook, exit hook; then the program's arguments.
KNOWN_BASE_FORMAT = "iiiKKppOOOOOO"


def direct_runner(compiled, grid: tuple, runner):
    """A drop-in for runner = compiled[grid] (``runner(*args, stream=None)``) that calls the C
    launcher directly, or None where this Triton's launcher is not the layout known here."""
    try:
        from triton import knobs
        from triton.backends.nvidia import driver as nvidia
        from triton.runtime.driver import driver
        parts = launch_parts(compiled, nvidia)
    except (ImportError, AttributeError, KeyError, TypeError, ValueError):
        return None
    if parts is None:
        return None
    launch, function, packed, cooperative, pdl, descriptors = parts
    active = driver.active
    return make_runner(launch, tuple(grid), function, packed, cooperative, pdl, descriptors,
                       nvidia.make_tensordesc_arg, runner, knobs.runtime,
                       lambda: active.get_current_stream(active.get_current_device()))


def launch_parts(compiled, nvidia):
    """(C launch, function, packed metadata, cooperative, pdl, [(argument index, descriptor
    metadata)]) of a compiled program whose launcher has the known layout, else None."""
    launcher = compiled.run
    if (getattr(nvidia, "_BASE_ARGS_FORMAT", None) != KNOWN_BASE_FORMAT or type(launcher).__name__ != "CudaLauncher"
            or getattr(launcher, "global_scratch_size", 1) or getattr(launcher, "profile_scratch_size", 1)):
        return None
    launch, descriptors = launcher.launch, []
    if getattr(launch, "__name__", "") == "inner":        # wrap_handle_tensordesc's closure around the C launch
        cells = dict(zip(launch.__code__.co_freevars, (c.cell_contents for c in launch.__closure__)))
        launch, indices, metas = cells["launcher"], sorted(cells["tensordesc_indices"]), cells["tensordesc_meta"]
        descriptors = list(zip(indices, metas))
    if not callable(launch):
        return None
    return (launch, compiled.function, compiled.packed_metadata, launcher.launch_cooperative_grid, launcher.launch_pdl,
            descriptors)


# Addresses a descriptor argument keeps its expansion for: a replay's operands come and go at the
# addresses torch's caching allocator hands out, and one plan serves every layer of a model whose
# Linears share a shape (a 16-layer Llama's q and o projections: 32 weights, and as many activations
# kept for the backward). An entry is a CUtensorMap and a few ints; filling one again costs a few
# microseconds of a launch's CPU time.
KEPT_ADDRESSES = 256


class Unhooked:
    """No hook chain: no calls."""
    calls = ()


UNHOOKED = Unhooked()


def idle_hook(hook) -> tuple:
    """(value, chain) of a launch hook as read when a replay's quick call is made, which tells at
    each call, in an identity and a list's truth where getattr costs twice as much, that a hook is
    set: ``runtime's hook is not value or chain.calls``. A HookChain (Triton 3.6 on): itself, its
    calls read at each call; None (before): None, UNHOOKED; a hook set already: a value no hook is."""
    if hook is None:
        return None, UNHOOKED
    if isinstance(getattr(hook, "calls", None), list):
        return hook, hook
    return object(), UNHOOKED


def make_runner(launch, grid: tuple, function, packed, cooperative, pdl, descriptors: list, expand, runner, runtime,
                current_stream):
    """runner(*args, stream=None) calling launch with Triton's leading arguments for this grid, on
    stream (a raw handle; None: current_stream()); expand(descriptor, metadata) gives a descriptor's
    arguments (Triton's make_tensordesc_arg), kept for the next launch given a descriptor with the
    same shape, strides and block (the very objects: a replay's descriptors share its recording's)
    over the same address; while runtime (Triton's knobs) has launch hooks, runner launches instead.
    What is kept holds no tensor and no descriptor: only arguments expanded with metadata (a
    CUtensorMap, shape and strides), for up to KEPT_ADDRESSES addresses an argument."""
    grid_x, grid_y, grid_z = grid
    expanded: dict = {index: {} for index, meta in descriptors if meta is not None}   # index -> address -> kept

    def run(*args, stream=None):
        # a hook set: a function, or (Triton 3.6 on) a HookChain with calls in it (an empty chain is
        # the default); checked inline, as every launch passes here
        enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
        if (enter is not None and getattr(enter, "calls", True)) or (leave is not None and getattr(leave, "calls", True)):
            return runner(*args, stream=stream)
        if stream is None:
            stream = current_stream()
        if descriptors:
            args = list(args)
            for index, meta in reversed(descriptors):
                d = args[index]
                kept = expanded.get(index)
                if kept is None:             # without metadata the arguments hold the base tensor: not kept
                    args[index:index + 1] = expand(d, meta)
                    continue
                address = d.base.data_ptr()
                known = kept.get(address)
                if known is None or known[0] is not d.shape or known[1] is not d.strides or known[2] is not d.block_shape:
                    if len(kept) >= KEPT_ADDRESSES:
                        kept.clear()
                    known = kept[address] = (d.shape, d.strides, d.block_shape, expand(d, meta))
                args[index:index + 1] = known[3]
        launch(grid_x, grid_y, grid_z, stream, function, cooperative, pdl, None, None, packed, None, None, None, *args)
    # what it calls, for a replay that works out the arguments itself (tilemm.engine.direct_replay)
    run.parts = (launch, grid, function, packed, cooperative, pdl, tuple(descriptors), expand, runtime)
    return run
