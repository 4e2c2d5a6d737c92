"""plan()'s checks: everything about a call, NumPy's contract first, then the kernel (named,
default or auto) and what it can run; a Plan comes out, or an error before any work."""
from __future__ import annotations

import math

import numpy as np

from tilemm.numerics import arrays
from tilemm.choose import default as dispatch
from tilemm.contract import numpy_rules as contract, numpy_subclasses as subclasses, torch_rules as torch_contract
from tilemm.ladder import registry
from tilemm.engine import streams
from tilemm.numerics.dtypes import HOST_ONLY, dtype_name, int_width, result_dtype
from tilemm.plans.plan import KernelUnavailable, Plan
from tilemm.ladder.registry import Problem


def check(a, b, *, kernel: str | None = None, out=None, out_dtype=None, stream=None, casting: str | None = None,
          **params) -> Plan:
    """Check everything about ``matmul(a, b, ...)`` and return what would run, in core (a call
    that goes out of core is tilemm.spread.outofcore_plan's: api.plan asks it). ``casting``: NumPy's rule
    for the operands' cast to out_dtype and the result's into out (tilemm.contract.numpy_keywords);
    None: not named, "same_kind", and a torch out takes torch's rule (tilemm.contract.torch_rules)."""
    torch_out = casting is None      # (NumPy's keywords bring NumPy's rules for a torch out with them)
    out_dtype = contract.dtype_of_class(out_dtype)
    casting = casting or "same_kind"
    a, b = arrays.as_arrays(a, b)        # lists, scalars, __array__ objects: np.asarray's arrays
    if subclasses.subclass_wrap(a, b) is not None:   # an ndarray subclass's wrap is matmul()'s: its data here
        a, b = subclasses.plain(a), subclasses.plain(b)
    out = contract.single_out(out)
    contract.check_out_writeable(out)    # (NumPy's first refusal, before the operands' dtypes)
    a, b = arrays.native_order(a), arrays.native_order(b)
    da, db = arrays.describe(a, "0"), arrays.describe(b, "1")
    if stream is not None:
        streams.handle_of(stream)      # a bad stream= is refused before anything else
    contract.check_operand_dtypes(a.dtype, b.dtype, out_dtype)
    contract.check_one_kind(da.kind, db.kind)
    if da.device != db.device:
        raise ValueError(f"matmul: operand 0 is on {da.device} and operand 1 on {db.device}; "
                         "move them to one device")
    if da.kind == "torch":            # torch's rules and errors for its tensors: one dtype (tilemm.contract.torch_rules)
        if out is not None:           # (torch's first check: no out= where a gradient could be recorded)
            torch_contract.check_out_gradient(a, b, out)
        torch_contract.check_operands(a, b, da.dtype, db.dtype, out, da.device, torch_out=out_dtype is None)
        contract.check_no_gradient(a, b)
        a, b = a.detach(), b.detach()     # grad mode is off: numba-cuda cannot view a tensor that requires grad
    result = result_dtype(da.dtype, db.dtype) if out_dtype is None else None
    if out_dtype is not None:         # before the shapes, as NumPy resolves dtype= first
        result = contract.checked_out_dtype(out_dtype, result, (a.dtype, b.dtype), casting)
        if result == "bfloat16" and da.kind != "torch":
            raise TypeError(f"matmul: out_dtype=bfloat16 needs torch tensors: {da.kind} has no bfloat16 "
                            "to return the result in")
        if (result in HOST_ONLY or result == "object") and da.kind != "numpy":   # (torch's TypeError from a copy)
            raise TypeError(f"matmul: out_dtype={result} needs NumPy arrays: {da.kind} has no {result} "
                            "to return the result in")
    torch_rule = out is not None and da.kind == "torch" and torch_out    # torch's rule for this out
    elsewhere = None                  # torch's refusal of an out on another device than CUDA operands'
    if out is not None:               # its kind and dtype before the shapes, as NumPy
        described = arrays.describe(out, "out")
        if torch_rule:                # (its dtype once the result's shape is known)
            if described.kind == "torch" and described.device != da.device and da.device.startswith("cuda"):
                elsewhere = torch_contract.out_device_refusal(da.shape, db.shape, tuple(out.shape), da.device,
                                                              described.device)
                if not torch_contract.resized_first(da.shape, db.shape):
                    raise elsewhere
            else:
                contract.check_out_place(described, da, torch_contract.TorchTypeError)
        else:
            contract.check_out_dtype(out, described, da, result, casting)
    exact = None
    if da.kind in ("numpy", "cupy"):  # the dtype object NumPy returns, not merely one equal to it
        exact = contract.result_type(a.dtype, b.dtype, None if out_dtype is None else (out_dtype, result))
    contract.check_not_scalars(da.shape, db.shape)
    m, k = (1, da.shape[0]) if len(da.shape) == 1 else da.shape[-2:]
    k2, n = (db.shape[0], 1) if len(db.shape) == 1 else db.shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
                         f"signature {contract.SIGNATURE} (size {k2} is different from {k}); "
                         f"shapes {da.shape} and {db.shape}")
    batch = contract.broadcast_batch(da.shape[:-2], db.shape[:-2], da.shape, db.shape)
    core = ((m,) if len(da.shape) > 1 else ()) + ((n,) if len(db.shape) > 1 else ())
    shape = batch + core
    if elsewhere is not None:         # a product with a stack: torch resizes the out before it is refused
        torch_contract.resize_out(out, shape, da.shape, db.shape)
        raise elsewhere
    if torch_rule:                    # the result's dtype exactly
        torch_contract.check_out_dtype(out, da.shape, db.shape, result, dtype_name(out.dtype), shape,
                                       torch_contract.folds_of(a, b, True))
    resized = torch_rule and tuple(out.shape) != shape
    if out is not None and not resized:   # NumPy's rules for out, before any kernel is looked at
        contract.check_out_shape(out, batch, core)
    if casting == "unsafe" and out_dtype is not None:   # float -> int and the like: cast first, as NumPy does
        a, b = (x if contract.castable(d.dtype, result) else arrays.cast(x, exact or result)
                for x, d in ((a, da), (b, db)))
        da, db = arrays.describe(a, "0"), arrays.describe(b, "1")

    once = False       # a plan for this call only (the library before Triton: default.library_for_first_call_only)
    if kernel == "auto":
        if params:
            raise TypeError(f"matmul: kernel='auto' takes no kernel parameters (got {', '.join(sorted(params))}); "
                            "name a kernel to set them")
        from tilemm.choose import auto     # (kernel="auto" alone times rungs: loaded where asked)
        chosen = auto.choose(lambda name: check(a, b, kernel=name, out_dtype=out_dtype, stream=stream), da.device,
                             result, m, n, k,
                             auto.layout(a) + auto.layout(b), dispatch.leading_dims(a, b, k, n))
    elif kernel is not None:
        chosen = registry.get(kernel)
    else:
        first, stacked = (result, m, n, k) not in dispatch.SERVED_BEFORE_TRITON, math.prod(batch) > 1
        chosen = dispatch.default_kernel(da.device, result, m, n, k, da.dtype if da.dtype == db.dtype else None,
                                         dispatch.leading_dims(a, b, k, n) if da.device != "cpu" else None,
                                         stacked, da.kind == "torch" and dispatch.b_rows(a, b), first)
        once = first and chosen.name == "cublas" and dispatch.library_for_first_call_only(result, m, n, k, stacked)
    resolved = chosen.resolve(params)
    compute = chosen.compute_dtype(result)
    if compute is None:
        host_only = " (longdouble: NumPy's own, on the host)" if result in HOST_ONLY else ""
        raise TypeError(f"matmul: kernel {chosen.name!r} does not compute {result}{host_only} "
                        f"(it computes {', '.join(chosen.dtypes)}); {kernels_computing(result, chosen.device)}")
    if result == "bool" and k >= 2**31 and int_width(compute) < 64:   # the count of true pairs must fit
        compute = chosen.compute_dtype("int64")
        if compute is None:
            raise KernelUnavailable(f"matmul: kernel {chosen.name!r} counts bool products in "
                                    f"{chosen.compute_dtype('bool')}, which K = {k} could pass; try kernel='numpy'")
    problem = Problem(m, n, k, compute)
    reason = chosen.why_not(problem, resolved)
    if reason:
        raise KernelUnavailable(f"matmul: kernel {chosen.name!r} can't run this problem: {reason}")
    queue = streams.caller_stream(da.kind, da.device, stream) if chosen.device == "cuda" else streams.LEGACY_DEFAULT
    direct = (chosen.name == "numpy" and da.kind == db.kind == "numpy" and da.dtype == db.dtype == result == compute
              and (out_dtype is None or exact.char == np.result_type(a.dtype, b.dtype).char))
    if resized:       # torch's rule: an out of another shape is made the result's, once every check has passed
        torch_contract.resize_out(out, shape, da.shape, db.shape)
        contract.check_out_shape(out, batch, core)        # (its elements, now: torch refuses shared ones)
    fast = None      # the rung's library product for repeated calls (torch.matmul, torch._int_mm)
    if chosen.fast_product and da.kind == db.kind == "torch" and da.device != "cpu" and da.dtype == db.dtype:
        fast = chosen.fast_product(a, b, da.dtype, result, compute)
    return Plan(a, b, da, chosen, resolved, problem, batch, shape, result, out, queue, direct, fast,
                exact=exact, repeatable=not once)


def kernels_computing(result: str, device: str) -> str:
    """A refusal's hint: the highest rungs that compute result on the refusing kernel's device
    ("cpu" or "cuda"; the host for NumPy's own types), and the default."""
    where = "cpu" if result in HOST_ONLY else device
    names = [k.name for k in reversed(registry.kernels(where)) if k.compute_dtype(result)][:3]
    return f"try kernel={' or '.join(repr(name) for name in names)}, or no kernel (the default)"
