"""Bad input at the public entry points: each refused before any work with a TypeError, ValueError
or KernelUnavailable that names the problem (never an error from deep in a launch, a wrong answer
or a hang). The cases here are those the other test files do not already cover."""
import numpy as np
import pytest
import torch

import tilemm

from .conftest import ON_GPU

WHERE = "cuda" if ON_GPU else "cpu"     # (scaled_matmul and grouped_matmul's torch tensors: a GPU's, or the CPU's
                                        # under the interpreter)
A = np.arange(12, dtype=np.float32).reshape(4, 3)
B = np.arange(15, dtype=np.float32).reshape(3, 5)


# -- kernel parameters: a value equal to a choice but of another type (True == 1, 16.0 == 16) -------

@pytest.mark.parametrize("kernel,name,value,match", [
    ("cpu-tiled", "block_m", 16.0, "block_m=16.0 is not allowed.*float"),         # numba's TypingError
    ("naive", "block", True, "block=True is not allowed.*bool"),                  # the simulator's TypeError
    ("naive", "block", 16.0, "block=16.0 is not allowed.*float"),
    ("tiled", "tile", 16.0, "tile=16.0 is not allowed.*float"),
    ("regblock", "thread_n", True, "thread_n=True is not allowed.*bool"),
    ("regblock", "block_k", np.float32(16), "block_k=.*16.* is not allowed.*float32"),
    ("tensorcore", "block_m", 16.0, "block_m=16.0 is not allowed"),               # (tile_model's TypeError)
    ("tensorcore", "persistent", 1, "persistent=1 is not allowed.*int.*bool"),     # taken as True before
    ("tensorcore", "tma", 0, "tma=0 is not allowed"),
    ("tensorcore-tutorial", "num_warps", True, "num_warps=True is not allowed"),  # run as 1 warp before
    ("tensorcore-f32", "copy_panels", True, "copy_panels=True is not allowed"),
    ("tensorcore-int", "split_k", True, "split_k=True is not allowed"),
    ("tensorcore", "split_k", 2.0, "split_k=2.0 is not allowed.*int"),
])
def test_a_parameter_of_the_wrong_type_is_refused(kernel, name, value, match):
    with pytest.raises(ValueError, match=match):
        tilemm.plan(A, B, kernel=kernel, **{name: value})


@pytest.mark.parametrize("kernel,name,value", [("cpu-tiled", "block_m", np.int64(16)), ("naive", "block", np.int32(8)),
                                               ("tiled", "tile", np.int64(8)), ("regblock", "thread_n", np.uint8(4))])
def test_a_numpy_integer_parameter_is_taken_as_an_int(kernel, name, value):
    """(tiled's simulated kernel failed on tile=np.int64(16); Triton's interpreter on block_m=np.int32(16))"""
    plan = tilemm.plan(A, B, kernel=kernel, **{name: value})
    assert type(plan.params[name]) is int and plan.params[name] == value
    np.testing.assert_allclose(tilemm.matmul(A, B, kernel=kernel, **{name: value}), A @ B)


def test_a_parameter_refused_after_its_equal_of_another_type_ran():
    """A repeated call's key tells True from 1: persistent=1 after a persistent=True call is refused
    as it would be on its own (equal keys once took the kept plan)."""
    a, b = A.astype(np.float16), B.astype(np.float16)
    np.testing.assert_allclose(tilemm.matmul(a, b, kernel="tensorcore", persistent=True), a @ b, rtol=1e-2)
    with pytest.raises(ValueError, match="persistent=1 is not allowed"):
        tilemm.matmul(a, b, kernel="tensorcore", persistent=1)
    np.testing.assert_allclose(tilemm.matmul(A, B, kernel="cpu-tiled", block_m=16), A @ B)
    with pytest.raises(ValueError, match="block_m=16.0 is not allowed"):
        tilemm.matmul(A, B, kernel="cpu-tiled", block_m=16.0)


@pytest.mark.parametrize("kernel", [["numpy"], tilemm.kernel("numpy"), 1])
def test_a_kernel_that_is_not_a_name(kernel):
    """(a list failed as "unhashable type: 'list'"; a Kernel as an unknown kernel)"""
    with pytest.raises(TypeError, match="kernel must be a kernel's name"):
        tilemm.matmul(A, B, kernel=kernel)


