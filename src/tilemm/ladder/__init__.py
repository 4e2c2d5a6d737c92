"""The ladder. Importing this package registers every rung, in ladder order."""
from . import reference, cpu  # noqa: F401
from .simt import s1_naive, s2_naive_global, s3_uncoalesced, s4_tiled, s5_rect, s6_regblock  # noqa: F401
from .tensorcore import t1_blocked, t2_int_digits, t3_fp64, t4_f32  # noqa: F401
from . import library  # noqa: F401
