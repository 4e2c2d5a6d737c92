"""tilemm.system.timing's arithmetic (the timers themselves need a GPU: the benchmarks use them there)."""
from tilemm.system.timing import paired_ratio


def test_paired_ratio_compares_within_rounds():
    """One round where the host ran everything twice as slow moves the ratio of all-round medians
    but not the median of the rounds' own ratios."""
    base = [[10.0, 10.0], [10.0, 10.0], [20.0, 20.0]]
    variant = [[11.0, 11.0], [20.0, 22.0], [22.0, 22.0]]
    assert paired_ratio(base, variant) == 10.0 / 11.0
    assert paired_ratio(base, base) == 1.0
