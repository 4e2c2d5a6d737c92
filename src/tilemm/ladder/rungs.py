"""Where each rung's record lives, in ladder order: the registry imports a rung's module when the
rung is first asked for. A rung's module holds its record, launcher and checks and never imports
numba, numba-cuda or Triton at import: its kernel's file does, at the first launch."""

# The product programs that tilemm.matmul never runs and that register no rung of their own: their
# fronts (tilemm.scaled_matmul with scales that vary) call their launchers, through registry.program
PROGRAMS = {"block-scaled": "tilemm.ladder.tensorcore.r16_block_scaled"}

# kernel name -> the module that registers it
RUNGS = {
    "numpy": "tilemm.ladder.reference",
    "cpu-naive": "tilemm.ladder.r01_cpu_naive",
    "cpu-tiled": "tilemm.ladder.r02_cpu_tiled",
    "naive": "tilemm.ladder.simt.r03_naive",
    "naive-global": "tilemm.ladder.simt.r04_naive_global",
    "uncoalesced": "tilemm.ladder.simt.r05_uncoalesced",
    "tiled": "tilemm.ladder.simt.r06_tiled",
    "rect": "tilemm.ladder.simt.r07_rect",
    "regblock": "tilemm.ladder.simt.r08_regblock",
    "tensorcore-tutorial": "tilemm.ladder.tensorcore.r09_tutorial",
    "tensorcore": "tilemm.ladder.tensorcore.r10_tensorcore",
    "tensorcore-int": "tilemm.ladder.tensorcore.r11_int_digits",
    "tensorcore-f64": "tilemm.ladder.tensorcore.r12_fp64",
    "tensorcore-f32": "tilemm.ladder.tensorcore.r13_f32",
    "tensorcore-complex": "tilemm.ladder.tensorcore.r14_complex",
    "tensorcore-grouped": "tilemm.ladder.tensorcore.r15_grouped",
    "scaled-fp8": "tilemm.ladder.tensorcore.scaled_fp8",
    "cublas": "tilemm.ladder.library",
}