# -- scaled_matmul (float8 CPU tensors under the interpreter) -------------------------------------

F8 = torch.float8_e4m3fn


def fp8_operands(m=16, k=32, n=16):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(m, k, generator=g).to(F8).to(WHERE), torch.randn(n, k, generator=g).to(F8).to(WHERE).t())


@pytest.mark.parametrize("fast_accum", [1, 0, "yes", None, np.True_])
def test_scaled_fast_accum_must_be_a_bool(fast_accum):
    """As torch._scaled_mm's use_fast_accum (TypeError: must be bool); these ran as bool(fast_accum)."""
    a, b = fp8_operands()
    with pytest.raises(TypeError, match="fast_accum must be True or False"):
        tilemm.scaled_matmul(a, b, fast_accum=fast_accum)
    with pytest.raises(TypeError, match="fast_accum must be True or False"):     # block scales too
        tilemm.scaled_matmul(a, b, torch.ones(16, 1, device=WHERE), torch.ones(1, 1, device=WHERE),
                             fast_accum=fast_accum)


def test_scaled_numpy_integer_parameters_are_ints():
    """num_warps=np.int64(4) was refused as not 'a positive integer'."""
    a, b = fp8_operands()
    want = tilemm.scaled_matmul(a, b, num_warps=4, block_k=32)
    got = tilemm.scaled_matmul(a, b, num_warps=np.int64(4), block_k=np.int32(32))
    assert torch.equal(got, want)


@pytest.mark.parametrize("which", ["scale_a", "scale_b"])
def test_scaled_meta_scale_is_refused(which):
    """(a NotImplementedError from the copy: 'Cannot copy out of meta tensor')"""
    a, b = fp8_operands()
    scales = {"scale_a": 1.0, "scale_b": 1.0, which: torch.ones((), device="meta")}
    with pytest.raises(ValueError, match=f"{which} is a meta tensor"):
        tilemm.scaled_matmul(a, b, **scales)


def test_an_empty_out_with_a_zero_stride_is_written_as_torch_writes_it():
    """An empty out holds nothing, whatever its strides: torch.matmul takes an expanded (3, 0) out,
    and so do tilemm.matmul and the float8 and out-of-core checks' common rule."""
    from tilemm.numerics.arrays import elements_share_memory
    a, b = torch.ones(3, 4), torch.ones(4, 0)
    want = torch.matmul(a, b, out=torch.empty(0).expand(3, 0))
    got = tilemm.matmul(a, b, out=torch.empty(0).expand(3, 0))
    assert got.shape == want.shape == (3, 0)
    assert not elements_share_memory((3, 0), (0, 1)) and not elements_share_memory((1, 5), (0, 1))
    assert elements_share_memory((3, 2), (0, 1))


@pytest.mark.parametrize("kernel", ["numpy", "cpu-tiled", "tiled"])
def test_a_torch_out_whose_elements_share_memory_is_refused_first(kernel):
    """torch.matmul refuses an expanded out (RuntimeError); tilemm raised torch's error only from
    the copy into out, after the product. NumPy writes such an out, and so does tilemm."""
    from tilemm.contract.numpy_rules import OverlappingOutError
    t = torch.arange(16.0).reshape(4, 4)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor") as torch_error:
        torch.matmul(t, t, out=torch.zeros(1, 4).expand(4, 4))
    for _ in range(2):                 # (a repeated call too)
        with pytest.raises(OverlappingOutError, match=str(torch_error.value)[:40]) as error:
            tilemm.matmul(t, t, out=torch.zeros(1, 4).expand(4, 4), kernel=kernel)
        assert isinstance(error.value, ValueError) and isinstance(error.value, RuntimeError)
    shared, numpys = (np.lib.stride_tricks.as_strided(np.zeros(4, np.float32), (4, 4), (0, 4)) for _ in range(2))
    x = t.numpy()
    tilemm.matmul(x, x, out=shared, kernel=kernel)
    np.matmul(x, x, out=numpys)
    np.testing.assert_array_equal(shared, numpys)


def test_scaled_out_whose_elements_share_memory_is_refused():
    """(torch's RuntimeError from inside the program's launch before)"""
    a, b = fp8_operands()
    with pytest.raises(ValueError, match="out has a zero stride"):
        tilemm.scaled_matmul(a, b, out=torch.empty(1, 16, dtype=torch.bfloat16, device=WHERE).expand(16, 16))


