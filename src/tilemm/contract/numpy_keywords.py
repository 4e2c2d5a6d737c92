"""numpy.matmul's keywords beyond out=: casting, dtype (and signature), axes (and axis), order and
subok, checked as NumPy checks them; then the plain call (or plan) that computes what NumPy would.

NumPy refuses in this order, and so does tilemm: dtype= and signature='s own form, a read-only
out, the keywords' own values (casting, order, subok); the dtypes (dtype= or signature= picks the
dtype the product is computed in; each operand's cast to it, then the result's cast into out,
under the casting rule); axes=; then the shapes (the plain call's checks). A call that names
none of these keywords never comes here.

- **casting** ("no", "equiv", "safe", "same_kind" (the default), "unsafe"): NumPy's rule for the
  operands' cast to the computing dtype and the result's cast into out. Where "unsafe" lets
  through a cast that "same_kind" refuses (float operands with dtype=int64; a float result into
  an int out), the call is planned with that rule each time (no plan cache).
- **dtype**: tilemm's ``out_dtype`` by NumPy's name (a DType class such as np.dtypes.Float32DType
  names its dtype). **signature**: a string "ff->f" or a tuple of three dtypes or None; matmul's
  loops take one dtype for all three, so it names dtype= too; where it names one operand's alone,
  NumPy searches its loops and takes the other operand only by a safe cast.
- **axes**: a list of one entry per operand and one for the result: a tuple of the two core
  axes, or for a 1-D operand (and a result of one core axis) one int or a 1-tuple; () for the
  result of 1-D @ 1-D. The product runs on views whose core axes are last (np.moveaxis,
  torch.movedim, cupy.moveaxis) and the result comes back as a view with its core axes placed;
  ``out`` is written through such a view. **axis** is refused, as numpy.matmul refuses it.
- **order**: the result's layout (tilemm.contract.numpy_layout): "K" a stack ordered as NumPy's
  iterator orders it, of C-contiguous matrices; "C" C-contiguous, "F" Fortran (all dimensions
  reversed), "A" Fortran where every operand is Fortran-contiguous. Ignored with out=.
- **subok**: False returns a plain ndarray for ndarray subclasses (np.matrix).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from tilemm.numerics import arrays
from tilemm.contract import numpy_layout, numpy_rules as contract, numpy_subclasses as subclasses
from tilemm.numerics.dtypes import SUPPORTED, check_supported, dtype_name, result_dtype

NAMES = ("casting", "dtype", "signature", "axes", "axis", "order", "subok")
REFUSED = ("where", "keepdims")        # ufunc keywords that numpy.matmul refuses
KEYWORDS = frozenset(NAMES + REFUSED)  # what api.matmul looks for among its keyword arguments
CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
WEAK_KINDS = {int: "iufc", float: "fc", complex: "c"}    # a Python scalar takes a computing dtype of these kinds
ORDERS = ("C", "F", "A", "K")
NO_LOOP = "No loop matching the specified signature and casting was found for ufunc matmul"
NO_AXIS = ("matmul: axis can only be used with a single shared core dimension, not with the 3 distinct ones "
           f"implied by signature {contract.SIGNATURE}.")


@dataclass(frozen=True)
class Keywords:
    casting: str = "same_kind"
    computed_in: object = None   # dtype= (or signature's dtype) as given, or None: the operands' common dtype
    axes: object = None
    axes_given: bool = False     # (axes=None is NumPy's TypeError, not its absence)
    axis_given: bool = False
    order: str = "K"
    subok: bool = True
    unnamed: int | None = None   # signature= names one operand's dtype alone: the other's index (loop_found)


def split(params: dict, out_dtype, out=None) -> tuple[Keywords, dict]:
    """(NumPy's keywords among ``params``, their values checked; the kernel's parameters). ``out``
    as given: refused where read-only, after the dtypes named and before the other values, as NumPy."""
    for name in REFUSED:
        if name in params:
            why = (" (it multiplies whole rows by columns: mask the operands instead)" if name == "where" else
                   f" (its signature {contract.SIGNATURE} has core dimensions in its output)")
            raise TypeError(f"matmul() got an unexpected keyword argument {name!r}: numpy.matmul takes no {name}={why}")
    given = {name: params[name] for name in NAMES if name in params}
    kernel_params = {name: value for name, value in params.items() if name not in given}
    known = parameter_names()
    # (a loop, not keys() - known: torch 2.11's Dynamo, tracing this, fails on a dict's keys minus a frozenset)
    unknown = sorted(name for name in kernel_params if name not in known)
    if unknown:       # (before the keywords' values, as numpy.matmul's argument parsing: parrot=True with bad axes)
        raise TypeError(f"matmul() got an unexpected keyword argument {unknown[0]!r}")
    if "dtype" in given and "signature" in given:
        raise TypeError("cannot specify both 'signature' and 'dtype'")
    if "axis" in given and "axes" in given:
        raise TypeError("cannot specify both 'axis' and 'axes'")
    computed_in, entries = contract.dtype_of_class(given.get("dtype")), None
    if "signature" in given:          # read first, as NumPy reads it: its form and its dtypes
        entries = tuple(map(contract.dtype_of_class, signature_entries(given["signature"])))
    elif computed_in is not None:
        converted(computed_in)
    contract.check_out_writeable(contract.single_out(out))
    casting = checked_choice("casting", given.get("casting", "same_kind"), CASTINGS)
    order = given.get("order")
    order = "K" if order is None else checked_choice("order", order, ORDERS, upper=True)
    subok = given.get("subok", True)
    if type(subok) is not bool:
        raise TypeError("'subok' must be a boolean")
    unnamed = None
    if entries is not None:
        computed_in, unnamed = signature_dtype(entries)
    if computed_in is not None and out_dtype is not None:
        raise TypeError("matmul: dtype= (NumPy's name) and out_dtype= (tilemm's) both name the dtype the product is "
                        "computed in and returned as: give one")
    if computed_in is not None:
        checked_dtype(computed_in)
    return (Keywords(casting, computed_in, given.get("axes"), "axes" in given, "axis" in given, order, subok,
                     unnamed), kernel_params)


def parameter_names() -> frozenset:
    """Every parameter name of a kernel of the ladder (tilemm's own keywords beside NumPy's), kept
    once made (in a list, not functools.lru_cache, which torch.compile warns of wherever a traced
    call reaches it)."""
    if not PARAMETER_NAMES:
        from tilemm.ladder import registry
        PARAMETER_NAMES.append(frozenset(p.name for kernel in registry.kernels() for p in kernel.params))
    return PARAMETER_NAMES[0]


PARAMETER_NAMES: list = []


def checked_choice(name: str, value, choices: tuple, upper: bool = False) -> str:
    """casting= or order= as NumPy reads it (str or bytes; order in either case)."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, not {type(value).__name__}")
    chosen = value.upper() if upper else value
    if chosen not in choices:
        listed = (", ".join(f"'{c}'" for c in choices[:-1]) + f", or '{choices[-1]}'" if upper else
                  ", ".join(f"'{c}'" for c in choices))
        raise ValueError(f"{name} must be one of {listed} (got {value!r})")
    return str(chosen)


