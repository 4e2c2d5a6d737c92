"""torch's own sample inputs for its products (the OpInfo database its test suite runs matmul,
``@`` from the right, mm, bmm, mv and dot on), each through tilemm.matmul beside torch.matmul on
the CPU, in every dtype torch takes for them: the same shape and dtype, integers exactly, floats
and their gradients (where the sample records one) at least as close to a float64 product as
torch's own or within one rounding of the result's dtype (plus float32 sums). F.linear's
reference inputs through tilemm.linear the same way, in the float dtypes it takes (others refused
with a TypeError that names the dtype)."""
import pytest
import torch

import tilemm

pytest.importorskip("expecttest")          # (torch's test helpers import it)
common_methods_invocations = pytest.importorskip("torch.testing._internal.common_methods_invocations")

PRODUCTS = {("matmul", ""), ("__rmatmul__", ""), ("mm", ""), ("bmm", ""), ("bmm", "triton_optimized"), ("mv", ""),
            ("dot", "")}
OPS = sorted((op for op in common_methods_invocations.op_db if (op.name, op.variant_test_name) in PRODUCTS),
             key=lambda op: (op.name, op.variant_test_name))
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24,
                 torch.float64: 2.0**-53, torch.complex64: 2.0**-24, torch.complex128: 2.0**-53}
SUMS = 2.0**-24                        # float32 sums (16-bit and float32 operands)


def operands(op, sample):
    """(a, b) of a sample: torch's ``b.__rmatmul__(a)`` is a @ b."""
    return (sample.args[0], sample.input) if op.name == "__rmatmul__" else (sample.input, sample.args[0])


def case_id(op) -> str:
    return op.name + (f"-{op.variant_test_name}" if op.variant_test_name else "")


def assert_as_close(got, want, exact, size, terms: int, dtype, what: str):
    """got (tilemm's) against exact (float64's): within one rounding of dtype plus float32 sums
    of `terms` products of magnitude `size`, or no further than want (torch's) is."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    wide = torch.complex128 if dtype.is_complex else torch.float64
    err = (got.detach().to(wide) - exact).abs()
    torch_err = (want.detach().to(wide) - exact).abs()
    bound = UNIT_ROUNDOFF[dtype] * exact.abs() + 2 * terms * SUMS * size + 1e-30
    worse = (err > bound) & (err > torch_err)
    assert not worse.any(), (f"{what}: tilemm's error {err[worse].max().item():.3g} past one rounding "
                             f"({bound[worse].max().item():.3g}) and torch's ({torch_err[worse].max().item():.3g})")


@pytest.mark.parametrize("op", OPS, ids=case_id)
def test_every_sample_gives_torch_s_answer(op):
    """Every sample input in every dtype the op takes on the CPU (integers included)."""
    checked = 0
    for dtype in sorted(op.supported_dtypes("cpu"), key=str):
        for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
            a, b = operands(op, sample)
            want, got = torch.matmul(a, b), tilemm.matmul(a, b)
            what = f"{case_id(op)} {dtype} {tuple(a.shape)} @ {tuple(b.shape)}"
            if dtype.is_floating_point or dtype.is_complex:
                wide = torch.complex128 if dtype.is_complex else torch.float64
                exact = torch.matmul(a.to(wide), b.to(wide))
                size = torch.matmul(a.to(wide).abs(), b.to(wide).abs())
                assert_as_close(got, want, exact, size, a.shape[-1], dtype, what)
            else:
                assert got.dtype == want.dtype and torch.equal(got, want), what
            checked += 1
    assert checked > 0


def float64_grads(a, b, g, absolute: bool):
    """dA and dB of A @ B for dC = g in float64 (of |A|, |B| and |g| where absolute: the size of
    the sums), None for an operand that records no gradient."""
    wide = torch.complex128 if a.dtype.is_complex else torch.float64

    def up(x, grad):
        x = x.detach().to(wide)
        return (x.abs() if absolute else x).requires_grad_(grad)
    a64, b64 = up(a, a.requires_grad), up(b, b.requires_grad)
    g64 = g.to(wide).abs() if absolute else g.to(wide)
    need = [x for x in (a64, b64) if x.requires_grad]
    grads = iter(torch.autograd.grad(torch.matmul(a64, b64), need, g64))
    return [next(grads) if x.requires_grad else None for x in (a, b)]


@pytest.mark.parametrize("op", [op for op in OPS if op.supports_autograd], ids=case_id)
def test_every_reference_input_gives_torch_s_gradients(op):
    """torch's reference inputs (samples and more: broadcast stacks, views) in every float and
    complex dtype, recording gradients: tilemm's dA and dB against float64's and torch's."""
    checked = 0
    for dtype in sorted(op.supported_dtypes("cpu"), key=str):
        if not (dtype.is_floating_point or dtype.is_complex):
            continue
        for sample in op.reference_inputs("cpu", dtype, requires_grad=True):
            a, b = operands(op, sample)
            need = [x for x in (a, b) if x.requires_grad]
            if not need:
                continue
            want, got = torch.matmul(a, b), tilemm.matmul(a, b)
            g = torch.randn_like(want)
            torch_grads = iter(torch.autograd.grad(want, need, g))
            tilemm_grads = iter(torch.autograd.grad(got, need, g))
            exact, size = float64_grads(a, b, g, False), float64_grads(a, b, g, True)
            terms = max(g.numel(), 1)            # (at most every product of dC into one sum)
            for name, x, e, s in (("dA", a, exact[0], size[0]), ("dB", b, exact[1], size[1])):
                if x.requires_grad:
                    what = f"{case_id(op)} {dtype} {tuple(a.shape)} @ {tuple(b.shape)}: {name}"
                    assert_as_close(next(tilemm_grads), next(torch_grads), e, s, terms, dtype, what)
                    checked += 1
    assert checked > 0