# -- grouped_matmul ----------------------------------------------------------------------------------

def grouped_operands():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(8, 16, generator=g).half().to(WHERE), torch.randn(3, 16, 16, generator=g).half().to(WHERE),
            torch.tensor([2, 5, 8], dtype=torch.int32))


@pytest.mark.parametrize("offs", ["2,5,8", {2, 5, 8}, {0: 8}, 8.0])
def test_grouped_offs_of_no_array_kind(offs):
    """(an AttributeError: "'str' object has no attribute 'ndim'")"""
    x, w, _ = grouped_operands()
    with pytest.raises(TypeError, match="offs and counts are int32 arrays"):
        tilemm.grouped_matmul(x, w, offs)
    with pytest.raises(TypeError, match="offs and counts are int32 arrays"):
        tilemm.grouped_matmul(x.reshape(2, 4, 16), w[:2], counts=offs)


def test_grouped_offs_list_past_int32():
    """(NumPy's OverflowError from the list's cast to int32)"""
    x, w, _ = grouped_operands()
    with pytest.raises(ValueError, match="must hold int32 values"):
        tilemm.grouped_matmul(x, w, [2, 5, 2**40])


@pytest.mark.parametrize("first,then,match", [({"block_m": 64}, {"block_m": 64.0}, "block_m=64.0 is not allowed"),
                                              ({"tma": False}, {"tma": 0}, "tma=0 is not allowed")])
def test_grouped_parameter_refused_after_its_equal_of_another_type_ran(first, then, match):
    """A repeated call's key tells 64 from 64.0 and False from 0: block_m=64.0 after block_m=64 once
    replayed the first call's launch, though refused on its own."""
    x, w, offs = grouped_operands()
    tilemm.grouped_matmul(x, w, offs, **first)
    with pytest.raises(ValueError, match=match):
        tilemm.grouped_matmul(x, w, offs, **then)


def test_grouped_out_whose_elements_share_memory_is_refused():
    """(it was written, each row over the last)"""
    x, w, offs = grouped_operands()
    with pytest.raises(ValueError, match="out has a zero stride"):
        tilemm.grouped_matmul(x, w, offs, out=torch.empty(1, 16, dtype=torch.float16, device=WHERE).expand(8, 16))


# -- linear and matmul_epilogue -------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["torch", "numpy"])
@pytest.mark.parametrize("name,value,error,match", [
    ("alpha", "2", TypeError, "alpha='2' must be a real number"),            # float("2") took it
    ("alpha", True, TypeError, "alpha=True must be a real number"),
    ("alpha", None, TypeError, "alpha=None must be a real number"),          # float()'s message, no name
    ("alpha", 1j, TypeError, "alpha=1j must be a real number"),
    ("beta", "1", TypeError, "beta='1' must be a real number"),
    ("alpha", torch.ones(2), ValueError, "alpha has shape \\(2,\\); it is one real number"),
])
def test_epilogue_alpha_beta_must_be_real_numbers(kind, name, value, error, match):
    a, b, c = torch.randn(4, 8), torch.randn(8, 6), torch.randn(4, 6)
    if kind == "numpy":
        a, b, c = a.numpy(), b.numpy(), c.numpy()
    with pytest.raises(error, match=match):
        tilemm.matmul_epilogue(a, b, c=c, **{name: value})


def test_epilogue_alpha_beta_of_numpy_and_one_element_tensors():
    a, b, c = torch.randn(4, 8), torch.randn(8, 6), torch.randn(4, 6)
    want = tilemm.matmul_epilogue(a, b, c=c, alpha=2.0, beta=0.5)
    assert torch.allclose(tilemm.matmul_epilogue(a, b, c=c, alpha=np.float32(2), beta=torch.tensor(0.5)), want)


@pytest.mark.parametrize("call", ["linear", "matmul_epilogue"])
@pytest.mark.parametrize("which", [0, 1])
def test_epilogue_operand_none(call, which):
    """(linear(None, w): an AttributeError, "'NoneType' object has no attribute 'shape'")"""
    operands = [torch.randn(4, 8), torch.randn(6, 8) if call == "linear" else torch.randn(8, 6)]
    operands[which] = None
    name = (("x", "weight") if call == "linear" else ("a", "b"))[which]
    with pytest.raises(TypeError, match=f"{name} is None"):
        getattr(tilemm, call)(*operands)


