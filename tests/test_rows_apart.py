"""Rows past the last multiple of 128 run apart (a sliver) in the fused-epilogue product: the rule
(tile_model.sliver_rows) and the answer against float64: eager and bound, two launches (the TMA
program's and the pointer program's); traced (inside a compiled graph), one launch of the TMA
program that sums the sliver too, on the whole tensors (no view past its storage's start);
and a product of a few rows whole in the slivers' thin tiles."""
import pytest
import torch

from tilemm.engine import availability, epilogue_launch, tile_model
from tilemm.engine.epilogue_launch import bound_epilogue, config_for
from tilemm.engine.launches import Steps
from tilemm.products import fused

from .test_epilogue import DEVICE, TOLERANCE, reference, relative, tma_operands


@pytest.fixture
def h200(monkeypatch):
    monkeypatch.setattr(availability, "multiprocessors", lambda: 132)


@pytest.mark.parametrize("shape, rows", [
    ((2052, 2048, 5632), 4),       # 17 block rows of 128 x 128 (3 rounds) against 16 of 128 x 256 (one) and 4 rows
    ((2052, 2048, 2048), 4),
    ((2060, 2048, 32000), 12),
    ((2048, 2048, 5632), 0),       # no rows past a multiple of 128
    ((2052, 5632, 2048), 0),       # the rest's 128 x 256 tiles take three rounds either way
    ((2100, 2048, 5632), 0),       # 52 rows past: more than a sliver
    ((132, 2048, 5632), 0),        # a single block row
])
def test_the_rows_apart_where_predicted_faster(shape, rows, h200):
    assert tile_model.sliver_rows(*shape) == rows


def test_an_eager_launch_goes_apart_only_where_its_cpu_time_is_saved(h200):
    """Through Triton's JIT a second launch costs about EAGER_LAUNCH_US of the CPU's time."""
    saving = tile_model.EAGER_LAUNCH_US
    assert tile_model.sliver_rows(2052, 2048, 32000, saving_us=saving) == 4      # an LM head's dX: ~190 µs saved
    assert tile_model.sliver_rows(2052, 2048, 2048, saving_us=saving) == 0


def launches_taken(monkeypatch):
    """[(program, rows)] of each launch made or bound: "tma" or "pointers", and A's rows; for the
    TMA program's launch with a sliver, ("tma", rows, the sliver's rows)."""
    from tilemm.engine import epilogue_tma_launch
    taken, tma_arguments, pointer_arguments = [], epilogue_tma_launch.arguments, epilogue_launch.pointer_arguments

    def tma_spy(a_rows, a_t, *rest, **kw):
        sliver = kw.get("sliver")
        taken.append(("tma", a_rows.shape[1] if a_t else a_rows.shape[0], *((sliver["rows"],) if sliver else ())))
        return tma_arguments(a_rows, a_t, *rest, **kw)

    def pointer_spy(a, *rest, **kw):
        taken.append(("pointers", a.shape[0]))
        return pointer_arguments(a, *rest, **kw)
    monkeypatch.setattr(epilogue_tma_launch, "arguments", tma_spy)
    monkeypatch.setattr(epilogue_launch, "pointer_arguments", pointer_spy)
    return taken


@pytest.fixture
def three_rows_apart(monkeypatch):
    """131 rows: 128 by the TMA program in its own tiles, the last 3 apart."""
    monkeypatch.setattr(epilogue_launch, "sliver_rows", lambda m, n, k, saving_us=0.0: 3 if m == 131 else 0)
    monkeypatch.setattr(epilogue_launch, "large_enough", lambda m, n, k: True)
    return launches_taken(monkeypatch)


def cut(traced: bool, m: int, rest: int) -> list:
    """launches_taken's record of a product of m rows whose last `rest` run apart: two launches,
    or where traced the TMA program's one with the sliver."""
    return [("tma", m, rest)] if traced else [("tma", m - rest), ("pointers", rest)]


