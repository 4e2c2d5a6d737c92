"""Which cases a `tilemm bench` command line names, or why none of them can run here.

Every refusal is a ValueError or TypeError that names the problem, raised before any case runs.
"""
from __future__ import annotations

import dataclasses

from tilemm.system import machine
from tilemm.ladder import registry
from tilemm.tools.bench import suites
from tilemm.tools.bench.suites import Case

SUITES = ("cpu", "seeds", "ladder", "shapes", "tensorcore", "wide")
CPU_SIZES = (256, 512, 1024)       # a named selection's sizes when every kernel in it is a CPU rung
GPU_SIZES = (1024, 2048, 4096)     # ... and when one is a GPU rung


def default_suite() -> str:
    """The suite a bare `tilemm bench` runs: the seeds' experiments on a GPU, else the CPU rungs."""
    return "seeds" if machine.gpu() else "cpu"


def suite_cases(name: str, sizes: tuple[int, ...] | None = None) -> list[Case]:
    """A suite's cases, each marked with the suite; `sizes` (square n) replace the suite's own."""
    squares = [(n, n, n) for n in sizes] if sizes else None
    if name == "cpu":
        cases = suites.cpu_suite(sizes or (256, 512, 1024, 2048))
    elif name == "seeds":
        cases = suites.seeds_suite(sizes)
    elif name == "ladder":
        cases = suites.ladder_suite(registry.kernels(), sizes or GPU_SIZES)
    elif name == "tensorcore":
        cases = suites.tensorcore_suite(squares)
    elif name == "shapes":
        cases = suites.shapes_suite(shapes=squares)
    elif name == "wide":
        if sizes:
            raise ValueError("--sizes: the wide suite's problems are generated (each with its own M, N, K); "
                             "it takes no sizes")
        cases = suites.wide_suite()
    else:
        raise ValueError(f"unknown suite {name!r}; the suites: {', '.join(SUITES)}")
    return once([dataclasses.replace(c, suite=name) for c in cases])


def once(cases: list[Case]) -> list[Case]:
    """Each case once: two of a suite's experiments that name the same measurement (as the seeds'
    do at one --sizes) are measured once, under the first."""
    seen, out = set(), []
    for c in cases:
        key = (c.kernel, tuple(sorted(c.params.items())), c.dtype, c.m, c.n, c.k, c.host_inputs, c.layout, c.tag,
               c.suite)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def own_dtype(kernel: registry.Kernel) -> str:
    """The dtype a kernel is measured in when none is named: float32 where it computes it."""
    return "float32" if "float32" in kernel.dtypes else kernel.dtypes[0]


def named_cases(kernels: list[str], dtypes: list[str] | None, sizes: tuple[int, ...] | None) -> list[Case]:
    """Each named kernel in each named dtype (else its own), square at each size."""
    chosen = [registry.get(name) for name in dict.fromkeys(kernels)]
    if not sizes:
        sizes = GPU_SIZES if any(k.device == "cuda" for k in chosen) else CPU_SIZES
    return [Case(k.name, dtype, n, n, n, suite="custom")
            for k in chosen for dtype in (dtypes or [own_dtype(k)]) for n in sizes]


def _filtered(cases: list[Case], suite_names: list[str], kernels, dtypes) -> list[Case]:
    where = " and ".join(suite_names) + (" suite" if len(suite_names) == 1 else " suites")
    if kernels:
        have = list(dict.fromkeys(c.kernel for c in cases))
        cases = [c for c in cases if c.kernel in kernels]
        if not cases:
            raise ValueError(f"--kernels {' '.join(kernels)}: the {where} measure{'s' * (len(suite_names) == 1)} "
                             f"none of them (its kernels: {', '.join(have)}); leave out --suite to measure "
                             "the kernels you name")
    if dtypes:
        have = list(dict.fromkeys(c.dtype for c in cases))
        cases = [c for c in cases if c.dtype in dtypes]
        if not cases:
            which = f"{' '.join(kernels)} in " if kernels else ""
            raise ValueError(f"--dtypes {' '.join(dtypes)}: the {where} measure{'s' * (len(suite_names) == 1)} "
                             f"{which}{', '.join(have)} only; leave out --suite to measure the dtypes you name")
    return cases


def with_params(cases: list[Case], given: dict) -> list[Case]:
    """The cases with the given parameters set on those whose kernel has them; a parameter no
    kernel of the selection has, or a value a kernel refuses, is an error."""
    if not given:
        return cases
    takes = {name: {p.name for p in registry.get(name).params} for name in dict.fromkeys(c.kernel for c in cases)}
    for param in given:
        if not any(param in names for names in takes.values()):
            have = "; ".join(f"{k}: {', '.join(sorted(v)) or 'none'}" for k, v in takes.items())
            raise ValueError(f"--param {param}: no kernel of the selection has a parameter {param!r} "
                             f"(their parameters: {have})")
    out = []
    for case in cases:
        params = {**case.params, **{k: v for k, v in given.items() if k in takes[case.kernel]}}
        registry.get(case.kernel).resolve(params)          # a value the kernel refuses: refused now
        out.append(dataclasses.replace(case, params=params))
    return out


def why_not_here(case: Case) -> str | None:
    """Why a case can't run on this machine, or None (its limits at its size are the runner's to find)."""
    kernel = registry.get(case.kernel)
    why = kernel.available()
    if why:
        return f"{kernel.name} {why}"
    if kernel.compute_dtype(case.dtype) is None:
        return f"{kernel.name} does not compute {case.dtype} (its dtypes: {', '.join(kernel.dtypes)})"
    return None


def select(suite_names: list[str] | None, kernels: list[str] | None, dtypes: list[str] | None,
           sizes: tuple[int, ...] | None, params: dict | None = None) -> list[Case]:
    """The cases to run. With suites: theirs (at `sizes` if given), only those of the named kernels
    and dtypes. Without: the named kernels in the named dtypes at `sizes`, or else the default suite.
    An empty selection, or one of which nothing can run here, is a ValueError that says why."""
    if suite_names:
        cases = _filtered([c for name in suite_names for c in suite_cases(name, sizes)], suite_names, kernels, dtypes)
    elif kernels or dtypes:
        cases = named_cases(kernels or list(dict.fromkeys(c.kernel for c in suite_cases(default_suite()))),
                            dtypes, sizes)
    else:
        cases = suite_cases(default_suite(), sizes)
    if not cases:
        raise ValueError("the selection is empty")
    cases = with_params(cases, params or {})
    reasons = [why_not_here(c) for c in cases]
    if all(reasons):
        raise NothingRunsHere(cases)
    return cases


class NothingRunsHere(ValueError):
    """No case of a selection can run on this machine: one line per reason, with the rungs it
    stops, and on a machine without a GPU the suite that can run."""

    def __init__(self, cases: list[Case]):
        stopped: dict = {}
        for c in cases:
            kernel = registry.get(c.kernel)
            why = kernel.available()
            if why is None:
                why = f"does not compute {c.dtype} (its dtypes: {', '.join(kernel.dtypes)})"
            stopped.setdefault(why, []).append(kernel.name)
        self.lines = ["nothing in this selection can run here:"] + [
            f"{', '.join(dict.fromkeys(names))}: {why}" for why, names in stopped.items()]
        if not machine.gpu():
            self.lines.append("on this machine: tilemm bench --suite cpu --budget 0.3 --skip-over 2 (the CPU rungs "
                              "against NumPy, a few minutes on 2 cores)")
        super().__init__(" ".join(self.lines))