def signature_entries(signature) -> tuple:
    """A matmul signature ("ff->f", (None, None, "f"), ("f", "f", None)) as its three entries,
    None or a dtype; NumPy's errors where it is malformed."""
    if isinstance(signature, str):
        if len(signature) == 1:
            raise TypeError("Use `dtype` or  fill the tuple with more than one 'None'.")
        parts = signature.split("->")
        if len(parts) != 2 or len(parts[0]) != 2 or len(parts[1]) != 1:
            raise ValueError("a type-string for matmul, 2 typecode(s) before and 1 after the -> sign")
        try:
            return tuple(np.dtype(code) for code in parts[0] + parts[1])
        except TypeError:
            raise ValueError("Invalid data-type for array") from None
    if not isinstance(signature, tuple):
        raise TypeError("the signature object to ufunc must be a string or a tuple.")
    if len(signature) == 1:
        raise TypeError("Use `dtype` or  fill the tuple with more than one 'None'.")
    if len(signature) != 3:
        raise ValueError("a type-tuple must be specified of length 3 for ufunc 'matmul'")
    for entry in signature:
        if entry is not None:
            converted(entry)
    return signature


def signature_dtype(entries: tuple) -> tuple:
    """(The one dtype a signature's entries name (as given), or None where they name none; where
    they name one operand's alone, the other operand's index, which NumPy's search of its loops
    then checks (loop_found), else None). NumPy's refusal where they name two: matmul's loops take
    one dtype for all three; the result's alone names all three (as dtype=)."""
    first, second, result = entries
    named = [entry for entry in entries if entry is not None]
    if named and len({dtype_name(converted(entry)) for entry in named}) > 1:
        raise TypeError(NO_LOOP)
    unnamed = (0 if first is None else 1) if (first is None) != (second is None) and result is None else None
    return (result if result is not None else first if first is not None else second), unnamed