def traced_if(traced: bool):
    """fused.forward's wrap: a stand-in for torch.library.wrap_triton (the program itself) where traced."""
    return (lambda program: program) if traced else None


@pytest.mark.parametrize("bias_over_m", [False, True])
@pytest.mark.parametrize("traced", [False, True])
def test_the_sliver_s_epilogue_against_float64(bias_over_m, traced, three_rows_apart):
    """Every operand of the epilogue given (bias over N or over M), AUX saved: Y and AUX within a
    rounding of bfloat16, from the TMA program's 128 rows and the pointer program's 3 (eager), or
    where traced from one launch of the TMA program on the whole, the 3 rows in its thin tiles:
    inside a compiled graph no launch writes a view that starts past its storage's first element
    (Inductor up to torch 2.11 reads such a view's copy past its end)."""
    a, b, bias_n, bias_m, c, residual = tma_operands(131, 80, 48, torch.bfloat16, seed=3)
    bias = bias_m if bias_over_m else bias_n
    y, aux = fused.forward(a, b, bias, bias_over_m, c, residual, "silu", 0.5, 2.0, fused.TRITON,
                           config_for(torch.bfloat16), True, wrap=traced_if(traced))
    ref_y, ref_z = reference(a, b, bias, bias_over_m, c, residual, "silu", 0.5, 2.0)
    assert three_rows_apart == cut(traced, 131, 3)
    assert relative(y, ref_y) <= TOLERANCE[torch.bfloat16] and relative(aux, ref_z) <= TOLERANCE[torch.bfloat16]
    assert relative(y[128:], ref_y[128:]) <= TOLERANCE[torch.bfloat16]
    assert relative(aux[128:], ref_z[128:]) <= TOLERANCE[torch.bfloat16]


def mutated_views(monkeypatch) -> list:
    """[(program, name, storage offset)] of each Y or AUX a launch is given (made or bound) that
    starts past its storage's first element."""
    from tilemm.engine import epilogue_tma_launch
    found, tma_arguments, pointer_arguments = [], epilogue_tma_launch.arguments, epilogue_launch.pointer_arguments

    def record(program, y, aux):
        found.extend((program, name, t.storage_offset()) for name, t in (("Y", y), ("AUX", aux))
                     if t is not None and t.storage_offset() != 0)

    def tma_spy(a_rows, a_t, b_rows, b_t, y, aux, *rest, **kw):
        record("tma", y, aux)
        return tma_arguments(a_rows, a_t, b_rows, b_t, y, aux, *rest, **kw)

    def pointer_spy(a, b, y, aux, *rest, **kw):
        record("pointers", y, aux)
        return pointer_arguments(a, b, y, aux, *rest, **kw)
    monkeypatch.setattr(epilogue_tma_launch, "arguments", tma_spy)
    monkeypatch.setattr(epilogue_launch, "pointer_arguments", pointer_spy)
    return found


@pytest.mark.parametrize("traced", [False, True])
def test_a_traced_call_mutates_no_view_past_its_storage_s_start(traced, monkeypatch):
    """Inside a compiled graph (traced) no launch is given a Y or AUX that starts past its
    storage's first element, the rows cut or not (the whole product, and its dX's shape); an
    eager call's sliver is such a view (the spy sees what it must)."""
    monkeypatch.setattr(epilogue_launch, "sliver_rows", lambda m, n, k, saving_us=0.0: 3 if m == 131 else 0)
    monkeypatch.setattr(epilogue_launch, "large_enough", lambda m, n, k: True)
    views = mutated_views(monkeypatch)
    a, b, bias, _, _, residual = tma_operands(131, 80, 48, torch.bfloat16, seed=6)
    y, aux = fused.forward(a, b, bias, False, None, residual, "gelu", 1.0, 0.0, fused.TRITON,
                           config_for(torch.bfloat16), True, wrap=traced_if(traced))
    assert relative(y, reference(a, b, bias, False, None, residual, "gelu", 1.0, 0.0)[0]) <= TOLERANCE[torch.bfloat16]
    assert views == ([] if traced else [("pointers", "Y", 128 * 80), ("pointers", "AUX", 128 * 80)])


