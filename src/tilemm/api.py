"""The public functions: tilemm.matmul, tilemm.plan and tilemm.release_memory, with their docs.

A call goes: matmul -> a known plan (tilemm.plans.cache: Plan.run_again) or plan() ->
tilemm.plans.checks (NumPy's contract, the choice of kernel) -> Plan.run -> tilemm.engine.backends
-> the rung (tilemm.ladder). What a plain plan does not run is decided here first: NumPy's keywords
(tilemm.contract.numpy_keywords), torch's autograd and compiler (tilemm.torch.ops), several devices
(tilemm.spread), ndarray subclasses.
"""
from __future__ import annotations

import sys

from tilemm.contract import numpy_rules as contract, numpy_keywords, numpy_subclasses as subclasses
from tilemm.spread import outofcore_plan
from tilemm.plans import cache, calls, checks
from tilemm.plans.plan import KernelUnavailable, Plan

__all__ = ["matmul", "plan", "release_memory", "KernelUnavailable", "Plan"]


def matmul(a, b, /, out=None, *, kernel: str | None = None, out_dtype=None, stream=None, **params):
    """``a @ b`` as numpy.matmul computes it, with the kernel of your choice.

    NumPy's keywords (``dtype``, ``casting``, ``axes``, ``order``, ``subok``, ``signature``) are
    taken with NumPy's meaning and NumPy's errors (``tilemm.contract.numpy_keywords``); a call that names
    none of them pays nothing for them.

    Parameters
    ----------
    a, b : array_like
        NumPy arrays, PyTorch tensors or CuPy arrays (both of one kind, on one device), 1-D, 2-D
        or stacks of matrices, any strides. NumPy's dtypes: integers, bool (the OR of ANDs),
        float16/32/64, complex64/128 on every device; longdouble, clongdouble and object arrays
        (Python objects: NumPy's loop, their own + and *) on the host (the numpy rung); torch's
        bfloat16. Where neither operand is a torch tensor or CuPy array,
        lists, tuples, scalars and objects with ``__array__`` or ``__array_interface__`` are
        converted as ``np.asarray`` converts them (a scalar is then refused with NumPy's 0-d
        ValueError); beside a torch tensor or CuPy array they are refused (TypeError naming the
        conversion to make).
    out : array or tuple of one array, optional
        Where to write the result, by keyword or third by position, as numpy.matmul takes it:
        computed in the result's dtype and cast into out where ``casting`` allows (else
        ``contract.OutputCastingError``, NumPy's own class, a TypeError); the result's shape, or
        leading dimensions the stack broadcasts to (a (1, 1) out for 1-D @ 1-D). The same rules
        for CuPy outs, of the operands' kind and device. A torch out takes torch.matmul's rules
        (``tilemm.contract.torch_rules``): the result's dtype exactly, and resized where its shape
        is another (NumPy's rules where the call names NumPy's keywords).
    kernel : str, optional
        A name from ``tilemm.kernels()``; None picks the default for the inputs' device; "auto"
        the fastest of the fast rungs for this problem, timed on the first call and then read
        from the tuning cache (``tilemm.choose.auto``).
    out_dtype : dtype, optional
        Compute in and return this dtype: int8 inputs with ``out_dtype="int32"`` give the exact
        int32 sums instead of int8's wrapped ones. NumPy's ``dtype=`` by tilemm's name (a NumPy,
        torch or CuPy dtype, or its name).
    stream : stream or int, optional
        Where a GPU kernel's work is queued (a torch, CuPy or numba-cuda stream, or a
        cudaStream_t as an int); None: torch's current stream for torch tensors, CuPy's for CuPy
        arrays, the legacy default stream for host arrays (``tilemm.engine.streams``). The call does not
        synchronize the device; host operands wait for their own result only.
    dtype : dtype, optional
        NumPy's name for ``out_dtype`` (both given: TypeError). The operands are cast to it under
        ``casting`` before the product (``contract.InputCastingError`` where the rule refuses:
        float operands with ``dtype=np.int64`` need ``casting="unsafe"``, and are then truncated
        to integers and multiplied exactly).
    casting : {"no", "equiv", "safe", "same_kind", "unsafe"}, optional
        NumPy's rule for the operands' cast to the dtype the product is computed in and for the
        result's cast into ``out``; "same_kind" by default. A cast that only "unsafe" allows is
        planned afresh on each call.
    axes : list of three tuples, optional
        NumPy's gufunc axes: for each operand and the result, the axes that hold its matrix,
        e.g. ``[(-2, -1), (-2, -1), (-2, -1)]``; a 1-D operand (and a result with one core axis)
        takes an int or a 1-tuple, the result of 1-D @ 1-D ``()``. The result is a view with its
        matrix axes placed, as NumPy's; ``out`` is written through one. NumPy's errors for bad
        axes (AxisError, ValueError, TypeError).
    axis : None
        Refused (TypeError), as numpy.matmul refuses it: matmul has three core dimensions.
    order : {"K", "C", "F", "A"}, optional
        The result's layout, as numpy.matmul lays it out: for "K" (the default) C-contiguous
        matrices in a stack ordered as NumPy's iterator orders it from the operands' strides
        (``tilemm.contract.numpy_layout``), C-contiguous for "C", Fortran-contiguous over every
        dimension for "F", and for "A" where every operand is Fortran-contiguous. Ignored with
        ``out``.
    subok : bool, optional
        True (the default): an ndarray subclass (np.matrix) comes back through its
        ``__array_wrap__``, as from numpy.matmul; False: a plain ndarray.
    signature : str or tuple of three dtypes, optional
        NumPy's loop selection, e.g. ``"ff->f"`` or ``(None, None, "float32")``: matmul's loops
        are of one dtype, so it names ``dtype``; one operand's alone (``("d", None, None)``):
        NumPy's search of its loops, which takes the other operand only by a safe cast; NumPy's
        errors where it names two dtypes or is malformed.
    **params
        The kernel's parameters, e.g. ``block_m=64`` (see ``tilemm.kernels()``); or
        ``devices=[0, 1, ...]``: the product split over these GPUs from this process
        (``tilemm.spread.multi``). numpy.matmul's ``where`` and ``keepdims`` are refused (TypeError).
        DTensors (torch.distributed.tensor) multiply rank by rank, placed as torch.matmul places
        them (``tilemm.spread.dtensor``).

    Returns
    -------
    array
        The same kind of array on the same device, with numpy.matmul's shape and dtype (torch's
        for bfloat16); for 1-D @ 1-D a 0-d tensor or CuPy array, and for NumPy operands a NumPy
        scalar, as NumPy gives. For NumPy operands the result's dtype object is
        ``np.result_type``'s, char and scalar type included. ``out`` where one was given.

    Notes
    -----
    Integers are exact and wrap as NumPy's do; floats lie within the bound documented in
    ``tilemm.numerics.accuracy``. Torch tensors that require grad get torch's autograd (float products:
    the operands' gradients computed by tilemm with the same kernel and parameters), and under
    ``torch.compile`` a call is one custom op (``tilemm.torch.ops``). Torch tensors keep torch's
    contract: one dtype for both, torch's errors, conjugate views, torch.func, torch.jit, meta
    tensors, a tensor subclass's ``__torch_function__`` (``tilemm.contract.torch_rules``); sparse
    and nested tensors are refused (TypeError). Errors are raised before any kernel runs, in NumPy's
    order for NumPy arrays: the keywords' values, the dtypes and casts, the axes, the shapes.
    """
    if out is not None:
        out = contract.single_out(out)
        if subclasses.wrapped_out(out):   # an ndarray subclass: written through its data, then its __array_wrap__
            matmul(a, b, subclasses.plain(out), kernel=kernel, out_dtype=out_dtype, stream=stream, **params)
            return subclasses.out_wrap(a, b, out)
    if params and not numpy_keywords.KEYWORDS.isdisjoint(params):   # NumPy's keywords: checked, then this call
        return numpy_keywords.matmul(matmul, plan, a, b, out, kernel, out_dtype, stream, params)
    if compiling():                      # torch.compile: one op in the graph; Dynamo never sees the plans
        from tilemm.torch import compiled_transforms, ops as torch_ops
        if compiled_transforms.transformed():   # inside autograd's torch.func transforms: the eager call's rules
            return compiled_transforms.outside_the_graph(matmul, a, b, out=out, kernel=kernel, out_dtype=out_dtype,
                                                         stream=stream, **params)
        cast = contract.autocast_operands(a, b, out)    # autocast's casts, as eager (the op has no autocast rule)
        a, b = (a, b) if cast is None else cast
        if "DTensor" in (type(a).__name__, type(b).__name__):   # the op's sharding rule, registered on import
            from tilemm.spread import dtensor  # noqa: F401
        return torch_ops.traced_matmul(a, b, kernel, out, out_dtype, stream, params)
    if out is None and not params and type(a) is type(b):   # the usual call: its key and plan in one frame
        key, known = cache.USUAL.get(type(a), cache.usual_lookup)(a, b, kernel, out_dtype)
        if known is not None and stream is None:          # repeated, in the fewest steps: Plan.repeat
            return known.repeat(a, b)
    else:
        key, known = cache.lookup(a, b, kernel, out, out_dtype, params)
    if known is not None:                # a repeated call: its plan (tilemm.plans)
        return known.run_again(a, b, out, stream)
    if "devices" in params or type(a).__name__ == "DTensor" or type(b).__name__ == "DTensor":   # (never keyed)
        from tilemm.spread import route as spread                      # several GPUs or ranks: tilemm.spread
        return spread.matmul(a, b, out, kernel, out_dtype, stream, params)
    if key is None and contract.handled_by_subclass(a, b):   # a tensor subclass's __torch_function__ first, as
        import torch                                          # torch's functions do (its result in the subclass)
        return torch.overrides.handle_torch_function(matmul, (a, b), a, b, out, kernel=kernel, out_dtype=out_dtype,
                                                     stream=stream, **params)
    if key is None:                      # torch's autocast on (a torch tensor's key is None then): its casts
        cast = contract.autocast_operands(a, b, out)
        if cast is not None:             # the cast operands' product, their plans kept as any others'
            import torch
            with torch.autocast(a.device.type, enabled=False):
                return matmul(*cast, out, kernel=kernel, out_dtype=out_dtype, stream=stream, **params)
    if contract.torch_routed(a, b):      # autograd, torch.func, jit.trace, meta (their keys never meet a
        from tilemm.torch import ops as torch_ops                      # plain call's: see tilemm.plans.cache)
        return torch_ops.routed_matmul(a, b, kernel, out, out_dtype, stream, params)
    wrap = subclasses.subclass_wrap(a, b)    # (ndarray subclasses have no key: never a known plan)
    if wrap is not None:                 # np.matrix and other subclasses: their data, then their wrap
        value = matmul(subclasses.plain(a), subclasses.plain(b), out, kernel=kernel, out_dtype=out_dtype,
                       stream=stream, **params)
        return value if out is not None else wrap(value)
    return calls.first_call(key, a, b, kernel, out, out_dtype, stream, params, plan)


