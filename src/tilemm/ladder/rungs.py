"""Every rung of the ladder: importing this module registers them, in ladder order."""
from tilemm.ladder import reference, r01_cpu_naive, r02_cpu_tiled  # noqa: F401
from tilemm.ladder.simt import r03_naive, r04_naive_global, r05_uncoalesced, r06_tiled, r07_rect, r08_regblock  # noqa: F401
from tilemm.ladder.tensorcore import r09_tutorial, r10_tensorcore, r11_int_digits, r12_fp64, r13_f32, r14_complex  # noqa: F401
from tilemm.ladder.tensorcore import r15_grouped, scaled_fp8  # noqa: F401
from tilemm.ladder import library  # noqa: F401