def test_a_bound_sliver_is_two_steps(three_rows_apart):
    """bound_epilogue gives the two launches as Steps, which write the whole of Y."""
    a, b, bias, _, _, _ = tma_operands(131, 80, 48, torch.bfloat16, seed=4)
    y = torch.full((131, 80), float("nan"), dtype=torch.bfloat16, device=a.device)
    bound = bound_epilogue(a, b, y, None, bias, False, None, None, "gelu", 1.0, 0.0, config_for(torch.bfloat16))
    assert isinstance(bound, Steps) and len(bound.launches) == 2
    bound()
    assert three_rows_apart == cut(False, 131, 3)
    assert relative(y, reference(a, b, bias, False, None, None, "gelu", 1.0, 0.0)[0]) <= TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("traced", [False, True])
def test_tiles_named_or_tma_forced_keep_one_launch(traced, three_rows_apart):
    """The caller's tiles, or tma=True, are the caller's: the product is launched whole, with no
    sliver, eager or traced."""
    a, b, bias, _, _, _ = tma_operands(131, 80, 48, torch.bfloat16, seed=5)
    for params in (dict(block_m=64, block_n=64, block_k=16), dict(tma=True)):
        three_rows_apart.clear()
        y, _ = fused.forward(a, b, bias, False, None, None, "relu", 1.0, 0.0, fused.TRITON,
                             config_for(torch.bfloat16, params), False, wrap=traced_if(traced))
        assert three_rows_apart == [("tma", 131)]
        assert relative(y, reference(a, b, bias, False, None, None, "relu", 1.0, 0.0)[0]) <= TOLERANCE[torch.bfloat16]