def torch_compiling() -> bool:
    """Whether torch.compile or torch.export is tracing this call (Dynamo reads
    torch.compiler.is_compiling as True; torch.export without Dynamo sets what it returns).
    False where torch is not imported: nothing can be compiling. Once torch is found, ``compiling``
    is torch's own check: a trace reads sys.modules at most once (Dynamo wraps it whole, and another
    thread's import may change it meanwhile)."""
    global compiling
    compiler = getattr(sys.modules.get("torch"), "compiler", None)    # (None while torch is still importing)
    if compiler is None:
        return False
    compiling = compiler.is_compiling
    return compiler.is_compiling()


# torch imported before tilemm (as torch programs do): torch's own check, one call fewer a call;
# else torch_compiling, which finds torch once it is imported
compiling = getattr(getattr(sys.modules.get("torch"), "compiler", None), "is_compiling", torch_compiling)


def release_memory() -> None:
    """Let go of the GPU memory tilemm keeps between calls.

    That is the repeated calls' plans and replays (and the scratch of their operand copies, kept
    per thread and stream, up to 64 MiB each), and the stream-K and split-K workspaces. Later
    calls plan and allocate anew.

    Returns
    -------
    None

    Notes
    -----
    The memory goes back to torch's caching allocator; ``torch.cuda.empty_cache()`` then
    returns it to the driver.
    """
    cache.PLANS.clear()
    # what keeps memory, each where a call has loaded it: float8 replays, replays, workspaces
    for module, release in (("tilemm.products.scaled", "release_replays"), ("tilemm.engine.replay", "release"),
                            ("tilemm.engine.workspaces", "release_workspaces")):
        if module in sys.modules:
            getattr(sys.modules[module], release)()


