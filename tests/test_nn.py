"""tilemm.nn: Linear as a drop-in for torch.nn.Linear, swapping a model's Linears in place and back,
and a tiny transformer trained with tilemm's Linears and with torch's to the same losses."""
import contextlib
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import tilemm
import tilemm.torch.nn_products
from tilemm.nn import Linear, restore_linears, swap_linears


class Block(torch.nn.Module):
    """Pre-norm causal self-attention and an MLP, every projection an nn.Linear."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)
        self.q, self.k, self.v = (torch.nn.Linear(hidden, hidden, bias=False) for _ in range(3))
        self.o = torch.nn.Linear(hidden, hidden)
        self.up, self.down = torch.nn.Linear(hidden, 4 * hidden), torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        h = self.norm1(x)
        split = [p(h).unflatten(-1, (self.heads, -1)).transpose(1, 2) for p in (self.q, self.k, self.v)]
        attention = F.scaled_dot_product_attention(*split, is_causal=True)
        x = x + self.o(attention.transpose(1, 2).flatten(2))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyTransformer(torch.nn.Module):
    def __init__(self, vocab=50, hidden=64, layers=2, heads=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.blocks = torch.nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def train(model, steps: int, seed: int = 0, step_fn=None) -> list[float]:
    """Losses of `steps` AdamW steps of next-token prediction on one fixed batch of random tokens
    (the loss must fall)."""
    g = torch.Generator().manual_seed(seed)
    batch = torch.randint(0, 50, (4, 17), generator=g)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    forward = step_fn if step_fn is not None else model
    losses = []
    for _ in range(steps):
        logits = forward(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def tiny_model(dtype=torch.float64, seed=0) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer().to(dtype)


@pytest.mark.parametrize("kernel", [None, "cpu-tiled"])
def test_tiny_transformer_trains_to_torch_s_losses(kernel):
    """float64: the losses of 4 steps agree to 1e-10 relative (the products differ only in the
    order of their sums)."""
    theirs = train(tiny_model(), 4)
    model = tiny_model()
    swapped = swap_linears(model, kernel=kernel)
    assert len(swapped) == 2 * 6 + 1 and all(type(m) is Linear for m in model.modules() if
                                             isinstance(m, torch.nn.Linear))
    ours = train(model, 4)
    assert ours == pytest.approx(theirs, rel=1e-10) and ours[-1] < ours[0]


def test_linear_is_a_drop_in():
    """Same parameters, state_dict keys and initialization as torch.nn.Linear (same seed), the
    same outputs for 1-D, 2-D and 3-D inputs, and a state_dict loads both ways."""
    torch.manual_seed(1)
    theirs = torch.nn.Linear(5, 3, dtype=torch.float64)
    torch.manual_seed(1)
    ours = Linear(5, 3, dtype=torch.float64, kernel="cpu-tiled", block_m=16)
    assert isinstance(ours, torch.nn.Linear) and list(ours.state_dict()) == list(theirs.state_dict())
    assert all(torch.equal(p, q) for p, q in zip(ours.parameters(), theirs.parameters()))
    for shape in [(5,), (4, 5), (2, 3, 5), (0, 5)]:
        x = torch.randn(shape, dtype=torch.float64)
        assert torch.allclose(ours(x), theirs(x)) and ours(x).shape == theirs(x).shape
    no_bias = Linear(5, 3, bias=False)
    assert no_bias.bias is None and list(no_bias.state_dict()) == ["weight"]
    no_bias.load_state_dict({"weight": theirs.weight.float()})
    theirs.load_state_dict(ours.state_dict())
    assert "kernel='cpu-tiled'" in repr(ours) and "block_m=16" in repr(ours)


def test_linear_options_are_checked_before_any_product():
    with pytest.raises(TypeError, match="has no parameter 'tile'"):
        Linear(4, 4, kernel="cpu-tiled", tile=8)
    with pytest.raises(ValueError, match="unknown kernel"):
        Linear(4, 4, kernel="no-such-rung")
    with pytest.raises(TypeError, match="need a kernel named"):
        swap_linears(torch.nn.Linear(4, 4), block_m=16)


def test_out_dtype():
    layer = Linear(4, 3, out_dtype="float64")
    y = layer(torch.randn(2, 4))
    assert y.dtype == torch.float64
    y.sum().backward()
    assert layer.weight.grad.dtype == torch.float32


def test_swap_and_restore_in_place():
    """The same module objects and parameters (an optimizer built before keeps working), dtypes,
    devices and requires_grad kept; subclasses of nn.Linear left alone; and back."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2).double(),
                                torch.nn.MultiheadAttention(8, 2))
    model[0].weight.requires_grad_(False)
    before = list(model.modules())
    parameters = {name: (p, p.dtype, p.device, p.requires_grad) for name, p in model.named_parameters()}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert swap_linears(model, kernel="numpy") == ["0", "2"]
    assert type(model[3].out_proj) is not Linear                         # its own subclass of nn.Linear
    assert list(model.modules()) == before and type(model[0]) is Linear and model[2].kernel == "numpy"
    assert {name: (p, p.dtype, p.device, p.requires_grad) for name, p in model.named_parameters()} == parameters
    assert model.state_dict().keys() == state.keys()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model[2](model[1](model[0](torch.randn(3, 4))).double()).sum().backward()
    optimizer.step()
    assert model[0].weight.grad is None and model[2].weight.grad is not None
    assert restore_linears(model) == ["0", "2"]
    assert type(model[0]) is torch.nn.Linear and not hasattr(model[0], "kernel")
    assert list(model.modules()) == before


