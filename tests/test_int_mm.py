"""int8 x int8 -> int32 through torch._int_mm (tilemm.ladder.int_mm) in the library rung: the default
keeps tensorcore-int for int8 products into int32 in every layout (its small-M program's kernel
and call measured no slower than the library's), and nothing changes for other dtypes; the
library's products are exact (on the CPU through torch's own _int_mm, which takes the same sizes)."""
import dataclasses

import pytest

from tilemm.choose import by_shape as choice, default as dispatch
from tilemm.ladder import record as kernel_record, registry
from tilemm.system import machine
from tilemm.engine import availability, streams
from tilemm.ladder import int_mm

torch = pytest.importorskip("torch")

H200_SMS = 132


@pytest.fixture
def hopper_with_library(monkeypatch):
    """What the default sees on an H200: the int8 table's GPU, its SMs, the library rung running,
    in a process that has loaded Triton (the table's choice, not the first call's library)."""
    monkeypatch.setattr(choice, "capability", lambda: (9, 0))
    monkeypatch.setattr(availability, "triton_loaded", lambda: True)
    monkeypatch.setattr(machine, "gpu", lambda: dataclasses.replace(machine.H100, sms=H200_SMS))
    library = registry.get("cublas")
    monkeypatch.setitem(kernel_record.LADDER, "cublas", dataclasses.replace(library, available=lambda: None,
                                                                        limits=lambda problem: None))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a host without CUDA")
def test_no_cuda_no_library(hopper_with_library):
    """Here torch has no CUDA: _int_mm can't run, and the default keeps tensorcore-int."""
    assert int_mm.why_not(64, 4096, 4096) is not None
    assert dispatch.default_kernel("cuda:0", "int32", 64, 4096, 4096, "int8").name == "tensorcore-int"


def test_the_default_keeps_the_rung_for_int8_into_int32(hopper_with_library, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def default(m, n, k, result="int32", operands="int8", stacked=False, b_rows=False):
        return dispatch.default_kernel("cuda:0", result, m, n, k, operands, stacked=stacked, b_rows=b_rows).name
    for m in (17, 64, 512):
        assert default(m, 2048, 2048) == "tensorcore-int"              # a small weight too
    assert default(1, 3584, 18944) == "tensorcore-int"
    assert default(100, 28672, 4096) == "tensorcore-int"
    assert default(1, 2048, 2048) == "tensorcore-int"
    assert default(64, 2048, 2048, b_rows=True) == "tensorcore-int"
    assert default(64, 2040, 2048) == "tensorcore-int"
    assert default(64, 2044, 2048) == "tensorcore-int"                      # N not a multiple of 8
    assert default(64, 2048, 2044) == "tensorcore-int"                      # nor K
    assert default(64, 2048, 2048, result="int64") == "tensorcore-int"
    assert default(64, 2048, 2048, result="int8") == "tensorcore-int"       # int8 results keep the rung
    assert default(64, 2048, 2048, operands="int16") == "tensorcore-int"
    assert default(4096, 4096, 4096, stacked=True) == "tensorcore-int"      # a stack: the rule for stacks
    monkeypatch.setitem(kernel_record.LADDER, "cublas", dataclasses.replace(
        registry.get("cublas"), limits=lambda problem: "no CuPy"))
    assert default(64, 2048, 2048) == "tensorcore-int"                     # the library refuses: the rung


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64", "int32", "int64", "complex64"])
def test_other_dtypes_choose_as_before(hopper_with_library, monkeypatch, dtype):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for shape in [(64, 4096, 4096), (1, 3584, 18944), (6175, 3136, 3462)]:
        assert (dispatch.default_kernel("cuda:0", dtype, *shape, dtype, b_rows=True).name
                == dispatch.default_kernel("cuda:0", dtype, *shape, dtype).name)


def test_host_operands_keep_their_kernels():
    import tilemm
    a = torch.randint(-128, 128, (64, 256), dtype=torch.int8)
    b = torch.randint(-128, 128, (96, 256), dtype=torch.int8).T
    checked = tilemm.plan(a, b, out_dtype="int32")
    assert checked.kernel.name in ("numpy", "cpu-tiled") and checked.fast is None
    # (numpy, or cpu-tiled once this process has compiled it: the host's rule, not int8's)
    assert (dispatch.default_kernel("cpu", "int32", 64, 96, 256, "int8", b_rows=True).name
            == dispatch.default_kernel("cpu", "int32", 64, 96, 256).name)


def test_k_major_is_rows_of_a_and_columns_of_b():
    a = torch.empty(40, 64, dtype=torch.int8)
    bt = torch.empty(48, 64, dtype=torch.int8)
    assert int_mm.k_major(a, bt.T)
    assert not int_mm.k_major(a, bt.T.contiguous())                    # B row-major
    assert not int_mm.k_major(a.T.contiguous().T, bt.T)                # A column-major
    assert not int_mm.k_major(torch.empty(40, 68, dtype=torch.int8)[:, :64], bt.T)   # rows of 68: not whole 8s


def test_takes_only_int8_cuda_matrices_into_int32(monkeypatch):
    a, b, c = torch.zeros(40, 64, dtype=torch.int8), torch.zeros(48, 64, dtype=torch.int8).T, torch.empty(40, 48, dtype=torch.int32)
    assert not int_mm.takes(a, b, c)                                          # CPU tensors
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda x: True))     # as if on the GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert int_mm.takes(a, b, c)
    assert not int_mm.takes(a.short(), b.short(), c)                          # int16
    assert not int_mm.takes(a, b, c.long())                                   # an int64 C
    assert not int_mm.takes(a[None], b[None], c[None])                        # a stack
    assert not int_mm.takes(a, b, torch.empty(48, 40, dtype=torch.int32).T)   # C not contiguous
    assert not int_mm.takes(a[:, :60], b[:60], c)                             # K = 60


