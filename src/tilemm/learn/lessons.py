"""Judging an examination (examine.py's data): findings, each with the lesson a fault or a wrong
count points to. Every message names the learner's line where there is one, and the rung whose page
teaches the fix.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tilemm.learn.exercises import Exercise

COALESCING_SLACK = 1.5      # a warp's access may touch this many times the rung's sectors before it is flagged


@dataclass(frozen=True)
class Finding:
    ok: bool
    title: str
    detail: str
    lesson: str = ""


def at_line(fault: dict) -> str:
    if not fault.get("line"):
        return ""
    code = f": `{fault['code']}`" if fault.get("code") else ""
    return f" at line {fault['line']}{code}"


def bounds_lesson(exercise: Exercise) -> str:
    if exercise.backend == "triton":
        return ("mask every tl.load and tl.store so rows past M, columns past N and k past K are left out "
                "(mask=..., other=0.0): rung 9")
    if exercise.backend == "numba":
        return "loop i over range(m), j over range(n) and p over range(k), the shapes of A and B: rung 1"
    if exercise.uses_shared:
        return ("a thread whose element of A or B lies past an edge stores a zero into the tile instead of "
                "loading it, and only threads inside C store their result: rung 6")
    return ("the last blocks hang past the edge of C when the block does not divide M or N: test "
            "row < m and col < n before touching A, B or C: rung 3")


def judge_fault(fault: dict, exercise: Exercise, races: list, lines: list[str]) -> list[Finding]:
    kind = fault["kind"]
    if races:
        return [race_finding(races[0], lines)]
    if kind == "syntax":
        return [Finding(False, "the file does not parse", f"line {fault['line']}: {fault['message']}"
                        + (f": `{fault['code'].strip()}`" if fault.get("code") else ""),
                        "fix the line, then grade again")]
    if kind == "missing":
        return [Finding(False, "a library is missing", fault["message"], "install it, then grade again")]
    if kind == "no-run":
        return [Finding(False, "no launcher", fault["message"], f"`tilemm learn {exercise.name}` writes a fresh file")]
    if kind == "timeout":
        loop = ("every loop advances its counter (p = uint32(p + 1), phase = uint32(phase + tile))"
                if exercise.backend == "numba-cuda" else "every loop advances its counter")
        at = f" at {fault['where']}" if fault.get("where") else ""
        wraps = ("; a bound computed in uint32 wraps past zero to about 4 billion (k - tile where K < TILE)"
                 if exercise.backend == "numba-cuda" else "")
        return [Finding(False, "it never finished", f"the run was stopped after {fault['seconds']:.0f} s{at}: "
                        "an infinite loop, most likely", f"check that {loop} and ends at K{wraps}")]
    if kind == "crash":
        return [Finding(False, "the process died", fault["message"],
                        "compiled code checks no bounds: an index past the edge of an array; " + bounds_lesson(exercise))]
    if kind == "index":
        lesson = bounds_lesson(exercise)
        if column_major(fault):                   # right on row-major operands, past an edge here
            lesson = STRIDE_LESSON + "; and " + lesson
        elif fault.get("params"):                  # right with the file's tiles, past an edge with others
            lesson = UNEVEN_LESSON
        return [Finding(False, "an index past the edge of an array",
                        f"{fault['type']}{at_line(fault)} ({fault['message']}), on {fault['where']}", lesson)]
    if fault.get("where") == "import":
        return [Finding(False, "importing the file failed", f"{fault['type']}{at_line(fault)}: {fault['message']}",
                        "the code outside the exercise region is given: compare it with a fresh "
                        f"`tilemm learn {exercise.name}`")]
    return [Finding(False, f"it raised {fault['type']}", f"{fault['type']}{at_line(fault)}: {fault['message']} "
                    f"(on {fault['where']})", "read the message and the line it names")]


def race_finding(race: dict, lines: list[str]) -> Finding:
    """A race, and which barrier is missing: between the copy into the tiles and the products that
    read them when the learner's file has no barrier between those two lines, else the one after the
    products (before the next phase's copy overwrites the tiles)."""
    who = f"thread {tuple(race['thread'])} of block {tuple(race['block'])}"
    other = f"thread {tuple(race['other'])}"

    def where(line, code):
        return f"line {line}" + (f": `{code}`" if code else "")
    detail = (f"{who} {race['did']} {race['array']}[{race['element']}] ({where(race['line'], race.get('code'))}), "
              f"which {other} {race['other_did']} ({where(race['other_line'], race.get('other_code'))}) with no "
              "cuda.syncthreads() between them")
    write_line = race["line"] if race["did"] == "wrote" else race["other_line"]
    read_line = race["other_line"] if race["did"] == "wrote" else race["line"]
    if race["did"] == race["other_did"] == "wrote":
        missing = "two threads store the same element of the tile: each thread copies its own element"
    elif write_line and read_line and write_line < read_line and not any(
            "syncthreads" in text for text in lines[write_line:read_line - 1]):
        missing = ("the barrier between copying the tiles into shared memory and the products that read them "
                   "is missing")
    else:
        missing = ("the barrier after the products is missing: the next phase's copy overwrites the tiles while "
                   "other threads still read them")
    return Finding(False, "threads race on shared memory", detail, f"{missing}: rung 6")


def judge_cases(cases: list, exercise: Exercise) -> list[Finding]:
    bad = [c for c in cases if not c["ok"]]
    shapes = ", ".join("x".join(map(str, c["shape"])) + (" column-major" if column_major(c) else "")
                       + (" with " + ", ".join(f"{k}={v}" for k, v in c["params"].items()) if c.get("params") else "")
                       for c in cases)
    if not bad:
        return [Finding(True, f"correct on all {len(cases)} products",
                        f"M x N x K = {shapes}: integers bit-exact, floats within the bound")]
    first = bad[0]
    where = f"{'x'.join(map(str, first['shape']))} {first['dtype']}"
    findings = []
    unwritten = [c for c in bad if c.get("unwritten")]
    if unwritten:
        c = unwritten[0]
        total = c["shape"][0] * c["shape"][1]
        if c["unwritten"] == total:
            findings.append(Finding(False, "C was never written", f"no entry of C ({c['shape'][0]} x "
                                    f"{c['shape'][1]}) was stored", "write the lines the TODO describes; they end "
                                    "with each thread storing its sum into C"))
        else:
            findings.append(Finding(False, "some entries of C were never written",
                                    f"{c['unwritten']} of {total} at {'x'.join(map(str, c['shape']))}, the first "
                                    f"at {tuple(c['unwritten_first'])}",
                                    "the grid covers C, so a thread must store the output it owns: check "
                                    "the row and column formulas and the bounds test: " + bounds_lesson(exercise)))
    partial = [c for c in bad if "partial_k" in c]
    if partial:
        c = partial[0]
        findings.append(Finding(False, "the K loop stops early",
                                f"at {'x'.join(map(str, c['shape']))}, C holds the sums of the first "
                                f"{c['partial_k']} of K = {c['shape'][2]} products",
                                "walk all of K: ceil(K / TILE) phases, the last one partial, never derived "
                                "from the grid (rung 6)" if exercise.uses_shared else
                                "walk all of K: tl.cdiv(K, BLOCK_SIZE_K) tiles, the last one masked (rung 9)"
                                if exercise.backend == "triton" else "walk p over all of K"))
    if findings:
        return findings
    ints_ok = all(c["ok"] for c in cases if c["dtype"] == "int32")
    if ints_ok and any(c["dtype"] == "float32" for c in bad):
        return [Finding(False, "wrong in float32 only", f"{where}: {first['message']}",
                        "start the sum as acc(0) and keep it acc(...): the sum's type is C's")]
    if all(c.get("params") for c in bad):
        return [Finding(False, "wrong with other tile sizes",
                        f"right with the file's PARAMS, wrong at {where} with {first['params']}: {first['message']}",
                        UNEVEN_LESSON)]
    if all(column_major(c) for c in bad):
        return [Finding(False, "wrong when A and B are not row-major",
                        f"right on row-major operands, wrong at {where} with A and B column-major: "
                        f"{first['message']}", STRIDE_LESSON)]
    step = exercise.sim_params.get("block_k") or exercise.sim_params.get("tile")
    one_step = [c for c in cases if step and c["shape"][2] <= step]
    if one_step and all(c["ok"] for c in one_step) and all(c["shape"][2] > step for c in bad) \
            and len(bad) == len(cases) - len(one_step):
        return [Finding(False, "wrong wherever K takes more than one step",
                        f"right where K <= {step}, wrong at {', '.join('x'.join(map(str, c['shape'])) for c in bad)}: "
                        f"{first['message']}", step_lesson(exercise))]
    divided = [c for c in cases if c["shape"] == [8, 8, 8]]
    if divided and divided[0]["ok"] and exercise.backend != "numba":
        return [Finding(False, "wrong where the tile does not divide the shape",
                        f"right at 8x8x8, wrong at {', '.join('x'.join(map(str, c['shape'])) for c in bad)}: "
                        f"{first['message']}", bounds_lesson(exercise))]
    return [Finding(False, f"wrong on {len(bad)} of {len(cases)} products",
                    f"first at {where}: {first['message']}",
                    "run the small test at the bottom of the file and compare with the TODO's description")]


def column_major(record: dict) -> bool:
    """Whether a case (or the fault of one) ran on transposed operands, not row-major ones
    (tilemm.learn.examine's layouts: "nn" row-major, the default of records without one)."""
    return record.get("layout", "nn") != "nn"


UNEVEN_LESSON = ("an index that holds only while the tiles are square and a thread's values are one run "
                 "(there a_step == b_step, and i // vec_m is 0): follow the TODO's formula term by term")
STRIDE_LESSON = ("step a pointer by its stride, never by an element count that holds only for row-major "
                 "operands: a_ptrs += BLOCK_SIZE_K * stride_ak, b_ptrs += BLOCK_SIZE_K * stride_bk (rung 9)")


def step_lesson(exercise: Exercise) -> str:
    """What goes wrong between one step along K and the next, in the exercise's own words."""
    if exercise.backend == "triton":
        return ("after each tile, advance a_ptrs by BLOCK_SIZE_K * stride_ak and b_ptrs by BLOCK_SIZE_K * "
                "stride_bk, and mask k against what is left of K (K - k * BLOCK_SIZE_K): rung 9")
    return ("the next step along K must read the next slice of A and B: advance the K index by the whole "
            "step, and index A's columns and B's rows by it: " + bounds_lesson(exercise))


def judge_counts(exam: dict, exercise: Exercise) -> list[Finding]:
    mine, rung, model = exam["counts"], exam["reference"], exam["model"]
    if mine is None or rung is None:
        return []
    findings = []
    shape = "x".join(map(str, exam["count_shape"]))

    def count(table, key, name):
        return table[key].get(name, 0)

    for name in ("A", "B"):
        got, want = count(mine, "loads", name), count(rung, "loads", name)
        if got > want:
            findings.append(Finding(False, f"{name} is loaded {got / max(want, 1):.1f}x as often as the rung loads it",
                                    f"{got} loads of {name} at {shape}, where the rung makes {want}",
                                    global_reuse_lesson(exercise, name, got / max(want, 1))))
        elif got < want:
            findings.append(Finding(True, f"fewer loads of {name} than the rung",
                                    f"{got} where the rung makes {want}, and correct: a step past the rung"))
    got_c, want_c = count(mine, "loads", "C"), count(rung, "loads", "C")
    if got_c > want_c:
        findings.append(Finding(False, "C is read inside the K loop", f"{got_c} loads of C where the rung makes {want_c}",
                                "keep the sum in a register and store C once at the end: rung 3 (rung 4 measures "
                                "what reading C each step costs)"))
    elif got_c < want_c:
        findings.append(Finding(False, "the sum is not kept in C", f"{got_c} loads of C where the rung makes {want_c}",
                                "this exercise accumulates in C itself: read and write c[row, col] at every "
                                "step p: rung 4"))
    got_s, want_s = count(mine, "stores", "C"), count(rung, "stores", "C")
    if got_s != want_s and got_c <= want_c:
        findings.append(Finding(False, "C is stored a different number of times than the rung stores it",
                                f"{got_s} stores where the rung makes {want_s}",
                                "store each entry of C once, after its K loop: rung 3" if got_s > want_s else
                                "store each entry at every step p: rung 4"))
    findings += judge_shared(mine, rung, exercise)
    findings += judge_coalescing(mine, rung, exercise)
    wide = exam.get("coalescing")
    if wide and not any(f.title.startswith(("uncoalesced", "coalesced")) for f in findings):
        where = "at {}, {}".format("x".join(map(str, wide["shape"])),
                                   ", ".join(f"{k}={v}" for k, v in wide["params"].items()))
        findings += judge_coalescing({"sectors_per_access": wide["yours"]},
                                     {"sectors_per_access": wide["rung"]}, exercise, where)
    if all(f.ok for f in findings):
        read = sum(mine["loads"].values())
        findings.insert(0, Finding(True, "loads and stores as the rung's",
                                   f"at {shape}: {read} elements read, {sum(mine['stores'].values())} written"
                                   f" (the rung's traffic model: {model['read']:.0f} and {model['written']:.0f})"
                                   + (f"; shared memory: {mine['shared_loads']} loads, {mine['shared_stores']} "
                                      "stores" if mine["shared_loads"] else "")))
    return findings


def global_reuse_lesson(exercise: Exercise, name: str, ratio: float) -> str:
    if exercise.name == "rect" and name == "A":
        return ("load one A tile per phase and use it for all F tiles of B: each A value read from shared "
                "memory feeds F products (rung 7)")
    if exercise.uses_shared or exercise.backend == "triton":
        return (f"each thread reads {name}'s elements from global memory itself: copy each tile of {name} into "
                "shared memory once per block, one element a thread, and read it from there (rung 6)")
    return f"each product needs one load of {name}: read a[row, p] and b[p, col] once per step (rung 3)"


def judge_shared(mine: dict, rung: dict, exercise: Exercise) -> list[Finding]:
    if not rung["shared_loads"] and not mine["shared_loads"]:
        return []
    if not mine["shared_loads"]:
        return [Finding(False, "no shared memory read", "the rung reads its tiles from shared memory",
                        "copy the tiles into the shared arrays, then read the products' operands from them: rung 6")]
    findings = []
    if mine["shared_loads"] > rung["shared_loads"]:
        lesson = {"rect": "read tile_a[ty, j] once for each j and use it for all F products: rung 7",
                  "regblock": "read each of the THREAD_M values of A and THREAD_N of B once per K step, then "
                              "do THREAD_M x THREAD_N products from registers: rung 8"}.get(
            exercise.name, "read each operand from shared memory once per product: rung 6")
        findings.append(Finding(False, "more shared-memory loads than the rung",
                                f"{mine['shared_loads']} where the rung makes {rung['shared_loads']}", lesson))
    if mine["shared_stores"] != rung["shared_stores"]:
        findings.append(Finding(False, "shared-memory stores differ from the rung's",
                                f"{mine['shared_stores']} where the rung makes {rung['shared_stores']}",
                                "per phase each thread copies one element of each tile (zeros past the edges): "
                                "rung 6"))
    return findings


def judge_coalescing(mine: dict, rung: dict, exercise: Exercise, where: str = "") -> list[Finding]:
    """Findings where a warp's accesses touch more sectors than the rung's (or, in the uncoalesced
    exercise, fewer); `where` names the shape and tiles when they are not the count's own."""
    findings = []
    at = f" ({where})" if where else ""
    for name, want in rung["sectors_per_access"].items():
        got = mine["sectors_per_access"].get(name)
        if got is None:
            continue
        if got > COALESCING_SLACK * want:
            findings.append(Finding(False, f"uncoalesced accesses to {name}",
                                    f"a warp's access to {name} touches {got:.1f} 32-byte sectors on average, the "
                                    f"rung's {want:.1f}{at}",
                                    "neighbouring threads (threadIdx.x) must touch neighbouring elements: "
                                    + ("in the copies into shared memory too, threadIdx.x walks the columns: "
                                       "a[row, phase + tx], b[phase + ty, col] (rung 6; rung 5 measures the cost)"
                                       if exercise.uses_shared else
                                       "threadIdx.x walks the columns of C and of B (rung 3; rung 5 measures the "
                                       "cost)")))
        elif exercise.name == "uncoalesced" and got * COALESCING_SLACK < want:
            findings.append(Finding(False, f"coalesced accesses to {name}, where the exercise asks otherwise",
                                    f"{got:.1f} sectors a warp's access, the rung's {want:.1f}{at}",
                                    "this exercise is the slow layout on purpose: threadIdx.x walks the rows "
                                    "of C (rung 5)"))
    return findings


def file_lines(exam: dict) -> list[str]:
    try:
        return Path(exam["file"]).read_text().splitlines()
    except (KeyError, OSError):
        return []


def divergent_finding(divergent: dict) -> Finding:
    return Finding(
        False, "a barrier not every thread reaches",
        f"in block {tuple(divergent['block'])}, thread {tuple(divergent['thread'])} passed "
        f"{divergent['passed']} cuda.syncthreads() and thread {tuple(divergent['other'])} "
        f"{divergent['other_passed']}: the simulator lets the others through, a GPU may hang",
        "every thread of the block, inside C or not, reaches every barrier: keep cuda.syncthreads() "
        "out of the bounds test, and let threads past the edge load zeros instead (rung 6)")


def judge(exam: dict, exercise: Exercise) -> list[Finding]:
    """The findings of one examination, the failures first where they explain the rest: a barrier
    some threads skip, else a race, explains wrong answers."""
    if exam.get("fault"):
        found = judge_fault(exam["fault"], exercise, exam.get("races") or [], file_lines(exam))
        variant = column_major(exam["fault"]) or bool(exam["fault"].get("params"))
        if variant and any(not c["ok"] for c in exam["cases"]):   # wrong before the layout or tiles changed
            return judge_cases(exam["cases"], exercise) + found
        return found
    lead = []
    if exam.get("divergent_barriers"):
        lead.append(divergent_finding(exam["divergent_barriers"]))
    elif exam.get("races"):
        lead.append(race_finding(exam["races"][0], file_lines(exam)))
    findings = judge_cases(exam["cases"], exercise)
    if lead:
        findings = lead + [f if f.ok else Finding(False, f.title, f.detail, "the " + (
            "barrier" if exam.get("divergent_barriers") else "race") + " above: threads read tiles other "
            "threads had not finished writing, or had already overwritten") for f in findings]
    if all(f.ok for f in findings):
        findings += judge_counts(exam, exercise)
    return findings
