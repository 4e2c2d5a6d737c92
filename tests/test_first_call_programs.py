"""How many Triton programs a first call compiles, counted on the CPU: each launch under the
interpreter is recorded, not run, as the key Triton's JIT would look its program up by on an sm_90
GPU (the program, every argument's specialization: a stride of 1 or sizes divisible by 16 make
programs of their own; the launch options), with the SMs of an H200. A first call with empty disk
caches compiles one program a distinct key, each about a second of a cold start."""
import pytest

from tests.conftest import ON_GPU

interpreter = pytest.mark.skipif(ON_GPU, reason="counts the interpreter's launches")
H200_SMS = 132


@pytest.fixture
def requested(monkeypatch):
    """A function running call() with every Triton launch recorded rather than run, returning the
    keys the launches asked for, in order."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction, create_function_from_signature
    from tilemm.engine import availability
    monkeypatch.setattr(availability, "multiprocessors", lambda: H200_SMS)
    backend = CUDABackend(GPUTarget("cuda", 90, 32))
    keys = []

    def record(self, *args, grid, warmup, **kwargs):
        flags = {k: v for k, v in self.kwargs.items() if k in ("do_not_specialize", "do_not_specialize_on_alignment")}
        jit = JITFunction(self.fn, **flags)
        _, specialization, options = create_function_from_signature(jit.signature, jit.params, backend)(*args, **kwargs)
        keys.append((self.fn.__name__, repr(specialization), repr(sorted(options.items()))))

    def run(call):
        monkeypatch.setattr(InterpretedFunction, "run", record)
        try:
            call()
        finally:
            monkeypatch.undo()
        return keys
    return run


def square(n, dtype):
    import torch
    return torch.ones((n, n), dtype=dtype), torch.ones((n, n), dtype=dtype)


@interpreter
def test_complex64_at_512_asks_for_one_program(requested):
    """tensorcore-complex at 512³ (a 512 x 1024 x 1024 real product): tensorcore-f32's one launch,
    not the split passes (one program for A and B^T) and a stream-K product."""
    import torch
    import tilemm
    a, b = square(512, torch.complex64)
    keys = requested(lambda: tilemm.matmul(a, b, kernel="tensorcore-complex"))
    assert [name for name, *_ in keys] == ["tf32x3_direct"]


@interpreter
def test_float32_at_512_asks_for_one_program(requested):
    import torch
    import tilemm
    a, b = square(512, torch.float32)
    keys = requested(lambda: tilemm.matmul(a, b, kernel="tensorcore-f32"))
    assert [name for name, *_ in keys] == ["tf32x3_direct"]


@interpreter
@pytest.mark.parametrize("kernel,dtype,n,product", [("tensorcore-complex", "complex64", 1024, "tf32_matmul"),
                                                    ("tensorcore-complex", "complex64", 500, "matmul_persistent"),
                                                    ("tensorcore-f32", "float32", 2048, "tf32_matmul")])
def test_past_the_one_launch_the_two_split_passes_ask_for_one_program(requested, kernel, dtype, n, product):
    """Past the one launch's reach (complex 1024³, float32 2048³), or with complex rows not 16-byte
    aligned (500³: real rows of 1000 floats), the split passes and the product: A's split reads
    across its rows and B^T's down its columns, the stride of 1 passed in one place, so that both
    launches ask for one program."""
    import torch
    import tilemm
    a, b = square(n, getattr(torch, dtype))
    keys = requested(lambda: tilemm.matmul(a, b, kernel=kernel))
    assert [name for name, *_ in keys] == ["split_tf32", "split_tf32", product]
    assert keys[0] == keys[1]


@interpreter
def test_the_keys_tell_a_stride_of_one_apart(requested):
    """The count above counts what Triton compiles: the split launched with B^T's strides as they
    are (the stride of 1 first) is another program."""
    import torch
    from tilemm.ladder.tensorcore.r13_f32_kernel import split_tf32
    x = torch.ones((64, 64))
    out = torch.empty((2, 64, 64))
    keys = requested(lambda: [split_tf32[(1, 1)](x, out, 64, 64, 64, *strides, 0, PARTS=2, BLOCK_R=64, BLOCK_C=64)
                              for strides in ((64, 1), (1, 64), (64, 1))])
    assert keys[0] != keys[1] and keys[0] == keys[2]


@pytest.mark.gpu
@pytest.mark.parametrize("n,one_launch", [(512, True), (500, False)])
def test_gpu_complex64_in_one_launch_or_split_within_its_bound(n, one_launch):
    """The one launch (512³) and the split passes (500³: rows not 16-byte aligned) both within the
    complex product's float32 bound."""
    import torch
    import tilemm
    from tilemm.ladder.tensorcore import r14_complex
    from tilemm.numerics.accuracy import compare_on_device
    assert r14_complex.one_launch(n, n, n) is one_launch
    g = torch.Generator(device="cuda").manual_seed(n)
    a, b = (torch.randn((n, n), dtype=torch.complex64, device="cuda", generator=g) for _ in range(2))
    c = tilemm.plan(a, b, kernel="tensorcore-complex").execute(poison=True)
    verdict = compare_on_device(c, a, b, "complex64")
    assert verdict.ok, verdict.message
