"""The kernel record: what a rung tells tilemm about itself (Kernel, its Params, the Problem it
is asked, its Traffic), and register(), which each rung module calls as it is imported."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tilemm.numerics.dtypes import compute_dtype


class WholeNumbers(tuple):
    """A Param's choices that are None or a whole number from lo to hi, listed as (None, 'lo..hi')."""

    def __new__(cls, lo: int, hi: int):
        numbers = super().__new__(cls, (None, f"{lo}..{hi}"))
        numbers.lo, numbers.hi = lo, hi
        return numbers

    def __contains__(self, value) -> bool:
        return value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool)
                                 and self.lo <= value <= self.hi)


@dataclass(frozen=True)
class Param:
    """A kernel parameter: its default and the values it may take."""
    name: str
    default: Any
    choices: tuple = ()
    doc: str = ""

    def validate(self, kernel: str, value: Any) -> Any:
        """``value`` as the kernel takes it (a NumPy integer or bool as Python's), or a ValueError.
        A choice is matched by type as well as by value: True == 1 and 16.0 == 16, but True is no
        warp count, 1 no switch and 16.0 no tile (each failed deep in a launch)."""
        if not self.choices:
            return value
        if isinstance(value, (np.integer, np.bool_)):
            value = value.item()
        if isinstance(self.choices, WholeNumbers):
            allowed, kinds = value in self.choices, {"int"}
        else:
            allowed = any(value == choice and type(value) is type(choice) for choice in self.choices)
            kinds = {type(choice).__name__ for choice in self.choices if choice is not None}
        if not allowed:
            wrong = f" (of type {type(value).__name__}, where the choices are {' or '.join(sorted(kinds))})" \
                if value is not None and type(value).__name__ not in kinds else ""
            raise ValueError(f"kernel {kernel!r}: {self.name}={value!r} is not allowed{wrong}; "
                             f"choose one of {', '.join(map(repr, self.choices))}")
        return value


@dataclass(frozen=True)
class Traffic:
    """Global-memory traffic of one launch, in elements (multiply by the itemsize for bytes)."""
    read: float
    written: float

    def bytes(self, itemsize: int) -> float:
        return (self.read + self.written) * itemsize


