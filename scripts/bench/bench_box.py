"""The box for strangers' code: what one boxed run costs over a bare interpreter.

Setup: one requester's check, `def check(outputs)` comparing two fractions (the invoice's
`totals-agree`, tests/specs.py), and its outputs.

Measures, side by side in a rotating order, one run each per repetition, every run a fresh
subprocess timed from spawn to exit:
- `python -I -S -c CODE`: the bare interpreter running the same check on the same outputs
  (the baseline: what any out-of-process run costs);
- the unboxed harness (`ACCORD_SANDBOX=none`): `run_function_cases` without bubblewrap;
- the box: `run_function_cases` under bubblewrap and the seccomp filter.
The overhead is each repetition's boxed time minus the bare one of the same repetition; the
goals take its median and 95th percentile. Then a settlement's python checks: `evaluate_all`
over a spec with 10 python checks (every one a boxed run, as `settle_task` runs them), timed
whole, a few times.

Run alone: `.venv/bin/python scripts/bench/bench_box.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from _common import Goal, Measure, Section, percentile, progress, run_alone, side_by_side

from accord.identity.challenges.sandbox import (
    DEFAULT_WORLD,
    SandboxLimits,
    SandboxMode,
    check_box,
    run_function_cases,
)
from accord.market.check_io import run_python_check
from accord.market.checks import CheckResult, Delivered, Judged, evaluate_all
from accord.market.work import Check, JudgeCheck, Part, PythonCheck, ReviewCheck

GOAL_OVERHEAD_MEDIAN_MS = 10.0
GOAL_OVERHEAD_P95_MS = 25.0
GOAL_TEN_CHECKS_S = 2.0

CHECK = """
from fractions import Fraction


def check(outputs):
    lines = Fraction(str(outputs["lines-sum"]))
    tax = Fraction(str(outputs["tax"]))
    total = Fraction(outputs["invoice-fields"]["total"])
    return abs(lines + tax - total) <= Fraction(1, 100)
"""
OUTPUTS: dict[str, Any] = {
    "lines-sum": "2350.00",
    "tax": "235.00",
    "invoice-fields": {"total": "2585.00"},
}
LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=30.0)


def _bare() -> float:
    code = f"{CHECK}\nimport json, sys\nprint(json.dumps(check(json.loads(sys.argv[1]))))\n"
    start = time.perf_counter()
    done = subprocess.run(
        [os.path.realpath(sys.executable), "-I", "-S", "-c", code, json.dumps(OUTPUTS)],
        capture_output=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    if done.stdout.strip() != b"true":
        raise RuntimeError(f"the bare run said {done.stdout!r} {done.stderr[-300:]!r}")
    return seconds


def _harness(mode: SandboxMode) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        result = run_function_cases(CHECK, "check", [[OUTPUTS]], LIMITS, mode=mode)
        seconds = time.perf_counter() - start
        if result.failure is not None or result.results[0].value is not True:
            raise RuntimeError(f"the {mode} run failed: {result.failure or result.results}")
        return seconds

    return run


class PythonOnly:
    """The settlement's environment for python checks alone (as `ServiceCheckEnvironment` runs
    them)."""

    def run_python(self, check: PythonCheck, outputs: Any) -> CheckResult:
        return run_python_check(check, outputs, DEFAULT_WORLD)

    def ask_judge(self, check: JudgeCheck, prompt: str) -> Judged:
        raise RuntimeError("no judge check here")

    def unopened(self, check: Check) -> CheckResult:
        raise RuntimeError("every output is open here")

    def review(self, check: ReviewCheck, outputs: Any) -> CheckResult:
        raise RuntimeError("no review check here")


def _ten_checks() -> float:
    checks = tuple(
        PythonCheck(f"py-{n}", 1, ("lines-sum", "tax", "invoice-fields"), CHECK, 2, 256)
        for n in range(10)
    )
    parts = tuple(
        Part(part_id, "arithmetic", {"kind": "figures", "figures": ["1"], "operation": "sum"})
        for part_id in ("lines-sum", "tax", "invoice-fields")
    )
    delivered = Delivered(parts, OUTPUTS, {p.part_id: "did:key:zbench" for p in parts})
    env = PythonOnly()
    start = time.perf_counter()
    results = evaluate_all(checks, delivered, env)
    seconds = time.perf_counter() - start
    if not all(r.passed for r in results.values()):
        raise RuntimeError(f"a python check failed: {results}")
    return seconds


def run(quick: bool, reps: int) -> Section:
    section = Section(
        "box",
        "box: a boxed run of strangers' code against a bare interpreter",
        __doc__ or "",
    )
    started = time.perf_counter()
    check_box("bwrap")  # raises SandboxUnavailable (the bench fails) where there is no box
    runs = 30 if quick else max(60, reps * 20)
    bare = Measure("python -I -S -c CHECK (bare interpreter)", "ms")
    unboxed = Measure("run_function_cases, ACCORD_SANDBOX=none", "ms", baseline=bare.name)
    boxed = Measure("run_function_cases in the box (bwrap)", "ms", baseline=bare.name)

    def ms(work: Callable[[], float]) -> Callable[[], float]:
        return lambda: work() * 1000

    side_by_side(
        runs,
        [(bare, ms(_bare)), (unboxed, ms(_harness("none"))), (boxed, ms(_harness("bwrap")))],
        "box: ",
    )
    overhead = [b - a for a, b in zip(bare.samples, boxed.samples, strict=True)]
    over = Measure("overhead: boxed minus bare, same repetition", "ms")
    over.samples = overhead
    ten = Measure("a settlement's 10 python checks (evaluate_all, boxed)", "s")
    for rep in range(3 if quick else 5):
        ten.samples.append(_ten_checks())
        progress(f"box: 10 checks rep {rep + 1} done")
    section.measures += [bare, unboxed, boxed, over, ten]
    p95 = percentile(overhead, 0.95)
    section.goals += [
        Goal(
            "box overhead per run, median",
            GOAL_OVERHEAD_MEDIAN_MS,
            over.median,
            "ms",
            higher_is_better=False,
        ),
        Goal("box overhead per run, p95", GOAL_OVERHEAD_P95_MS, p95, "ms", higher_is_better=False),
        Goal(
            "settlement with 10 python checks",
            GOAL_TEN_CHECKS_S,
            ten.median,
            "s",
            higher_is_better=False,
        ),
    ]
    boxed_p95, bare_p95 = percentile(boxed.samples, 0.95), percentile(bare.samples, 0.95)
    section.notes.append(
        f"{runs} runs of each variant; overhead p95 {p95:.1f} ms; "
        f"boxed p95 {boxed_p95:.1f} ms, bare p95 {bare_p95:.1f} ms"
    )
    section.seconds = time.perf_counter() - started
    return section


if __name__ == "__main__":
    run_alone(run, __doc__ or "")