@pytest.mark.parametrize("call", ["linear", "matmul_epilogue"])
@pytest.mark.parametrize("name", ["bias", "residual"])
def test_epilogue_operand_not_a_tensor_beside_a_negative_view(call, name):
    """(beside torch._neg_view(x): an AttributeError, "'list' object has no attribute 'resolve_neg'")"""
    x = torch._neg_view(torch.randn(4, 8))
    operand = [0.0] * 6 if name == "bias" else [[0.0] * 6] * 4
    with pytest.raises(TypeError, match=f"{name} is list"):
        getattr(tilemm, call)(x, torch.randn(6, 8) if call == "linear" else torch.randn(8, 6), **{name: operand})


@pytest.mark.parametrize("call", ["linear", "matmul_epilogue"])
def test_epilogue_kernel_that_is_not_a_name(call):
    """(kernel=["tensorcore"]: "unhashable type: 'list'")"""
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match="kernel must be a kernel's name"):
        getattr(tilemm, call)(x, x.T if call == "linear" else x.T.contiguous(), kernel=["tensorcore"])


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_linear_of_meta_tensors_has_f_linear_shape(activation):
    """As F.linear and tilemm.matmul_epilogue take meta tensors (autocast's RuntimeError before:
    'unknown device type for autocast')."""
    x, w, b = (t.to("meta") for t in (torch.randn(2, 4, 8), torch.randn(6, 8), torch.randn(6)))
    y = tilemm.linear(x, w, b, activation)
    want = torch.nn.functional.linear(x, w, b)
    assert y.device.type == "meta" and y.shape == want.shape and y.dtype == want.dtype


# -- tilemm.nn ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("input", [np.ones((3, 8), np.float32), [[1.0] * 8], None])
def test_nn_linear_forward_of_no_tensor(input):
    """As torch.nn.Linear: a TypeError (an AttributeError from the input's strides before)."""
    layer = tilemm.nn.Linear(8, 6)
    with pytest.raises(TypeError, match="must be Tensor, not"):
        layer(input)


def test_nn_linear_forward_of_a_0d_tensor():
    """torch's words and a RuntimeError (an IndexError from its last dimension before)."""
    with pytest.raises(RuntimeError, match="need to be at least 1D, but they are 0D and 2D"):
        torch.nn.Linear(8, 6)(torch.tensor(1.0))
    with pytest.raises(RuntimeError, match="need to be at least 1D, but they are 0D and 2D"):
        tilemm.nn.Linear(8, 6)(torch.tensor(1.0))


@pytest.mark.parametrize("out_dtype", ["bogus", 5, "float8_e4m3fn"])
def test_nn_out_dtype_checked_when_the_layer_is_made(out_dtype):
    """(accepted, then refused at the first forward; out_dtype=5 NumPy's 'Cannot interpret')"""
    with pytest.raises(TypeError, match="out_dtype=.* is not a dtype tilemm computes"):
        tilemm.nn.Linear(8, 6, out_dtype=out_dtype)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6))
    with pytest.raises(TypeError, match="out_dtype=.* is not a dtype tilemm computes"):
        tilemm.nn.swap_linears(model, out_dtype=out_dtype)
    assert type(model[0]) is torch.nn.Linear


def test_nn_activation_with_a_kernel_that_has_no_epilogue():
    """(accepted, then refused at the first forward)"""
    with pytest.raises(ValueError, match="kernel='cpu-tiled' has no fused epilogue"):
        tilemm.nn.Linear(8, 6, kernel="cpu-tiled", activation="relu")


@pytest.mark.parametrize("function", ["swap_linears", "restore_linears"])
@pytest.mark.parametrize("model", ["model", None, [torch.nn.Linear(2, 2)]])
def test_nn_swap_of_no_module(function, model):
    """(an AttributeError: no named_modules)"""
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        getattr(tilemm.nn, function)(model)


@pytest.mark.parametrize("fuse", ["yes", 1, None])
def test_nn_fuse_activations_must_be_a_bool(fuse):
    """(fuse_activations='yes' fused the model's activations)"""
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.ReLU())
    with pytest.raises(TypeError, match="fuse_activations must be True or False"):
        tilemm.nn.swap_linears(model, fuse_activations=fuse)
    assert [type(m) for m in model] == [torch.nn.Linear, torch.nn.ReLU]