def plan(a, b, *, kernel: str | None = None, out=None, out_dtype=None, stream=None, **params) -> Plan:
    """Check everything about ``matmul(a, b, ...)`` and return what would run, without running it.

    Parameters
    ----------
    a, b : array_like
        The operands, as for `tilemm.matmul`: NumPy or CuPy arrays, or torch tensors.
    kernel : str, optional
        A rung's name (`tilemm.kernels` lists them); None: the default's choice for this problem.
    out : array, optional
        Where `execute` will write the result (checked here: shape, dtype, device; a torch out of
        another shape resized here, as torch.matmul resizes it).
    out_dtype : str or dtype, optional
        Compute in and return this dtype, as for `tilemm.matmul`.
    stream : optional
        Where a GPU kernel is queued, as for `tilemm.matmul`.
    **params
        The kernel's parameters, e.g. ``tile=32`` (`Kernel.params` lists them). NumPy's ``dtype=``,
        ``signature=`` and ``casting=`` are taken as `tilemm.matmul` takes them; ``axes=``,
        ``order=`` and ``subok=``, which shape matmul's result, are refused (TypeError).

    Returns
    -------
    Plan
        The checked call: ``.kernel`` (a `Kernel`), ``.params`` (every parameter, defaults filled
        in), ``.problem`` (m, n, k and the compute dtype), ``.shape`` and ``.result`` (the result's
        shape and dtype); ``.execute()`` runs it and returns what `tilemm.matmul` would. Host
        operands past the GPU's free memory give a plan that multiplies them a panel at a time.

    Raises
    ------
    TypeError
        An operand of a kind or dtype tilemm does not take, or a parameter the kernel does not have.
    ValueError
        Shapes that do not multiply, a parameter value the kernel refuses, or a bad out or stream.
    KernelUnavailable
        The kernel cannot run this problem on this machine (the message says why).
    """
    casting = None
    if params and not numpy_keywords.KEYWORDS.isdisjoint(params):
        out_dtype, casting, params = numpy_keywords.plan_arguments(a, b, out, out_dtype, params)
    checked = checks.check(a, b, kernel=kernel, out=out, out_dtype=out_dtype, stream=stream, casting=casting,
                             **params)
    if out_dtype is None and stream is None and outofcore_plan.goes_out_of_core(checked):
        return outofcore_plan.OutOfCorePlan.of(checked)
    return checked