@pytest.fixture
def int_mm_on_the_cpu(monkeypatch):
    """torch's CPU _int_mm takes int8 products as the CUDA one does: the library's path runs here."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(streams, "capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: type("S", (), {"synchronize": lambda s: None})())


def layouts(m, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    bt = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    return {"nt": (a, bt.T), "nn": (a, bt.T.contiguous()), "tt": (a.T.contiguous().T, bt.T),
            "A strided": (torch.cat([a, a], 1)[:, ::2], bt.T.contiguous())}


@pytest.mark.parametrize("m", [1, 5, 16, 17, 40])
def test_the_library_path_is_exact(int_mm_on_the_cpu, m):
    for name, (a, b) in layouts(m, 24, 64, m).items():
        expected = a.long() @ b.long()
        c = torch.empty(m, 24, dtype=torch.int32)
        int_mm.run(a, b, c)
        assert torch.equal(c.long(), expected), name
        fast = int_mm.product(a, b)
        assert torch.equal(fast(a, b).long(), expected), name
        assert fast(a, b).shape == (m, 24) and fast(a, b).dtype == torch.int32


def test_int_mm_is_given_its_fast_layout_alone(int_mm_on_the_cpu, monkeypatch):
    """A's rows and B's columns contiguous in every call (cuBLASLt refused 40 x 48 x 64 with B
    row-major on the H200): operands in other layouts are copied first."""
    real, seen = torch._int_mm, []

    def recording(a, b, **out):
        seen.append(a.stride(-1) == 1 and b.stride(-2) == 1)
        return real(a, b, **out)
    monkeypatch.setattr(torch, "_int_mm", recording)
    for m in (5, 40):
        for name, (a, b) in layouts(m, 48, 64, m).items():
            int_mm.run(a, b, torch.empty(m, 48, dtype=torch.int32))
            int_mm.product(a, b)(a, b)
    assert seen and all(seen)


def test_product_refuses_sizes_int_mm_does_not_take(int_mm_on_the_cpu):
    a = torch.zeros(40, 60, dtype=torch.int8)
    assert int_mm.product(a, torch.zeros(60, 48, dtype=torch.int8)) is None       # K = 60
    assert int_mm.product(torch.zeros(40, 64, dtype=torch.int8), torch.zeros(64, 44, dtype=torch.int8)) is None
    assert "multiples of 8" in int_mm.why_not(40, 44, 64)


def test_the_library_rung_takes_other_narrow_operands(int_mm_on_the_cpu):
    """run_cublas takes narrow integer operands as they are (narrow_operands): int8 into int32 goes
    to _int_mm where it takes them, anything else to float64 digits (tilemm.ladder.int_dgemm)."""
    from tilemm.ladder import library
    assert registry.get("cublas").narrow_operands
    g = torch.Generator().manual_seed(3)
    for a_dtype, c_dtype, (m, n, k) in [(torch.int8, torch.int32, (40, 24, 64)), (torch.int8, torch.int32, (40, 20, 60)),
                                          (torch.int16, torch.int32, (40, 24, 64)), (torch.int8, torch.int64, (9, 24, 64))]:
        a = torch.randint(-100, 100, (m, k), dtype=a_dtype, generator=g)
        b = torch.randint(-100, 100, (k, n), dtype=a_dtype, generator=g)
        c = torch.empty(m, n, dtype=c_dtype)
        library.run_cublas(a, b, c)
        assert torch.equal(c.long(), a.long() @ b.long()), (a_dtype, c_dtype, (m, n, k))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16, 17, 100])
def test_the_default_is_exact_on_the_gpu(m):
    import tilemm
    for name, (a, b) in layouts(m, 1024, 8192, m).items():
        a, b = a.cuda(), b.cuda()
        for kernel in (None, "cublas"):
            for _ in range(2):          # the plan's path, then a repeated call's
                c = tilemm.matmul(a, b, out_dtype="int32", kernel=kernel)
                assert c.dtype == torch.int32 and torch.equal(c.double(), a.double() @ b.double()), (name, kernel)


@pytest.mark.gpu
@pytest.mark.parametrize("out_dtype", [None, "int32", "int64"])
def test_the_library_rung_on_small_int8_products_on_the_gpu(out_dtype):
    """Small sizes in every layout (cuBLASLt refused 40 x 48 x 64 with B row-major), into int8
    (wrapped), int32 and int64."""
    import tilemm
    for m in (5, 40):
        for name, (a, b) in layouts(m, 48, 64, m).items():
            a, b = a.cuda(), b.cuda()
            c = tilemm.matmul(a, b, out_dtype=out_dtype, kernel="cublas")
            expected = (a.long().cpu() @ b.long().cpu()).to(c.dtype)         # NumPy's wrap for int8
            assert torch.equal(c.cpu(), expected), (name, out_dtype)