LINEAR = next(op for op in common_methods_invocations.op_db if op.name == "nn.functional.linear")


def test_every_linear_reference_input_gives_torch_s_answer_and_gradients():
    checked = refused = 0
    for dtype in sorted(LINEAR.supported_dtypes("cpu"), key=str):
        floating = dtype.is_floating_point
        for sample in LINEAR.reference_inputs("cpu", dtype, requires_grad=floating):
            x, weight = sample.input, sample.args[0]
            bias = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("bias")
            what = f"linear {dtype} {tuple(x.shape)}, {tuple(weight.shape)}, bias {bias is not None}"
            if not floating:
                with pytest.raises(TypeError, match=str(dtype).replace("torch.", "")):
                    tilemm.linear(x, weight, bias)
                refused += 1
                continue
            want, got = torch.nn.functional.linear(x, weight, bias), tilemm.linear(x, weight, bias)
            wide = [t.detach().double() if t is not None else None for t in (x, weight, bias)]
            exact = torch.nn.functional.linear(*wide)
            size = torch.nn.functional.linear(*[t.abs() if t is not None else None for t in wide])
            assert_as_close(got, want, exact, size, x.shape[-1] + 1, dtype, what)
            named = [(name, t) for name, t in (("x", x), ("weight", weight), ("bias", bias))
                     if t is not None and t.requires_grad]
            need = [t for _, t in named]
            if need and want.numel():
                g = torch.randn_like(want)
                for (name, _), mine, theirs in zip(named, torch.autograd.grad(got, need, g),
                                                   torch.autograd.grad(want, need, g)):
                    torch.testing.assert_close(mine, theirs, msg=f"{what}: d{name}")
            checked += 1
    assert checked > 0 and refused > 0


@pytest.mark.parametrize("op", [op for op in OPS if op.supports_autograd], ids=case_id)
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.bfloat16], ids=str)
def test_every_reference_input_under_torch_func_gives_torch_s_answers(op, dtype):
    """torch.func's jvp, vmap (either operand mapped, or both) and vjp of tilemm.matmul against
    torch.matmul's on the reference inputs."""
    from torch.func import jvp, vjp, vmap
    tolerance = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)

    def same(mine, theirs, what):
        assert mine.shape == theirs.shape and mine.dtype == theirs.dtype, (what, mine.shape, theirs.shape)
        torch.testing.assert_close(mine, theirs, **tolerance, msg=what)
    checked = 0
    for sample in op.reference_inputs("cpu", dtype, requires_grad=False):
        a, b = operands(op, sample)
        what = f"{case_id(op)} {dtype} {tuple(a.shape)} @ {tuple(b.shape)}"
        tangents = (torch.randn_like(a), torch.randn_like(b))
        for mine, theirs in zip(jvp(tilemm.matmul, (a, b), tangents), jvp(torch.matmul, (a, b), tangents)):
            same(mine, theirs, what + ": jvp")
        stacked = (torch.stack([a, 2 * a]), torch.stack([b, b + 1]))
        for dims in ((0, 0), (0, None), (None, 0)):
            x, y = (stacked[0] if dims[0] == 0 else a), (stacked[1] if dims[1] == 0 else b)
            same(vmap(tilemm.matmul, in_dims=dims)(x, y), vmap(torch.matmul, in_dims=dims)(x, y), f"{what}: vmap {dims}")
        (c, pull), (want, pull_torch) = vjp(tilemm.matmul, a, b), vjp(torch.matmul, a, b)
        g = torch.randn_like(want)
        for name, mine, theirs in zip(("dA", "dB"), pull(g), pull_torch(g)):
            same(mine, theirs, f"{what}: vjp {name}")
        checked += 1
    assert checked > 0
