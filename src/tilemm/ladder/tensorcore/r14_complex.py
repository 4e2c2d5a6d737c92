"""Rung 14, `tensorcore-complex`: complex64 and complex128 products as one real product on the
real tensor-core rungs: complex64 on `tensorcore-f32` (3xTF32: float32 accuracy), complex128 on
`tensorcore-f64` (the float64 DMMA program).

A complex matrix stored interleaved (re, im, re, im, ...) is already a real matrix of twice the
columns, so with A's rows read that way and B written once into a real matrix of twice its rows
and columns,

    [a_r a_i ...] @ [[ b_r  b_i ...]   = [c_r c_i ...]
                     [-b_i  b_r ...]]

row 2k of the real B holds B's row k as it is stored (b_r, b_i interleaved), row 2k+1 that of
i B (-b_i, b_r), and the real product lands interleaved in C's own memory: C = A B with no copy
of A (rows contiguous) or C. One real product of M x 2N x 2K, four real multiply-adds a complex
one, as in CGEMM and ZGEMM, on units that run float32 at twice SGEMM's rate (3xTF32) and float64
at DGEMM's (DMMA).

Accuracy: each part of C is a real dot product of 2K terms, sum_k (a_r b_r - a_i b_i) and
sum_k (a_r b_i + a_i b_r), whose magnitudes sum to at most sum_k |a_k| |b_k| (Cauchy-Schwarz):
the real rung's bound over 2K terms, 2 (2K) u sum_k |a_k| |b_k| a part, which tilemm.numerics.accuracy
checks for complex results.

products=3 (complex128 only): Gauss's three real products of M x N x K instead, P1 = A_r B_r,
P2 = A_i B_i, P3 = (A_r + A_i)(B_r + B_i), C_r = P1 - P2, C_i = P3 - P1 - P2: three quarters of the
multiply-adds, and the parts copied apart first. The imaginary part's error is then bounded by
the sums' sizes, not its own terms': with K u per product (float64 sums on DMMA) it is at most
about (3K + 6) u sum_k |a_k| |b_k| (P3's terms are at most 2 |a| |b|, the operands' sums and the
two subtractions round once each), within the bound above from K = 8 on (shorter sums take the
four products); but an imaginary part far smaller than the real part's terms (B nearly real,
say: A_r B_i is small, P3 and P1 are not) carries errors of the real part's size, where the four
products keep errors of its own terms' size. So the four products are the default. complex64 keeps them: 3xTF32's 22 bits leave no room for the larger sums.

Small complex64 products (ONE_LAUNCH_WORK) take the real rung's one-launch 3xTF32 program, which
splits the tiles into TF32 parts as they load: at a first call one program to compile rather than
two (the split passes' and the product's, the stream-K one here, the largest to compile), and
two launches fewer a call.

Parameters: the tile parameters go to the real rung (None: its own choice); precision to
`tensorcore-f32` for complex64.
"""
from __future__ import annotations

import functools

from tilemm.ladder import registry
from tilemm.ladder.record import Kernel, Param, Problem, Traffic, register
from tilemm.ladder.tensorcore.tile_params import tile_params
from tilemm.engine import availability
from tilemm.numerics.dtypes import torch_dtype_name

REAL = {"complex64": ("float32", "tensorcore-f32"), "complex128": ("float64", "tensorcore-f64")}
TILES = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")
GAUSS_FROM_K = 8     # products=3 from this K on (the bound's reach); shorter sums take the four products
# complex64 products whose real product (M x 2N x 2K) has at most this many multiply-adds take
# tensorcore-f32's one launch (direct=True) where its rows are 16-byte aligned (K and N multiples
# of 8; unaligned rows load its tiles 4 bytes at a time, 4x the copies). The real rung takes that
# launch itself up to 2^28; kernel alone (H100, float32), it measured 37 µs against the split
# passes' 70 at 2^27 and level at 2^30 (92 against 91 µs). 2^29 is 512³ complex, whose first
# call then compiles one program rather than two.
ONE_LAUNCH_WORK = 2**29


# Where the default leaves the library (CGEMM) for this rung: complex64 products whose real product
# fills a Hopper GPU with 3xTF32 tiles. Whole calls against the library rung, every answer checked
# (benchmarks/results/h200/complex_vs_library.jsonl.gz): faster where M and N are 1024 or more, K 512
# or more and the product 2^32 complex multiply-adds or more; slower on skinny, shallow or smaller
# products. complex128 stays with ZGEMM: on its large products no class came out clear of ZGEMM's
# own spread (docs/ladder/r14-tensorcore-complex.md).
COMPLEX64_FROM_MACS = 2**32
COMPLEX64_MIN_MN = 1024
COMPLEX64_MIN_K = 512