# -- stream= -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", ["numpy", "cpu-tiled"])
@pytest.mark.parametrize("stream,error,match", [(1.5, TypeError, "got a builtins.float"), (True, TypeError, "got True"),
                                                (2**64, ValueError, "is not a cudaStream_t")])
def test_a_bad_stream_on_a_repeated_host_call(kernel, stream, error, match):
    """A host plan's repeated call checks stream= as its first call does (stream=1.5 ran after a
    first call without one; 2**64 and more passed as a cudaStream_t)."""
    a, b = A + 1, B + 1                    # (operands of their own: this test's first call plans them)
    np.testing.assert_allclose(tilemm.matmul(a, b, kernel=kernel), a @ b)
    for _ in range(2):
        with pytest.raises(error, match=match):
            tilemm.matmul(a, b, kernel=kernel, stream=stream)


@pytest.mark.parametrize("out_dtype", [object, "object", np.longdouble, np.clongdouble])
def test_a_numpy_only_out_dtype_for_torch_tensors(out_dtype):
    """(torch's "can't convert np.ndarray of type numpy.object_" from the result's copy); NumPy
    operands take it, as numpy.matmul(dtype=...) does"""
    a, b = torch.ones(4, 3), torch.ones(3, 5)
    with pytest.raises(TypeError, match="needs NumPy arrays: torch has no"):
        tilemm.matmul(a, b, out_dtype=out_dtype)
    want = np.matmul(a.numpy(), b.numpy(), dtype=np.dtype(out_dtype))
    got = tilemm.matmul(a.numpy(), b.numpy(), out_dtype=out_dtype)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("out_dtype", ["bogus", object, "float128", "float8_e4m3fn", 5])
def test_meta_tensors_check_out_dtype_as_a_plain_call(out_dtype):
    """Meta tensors go through the custom op, whose fake read getattr(torch, "bogus") (an
    AttributeError) and took float8, which a plain call refuses."""
    a, b = torch.ones(4, 3, device="meta"), torch.ones(3, 5, device="meta")
    with pytest.raises(TypeError, match="out_dtype=.* is not a dtype tilemm computes"):
        tilemm.matmul(a, b, out_dtype=out_dtype)
    assert tilemm.matmul(a, b, out_dtype="float64").dtype == torch.float64


@pytest.mark.parametrize("device", [pytest.param("gpu", id="named-gpu"), "cuda:0", "CPU", 1])   # (an id "gpu" skips)
def test_kernels_of_an_unknown_device(device):
    """(an empty list, as if no rung ran there)"""
    with pytest.raises(ValueError, match="device must be 'cpu', 'cuda' or None"):
        tilemm.kernels(device=device)


@pytest.mark.parametrize("kernel", ["bogus", "cpu-tiled"])
def test_epilogue_of_numpy_operands_with_a_kernel(kernel):
    """(the message said kernel='bogus' "multiplies torch tensors")"""
    a, b = np.ones((4, 8), np.float32), np.ones((8, 6), np.float32)
    with pytest.raises(ValueError, match=f"computed on the host .*, not by kernel='{kernel}'"):
        tilemm.matmul_epilogue(a, b, kernel=kernel)


def test_grouped_float32_with_the_default_tiles():
    """float32 is one of grouped_matmul's dtypes, but its default tiles' 4 stages need 393216 bytes
    of shared memory: every default call was a KernelUnavailable. The default's stages now fit;
    stages the caller names are kept (and refused where they do not fit)."""
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(8, 16, generator=g).to(WHERE), torch.randn(3, 16, 16, generator=g).to(WHERE)
    offs = torch.tensor([2, 5, 8], dtype=torch.int32)
    c = tilemm.grouped_matmul(x, w, offs)
    cuts = [0, 2, 5, 8]
    want = torch.cat([x[cuts[g]:cuts[g + 1]].double() @ w[g].double() for g in range(3)])
    assert c.dtype == torch.float32 and torch.allclose(c.double(), want, rtol=1e-5, atol=1e-5)
    x.requires_grad_()
    tilemm.grouped_matmul(x, w, offs).sum().backward()
    assert torch.allclose(x.grad.double(), torch.cat([w[g].double().sum(1).expand(cuts[g + 1] - cuts[g], 16)
                                                      for g in range(3)]), rtol=1e-5, atol=1e-5)
    with pytest.raises(tilemm.KernelUnavailable, match="shared memory"):
        tilemm.grouped_matmul(x.detach(), w, offs, num_stages=4)


