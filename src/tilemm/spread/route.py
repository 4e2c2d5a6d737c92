"""Where tilemm.matmul sends a product spread over several devices: DTensors (tilemm.spread.dtensor) and
``devices=[...]`` (tilemm.multi). Imported only when a call has one of them."""
from __future__ import annotations

MULTI_OPTIONS = ("panel_k", "memory_limit", "out_of_core")


def matmul(a, b, out, kernel, out_dtype, stream, params: dict):
    """tilemm.matmul(a, b, ...) where an operand is a DTensor or params holds devices=."""
    if "devices" in params:
        others = sorted(set(params) - {"devices", *MULTI_OPTIONS})
        given = [name for name, value in (("out", out), ("kernel", kernel), ("out_dtype", out_dtype),
                                          ("stream", stream)) if value is not None]
        if others or given:
            raise TypeError(f"matmul: devices= splits the product with tilemm's default rungs and takes "
                            f"{', '.join(MULTI_OPTIONS)}; not {', '.join(given + others)}")
        return over_devices(a, b, params)
    from tilemm.spread import dtensor
    return dtensor.matmul(a, b, out, kernel=kernel, out_dtype=out_dtype, stream=stream, **params)


def over_devices(a, b, params: dict):
    """tilemm.multi's product of operands tilemm.matmul takes: one kind of array (not DTensors, sparse
    or nested tensors), an ndarray subclass's result through its wrap, as without devices=."""
    from tilemm.contract import numpy_rules, numpy_subclasses
    from tilemm.numerics import arrays
    from tilemm.spread import multi
    if "DTensor" in (type(a).__name__, type(b).__name__):
        raise TypeError("matmul: devices= splits a product of tensors or arrays from one process; DTensors are "
                        "spread over their DeviceMesh already (call without devices=)")
    kinds = (arrays.describe(x, str(i)).kind for i, x in enumerate((a, b)))     # (sparse, nested: refused)
    numpy_rules.check_one_kind(*kinds)
    wrap = numpy_subclasses.subclass_wrap(a, b)
    if wrap is not None:
        return wrap(multi.matmul(numpy_subclasses.plain(a), numpy_subclasses.plain(b), **params))
    return multi.matmul(a, b, **params)