def test_a_linear_s_route_replays_both_launches(three_rows_apart, monkeypatch):
    """tilemm.nn.Linear at 131 rows: its route replays the two launches of each product whose rows
    are cut (inference's and training's forward, dX) on new operands, through a stand-in C
    launcher on the host: the same bits as tilemm.linear's path, call after call."""
    from .interpreted_replays import replayed_on_the_host
    from .test_nn_fused_routes import fused_linear, same, the_route, today, train_both
    c_launches = replayed_on_the_host(monkeypatch)
    layer = fused_linear(48, 80, "gelu", torch.bfloat16, {})
    for _ in range(3):
        x = torch.randn(131, 48, device=DEVICE, dtype=torch.bfloat16)
        grad = torch.randn(131, 80, device=DEVICE, dtype=torch.bfloat16)
        with torch.no_grad():
            assert same([layer(x)], [today(layer, x)])
        assert same(*train_both(layer, x, grad))
    from tilemm.engine.replay import Replay
    assert ("pointers", 3) in three_rows_apart and not any(len(taken) == 3 for taken in three_rows_apart)
    assert isinstance(the_route(layer, x).forward_fast, Replay)     # two launches: the replay itself, no quick call
    assert len(c_launches) >= 4                                     # two replayed calls of both launches at least


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["silu", "identity"])
def test_on_the_gpu_a_ragged_linear_runs_its_last_rows_apart(activation, monkeypatch):
    """4 sequences of 513 tokens through a 2048 -> 5632 Linear: forward and dX (2052 rows) run the
    last 4 rows apart, replayed call after call: the bits of tilemm.linear's path, and within a
    rounding of bfloat16 of float32's product."""
    from .test_nn_fused_routes import same, today, train_both
    import tilemm.nn
    taken = launches_taken(monkeypatch)
    torch.manual_seed(0)
    layer = tilemm.nn.Linear(2048, 5632, kernel="tensorcore", activation=activation, device="cuda",
                             dtype=torch.bfloat16)
    for _ in range(3):
        x = torch.randn(4, 513, 2048, device="cuda", dtype=torch.bfloat16)
        grad = torch.randn(4, 513, 5632, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            y = layer(x)
            assert same([y], [today(layer, x)])
        assert same(*train_both(layer, x, grad))
    z = torch.nn.functional.linear(x.float(), layer.weight.float(), layer.bias.float())
    want = torch.nn.functional.silu(z) if activation == "silu" else z
    assert relative(y, want) <= TOLERANCE[torch.bfloat16]
    assert ("pointers", 4) in taken and ("tma", 2048) in taken



@pytest.mark.parametrize("rows, block_m, block_n, block_k, split", [
    (1, 16, 16, 512, 8), (16, 16, 16, 512, 8), (17, 32, 16, 512, 8), (64, 64, 16, 256, 0)])
def test_a_few_rows_take_thin_tiles_that_spread_b_over_the_sms(rows, block_m, block_n, block_k, split, h200):
    """A 16-bit product of 64 rows or fewer (the pointer program's) whose caller named no tile:
    one launch in thin tiles, one row of them (B read once), as many columns as fill the SMs
    (2048 / 16 = 128 programs), where 64 columns a program fill them, each K step in 8 parts in
    tiles of 512 elements or fewer (THIN_PARTS); with a tile parameter named, the configuration as
    given."""
    a, b = torch.ones(rows, 64, dtype=torch.float16), torch.ones(64, 2048, dtype=torch.float16)
    y = torch.empty(rows, 2048, dtype=torch.float16)
    (part,) = epilogue_launch.row_parts(a, b, y, None, None, False, None, None, config_for(torch.float16))
    assert tuple(part[-1][key] for key in ("block_m", "block_n", "block_k", "split")) == (block_m, block_n, block_k, split)
    given = config_for(torch.float16, {"num_warps": 4})
    (part,) = epilogue_launch.row_parts(a, b, y, None, None, False, None, None, given)
    assert part[-1] is given
    b_wide, y_wide = torch.ones(64, 64 * 132 + 1, dtype=torch.float16), torch.empty(rows, 64 * 132 + 1, dtype=torch.float16)
    (part,) = epilogue_launch.row_parts(a, b_wide, y_wide, None, None, False, None, None, config_for(torch.float16))
    assert part[-1]["block_m"] == 128          # wider than 64 columns a program fill: the default tiles
    wide = config_for(torch.float32)
    (part,) = epilogue_launch.row_parts(a.float(), b.float(), y.float(), None, None, False, None, None, wide)
    assert part[-1] is wide                # (the thin tiles are the 16-bit programs')


def test_a_few_rows_in_thin_tiles_against_float64():
    """16 and 40 rows x 300 x 70 (K not a multiple of the 256-long K steps), bias and GELU: the
    thin tiles' answer."""
    for rows in (16, 40):
        a, b, bias, _, _, _ = tma_operands(rows, 70, 300, torch.float16, seed=rows)
        y = torch.empty(rows, 70, dtype=torch.float16, device=DEVICE)
        epilogue_launch.launch_epilogue(a, b, y, None, bias, False, None, None, "gelu", 1.0, 0.0,
                                        config_for(torch.float16))
        want, _ = reference(a, b, bias, False, None, None, "gelu", 1.0, 0.0)
        assert relative(y, want) < TOLERANCE[torch.float16]


@pytest.mark.parametrize("rows", [16, 32, 48, 64])
@pytest.mark.parametrize("n", [2048, 5632, 8448])
def test_thin_tiles_fit_hopper_s_shared_memory(rows, n, h200):
    """The stages of A's and B's thin tiles (16-bit) within an SM's 227 KB (64 rows x 64 columns
    in four stages asked 256 KB: Triton refused the launch on an H200)."""
    a, b = torch.ones(rows, 64, dtype=torch.float16), torch.ones(64, n, dtype=torch.float16)
    (part,) = epilogue_launch.row_parts(a, b, torch.empty(rows, n, dtype=torch.float16), None, None, False, None,
                                        None, config_for(torch.float16))
    tiles = part[-1]
    assert tiles["block_m"] <= 64
    assert tiles["num_stages"] * (tiles["block_m"] + tiles["block_n"]) * tiles["block_k"] * 2 <= 227 * 1024