def loop_found(dtypes: list, loop, unnamed: int) -> None:
    """NumPy's search of matmul's loops for a signature that names one operand's dtype alone: the
    loop of that dtype is taken where the operand it leaves unnamed (index ``unnamed``) casts to it
    safely, whatever the casting rule (NumPy searches with "unsafe", which caps an input's at
    "safe"), and the object loop only where an operand is of objects; else NumPy's TypeError. Both
    operands' casts then meet the casting rule, as for any dtype."""
    objects = any(getattr(d, "kind", None) == "O" for d in dtypes)
    if (getattr(loop, "kind", None) == "O" and not objects) or not contract.castable(dtypes[unnamed], loop, "safe"):
        raise TypeError(NO_LOOP)


def converted(dtype):
    """A dtype= or signature entry as NumPy reads it (its np.dtype, a DType class's too; NumPy's
    refusal of a byte order, a size or a time unit, its error for what is no dtype), or torch's
    dtype by name."""
    try:
        numpy_dtype = np.dtype(contract.dtype_of_class(dtype))
    except TypeError:
        name = dtype_name(dtype)
        if name not in SUPPORTED:
            raise
        return name
    sized = numpy_dtype.kind in "SUV" and (numpy_dtype.itemsize or numpy_dtype.names)
    timed = numpy_dtype.kind in "mM" and np.datetime_data(numpy_dtype)[0] != "generic"
    if not numpy_dtype.isnative or sized or timed:
        raise TypeError("The `dtype` and `signature` arguments to ufuncs only select the general DType and not "
                        "details such as the byte order or time unit. You can avoid this error by using the scalar "
                        "types `np.float64` or the dtype string notation.")
    return numpy_dtype


def checked_dtype(dtype):
    """A dtype= as converted() reads it, refused (TypeError) where tilemm does not multiply it."""
    readable = converted(dtype)
    if isinstance(readable, np.dtype):
        check_supported(readable.name, "dtype")
    return readable


def operand_dtype(x):
    """x's dtype as NumPy's messages name it: the np.dtype of NumPy and CuPy arrays, torch's by name."""
    return x.dtype if isinstance(x.dtype, np.dtype) else dtype_name(x.dtype)


