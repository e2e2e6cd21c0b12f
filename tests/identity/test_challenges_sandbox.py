"""The python capability's sandbox: every way an answer can misbehave earns 0 with a reason
the host chose, and nothing it does outlives its run or escapes its box. (The hostile corpus,
run through settlement, audit and exams, is tests/identity/test_box.py's and
tests/integration/test_hostile_code.py's.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from accord.identity.challenges.base import ExamItem
from accord.identity.challenges.python_tasks import PythonCapability
from accord.identity.challenges.reference import solve
from accord.identity.challenges.sandbox import (
    DEFAULT_LIMITS,
    MiB,
    SandboxLimits,
    run_function_cases,
)
from accord.identity.errors import ExamError

FAST = SandboxLimits(cpu_seconds=1, wall_seconds=2.0)
CAPABILITY = PythonCapability(limits=FAST)
SEED = b"sandbox-test-seed-0001"


@pytest.fixture(scope="module")
def item() -> ExamItem:
    return CAPABILITY.generate(SEED, 1)[0]


def answer(item: ExamItem, body: str, preamble: str = "") -> str:
    """Source defining the item's function with `body` (already indented)."""
    return f"{preamble}\ndef {item.payload['function_name']}(*args):\n{body}\n"


def assert_zero(
    item: ExamItem, source: str, reason: str, capability: PythonCapability = CAPABILITY
) -> str:
    grade = capability.grade(item, source)
    assert (grade.earned, grade.possible) == (0, 1)
    assert reason in grade.reason, grade.reason
    return grade.reason


def test_the_reference_answer_passes_in_the_sandbox(item: ExamItem) -> None:
    grade = CAPABILITY.grade(item, solve(item))
    assert grade.full_marks and "passed all" in grade.reason


def test_the_default_limits_are_those_documented() -> None:
    assert DEFAULT_LIMITS.cpu_seconds == 2
    assert DEFAULT_LIMITS.memory_bytes == 256 * MiB


# The CPU-limit tests give the run a wall clock it cannot reach first even on a loaded machine
# (where a second of CPU can take several of wall time): the reason names which limit fired.
CPU_BOUND = PythonCapability(limits=SandboxLimits(cpu_seconds=1, wall_seconds=60.0))


def test_an_infinite_loop_is_killed_by_the_cpu_limit(item: ExamItem) -> None:
    grade = CPU_BOUND.grade(item, answer(item, "    while True:\n        pass"))
    assert grade.earned == 0 and "CPU time limit of 1 s" in grade.reason, grade.reason


def test_a_loop_that_ignores_sigxcpu_is_killed_anyway(item: ExamItem) -> None:
    """The soft limit's SIGXCPU is ignored; the hard limit's SIGKILL a second later is not."""
    preamble = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)"
    body = "    while True:\n        pass"
    grade = CPU_BOUND.grade(item, answer(item, body, preamble))
    assert grade.earned == 0 and "CPU time limit" in grade.reason, grade.reason


def test_sleeping_is_cut_by_the_wall_clock(item: ExamItem) -> None:
    started = time.monotonic()
    body = "    import time\n    time.sleep(60)"
    assert_zero(item, answer(item, body), "wall-clock limit of 2 s")
    assert time.monotonic() - started < FAST.wall_seconds + 1


# Growing to the memory limit costs CPU time (pages are zeroed), more on a loaded machine: the
# memory tests give the run CPU and wall time enough that only the memory limit can stop it.
MEMORY_BOUND = PythonCapability(limits=SandboxLimits(cpu_seconds=10, wall_seconds=60.0))


def test_a_memory_bomb_is_refused(item: ExamItem) -> None:
    bomb = answer(item, "    return len(bytearray(10**10))")
    assert_zero(item, bomb, "memory limit of 256 MiB", MEMORY_BOUND)
    growing = "    blocks = []\n    while True:\n        blocks.append(bytearray(10**7))"
    assert_zero(item, answer(item, growing), "memory limit", MEMORY_BOUND)
    assert_zero(item, "data = 'x' * 10**10\n", "memory limit", MEMORY_BOUND)


def test_a_syntax_error_is_reported_with_its_line(item: ExamItem) -> None:
    assert_zero(item, "def f(:\n    return 1\n", "syntax error: line 1")


def test_an_exception_is_reported_by_its_builtin_class_only(item: ExamItem) -> None:
    assert_zero(item, answer(item, "    return 1 // 0"), "raised ZeroDivisionError")
    assert_zero(item, "raise SystemExit(3)\n", "raised while loading: SystemExit")
    said = "    raise ValueError('the seed is 00ff')"
    reason = assert_zero(item, answer(item, said), "raised ValueError")
    assert "00ff" not in reason
    own_class = "class Seed00ff(Exception):\n    pass\n"
    reason = assert_zero(item, answer(item, "    raise Seed00ff()", own_class), "not built in")
    assert "00ff" not in reason


