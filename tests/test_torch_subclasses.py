"""Torch tensors beyond the plain dense one: a subclass with a ``__torch_function__`` of its own
gets tilemm.matmul's call first and its result in the subclass, as torch.matmul gives it
(torch.overrides' protocol); sparse and nested tensors are refused with a TypeError naming their
layout, before any work."""
import pytest
import torch

import tilemm


class Tagged(torch.Tensor):
    """A subclass with torch's default __torch_function__: results come back as Tagged."""


class Logging(torch.Tensor):
    """A subclass whose __torch_function__ records the functions it is handed."""
    seen: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


def operands(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(5, 7, generator=g), torch.randn(7, 3, generator=g)


@pytest.mark.parametrize("which", ["a", "b", "both"])
def test_a_subclass_gets_torch_s_result_type_and_values(which):
    a, b = operands()
    x = a.as_subclass(Tagged) if which in ("a", "both") else a
    y = b.as_subclass(Tagged) if which in ("b", "both") else b
    want = torch.matmul(x, y)
    for _ in range(3):                  # the first call, then the repeated calls' path
        c = tilemm.matmul(x, y)
        assert type(c) is type(want) is Tagged
        torch.testing.assert_close(c.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))


def test_a_subclass_s_torch_function_is_handed_tilemm_s_matmul():
    a, b = operands(1)
    Logging.seen.clear()
    c = tilemm.matmul(a.as_subclass(Logging), b)
    assert Logging.seen[0] is tilemm.matmul
    assert type(c) is Logging
    torch.testing.assert_close(c.as_subclass(torch.Tensor), a @ b)


def test_a_subclass_records_torch_s_gradients():
    a, b = operands(2)
    grads = []
    for product in (torch.matmul, tilemm.matmul):
        x = a.clone().as_subclass(Tagged).requires_grad_()
        c = product(x, b)
        c.sum().backward()
        grads.append((type(c), type(x.grad), x.grad.as_subclass(torch.Tensor)))
    assert grads[0][:2] == grads[1][:2]
    torch.testing.assert_close(grads[1][2], grads[0][2])


def test_a_subclass_with_out_gives_what_torch_gives():
    a, b = operands(3)
    results = []
    for product in (torch.matmul, tilemm.matmul):
        out = torch.full((5, 3), float("nan"))
        r = product(a.as_subclass(Tagged), b, out=out)
        results.append((type(r), r.data_ptr() == out.data_ptr(), out.clone()))
    assert results[0][:2] == results[1][:2]
    torch.testing.assert_close(results[1][2], results[0][2])


def test_plain_tensors_and_parameters_stay_plain():
    a, b = operands(4)
    assert type(tilemm.matmul(a, b)) is torch.Tensor
    with torch.no_grad():
        assert type(tilemm.matmul(a, torch.nn.Parameter(b))) is torch.Tensor


@pytest.mark.parametrize("layout, operand", [("sparse_coo", 0), ("sparse_coo", 1), ("sparse_csr", 0),
                                             ("sparse_csr", 1), ("nested", 0)])
def test_sparse_and_nested_tensors_are_refused_naming_their_layout(layout, operand):
    a, b = operands(5)
    dense = a if operand == 0 else b
    odd = {"sparse_coo": dense.to_sparse, "sparse_csr": dense.to_sparse_csr,
           "nested": lambda: torch.nested.nested_tensor([a[:2], a[2:]])}[layout]()
    x, y = (odd, b) if operand == 0 else (a, odd)
    for grad in (False, True):
        if grad and layout != "nested":
            x, y = (x.requires_grad_(), y) if operand == 0 else (x, y.requires_grad_())
        with pytest.raises(TypeError, match=f"operand {operand} is a {layout.split('_')[0]}"):
            tilemm.matmul(x, y)