def preferred(dtype: str, m: int, n: int, k: int, capability: tuple | None) -> str | None:
    """The rung the default takes for a complex product on a GPU of this compute capability, or
    None (the library)."""
    if (dtype == "complex64" and capability is not None and tuple(capability) >= (9, 0)
            and min(m, n) >= COMPLEX64_MIN_MN and k >= COMPLEX64_MIN_K and m * n * k >= COMPLEX64_FROM_MACS):
        return "tensorcore-complex"
    return None


def real_of(dtype: str) -> tuple[str, str]:
    """(real dtype, real rung) of a complex dtype; a model asked about a real dtype (the ladder's
    tables ask every rung about float32) gets its parts' own: float64's, else float32's."""
    return REAL.get(dtype) or REAL["complex128" if dtype == "float64" else "complex64"]


def real_rung(dtype: str, params: dict, m: int, n: int, k: int):
    """(the real rung, its resolved parameters, its dtype) for a complex dtype's M x N x K product:
    the real rung comes from the registry, by name (never imported: no rung imports another)."""
    real_dtype, name = real_of(dtype)
    rung = registry.get(name)
    given = {key: params[key] for key in TILES if params.get(key) is not None}
    if real_dtype == "float32":
        given["precision"] = params.get("precision", "3xtf32")
        if given["precision"] == "3xtf32" and one_launch(m, n, k):
            given["direct"] = True
    return rung, rung.resolve(given), real_dtype


def one_launch(m: int, n: int, k: int) -> bool:
    """Whether complex64's real product takes tensorcore-f32's one launch (ONE_LAUNCH_WORK)."""
    return m * (2 * n) * (2 * k) <= ONE_LAUNCH_WORK and k % 8 == 0 and n % 8 == 0


def real_problem(p: Problem) -> Problem:
    return Problem(p.m, 2 * p.n, 2 * p.k, real_of(p.dtype)[0])


def run(a, b, c, **params):
    bind(a, b, c, **params)()


def takes_gauss(k: int, products: int = 4, **_) -> bool:
    return products == 3 and k >= GAUSS_FROM_K


def bind(a, b, c, products=4, **params):
    """c = a @ b (complex torch tensors, one matrix each) as a launcher without arguments: A's rows
    viewed as real ones (copied first where they are not contiguous), B written into the real
    block matrix at each launch, the real rung's product into C's memory."""
    import torch
    m, k = a.shape
    n = b.shape[1]
    if k == 0:
        return c.zero_
    rung, real_params, real_dtype = real_rung(torch_dtype_name(c.dtype), params, m, n, k)
    real = getattr(torch, real_dtype)
    if takes_gauss(k, products):
        return gauss_bind(a, b, c, rung, real_params, real)
    rows_a = a.stride(1) == 1 and not a.is_conj()
    a_real = torch.view_as_real(a).view(m, 2 * k) if rows_a else torch.empty((m, 2 * k), dtype=real, device=a.device)
    b_real = torch.empty((k, 2, n, 2), dtype=real, device=b.device)
    rows_c = c.stride(1) == 1
    c_real = torch.view_as_real(c).view(m, 2 * n) if rows_c else torch.empty((m, 2 * n), dtype=real, device=c.device)
    bound = rung.bind(a_real, b_real.view(2 * k, 2 * n), c_real, **real_params) if rung.bind else None

    def launch():
        if not rows_a:
            a_real.view(m, k, 2).copy_(torch.view_as_real(a.resolve_conj()))
        pairs = torch.view_as_real(b.resolve_conj())     # (k, n, 2): b_r, b_i
        b_real[:, 0].copy_(pairs)
        torch.neg(pairs[..., 1], out=b_real[:, 1, :, 0])
        b_real[:, 1, :, 1].copy_(pairs[..., 0])
        if bound:
            bound()
        else:
            rung.run(a_real, b_real.view(2 * k, 2 * n), c_real, **real_params)
        if not rows_c:
            c.copy_(torch.view_as_complex(c_real.view(m, n, 2)))
    return launch


