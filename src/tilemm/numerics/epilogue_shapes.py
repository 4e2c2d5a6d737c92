"""The shapes a fused product takes (tilemm.linear, tilemm.matmul_epilogue), checked alike for
NumPy arrays and torch tensors: ValueError naming the operand and both shapes."""
from __future__ import annotations


def bias_layout(bias_shape: tuple, m: int, n: int, name: str = "matmul_epilogue") -> bool:
    """Whether a bias of this shape lies over M (a column, (M, 1)) rather than over N ((N,) or
    (1, N)); ValueError for any other shape."""
    # (==, not `in`: under torch.compile's dynamic shapes `in` answered False for sizes equal only
    # by a guard, where == adds the guard and answers True)
    if bias_shape == (n,) or bias_shape == (1, n):
        return False
    if bias_shape == (m, 1):
        return True
    raise ValueError(f"{name}: bias has shape {bias_shape}; it must be a row over N, ({n},) or (1, {n}), or a "
                     f"column over M, ({m}, 1)")


def check_matrices(a_shape: tuple, b_shape: tuple, c_shape, residual_shape, name: str = "matmul_epilogue") -> None:
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ValueError(f"{name}: a and b must be 2-D, (M, K) and (K, N); they are {a_shape} and {b_shape}")
    if a_shape[1] != b_shape[0]:
        raise ValueError(f"{name}: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature "
                         f"(n?,k),(k,m?)->(n?,m?) (size {b_shape[0]} is different from {a_shape[1]})")
    shape = (a_shape[0], b_shape[1])
    for label, given in (("c", c_shape), ("residual", residual_shape)):
        if given is not None and tuple(given) != shape:
            raise ValueError(f"{name}: {label} has shape {tuple(given)}; the product's is {shape}")


def check_linear_shapes(x_shape: tuple, weight_shape: tuple, bias_shape) -> None:
    if len(weight_shape) != 2:
        raise ValueError(f"linear: weight must be 2-D, (out_features, in_features); it is {tuple(weight_shape)}")
    if len(x_shape) < 1 or x_shape[-1] != weight_shape[1]:
        raise ValueError(f"linear: x of shape {tuple(x_shape)} and weight of shape {tuple(weight_shape)}: x's last "
                         f"dimension must be in_features = {weight_shape[1]}")
    if bias_shape is not None and tuple(bias_shape) != (weight_shape[0],):
        raise ValueError(f"linear: bias has shape {tuple(bias_shape)}; it must be (out_features,) = "
                         f"({weight_shape[0]},)")


def check_linear_residual(residual_shape, out_shape) -> None:
    """A residual broadcasts to the result's shape without widening it (NumPy's and torch's
    broadcasting rules): ValueError naming both shapes otherwise."""
    residual_shape, out_shape = tuple(residual_shape), tuple(out_shape)
    fits = len(residual_shape) <= len(out_shape) and all(
        r in (1, o) for r, o in zip(residual_shape[::-1], out_shape[::-1]))
    if not fits:
        raise ValueError(f"linear: residual of shape {residual_shape} does not broadcast to the result's shape "
                         f"{out_shape}")