def checked_casts(a, b, out, computed_in, casting: str, given: tuple = (None, None),
                  unnamed: int | None = None) -> bool:
    """NumPy's checks of the dtypes, in its order: operands of dtypes it has a loop for (TypeError;
    a signature naming one operand's alone, the other's index ``unnamed``: loop_found), each
    operand to the dtype the product is computed in (InputCastingError), the result into out
    (OutputCastingError).
    ``given``: the operands as passed, where a Python scalar takes the computing dtype as NumPy's
    weak scalars do (NEP 50). Returns whether a cast passed that "same_kind" would refuse
    (casting="unsafe"), which the plain call's checks would not let by."""
    dtypes = [operand_dtype(x) for x in (a, b)]
    loop = None if computed_in is None else checked_dtype(computed_in)
    contract.check_operand_dtypes(*dtypes, into=loop)
    weak = [type(x) in WEAK_KINDS for x in given]
    if loop is None and all(isinstance(d, np.dtype) for d in dtypes):
        loop = np.result_type(*(x if is_weak else d for x, d, is_weak in zip(given, dtypes, weak)))
    elif loop is None:
        loop = result_dtype(*(dtype_name(d) for d in dtypes))
    for i, x in enumerate(given):
        if weak[i] and isinstance(loop, np.dtype):
            dtypes[i] = loop if loop.kind in WEAK_KINDS[type(x)] else np.result_type(x, loop)
    if unnamed is not None:
        loop_found(dtypes, loop, unnamed)
    beyond = False
    for i, dtype in enumerate(dtypes):
        if not contract.castable(dtype, loop, casting):
            raise contract.InputCastingError(dtype, loop, casting, i)
        beyond = beyond or (casting == "unsafe" and not contract.castable(dtype, loop))
    if getattr(out, "dtype", None) is not None:     # (an out that is no array: the plain call's refusal)
        into = operand_dtype(out)
        if not contract.castable(loop, into, casting):
            raise contract.OutputCastingError(loop, into, casting)
        beyond = beyond or (casting == "unsafe" and not contract.castable(loop, into))
    return beyond


def core_axes(keywords: Keywords, a, b, out) -> tuple | None:
    """axes= checked as NumPy checks it: (operand 0's core axes, operand 1's, the result's), each
    a tuple of non-negative axes (empty for a result without core dimensions), or None for no axes."""
    if not keywords.axes_given:
        return None
    axes = keywords.axes
    if not isinstance(axes, list):
        raise TypeError("axes should be a list.")
    cores = [1 if np.ndim(a) == 1 else 2, 1 if np.ndim(b) == 1 else 2]
    cores.append((cores[0] == 2) + (cores[1] == 2))
    if out is not None:
        result_ndim = np.ndim(out)
    else:
        result_ndim = max(np.ndim(a) - cores[0], np.ndim(b) - cores[1], 0) + cores[2]
    if len(axes) != 3:      # (the result's entry, even for 1-D @ 1-D: its signature gives it core axes)
        raise ValueError("axes should be a list with an entry for all 3 inputs and outputs; entries for outputs "
                         "can only be omitted if none of them has core axes.")
    placed = []
    for i, (entry, core, ndim) in enumerate(zip(axes, cores, (np.ndim(a), np.ndim(b), result_ndim))):
        placed.append(operand_axes(i, entry, core, ndim))
    return tuple(placed)


def operand_axes(i: int, entry, core: int, ndim: int) -> tuple:
    """One entry of axes=, for operand i (2: the result) of ``core`` core dimensions in ``ndim``."""
    if isinstance(entry, tuple):
        if len(entry) != core:
            raise np.exceptions.AxisError(f"matmul: operand {i} has {core} core dimensions, but {len(entry)} "
                                          "dimensions are specified by axes tuple.")
        values = [operator.index(axis) for axis in entry]
    elif is_number(entry):
        if core != 1:
            raise np.exceptions.AxisError(f"matmul: operand {i} has {core} core dimensions, but the axes item is a "
                                          "single integer.")
        values = [operator.index(entry)]
    else:
        raise TypeError(f"matmul: axes item {i} should be a tuple.")
    normalized = []
    for axis in values:
        if not -ndim <= axis < ndim:
            raise np.exceptions.AxisError(axis, ndim)
        axis %= ndim
        if axis in normalized:
            raise ValueError(f"axes item {i} has value {axis} repeated")
        normalized.append(axis)
    return tuple(normalized)


def is_number(x) -> bool:
    """What NumPy takes for a single integer in axes= (and then reads with __index__): any number."""
    kind = type(x)
    return any(hasattr(kind, slot) for slot in ("__index__", "__int__", "__float__", "__complex__"))


