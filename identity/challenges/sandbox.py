"""Run untrusted Python answers against test inputs in a separate, resource-limited interpreter.

This is the only module of the exams that does I/O. Each run:

- starts a fresh interpreter (`sys.executable -s -P -c HARNESS`) with a clean environment, in its
  own session (process group) and a new temporary directory as its working directory;
- sends the source, the function name and the test inputs as JSON on stdin, which the harness
  reads in full and then replaces with /dev/null;
- limits the child with `resource.setrlimit`, set by the harness before the answer is compiled:
  address space (memory), CPU seconds (SIGXCPU, then SIGKILL a second later), size of any file
  written (which also caps stdout, a regular file here) and no core dumps;
- enforces a wall-clock timeout from the parent, then kills the whole process group, which also
  ends anything the answer spawned (`os.system`, `subprocess`);
- captures the answer's own prints into a bounded sink, and reads the harness's result line (the
  return values as JSON) from stdout. Expected values never enter the child: comparison happens
  in the grader, so an answer cannot read or forge them.

The interpreter runs with `-s -P` and an explicit environment rather than `-I`, because `-I`
ignores `PYTHONHASHSEED`; a fixed hash seed keeps grading deterministic for answers whose results
depend on set or dict ordering of strings, so an auditor re-grading gets the same verdict. With the
environment built from scratch, this is as isolated as `-I`.

What this does not do: drop to another user, or cut network and filesystem access. The answer runs
with the grader's own user rights, time- and memory-limited; a deployment that grades answers from
strangers should run the grader as an unprivileged user or in a container.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from identity.challenges.base import JSON
from identity.errors import ExamError

MiB = 1024 * 1024
RESULT_MARKER = "\x1eACCORD-SANDBOX-RESULT\x1e"

HARNESS = r"""
import builtins, json, os, resource, sys

request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
limits = json.loads(sys.argv[1])
null_fd = os.open(os.devnull, os.O_RDONLY)
os.dup2(null_fd, 0)
os.close(null_fd)
result_fd = os.dup(1)
dumps, write, exit_now = json.dumps, os.write, os._exit
marker = limits["marker"]


def emit(result):
    data = ("\n" + marker + dumps(result) + "\n").encode("utf-8")
    while data:
        data = data[write(result_fd, data):]
    exit_now(0)


resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
resource.setrlimit(resource.RLIMIT_FSIZE, (limits["output_bytes"], limits["output_bytes"]))
resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"] + 1))
resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))


class PrintLimitExceeded(Exception):
    pass


class BoundedSink:
    def __init__(self, limit):
        self.limit, self.used, self.exceeded = limit, 0, False

    def write(self, text):
        self.used += len(text)
        if self.used > self.limit:
            self.exceeded = True
            raise PrintLimitExceeded("print limit exceeded")
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False


sink = BoundedSink(limits["print_chars"])
sys.stdout = sys.stderr = sink


def describe(exc):
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:300] + "…"


def check_prints():
    if sink.exceeded:
        emit({"status": "print_limit"})


try:
    code = compile(request["source"], "<answer>", "exec")
except SyntaxError as exc:
    emit({"status": "syntax_error", "detail": f"line {exc.lineno}: {exc.msg}"})
except BaseException as exc:
    emit({"status": "syntax_error", "detail": describe(exc)})

namespace = {"__name__": "__answer__", "__builtins__": builtins}
try:
    exec(code, namespace)
except MemoryError:
    emit({"status": "memory_error"})
except BaseException as exc:
    check_prints()
    emit({"status": "load_error", "detail": describe(exc)})
check_prints()

function = namespace.get(request["function"])
if not callable(function):
    emit({"status": "missing_function"})

results = []
budget = limits["result_bytes"]
for args in request["cases"]:
    try:
        value = function(*args)
    except MemoryError:
        emit({"status": "memory_error"})
    except PrintLimitExceeded:
        emit({"status": "print_limit"})
    except BaseException as exc:
        check_prints()
        results.append({"error": describe(exc)})
        continue
    check_prints()
    try:
        encoded = dumps(value)
    except MemoryError:
        emit({"status": "memory_error"})
    except BaseException:
        results.append({"error": f"returned a {type(value).__name__}, which is not JSON"})
        continue
    budget -= len(encoded)
    if budget < 0:
        emit({"status": "result_too_large"})
    results.append({"value": value})
emit({"status": "ok", "results": results})
"""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run. Raises ExamError when constructed with nonsense."""

    cpu_seconds: int = 2
    wall_seconds: float = 5.0
    memory_bytes: int = 256 * MiB
    output_bytes: int = 1 * MiB
    """Cap on any file the child writes, stdout included; the child dies on reaching it."""
    print_chars: int = 64 * 1024
    """Cap on characters the answer prints through `print`/`sys.stdout`; beyond it the run fails."""

    def __post_init__(self) -> None:
        if self.cpu_seconds < 1 or self.wall_seconds <= 0:
            raise ExamError("sandbox time limits must be positive")
        if self.memory_bytes < 64 * MiB:
            raise ExamError("the interpreter needs at least 64 MiB of address space")
        if self.output_bytes < 4096 or self.print_chars < 0:
            raise ExamError("sandbox output limits are too small")


DEFAULT_LIMITS = SandboxLimits()