def test_transformers_llama_trains_to_torch_s_losses():
    """transformers' Llama (where installed), tiny, float64: the same losses both ways."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=50)

    def model():
        torch.manual_seed(0)
        return transformers.LlamaForCausalLM(config).double()
    theirs_model, ours_model = model(), model()
    theirs = train(theirs_model, 3, step_fn=lambda tokens: theirs_model(tokens).logits)
    swap_linears(ours_model)
    ours = train(ours_model, 3, step_fn=lambda tokens: ours_model(tokens).logits)
    assert ours == pytest.approx(theirs, rel=1e-10)


def test_tilemm_nn_is_reached_from_the_package():
    assert tilemm.nn.Linear is Linear and tilemm.torch.ops.MatmulFunction is not None


@pytest.mark.parametrize("kernel", [None, "cpu-tiled"])
@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 4, 5)])
def test_linear_gradients_match_torch_s_and_its_output_takes_in_place_ops(kernel, shape):
    """Linear's own autograd (tilemm.nn.LinearProduct): torch's gradients for 1-D, 2-D and 3-D inputs,
    an output that an in-place op may follow (no view of a custom Function's output), a double
    backward, and a module that still pickles once it has recorded its layouts."""
    torch.manual_seed(0)
    ours = Linear(5, 3, dtype=torch.float64, kernel=kernel)
    theirs = torch.nn.Linear(5, 3, dtype=torch.float64)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    grads = []
    for layer in (ours, theirs):
        y = layer(x)
        y.mul_(2)
        y.pow(2).sum().backward()
        grads.append((y.detach(), x.grad, layer.weight.grad, layer.bias.grad))
        x.grad = None
    for a, b in zip(*grads):
        assert a.shape == b.shape and torch.allclose(a, b)
    assert ours.weight.grad.is_contiguous()
    assert torch.autograd.gradgradcheck(lambda t: ours(t), (x,))
    assert ours.products.known and pickle.loads(pickle.dumps(ours)).products.known == {}


@pytest.mark.parametrize("kernel", [None, "cpu-tiled"])
def test_batched_gradients_of_a_linear_are_torch_s(kernel):
    """autograd's batched dY (is_grads_batched=True, jacobian(vectorize=True)) has no memory for
    tilemm's products: the layer's routes take torch's there (they failed in tilemm.matmul's
    checks: "Batching rule not implemented for aten::detach"), at its first and later calls."""
    torch.manual_seed(0)
    ours = Linear(5, 3, dtype=torch.float64, kernel=kernel)
    theirs = torch.nn.Linear(5, 3, dtype=torch.float64)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 4, 5, dtype=torch.float64)
    want = torch.autograd.functional.jacobian(theirs, x)
    for _ in range(3):
        got = torch.autograd.functional.jacobian(ours, x, vectorize=True)
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 4, 5), "strided"])
@pytest.mark.parametrize("reduced", [False, True])
def test_the_library_s_layouts_give_torch_s_values_and_gradients(shape, reduced, monkeypatch):
    """Where tilemm's plans are the library's (as on a GPU; here its repeated-call product on the
    CPU stands in): the forward is F.linear with tilemm's sums; once a backward has seen that both
    gradient products are the library's too, later forwards record torch's own nodes, and where
    torch's flags would allow reduced-precision sums, its backward products run with them off."""
    from tilemm.ladder import library
    monkeypatch.setattr(tilemm.nn.Products, "fast_product",
                        lambda self, a, b: library.torch_product(str(a.dtype).removeprefix("torch.")))
    # the CPU's products never read the flag, so that torch's backward would be seen to sum in
    # float32 under it (the next test): here, as where cuBLAS would reduce in 16 bits
    monkeypatch.setattr(tilemm.torch.nn_products, "same_with_flag", lambda *args, **kwargs: False)
    with flag_set(FLAG, reduced):
        check_library_layouts(shape, reduced, FLAG)