def move(x, source: tuple, destination: tuple):
    """A view of x (NumPy, torch or CuPy) with axes ``source`` moved to ``destination``."""
    if not source or tuple(d % x.ndim for d in source) == tuple(d % x.ndim for d in destination):
        return x
    if arrays.torch_of(x) is not None:
        return x.movedim(source, destination)
    return (arrays.cupy_of(x) or np).moveaxis(x, source, destination)


def last(count: int) -> tuple:
    """The last ``count`` axes, where core axes go for the product."""
    return tuple(range(-count, 0))


def matmul(product, plan, a, b, out, kernel, out_dtype, stream, params: dict):
    """tilemm.matmul(a, b, out, kernel=..., out_dtype=..., stream=..., **params) where params hold
    some of numpy.matmul's keywords: checked, then computed as NumPy computes them. product and
    plan: tilemm.matmul and tilemm.plan, which take the call once its keywords are resolved."""
    keywords, params = split(params, out_dtype, out)
    given = (a, b)
    a, b = arrays.as_arrays(a, b)
    if not keywords.subok:
        a, b = subclasses.plain(a), subclasses.plain(b)
    operands, out = (a, b), contract.single_out(out)
    computed_in = keywords.computed_in if keywords.computed_in is not None else out_dtype
    beyond_same_kind = checked_casts(a, b, out, computed_in, keywords.casting, given, keywords.unnamed)
    contract.check_not_scalars(np.shape(a), np.shape(b))     # (after the dtypes, before the axes: NumPy's order)
    if keywords.axis_given:
        raise TypeError(NO_AXIS)
    axes = core_axes(keywords, a, b, out)
    if axes is not None:        # the core axes last, where the product looks for them
        a, b = move(a, axes[0], last(len(axes[0]))), move(b, axes[1], last(len(axes[1])))
    into = out if out is None or axes is None else move(out, axes[2], last(len(axes[2])))
    # a torch out under NumPy's keywords takes NumPy's rules (a plain call's is torch's): planned with them too
    numpy_out = out is not None and arrays.torch_of(out) is not None and not contract.torch_routed(a, b)
    if beyond_same_kind or numpy_out:   # casting="unsafe" past what the plain call's checks let by: planned with the rule
        if contract.torch_routed(a, b):
            raise TypeError("matmul: a cast that only casting='unsafe' allows records no autograd graph; cast the "
                            "operands yourself, or call it under torch.no_grad()")
        wrap = subclasses.subclass_wrap(a, b) if out is None else None
        value = plan(a, b, kernel=kernel, out=into, out_dtype=computed_in, stream=stream,
                         casting=keywords.casting, **params).execute()
        value = value if wrap is None else wrap(value)
    else:
        value = product(a, b, into, kernel=kernel, out_dtype=computed_in, stream=stream, **params)
    if out is not None:
        return out
    value = numpy_layout.laid_out(value, keywords.order, operands, (a, b))
    if axes is None:
        return value
    moved = move(value, last(len(axes[2])), axes[2])
    return arrays.owned(moved) if moved is not value else value


def plan_arguments(a, b, out, out_dtype, params: dict) -> tuple:
    """For tilemm.plan: (out_dtype, casting, the kernel's parameters) from dtype=, signature= and
    casting= among ``params``, checked as matmul checks them; a TypeError for the keywords that
    shape matmul's result (axes, axis, order, subok), which a plan's result does not take."""
    for name in ("axes", "axis", "order", "subok"):
        if name in params:
            raise TypeError(f"plan: {name}= is tilemm.matmul's: a plan multiplies its operands as they are laid "
                            "out and returns the product's own array (plan on np.moveaxis views for axes=)")
    keywords, params = split(params, out_dtype, out)
    computed_in = keywords.computed_in if keywords.computed_in is not None else out_dtype
    a, b = arrays.as_arrays(a, b)
    checked_casts(a, b, contract.single_out(out), computed_in, keywords.casting, (None, None), keywords.unnamed)
    return computed_in, keywords.casting, params