@dataclass(frozen=True)
class CaseResult:
    """What one call returned (`value`), or why it did not return (`error`)."""

    value: JSON = None
    error: str | None = None


@dataclass(frozen=True)
class SandboxRun:
    """The outcome of one run: results per case, or `failure` saying why there are none."""

    results: tuple[CaseResult, ...]
    failure: str | None = None


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _clean_environment(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }


def _tail(data: bytes, limit: int = 300) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def _failure_from_status(result: dict[str, JSON], limits: SandboxLimits, name: str) -> str:
    status = result.get("status")
    detail = result.get("detail", "")
    if status == "syntax_error":
        return f"syntax error: {detail}"
    if status == "load_error":
        return f"the source raised while loading: {detail}"
    if status == "memory_error":
        return f"memory limit of {limits.memory_bytes // MiB} MiB exceeded"
    if status == "missing_function":
        return f"the source defines no function named {name!r}"
    if status == "print_limit":
        return (
            f"printed more than {limits.print_chars} characters; "
            "answers must return values, not print"
        )
    if status == "result_too_large":
        return "return values too large"
    return f"unexpected sandbox status {status!r}"


def _interpret(
    stdout: bytes,
    stderr: bytes,
    returncode: int,
    timed_out: bool,
    limits: SandboxLimits,
    function_name: str,
    case_count: int,
) -> SandboxRun:
    if timed_out:
        return SandboxRun((), f"wall-clock limit of {limits.wall_seconds:g} s exceeded")
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return SandboxRun((), f"CPU time limit of {limits.cpu_seconds} s exceeded")
    if returncode == -signal.SIGXFSZ or len(stdout) >= limits.output_bytes:
        return SandboxRun((), f"output limit of {limits.output_bytes} bytes exceeded")
    marker = RESULT_MARKER.encode("utf-8")
    position = stdout.rfind(marker)
    if position < 0:
        if b"MemoryError" in stderr:
            return SandboxRun((), f"memory limit of {limits.memory_bytes // MiB} MiB exceeded")
        return SandboxRun(
            (), f"the interpreter ended without results (exit {returncode}): {_tail(stderr)}"
        )
    try:
        result = json.loads(stdout[position + len(marker) :].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return SandboxRun((), "the sandbox result was garbled (did the answer write to fd 1?)")
    if not isinstance(result, dict):
        return SandboxRun((), "the sandbox result was garbled")
    if result.get("status") != "ok":
        return SandboxRun((), _failure_from_status(result, limits, function_name))
    raw_results = result.get("results")
    if not isinstance(raw_results, list) or len(raw_results) != case_count:
        return SandboxRun((), "the sandbox returned the wrong number of results")
    cases = []
    for raw in raw_results:
        if isinstance(raw, dict) and "value" in raw:
            cases.append(CaseResult(value=raw["value"]))
        else:
            error = raw.get("error") if isinstance(raw, dict) else None
            cases.append(CaseResult(error=str(error)))
    return SandboxRun(tuple(cases))


def run_function_cases(
    source: str,
    function_name: str,
    cases: Sequence[Sequence[JSON]],
    limits: SandboxLimits = DEFAULT_LIMITS,
) -> SandboxRun:
    """Define `source` in a fresh limited interpreter, call `function_name(*args)` per case.

    Every failure of the answer (syntax error, exception, timeout, memory, output flood, missing
    function) is reported in the result, never raised. Raises ExamError only when the sandbox
    itself cannot run (the interpreter cannot be started, or the inputs are not JSON).
    """
    try:
        request = json.dumps(
            {"source": source, "function": function_name, "cases": [list(c) for c in cases]}
        ).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ExamError(f"sandbox inputs must be JSON: {exc}") from exc
    harness_limits = json.dumps(
        {
            "cpu_seconds": limits.cpu_seconds,
            "memory_bytes": limits.memory_bytes,
            "output_bytes": limits.output_bytes,
            "print_chars": limits.print_chars,
            "result_bytes": limits.output_bytes // 2,
            "marker": RESULT_MARKER,
        }
    )
    with tempfile.TemporaryDirectory(prefix="accord-sandbox-", ignore_cleanup_errors=True) as root:
        workdir = os.path.join(root, "work")
        os.mkdir(workdir, 0o700)
        with (
            open(os.path.join(root, "stdout"), "w+b") as stdout_file,
            open(os.path.join(root, "stderr"), "w+b") as stderr_file,
        ):
            try:
                process = subprocess.Popen(
                    [sys.executable, "-s", "-P", "-c", HARNESS, harness_limits],
                    stdin=subprocess.PIPE,
                    stdout=stdout_file,
                    stderr=stderr_file,
                    cwd=workdir,
                    env=_clean_environment(workdir),
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise ExamError(f"cannot start the sandbox interpreter: {exc}") from exc
            timed_out = False
            try:
                process.communicate(request, timeout=limits.wall_seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(process.pid)
                process.wait()
            finally:
                _kill_group(process.pid)
            stdout_file.seek(0)
            stdout = stdout_file.read(limits.output_bytes + 1)
            stderr_file.seek(0)
            stderr = stderr_file.read(64 * 1024)
    return _interpret(
        stdout, stderr, process.returncode, timed_out, limits, function_name, len(cases)
    )