@dataclass(frozen=True)
class Problem:
    """What a kernel is asked to compute: (m, k) @ (k, n) in ``dtype`` (the compute dtype)."""
    m: int
    n: int
    k: int
    dtype: str

    @property
    def itemsize(self) -> int:
        """Bytes of one element of the compute dtype (NumPy has no bfloat16: 2, nor float8: 1)."""
        if self.dtype.startswith("float8"):
            return 1
        return 2 if self.dtype == "bfloat16" else np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Kernel:
    """One rung of the ladder: what it computes, where it runs, its parameters and its models.

    Get one with ``tilemm.kernel(name)``; ``tilemm.kernels()`` lists them all.

    Attributes
    ----------
    name : str
        The rung's name, e.g. ``"tiled"``: the ``kernel=`` of `tilemm.matmul`.
    rung : int
        Its position on the ladder (the anchor `cublas` is 99).
    device : str
        ``"cpu"`` or ``"cuda"``.
    backend : str
        What it is written in: ``"numba"``, ``"numba-cuda"``, ``"triton"``, ``"numpy"`` or ``"library"``.
    dtypes : tuple of str
        The dtypes it computes natively; others are promoted to one of these.
    seed : str
        Where the idea comes from (``"seeds 000-003"``, ``"beyond"``, ``"anchor"``).
    summary : str
        The rung's idea in one line.
    run : callable
        ``run(a, b, c, **params)`` writes ``a @ b`` into ``c`` (arrays on the kernel's device).
    traffic : callable
        ``traffic(problem, **params)``: the global-memory traffic model, a `Traffic` in elements.
    params : tuple of Param
        Its parameters: each one's name, default and allowed values.
    limits : callable
        ``limits(problem, **params)``: why it cannot run a problem (a sentence), or None.
    available : callable
        ``available()``: why it cannot run on this machine, or None.
    launch_shape : callable or None
        The SIMT rungs' grid, block and shared memory for a problem (`tilemm explain` prints it).
    compiled_for : callable or None
        ``compiled_for(dtype)``: whether this process holds the kernel compiled for that compute
        dtype (the default takes a compiled rung sooner), without compiling or importing it.
    fast_product : callable or None
        ``fast_product(a, b, operands, result, compute)``: the library's own product of torch CUDA
        tensors shaped as a and b, for a plan's repeated calls, or None where it has none.
    int8_gemm : module or None
        The rung's int8 x int8 -> int32 GEMM (`tilemm.ladder.int_mm`): ``why_not(m, n, k)``,
        ``k_major(a, b)`` (its fast layout).
    prefers : callable or None
        ``prefers(dtype, m, n, k, sms, capability)``: the rung's own rule for whether the default
        takes it for this product on a GPU of this many SMs and this compute capability (None:
        unknown), where the shape tables hold no class for it (rung 14: complex products; rung 11:
        its small-M program, which takes ``b_rows=True`` too: B row-major).
    accumulate : callable or None
        ``accumulate(a, b, acc, first)``: a @ b added into float32 acc in the product's own
        epilogue (first: written over it), for the products past one GPU that add K panels.
    bind, replay, run_stack : callable or None
        Faster paths of a prepared plan, a repeated call and a stack of matrices; None where the
        rung has none.
    narrow_operands : bool
        Signed integer operands narrower than the compute dtype reach `run` as they are.
    compute_unit : callable or None
        The datasheet peak its products run on, and how many there per product of the problem
        (3xTF32: three TF32 products); None: the dtype's own unit.
    """
    name: str
    rung: int                 # position in the ladder; `tilemm kernels` lists in this order
    device: str               # "cpu" or "cuda"
    backend: str              # "numba", "numba-cuda", "triton", "numpy", "library"
    dtypes: tuple[str, ...]   # dtypes it computes natively; others are promoted (see dtypes.py)
    seed: str                 # where the idea comes from ("seeds 000-003", "beyond")
    summary: str              # one line: the idea of the rung
    run: Callable             # run(a, b, c, **params): c = a @ b, arrays of the kernel's device
    traffic: Callable[..., Traffic]   # traffic(problem, **params)
    params: tuple[Param, ...] = ()
    limits: Callable[..., str | None] = field(default=lambda problem, **p: None)  # why it can't run it
    available: Callable[[], str | None] = field(default=lambda: None)         # why it can't run here
    launch_shape: Callable | None = None      # launch_shape(problem, **params) -> grid, block, shared memory
    bind: Callable | None = None   # bind(a, b, c, **params) -> launcher without arguments, or None: run()'s
                                   # set-up done once for a prepared plan launched many times
    replay: Callable | None = None  # replay(a, b, c, **params) after a first launch on 2-D torch CUDA tensors:
                                    # a function (a, b) -> c launching its compiled kernel directly, or None
    narrow_operands: bool = False  # signed integer operands narrower than the compute dtype reach run() as
                                   # they are (a digit kernel does less work on fewer digits)
    compute_unit: Callable | None = None  # compute_unit(problem, **params) -> (the datasheet peak it runs on,
                                          # products there per product of the problem); None: the dtype's own
    run_stack: Callable | None = None  # run_stack(a, b, c): a whole stack of matrices (NumPy's broadcasting) in one
                                       # call, where the rung's library takes stacks itself; None: run() a matrix
    compiled_for: Callable | None = None  # compiled_for(dtype) -> whether this process holds its kernel compiled for
                                          # that compute dtype (None: not tracked); never imports the kernel
    fast_product: Callable | None = None  # fast_product(a, b, operands, result, compute) -> a function (a, b) -> a @ b
                                          # for a plan's repeated calls on torch CUDA tensors, or None
    int8_gemm: Any = None   # its library's int8 x int8 -> int32 GEMM (tilemm.ladder.int_mm): why_not(m, n, k),
                            # k_major(a, b) (its fast layout), product(a, b); None: it has none
    prefers: Callable | None = None     # prefers(dtype, m, n, k, sms, capability) -> whether the default takes it
    accumulate: Callable | None = None  # accumulate(a, b, acc, first): a @ b added into float32 acc

    def resolve(self, given: dict) -> dict:
        """The kernel's parameters for a call: ``given``, checked, with the defaults filled in.

        Parameters
        ----------
        given : dict
            Parameter names and values, e.g. ``{"tile": 32}``.

        Returns
        -------
        dict
            Every parameter of the kernel, by name.

        Raises
        ------
        TypeError
            A name the kernel has no parameter for (the message lists those it has).
        ValueError
            A value outside the parameter's choices.
        """
        known = {p.name: p for p in self.params}
        unknown = given.keys() - known.keys()
        if unknown:
            have = ", ".join(f"{p.name} (default {p.default!r})" for p in self.params) or "none"
            raise TypeError(f"kernel {self.name!r} has no parameter {', '.join(map(repr, sorted(unknown)))}; "
                            f"its parameters: {have}")
        return {name: p.validate(self.name, given.get(name, p.default)) for name, p in known.items()}

    def unit(self, problem: Problem, params: dict) -> tuple[str, int]:
        """(the datasheet peak its products run on, products there per product of the problem):
        the dtype's own unit (int64 on int32's, a complex one on its parts', four times), or the
        rung's compute_unit (TF32 or int8 tensor cores emulating float32 or wider integers)."""
        if self.compute_unit:
            return self.compute_unit(problem, **params)
        return DTYPE_UNITS.get(problem.dtype, (problem.dtype, 1))

    def compute_dtype(self, result: str) -> str | None:
        return compute_dtype(result, self.dtypes)

    def why_not(self, problem: Problem, params: dict) -> str | None:
        """The reason this kernel can't compute ``problem`` here, or None if it can.

        Parameters
        ----------
        problem : Problem
            The product (m, n, k and the compute dtype).
        params : dict
            The kernel's parameters, as `resolve` returns them.

        Returns
        -------
        str or None
            A sentence saying why not (no GPU, a launch limit, a refused shape), or None.
        """
        reason = self.available()
        if reason:
            return reason
        return self.limits(problem, **params)


# dtype -> (the datasheet peak its products run on, products there per product): a complex
# multiply-add is four real ones (CGEMM and ZGEMM run on float32's and float64's units)
DTYPE_UNITS = {"int64": ("int32", 1), "complex64": ("float32", 4), "complex128": ("float64", 4)}

# name -> Kernel, in the order the rungs registered (tilemm.ladder.registry reads it)
LADDER: dict[str, Kernel] = {}


def register(kernel: Kernel) -> Kernel:
    if kernel.name in LADDER:
        raise RuntimeError(f"kernel {kernel.name!r} registered twice")
    LADDER[kernel.name] = kernel
    return kernel

