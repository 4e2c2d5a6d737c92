"""tilemm.engine.jit_repeats: an eager Triton launch made again through the launcher of an
earlier launch of the same key. The key must tell apart every argument Triton specializes
differently (a silent wrong answer otherwise); on the host the launches are a stand-in program's."""
import pytest

torch = pytest.importorskip("torch")

from tilemm.engine import jit_repeats  # noqa: E402


def test_the_key_tells_apart_what_triton_specializes():
    x = torch.zeros(64)
    part = jit_repeats.part
    assert part(x) == part(torch.ones(64))                   # other values, same specialization
    assert part(x) != part(x[1:])                            # 16-byte alignment
    assert part(x) != part(x.double())                       # dtype
    assert part(1) != part(True) and part(1) != part(1.0)    # int, bool and float of one value
    assert part(16) != part(32) and part(None) == part(None)
    assert part("ieee") != part(None)
    with pytest.raises(jit_repeats.NotKeyed):
        part(object())


def test_a_host_descriptor_is_keyed_by_base_shape_strides_and_block():
    descriptors = pytest.importorskip("triton.tools.tensor_descriptor")
    t = torch.zeros(64, 64)
    d = descriptors.TensorDescriptor.from_tensor(t, [16, 32])
    part = jit_repeats.part
    assert part(d) == part(descriptors.TensorDescriptor.from_tensor(torch.ones(64, 64), [16, 32]))
    assert part(d) != part(descriptors.TensorDescriptor.from_tensor(t, [32, 32]))
    assert part(d) != part(descriptors.TensorDescriptor.from_tensor(torch.zeros(128, 64), [16, 32]))


def kernel(x_ptr, n, scale, BLOCK: int = 16, MODE: str = "a"):
    """A stand-in program's signature."""


class Program:
    """A stand-in for a Triton JIT program: program[grid](*args, **options) launches (and is
    recorded); what it returns stands for the compiled program."""
    fn = staticmethod(kernel)

    def __init__(self):
        self.jit, self.direct = [], []

    def __getitem__(self, grid):
        def run(*args, **options):
            self.jit.append((grid, args, options))
            return self
        return run


@pytest.fixture
def stand_in(monkeypatch):
    program = Program()
    monkeypatch.setattr(jit_repeats.compat, "triton_interpreter", lambda: False)
    monkeypatch.setattr(jit_repeats, "current_device", lambda: 0)
    monkeypatch.setattr(jit_repeats, "direct_runner", lambda compiled, grid3, runner: None)
    monkeypatch.setattr(jit_repeats, "REPEATS", {})
    return program


def test_a_repeated_key_calls_the_launcher_with_every_argument_in_order(stand_in, monkeypatch):
    program = stand_in
    compiled_calls = []

    class Compiled:
        def __getitem__(self, grid3):
            return lambda *values, stream=None: compiled_calls.append((grid3, values))

    def jit(grid):
        def run(*args, **options):
            program.jit.append((grid, args, options))
            return Compiled()
        return run
    monkeypatch.setattr(Program, "__getitem__", lambda self, grid: jit(grid))
    x, y = torch.zeros(64), torch.ones(64)
    jit_repeats.launch(program, (4,), (x, 64, 0.5), dict(BLOCK=32, num_warps=4))
    assert len(program.jit) == 1 and not compiled_calls          # the first launch: Triton's JIT
    jit_repeats.launch(program, (4,), (y, 64, 0.5), dict(BLOCK=32, num_warps=4))
    assert len(program.jit) == 1
    assert compiled_calls == [((4, 1, 1), (y, 64, 0.5, 32, "a"))]   # defaults filled, num_warps not an argument
    for args, options in [((x[1:], 64, 0.5), dict(BLOCK=32, num_warps=4)),      # misaligned
                          ((y, 63, 0.5), dict(BLOCK=32, num_warps=4)),          # another int
                          ((y, 64, 0.5), dict(BLOCK=16, num_warps=4)),          # another constexpr
                          ((y, 64, 0.5), dict(BLOCK=32, num_warps=8))]:         # another launch option
        jit_repeats.launch(program, (4,), args, options)
    assert len(program.jit) == 5 and len(compiled_calls) == 1
    jit_repeats.launch(program, (8,), (y, 64, 0.5), dict(BLOCK=32, num_warps=4))   # another grid
    assert len(program.jit) == 6
    monkeypatch.setattr(jit_repeats, "current_device", lambda: 1)                   # another device current
    jit_repeats.launch(program, (4,), (y, 64, 0.5), dict(BLOCK=32, num_warps=4))
    assert len(program.jit) == 7 and len(compiled_calls) == 1


def test_an_argument_not_described_launches_through_the_jit(stand_in):
    program = stand_in
    for _ in range(2):
        jit_repeats.launch(program, (4,), (object(), 64, 0.5), {})
    assert len(program.jit) == 2 and not program.direct


def test_the_signature_order_names_a_missing_argument():
    with pytest.raises(TypeError, match="no value for scale"):
        jit_repeats.in_signature_order(Program(), 2, ("BLOCK",))
    order = jit_repeats.in_signature_order(Program(), 2, ("scale", "num_warps"))
    assert order((1, 2), {"scale": 0.5, "num_warps": 4}) == (1, 2, 0.5, 16, "a")
