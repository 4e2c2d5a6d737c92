"""torch's cuBLAS flags for products with float32 sums (no TF32, no reduced-precision reductions):
set for one call and put back, or read and set around a function. What the library rung runs, and
what the layers above use with torch's own products (out-of-core panels, tilemm.nn), from here rather
than from a rung."""
import contextlib

from tilemm.numerics import arrays


@contextlib.contextmanager
def torch_matmul_flags(**flags):
    """torch.backends.cuda.matmul's flags set for one call, the caller's put back after it (torch
    reads them when it picks the cuBLAS routine, at the call); only those that differ are touched
    (each costs a few microseconds)."""
    import torch
    settings = torch.backends.cuda.matmul
    before = {name: getattr(settings, name) for name in flags}
    changed = {name: old for name, old in before.items() if old != flags[name]}
    try:
        for name in changed:
            setattr(settings, name, flags[name])
        yield torch
    finally:
        for name, value in changed.items():
            setattr(settings, name, value)


EXACT_FLAGS = dict(allow_tf32=False, allow_fp16_reduced_precision_reduction=False,
                   allow_bf16_reduced_precision_reduction=False)


# the one flag of EXACT_FLAGS that torch reads for a product of this dtype
FLAG_OF = {"float32": "allow_tf32", "complex64": "allow_tf32", "float16": "allow_fp16_reduced_precision_reduction",
           "bfloat16": "allow_bf16_reduced_precision_reduction"}


def torch_product(dtype: str):
    """product(a, b): torch.matmul(a, b) with float32 sums and no TF32, for operands of dtype, the
    caller's flag put back: what a repeated call of the default kernel on torch tensors runs
    (api.matmul's fast path), without run_cublas's result buffer, the context manager, or the
    flags this dtype's product never reads."""
    return with_exact_sums(dtype, arrays.torch_if_imported().matmul)


def with_exact_sums(dtype: str, function):
    """function(*args) run with the one flag of EXACT_FLAGS that torch reads for products of dtype
    off, the caller's flag put back after it; ``function`` itself where there is nothing to set
    (float64) or the flag is already off at the call. The flag is read and set through torch's
    own getter and setter where this torch has them (a tenth of a microsecond each, against half a
    microsecond through torch.backends.cuda.matmul), which also keep its split-K part as it was."""
    get, put = exact_sums_flag(dtype)
    if get is None:
        return function

    def exact(*args):
        before = get()
        if not before[0]:
            return function(*args)
        put(False, *before[1:])
        try:
            return function(*args)
        finally:
            put(*before)
    return exact


def exact_sums_flag(dtype: str) -> tuple:
    """(get, put) of the flag torch reads for products of dtype (get() gives a tuple whose first
    item is whether reduced-precision sums are allowed); (None, None) where none is read."""
    torch = arrays.torch_if_imported()
    flag = FLAG_OF.get(dtype)
    if flag is None:
        return None, None
    get, put = (getattr(torch._C, f"_{verb}_cublas_{flag}", None) for verb in ("get", "set"))
    if get is None or put is None:          # a torch without them: the attribute
        settings = torch.backends.cuda.matmul
        get, put = (lambda: getattr(settings, flag)), (lambda value: setattr(settings, flag, value))
    # the reductions' flags read (allowed, split-K allowed) in newer torch: the state is a tuple
    return (get if isinstance(get(), tuple) else (lambda: (get(),))), put


def torch_product_into(dtype: str):
    """into(a, b, out): torch.matmul(a, b, out=out) as torch_product computes it (float32 sums, no
    TF32, the caller's flag put back): a repeated call's product written straight into its out."""
    matmul = arrays.torch_if_imported().matmul

    def into(a, b, out):
        matmul(a, b, out=out)
    return with_exact_sums(dtype, into)