def gauss_bind(a, b, c, rung, real_params, real):
    """products=3: the parts of A and B and their sums copied apart at each launch, the three real
    products, C's parts from them (the module's docstring)."""
    import torch
    m, k = a.shape
    n = b.shape[1]
    a_parts = torch.empty((3, m, k), dtype=real, device=a.device)      # A_r, A_i, A_r + A_i
    b_parts = torch.empty((3, k, n), dtype=real, device=b.device)
    p = torch.empty((3, m, n), dtype=real, device=c.device)           # P1, P2, P3
    products = [rung.bind(a_parts[i], b_parts[i], p[i], **real_params) if rung.bind else
                functools.partial(rung.run, a_parts[i], b_parts[i], p[i], **real_params) for i in range(3)]

    def split(x, parts):
        pairs = torch.view_as_real(x.resolve_conj())
        parts[0].copy_(pairs[..., 0])
        parts[1].copy_(pairs[..., 1])
        torch.add(parts[0], parts[1], out=parts[2])

    def launch():
        split(a, a_parts)
        split(b, b_parts)
        for product in products:
            product()
        c_parts = torch.view_as_real(c)
        p[2].sub_(p[0]).sub_(p[1])
        c_parts[..., 1].copy_(p[2])
        c_parts[..., 0].copy_(p[0].sub_(p[1]))
    return launch


def traffic(p, products=4, **params):
    """The real products' traffic in complex elements (half as many as their real ones): four
    products, with B's real block matrix written (2 K N complex elements) after B is read; three
    (products=3), with A's and B's parts and sums written after they are read, and C from P1-P3."""
    rung, real_params, _ = real_rung(p.dtype, params, p.m, p.n, p.k)
    if takes_gauss(p.k, products):
        t = rung.traffic(Problem(p.m, p.n, p.k, real_of(p.dtype)[0]), **real_params)
        operands = p.m * p.k + p.k * p.n
        return Traffic(read=(3 * t.read) / 2 + operands * 2 + 3 * p.m * p.n / 2,
                       written=(3 * t.written) / 2 + 1.5 * operands + p.m * p.n)
    t = rung.traffic(real_problem(p), **real_params)
    return Traffic(read=t.read / 2 + p.k * p.n, written=t.written / 2 + 2 * p.k * p.n)


def limits(p, products=4, **params):
    if products == 3 and p.dtype != "complex128":
        return ("products=3 (Gauss's) is for complex128: complex64's 3xTF32 products leave its larger sums no room "
                "in float32's bound")
    rung, real_params, _ = real_rung(p.dtype, params, p.m, p.n, p.k)
    real = Problem(p.m, p.n, p.k, real_of(p.dtype)[0]) if takes_gauss(p.k, products) else real_problem(p)
    reason = rung.limits(real, **real_params)
    return f"its real product ({rung.name}, {real.m} x {real.n} x {real.k}): {reason}" if reason else None


def compute_unit(p, products=4, **params):
    """The real rung's unit, four real products a complex one (three with products=3)."""
    rung, real_params, _ = real_rung(p.dtype, params, p.m, p.n, p.k)
    gauss = takes_gauss(p.k, products)
    unit, work = rung.unit(Problem(p.m, p.n, p.k, real_of(p.dtype)[0]) if gauss else real_problem(p), real_params)
    return unit, (3 if gauss else 4) * work


register(Kernel(
    name="tensorcore-complex", rung=14, device="cuda", backend="triton", dtypes=("complex64", "complex128"),
    seed="beyond", summary="complex64 / complex128 as one real product on tensorcore-f32 (3xTF32) / tensorcore-f64 "
                           "(DMMA): interleaved A times B's real block matrix, into C's memory",
    run=run, bind=bind, traffic=traffic, limits=limits, available=availability.available, compute_unit=compute_unit,
    prefers=lambda dtype, m, n, k, sms, capability: preferred(dtype, m, n, k, capability) is not None,
    params=tile_params(None, None, None, num_warps=None, num_stages=None, chosen_by="the real rung") + (
        Param("precision", "3xtf32", ("3xtf32", "tf32"),
              "complex64: tensorcore-f32's precision for the real product (3xtf32: float32 accuracy; tf32: "
              "TF32's)"),
        Param("products", 4, (4, 3),
              "4: one real product of M x 2N x 2K (the block form); 3: complex128 by Gauss's three real products "
              "of M x N x K (three quarters of the work; a small imaginary part keeps errors of the real part's size)"),),
))