def test_grouped_float32_tiles_fit_by_shorter_k_steps_first():
    """The default's tiles are fitted to shared memory by halving their K steps (the stages kept:
    faster on a GPU), then by fewer stages; what the caller names is kept."""
    from tilemm.ladder import registry
    from tilemm.products.grouped_launch import fitted_to_shared_memory
    rung = registry.program("tensorcore-grouped")
    def fitted(params, itemsize):
        config = rung.KERNEL.resolve(params)
        return fitted_to_shared_memory(rung, config, params, itemsize), config
    reason, config = fitted({}, 4)
    assert reason is None and (config["block_k"], config["num_stages"]) == (32, 4)
    reason, config = fitted({"block_k": 64}, 4)
    assert reason is None and (config["block_k"], config["num_stages"]) == (64, 2)
    reason, config = fitted({}, 2)
    assert reason is None and (config["block_k"], config["num_stages"]) == (64, 4)
    reason, config = fitted({"num_stages": 4, "block_k": 64}, 4)
    assert "shared memory" in reason and (config["block_k"], config["num_stages"]) == (64, 4)


def test_grouped_numpy_out_read_only():
    """(NumPy's 'assignment destination is read-only' from the first group's write)"""
    a, b = np.ones((4, 3), np.float32), np.ones((2, 3, 5), np.float32)
    with pytest.raises(ValueError, match="out is read-only"):
        tilemm.grouped_matmul(a, b, np.array([2, 4], np.int32), out=np.broadcast_to(np.zeros(5, np.float32), (4, 5)))


# -- tilemm.outofcore ----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,error,match", [
    (dict(memory_limit="1G"), TypeError, "memory_limit='1G'; give a number of bytes"),    # "'>' not supported"
    (dict(memory_limit=True), TypeError, "memory_limit=True"),                             # planned for 1 byte
    (dict(device="gpu"), ValueError, "device='gpu'; give 'cuda'"),                         # torch's RuntimeError
    (dict(device=5), ValueError, "device=5; give 'cuda'"),
    (dict(out=np.broadcast_to(np.zeros(5, np.float32), (4, 5))), ValueError, "out is read-only"),
    (dict(out=torch.zeros(1, 5).expand(4, 5)), ValueError, "out has a zero stride"),      # torch's, after the work
])
def test_outofcore_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        tilemm.outofcore.matmul(A[:, :3], B, **{"device": "cpu", **kwargs})


@pytest.mark.skipif(torch.cuda.is_available(), reason="a host without CUDA")
def test_outofcore_on_cuda_without_a_gpu():
    """(torch's AssertionError 'Torch not compiled with CUDA enabled')"""
    with pytest.raises(tilemm.KernelUnavailable, match="torch sees no CUDA GPU"):
        tilemm.outofcore.matmul(A, B, device="cuda")


def test_multi_memory_limit_must_be_a_number():
    """(a str was taken where no panel went out of core)"""
    with pytest.raises(TypeError, match="memory_limit='1G'"):
        tilemm.multi.matmul(A, B, devices=["cpu", "cpu"], memory_limit="1G")


def test_distributed_grid_of_no_grid():
    """(the uninitialized process group was named, a RuntimeError, rather than the grid)"""
    with pytest.raises(TypeError, match="grid='x'; give a tilemm.distributed.Grid"):
        tilemm.distributed.matmul(torch.ones(4, 3), torch.ones(3, 5), grid="x")


@pytest.mark.parametrize("out", [[[0.0, 0.0], [0.0, 0.0]], 5, "x"])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_an_out_that_is_no_array_is_a_type_error(kind, out):
    """(NumPy: "return arrays must be of ArrayType"; an AttributeError had come from the call's
    own bookkeeping before the checks)"""
    a = np.ones((2, 2)) if kind == "numpy" else torch.ones(2, 2)
    with pytest.raises(TypeError, match="operand out is a builtins"):
        tilemm.matmul(a, a, out=out)