FLAG = "allow_bf16_reduced_precision_reduction"


@contextlib.contextmanager
def flag_set(flag: str, value: bool):
    """torch.backends.cuda.matmul.<flag> = value, put back after."""
    before = getattr(torch.backends.cuda.matmul, flag)
    setattr(torch.backends.cuda.matmul, flag, value)
    try:
        yield
    finally:
        setattr(torch.backends.cuda.matmul, flag, before)


def test_a_backward_seen_to_sum_in_float32_under_the_flag_runs_torch_s_nodes_as_they_are(monkeypatch):
    """Where torch's own backward is seen, on random operands laid out as the layer's, to give the
    same gradients bit for bit with the flag on as off (here always: the CPU's products don't read
    it), later training forwards record plain F.linear: no hooks, torch's flag at each backward
    product, torch's gradients."""
    from tilemm.ladder import library
    monkeypatch.setattr(tilemm.nn.Products, "fast_product",
                        lambda self, a, b: library.torch_product(str(a.dtype).removeprefix("torch.")))
    torch.manual_seed(0)
    ours = Linear(5, 3, dtype=torch.bfloat16)
    theirs = torch.nn.Linear(5, 3, dtype=torch.bfloat16)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 4, 5, dtype=torch.bfloat16, requires_grad=True)
    rng = torch.get_rng_state()
    with flag_set(FLAG, True):
        for step in range(3):
            grads = []
            for layer in (ours, theirs):
                y = layer(x)
                with FlagAtProducts(FLAG) as seen:
                    y.float().pow(2).sum().backward()
                grads.append((x.grad, layer.weight.grad, layer.bias.grad))
                x.grad = layer.weight.grad = layer.bias.grad = None
            layout = next(iter(ours.products.known.values()))
            assert layout.sums_seen == layout.get() == layout.plain_seen and layout.exact_now()
            if step:
                assert seen and all(seen)          # torch's flag as it is at ours' products too
                assert all(torch.equal(a, b) for a, b in zip(*grads))
        with flag_set(FLAG, False), flag_set(FLAG, True):     # the state seen, set again: still seen
            assert layout.exact_now()
    assert torch.equal(torch.get_rng_state(), rng)      # the random operands drawn from a generator of their own


class FlagReadingLinear(torch.autograd.Function):
    """F.linear whose weight gradient changes in its last bit where torch's flag allows
    reduced-precision sums: a product as cuBLAS makes it where it reduces in 16 bits."""

    @staticmethod
    def forward(ctx, x, w, bias=None):
        ctx.save_for_backward(x, w)
        y = torch.nn.functional.linear(x, w, bias)
        return torch.nextafter(y, torch.full_like(y, float("inf"))) if getattr(torch.backends.cuda.matmul, FLAG) else y

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        dw = grad.reshape(-1, grad.shape[-1]).mT @ x.reshape(-1, x.shape[-1])
        if getattr(torch.backends.cuda.matmul, FLAG):
            dw = torch.nextafter(dw, torch.full_like(dw, float("inf")))
        return grad @ w, dw, None