def test_a_wrong_result_is_reported_without_the_expected_value_or_the_answers(
    item: ExamItem,
) -> None:
    reason = assert_zero(item, answer(item, "    return 'nonsense'"), "wrong result")
    assert "expected" not in reason and "nonsense" not in reason


def test_non_json_results_are_reported(item: ExamItem) -> None:
    assert_zero(item, answer(item, "    return {1, 2}"), "returned a set, which is not JSON")


def test_print_spam_earns_nothing(item: ExamItem) -> None:
    source = solve(item)
    assert isinstance(source, str)
    assert_zero(item, "print('x' * 100_000)\n" + source, "printed more than 65536 characters")
    catching = "    while True:\n        try:\n            print('spam')\n        except BaseException:\n            pass"  # noqa: E501
    # It dies by the CPU limit, or by the wall-clock limit when a loaded machine gives the run
    # less CPU than wall time: either way it earns nothing.
    reason = assert_zero(item, answer(item, catching), "limit of")
    assert "CPU time limit" in reason or "wall-clock limit" in reason, reason


def test_huge_output_is_truncated_at_the_file_size_limit(item: ExamItem) -> None:
    body = "    import os\n    while True:\n        os.write(1, b'x' * 65536)"
    assert_zero(item, answer(item, body), "output limit of 1048576 bytes")
    assert_zero(item, answer(item, "    return list(range(10**6))"), "return values too large")


def test_leaving_early_gives_no_results(item: ExamItem) -> None:
    assert_zero(item, "import os\nos._exit(0)\n", "ended without results")


def test_the_code_runs_in_the_box_tmp_and_cannot_start_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    source = (
        "import os\n"
        "def where():\n"
        "    open('planted', 'w').write('x')\n"
        "    try:\n"
        "        os.fork()\n"
        "        spawned = 'forked'\n"
        "    except OSError as exc:\n"
        "        spawned = type(exc).__name__\n"
        "    return [os.getcwd(), os.listdir('.'), spawned, os.system('true')]\n"
    )
    run = run_function_cases(source, "where", [[]], FAST)
    assert run.failure is None, run.failure
    assert run.mode == "bwrap"
    # os.system: the C library's spawn is refused, which it reports as exit status 127.
    assert run.results[0].value == ["/tmp", ["planted"], "PermissionError", 127 << 8]
    assert not (tmp_path / "planted").exists()


def test_a_blocking_call_is_time_limited() -> None:
    started = time.monotonic()
    run = run_function_cases("import time\ntime.sleep(30)\n", "f", [[]], FAST)
    assert run.failure is not None and "wall-clock" in run.failure
    assert time.monotonic() - started < FAST.wall_seconds + 1


def test_the_child_sees_no_expected_values_no_stdin_and_a_clean_environment() -> None:
    source = (
        "import __main__, os, sys\n"
        "def peek():\n"
        "    return [__main__.request, sys.stdin.read(), sorted(os.environ), hash('accord')]\n"
    )
    first = run_function_cases(source, "peek", [[]], FAST)
    second = run_function_cases(source, "peek", [[]], FAST)
    assert first.failure is None, first.failure
    value = first.results[0].value
    assert isinstance(value, list)
    request, stdin_text, environment, string_hash = value
    assert isinstance(request, dict) and set(request) == {"source", "function", "cases", "frozen"}
    assert "expected" not in json.dumps(request)
    assert stdin_text == ""
    assert isinstance(environment, list)
    assert all(isinstance(key, str) for key in environment)
    assert not [k for k in environment if str(k).startswith("ACCORD") or "TOKEN" in str(k)]
    assert isinstance(string_hash, int)
    assert second.results[0].value == value, "str hashing must not vary between runs"


def test_each_case_gets_its_own_result_or_error() -> None:
    source = "def half(n):\n    return 10 // n\n"
    run = run_function_cases(source, "half", [[2], [0], [5]], FAST)
    assert run.failure is None
    assert [r.value for r in run.results] == [5, None, 2]
    assert run.results[1].error == "raised ZeroDivisionError"


def test_limits_refuse_nonsense_and_inputs_must_be_json() -> None:
    bad_limits: list[dict[str, float]] = [
        {"cpu_seconds": 0},
        {"wall_seconds": 0},
        {"memory_bytes": MiB},
        {"output_bytes": 10},
    ]
    for bad in bad_limits:
        with pytest.raises(ExamError):
            SandboxLimits(**bad)  # type: ignore[arg-type]
    with pytest.raises(ExamError):
        run_function_cases("def f(x): return x", "f", [[{1, 2}]], FAST)  # type: ignore[list-item]