@pytest.mark.parametrize("gradients", [False, True])
@pytest.mark.parametrize("reads_flag", [False, True])
def test_same_with_flag_sees_a_product_that_reads_the_flag(reads_flag, gradients, monkeypatch):
    from tilemm.ladder import library
    if reads_flag:
        monkeypatch.setattr(tilemm.torch.linear_flags, "linear", FlagReadingLinear.apply)
    get, put = library.exact_sums_flag("bfloat16")
    x = torch.randn(3, 4, 5, dtype=torch.bfloat16).transpose(0, 1)
    w, bias = torch.randn(2, 5, dtype=torch.bfloat16), torch.randn(2, dtype=torch.bfloat16)
    with flag_set(FLAG, True):
        assert tilemm.torch.linear_flags.same_with_flag(x, w, bias, get, put, gradients=gradients) is not reads_flag
        assert getattr(torch.backends.cuda.matmul, FLAG) is True      # put back


@pytest.mark.parametrize("seen", [False, True])
def test_a_forward_turns_the_flag_off_unless_f_linear_was_seen_to_sum_in_float32(seen, monkeypatch):
    """F.linear runs with torch's flag as it is where it was seen to give the same values with it
    on as off for the layer's layout, else with the flag off for the call (and put back)."""
    from tilemm.ladder import library
    monkeypatch.setattr(tilemm.nn.Products, "fast_product",
                        lambda self, a, b: library.torch_product(str(a.dtype).removeprefix("torch.")))
    if not seen:
        monkeypatch.setattr(tilemm.torch.nn_products, "same_with_flag", lambda *args, **kwargs: False)
    layer = Linear(5, 3, dtype=torch.bfloat16)
    x = torch.randn(2, 4, 5, dtype=torch.bfloat16)
    with flag_set(FLAG, True), torch.no_grad():
        layer(x)
        with FlagAtProducts(FLAG) as flags:
            y = layer(x)
        assert flags == [seen] and getattr(torch.backends.cuda.matmul, FLAG) is True
        assert torch.equal(y, F.linear(x, layer.weight, layer.bias))


def check_library_layouts(shape, reduced: bool, flag: str):
    torch.manual_seed(0)
    ours = Linear(5, 3, dtype=torch.bfloat16)
    theirs = torch.nn.Linear(5, 3, dtype=torch.bfloat16)
    theirs.load_state_dict(ours.state_dict())
    if shape == "strided":      # rows that are no view of one matrix (F.linear's graph adds the bias apart)
        x = torch.randn(2, 4, 5, dtype=torch.bfloat16).transpose(0, 1).detach().requires_grad_()
    else:
        x = torch.randn(shape, dtype=torch.bfloat16, requires_grad=True)
    for step in range(3):
        results, flags = [], []
        for layer in (ours, theirs):
            y = layer(x)
            with FlagAtProducts(flag) as seen:
                y.float().pow(2).sum().backward()
            flags.append(seen)
            results.append((y.detach(), x.grad, layer.weight.grad, layer.bias.grad, y.grad_fn))
            x.grad = layer.weight.grad = layer.bias.grad = None
        for a, b in zip(results[0][:4], results[1][:4]):    # (torch adds the bias before rounding)
            assert a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=2e-2, atol=2e-2)
        layout = next(iter(ours.products.known.values()))
        assert layout.linear is not None and layout.grads
        # the first backward is ours (it learns the gradients' plans), later ones torch's own nodes
        nodes = [results[0][4]] + [f for f, _ in results[0][4].next_functions if f is not None]
        assert any(type(node).__name__ == "LinearProductBackward" for node in nodes) == (step == 0)
        assert flags[0] and not any(flags[0])       # tilemm's gradient products: float32 sums
        assert flags[1] and all(value == reduced for value in flags[1])     # torch's: its flag
        assert getattr(torch.backends.cuda.matmul, flag) is reduced
    with torch.no_grad():
        assert torch.allclose(ours(x).double(), theirs(x).double(), rtol=2e-2, atol=2e-2)


class FlagAtProducts(TorchDispatchMode):
    """The value of torch's matmul flag `flag` at each product (mm, addmm, matmul) run under it."""
    PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::mv")

    def __init__(self, flag: str):
        super().__init__()
        self.flag, self.seen = flag, []

    def __enter__(self):
        super().__enter__()
        return self.seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in self.PRODUCTS:
            self.seen.append(getattr(torch.backends.cuda.matmul, self.flag))
        return func(*args, **(kwargs or {}))


def test_a_layout_is_planned_for_operands_that_require_grad(monkeypatch):
    """A training forward's layout is planned (tilemm.plans.checks) with grad mode off (a plan
    refuses operands that would record a gradient, which would leave every training call on the
    slow path)."""
    seen = []
    plan = tilemm.plans.checks.check

    def spy(a, b, **options):
        seen.append(torch.is_grad_enabled())
        return plan(a, b, **options)
    monkeypatch.setattr(tilemm.plans.checks, "check", spy)
    layer = Linear(5, 3, dtype=torch.float64)
    x = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    layer(x).sum().backward()
    assert seen and not any(seen)


def test_a_library_layout_is_looked_up_again_once_the_weight_changes(monkeypatch):
    """The shortest look-up (Products.library: the input's shape, strides and dtype) is cleared
    where the weight's device, dtype or strides may change: Module._apply (.to, .half, ...) and a
    new parameter; the answers stay F.linear's."""
    from tilemm.ladder import library
    monkeypatch.setattr(tilemm.nn.Products, "fast_product",
                        lambda self, a, b: library.torch_product(str(a.dtype).removeprefix("torch.")))
    layer = Linear(5, 3, dtype=torch.bfloat16)
    x = torch.randn(2, 5, dtype=torch.bfloat16)
    layer(x)
    assert list(layer.products.library) == [(x.shape, x.stride(), x.dtype)]
    layer.to(torch.float32)
    assert layer.products.library == {}
    assert torch.equal(layer(x.float()), F.linear(x.float(), layer.weight, layer.bias)) and layer.products.library
    layer.weight = torch.nn.Parameter(torch.randn(4, 5))
    layer.bias = None
    assert layer.products.library == {}
    assert torch.equal(layer(x.float()), F.linear(x.float(), layer.weight))
    restored = pickle.loads(pickle.dumps(layer))
    assert restored.products.library == {} and torch.equal(restored(x.float()), layer(x.float()))


def test_the_shortest_path_reads_the_weight_as_the_module_gives_it(monkeypatch):
    """A library layout's later calls read the weight and bias the module holds at the call: a
    parametrization's and pruning's (attributes, not parameters), and torch.func.functional_call's."""
    from torch.nn.utils import parametrize, prune

    from tilemm.ladder import library
    monkeypatch.setattr(tilemm.nn.Products, "fast_product",
                        lambda self, a, b: library.torch_product(str(a.dtype).removeprefix("torch.")))
    torch.manual_seed(0)
    x = torch.randn(2, 5)

    class Doubled(torch.nn.Module):
        def forward(self, w):
            return 2 * w

    layer = Linear(5, 3)
    layer(x)
    weights = {"weight": torch.randn(3, 5), "bias": torch.randn(3)}
    assert torch.equal(torch.func.functional_call(layer, weights, (x,)), F.linear(x, weights["weight"], weights["bias"]))
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
    parametrize.register_parametrization(layer, "weight", Doubled())
    layer(x)
    assert torch.equal(layer(x), F.linear(x, 2 * layer.parametrizations.weight.original, layer.bias))
    pruned = Linear(5, 3)
    pruned(x)
    prune.l1_unstructured(pruned, "bias", amount=0.5)
    pruned(x)
    assert torch.equal(pruned(x), F.linear(x, pruned.weight, pruned.bias_orig * pruned.bias_mask))


@pytest.mark.parametrize("kernel", [None, "tensorcore"])
def test_a_bias_of_another_dtype_is_refused_as_torch_refuses_it(kernel):
    """torch's Linear raises where the bias's dtype is not the weight's; tilemm's layer too, on its
    first call and after its layout's route is kept, rather than promoting the result."""
    layer = tilemm.nn.Linear(8, 4, dtype=torch.bfloat16, kernel=kernel)
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    layer(x), layer(x)                                   # a route kept with the bfloat16 bias
    layer.bias = torch.nn.Parameter(torch.zeros(4))      # float32
    for _ in range(2):
        with pytest.raises(RuntimeError, match="bias is torch.float32"):
            layer(x)
