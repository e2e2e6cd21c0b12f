"""The box: the one seam through which accord runs code a stranger wrote.

Requesters' `python` checks (at settlement and in every audit) and agents' answers to the
`python` exam all run through `run_function_cases`: define the source, call one function per
case, return each case's JSON result. Every run is a fresh interpreter inside a bubblewrap box:

- **namespaces** (`bwrap --unshare-user --unshare-pid --unshare-net --unshare-ipc
  --unshare-uts --unshare-cgroup-try --disable-userns`): the box has its own users (it runs as
  uid 65534), its own process tree, no network at all (not even the host's loopback), its own
  System V IPC and host name, and may make no further user namespace;
- **a read-only view of the interpreter only**: the shared libraries (`/usr/lib`, `/lib*`), the
  interpreter's binary and its standard library, with every site-packages directory masked by
  an empty one. No home, no `ACCORD_HOME`, no project source, no `/etc`, no shell, no `/proc`
  at all; `/dev` holds only the null, zero, full, random and tty devices (read-only) and a
  private `/dev/shm`; the environment is built from scratch;
- **no privileges**: every capability dropped (`--cap-drop ALL`), `NO_NEW_PRIVS`, a new session
  with no controlling terminal (`--new-session`), and the seccomp filter of
  `accord.identity.challenges.seccomp` (one process: no fork, vfork or non-thread clone; no ptrace,
  mount, bpf, keyctl, io_uring, AF_VSOCK, new namespaces, memfd or System V memory; other
  architectures are killed);
- **limits**: a private tmpfs of `tmp_bytes` at /tmp (the working directory) and one of a
  quarter of that at /dev/shm; rlimits set by the harness before the source is compiled:
  address space (which, with one process, bounds the box's memory), CPU seconds, size of any
  written file, open files, tasks (`RLIMIT_NPROC`, a second layer under the filter), no core
  dumps; output read through pipes and cut at `output_bytes`; a wall clock the host enforces;
- **results through a pipe**: the host reads the harness's result line from the box's stdout
  and never opens a path the box could write;
- **nothing outlives the run**: the box's first process is its PID namespace's init; when the
  run ends, or the host kills bubblewrap (`--die-with-parent`), the kernel kills every process
  in that namespace, `setsid` grandchildren included.

What comes back is bounded by the host, whatever the box printed: a case's value is JSON (the
caller decides what of it to show), an exception is reduced to the name of a built-in exception
class, and every failure is one of a fixed set of sentences. So a run can say pass or fail and
which limit or exception, but cannot smuggle a string of its choosing into a signed entry.

**Fail closed.** `ACCORD_SANDBOX` chooses the mode: `bwrap` (the default) or `none`. Where the
box cannot be made (bubblewrap or libseccomp missing, user namespaces disabled or restricted),
`run_function_cases` raises SandboxUnavailable naming the cause and runs nothing. Only
`ACCORD_SANDBOX=none`, an operator's explicit choice for a trusted local setup, runs code
unboxed (still rlimited, in its own session and temporary directory); every run reports the
mode it ran in, and settlements and exam grades record it.

The interpreter runs with `-S -s -P` and an explicit environment rather than `-I`, because `-I`
ignores `PYTHONHASHSEED`; a fixed hash seed keeps results deterministic for code whose results
depend on the order of sets or dicts of strings, so an auditor re-running it gets the same
verdict.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import glob
import json
import os
import selectors
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from accord.identity.challenges.base import JSON
from accord.identity.challenges.seccomp import filter_program
from accord.identity.errors import ExamError, SandboxUnavailable

MiB = 1024 * 1024
RESULT_MARKER = "\x1eACCORD-SANDBOX-RESULT\x1e"
STARTED_MARKER = "\x1eACCORD-SANDBOX-STARTED\x1e"
SANDBOX_ENV = "ACCORD_SANDBOX"
BOX_WORKERS_ENV = "ACCORD_BOX_WORKERS"
BOXED: Literal["bwrap"] = "bwrap"
UNBOXED: Literal["none"] = "none"
SandboxMode = Literal["bwrap", "none"]
BOX_UID = 65534
BOX_TMP = "/tmp"
STDERR_BYTES = 16 * 1024

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
write(result_fd, limits["started"].encode("utf-8"))  # the box is made: what follows is the code's


def emit(result):
    data = ("\n" + marker + dumps(result) + "\n").encode("utf-8")
    while data:
        data = data[write(result_fd, data):]
    exit_now(0)


def limit(kind, value):
    resource.setrlimit(kind, (value, value))


limit(resource.RLIMIT_CORE, 0)
limit(resource.RLIMIT_FSIZE, limits["file_bytes"])
limit(resource.RLIMIT_NOFILE, limits["open_files"])
limit(resource.RLIMIT_AS, limits["memory_bytes"])
if limits["processes"]:
    limit(resource.RLIMIT_NPROC, limits["processes"])
resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"] + 1))


def cpu_used():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- a fixed world: the clock stands at `frozen.at`, and every draw of entropy comes from a
# stream of `frozen.seed`, flagged unless the code seeded the generator it draws from itself.
import datetime as _dt, hashlib as _hashlib, random as _random, time as _time

FROZEN_AT = int(request["frozen"]["at"])
FROZEN_SEED = request["frozen"]["seed"].encode("utf-8")
world = {"block": 0, "pool": b"", "drawn": False, "seeded": False}


def stream(n):
    n = int(n)
    if n < 0:
        raise ValueError("negative argument not allowed")
    while len(world["pool"]) < n:
        block = world["block"].to_bytes(8, "big")
        world["pool"] += _hashlib.sha256(FROZEN_SEED + b"/" + block).digest()
        world["block"] += 1
    out, world["pool"] = world["pool"][:n], world["pool"][n:]
    return out


def urandom(n):
    world["drawn"] = True
    return stream(n)


os.urandom = urandom
_random._urandom = urandom
_instance_seed = _random.Random.seed


def instance_seed(self, a=None, version=2):
    if a is None:
        world["drawn"] = True
        a = int.from_bytes(stream(32), "big")
    return _instance_seed(self, a, version)


_random.Random.seed = instance_seed
_global = _random._inst
_instance_seed(_global, int.from_bytes(_hashlib.sha256(FROZEN_SEED + b"/global").digest(), "big"))


def global_seed(a=None, version=2):
    if a is None:
        world["drawn"] = True
        a = int.from_bytes(stream(32), "big")
    else:
        world["seeded"] = True
    _instance_seed(_global, a, version)


def drawing(method):
    def draw(*args, **kwargs):
        if not world["seeded"]:
            world["drawn"] = True
        return method(*args, **kwargs)

    return draw


_random.seed = global_seed
for _name in dir(_global):
    if not _name.startswith("_") and _name not in ("seed", "getstate", "setstate"):
        if callable(getattr(_random, _name, None)) and hasattr(_global, _name):
            if getattr(_random, _name) == getattr(_global, _name):
                setattr(_random, _name, drawing(getattr(_global, _name)))


def fixed(value):
    return lambda *args: value


_time.time, _time.time_ns = fixed(float(FROZEN_AT)), fixed(FROZEN_AT * 1_000_000_000)
for _name in ("monotonic", "perf_counter", "process_time", "thread_time"):
    setattr(_time, _name, fixed(0.0))
    setattr(_time, _name + "_ns", fixed(0))
_localtime, _gmtime, _ctime = _time.localtime, _time.gmtime, _time.ctime
_asctime, _strftime, _clock_gettime = _time.asctime, _time.strftime, _time.clock_gettime
_time.localtime = lambda secs=None: _localtime(FROZEN_AT if secs is None else secs)
_time.gmtime = lambda secs=None: _gmtime(FROZEN_AT if secs is None else secs)
_time.ctime = lambda secs=None: _ctime(FROZEN_AT if secs is None else secs)
_time.asctime = lambda t=None: _asctime(_localtime(FROZEN_AT) if t is None else t)
_time.strftime = lambda fmt, t=None: _strftime(fmt, _localtime(FROZEN_AT) if t is None else t)
_time.clock_gettime = lambda clock: float(FROZEN_AT) if clock == _time.CLOCK_REALTIME else 0.0
_time.clock_gettime_ns = lambda clock: int(_time.clock_gettime(clock) * 1_000_000_000)


class FrozenDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls.fromtimestamp(FROZEN_AT, tz)

    @classmethod
    def utcnow(cls):
        return cls.utcfromtimestamp(FROZEN_AT)

    @classmethod
    def today(cls):
        return cls.fromtimestamp(FROZEN_AT)


class FrozenDate(_dt.date):
    @classmethod
    def today(cls):
        return cls.fromtimestamp(FROZEN_AT)


FrozenDatetime.__name__ = FrozenDatetime.__qualname__ = "datetime"
FrozenDate.__name__ = FrozenDate.__qualname__ = "date"
_dt.datetime, _dt.date = FrozenDatetime, FrozenDate


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


def check_prints():
    if sink.exceeded:
        emit({"status": "print_limit"})


try:
    code = compile(request["source"], "<answer>", "exec")
except SyntaxError as exc:
    emit({"status": "syntax_error", "line": exc.lineno})
except BaseException as exc:
    emit({"status": "syntax_error", "line": None, "error": type(exc).__name__})

namespace = {"__name__": "__answer__", "__builtins__": builtins}
try:
    exec(code, namespace)
except MemoryError:
    emit({"status": "memory_error"})
except BaseException as exc:
    check_prints()
    emit({"status": "load_error", "error": type(exc).__name__})
check_prints()

function = namespace.get(request["function"])
if not callable(function):
    emit({"status": "missing_function"})



def spent(started):
    return {"cpu": round(cpu_used() - started, 3), "entropy": world["drawn"]}


results = []
budget = limits["result_bytes"]
loaded = (_global.getstate(), dict(world))
for args in request["cases"]:
    _global.setstate(loaded[0])  # each call starts from the world as the source left it
    world.update(loaded[1], drawn=False)
    started = cpu_used()
    try:
        value = function(*args)
    except MemoryError:
        emit({"status": "memory_error"})
    except PrintLimitExceeded:
        emit({"status": "print_limit"})
    except BaseException as exc:
        check_prints()
        results.append({"error": type(exc).__name__, **spent(started)})
        continue
    check_prints()
    try:
        encoded = dumps(value)
    except MemoryError:
        emit({"status": "memory_error"})
    except BaseException:
        results.append({"not_json": type(value).__name__, **spent(started)})
        continue
    budget -= len(encoded)
    if budget < 0:
        emit({"status": "result_too_large"})
    results.append({"value": value, **spent(started)})
emit({"status": "ok", "results": results})
"""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run. Raises ExamError when constructed with nonsense."""

    cpu_seconds: int = 2
    wall_seconds: float = 5.0
    memory_bytes: int = 256 * MiB
    """Address space of each process in the box."""
    output_bytes: int = 1 * MiB
    """Cap on what the box writes to its stdout; the run fails on reaching it."""
    print_chars: int = 64 * 1024
    """Cap on characters the code prints through `print`/`sys.stdout`; beyond it the run fails."""
    processes: int = 16
    """RLIMIT_NPROC of the box: a second layer, since its seccomp filter forbids new processes
    anyway (the kernel does not apply it when the operator runs as root)."""
    file_bytes: int = 1 * MiB
    """Cap on the size of any one file the code writes."""
    tmp_bytes: int = 8 * MiB
    """Size of the box's private /tmp (its working directory); /dev/shm gets a quarter."""
    open_files: int = 64

    def __post_init__(self) -> None:
        if self.cpu_seconds < 1 or self.wall_seconds <= 0:
            raise ExamError("sandbox time limits must be positive")
        if self.memory_bytes < 64 * MiB:
            raise ExamError("the interpreter needs at least 64 MiB of address space")
        if self.output_bytes < 4096 or self.print_chars < 0:
            raise ExamError("sandbox output limits are too small")
        if self.processes < 2 or self.open_files < 16:
            raise ExamError("the interpreter needs 2 processes and 16 open files at least")
        if self.file_bytes < 4096 or self.tmp_bytes < 64 * 1024:
            raise ExamError("sandbox file limits are too small")


DEFAULT_LIMITS = SandboxLimits()


@dataclass(frozen=True)
class CaseResult:
    """What one call returned (`value`), or why it did not (`error`: "raised X" for a built-in
    exception class X, or "returned a T, which is not JSON"; never words the code chose)."""

    value: JSON = None
    error: str | None = None
    cpu_seconds: float = 0.0
    """CPU time the call took (user and system, every thread), as the box measured it."""
    entropy: bool = False
    """Whether the call drew entropy: `os.urandom`, `secrets`, `uuid4`, `random` without a
    seed the code set itself. Its result then depends on the run's seed, not only its inputs."""


@dataclass(frozen=True)
class Frozen:
    """The world boxed code sees: the clock stands still at `at` (unix seconds: `time.time`,
    `datetime.now` and friends; the monotonic clocks read 0), and every draw of entropy comes
    from a stream of `seed` (`os.urandom`, `random`'s generators, `secrets`, `uuid4`). The same
    source, inputs and world give the same results, whoever runs them and whenever."""

    at: int
    seed: str

    def __post_init__(self) -> None:
        if isinstance(self.at, bool) or not isinstance(self.at, int) or not 0 <= self.at < 2**40:
            raise ExamError("a frozen clock is whole unix seconds")
        if not isinstance(self.seed, str) or not 0 < len(self.seed) <= 256:
            raise ExamError("a frozen world's seed is text of 1 to 256 characters")


DEFAULT_WORLD = Frozen(at=1_700_000_000, seed="accord-box/1")
"""The world of a run whose caller names none (exam answers): 2023-11-14T22:13:20Z."""


@dataclass(frozen=True)
class SandboxRun:
    """The outcome of one run: results per case, or `failure` saying why there are none;
    `mode` is how it ran (`bwrap`, or `none` when the operator turned the box off)."""

    results: tuple[CaseResult, ...]
    failure: str | None = None
    mode: SandboxMode = BOXED


# -- what may come back --------------------------------------------------------------------

BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)


def exception_name(raw: object) -> str:
    """Pure: `raw` if it names a built-in exception class, else a fixed phrase: the box may
    say which built-in exception its code raised, not choose the words."""
    if isinstance(raw, str) and raw in BUILTIN_EXCEPTIONS:
        return raw
    return "an exception of a class that is not built in"


def _json_type(raw: object) -> str:
    names = {"dict", "list", "set", "tuple", "bytes", "function", "generator", "object"}
    return raw if isinstance(raw, str) and raw in names else "an object"


def _failure_from_status(
    result: Mapping[str, JSON], limits: SandboxLimits, name: str, source_lines: int
) -> str:
    status = result.get("status")
    if status == "syntax_error":
        line = result.get("line")
        if isinstance(line, int) and not isinstance(line, bool) and 1 <= line <= source_lines:
            return f"syntax error: line {line}"
        return "syntax error"
    if status == "load_error":
        return f"the source raised while loading: {exception_name(result.get('error'))}"
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
    return "the run returned an unknown status"


def _interpret(
    stdout: bytes,
    stderr: bytes,
    returncode: int,
    ended_by: str | None,
    limits: SandboxLimits,
    function_name: str,
    case_count: int,
    source_lines: int,
) -> tuple[tuple[CaseResult, ...], str | None]:
    """Pure: what a run's pipes and exit status say, as (results, failure)."""
    if ended_by == "wall":
        return (), f"wall-clock limit of {limits.wall_seconds:g} s exceeded"
    if ended_by == "output":
        return (), f"output limit of {limits.output_bytes} bytes exceeded"
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU, 128 + 9):
        return (), f"CPU time limit of {limits.cpu_seconds} s exceeded"
    if returncode in (-signal.SIGSYS, 128 + signal.SIGSYS):
        return (), "the box's seccomp filter killed the run (a forbidden system call)"
    marker = RESULT_MARKER.encode("utf-8")
    position = stdout.rfind(marker)
    if position < 0:
        if b"MemoryError" in stderr:
            return (), f"memory limit of {limits.memory_bytes // MiB} MiB exceeded"
        return (), f"the interpreter ended without results (exit {returncode})"
    try:
        result = json.loads(stdout[position + len(marker) :].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return (), "the sandbox result was garbled (did the code write to fd 1?)"
    if not isinstance(result, dict):
        return (), "the sandbox result was garbled"
    if result.get("status") != "ok":
        return (), _failure_from_status(result, limits, function_name, source_lines)
    raw_results = result.get("results")
    if not isinstance(raw_results, list) or len(raw_results) != case_count:
        return (), "the sandbox returned the wrong number of results"
    cases = []
    for raw in raw_results:
        if not isinstance(raw, dict):
            cases.append(CaseResult(error=f"raised {exception_name(None)}"))
            continue
        spent = _spent(raw)
        if "value" in raw:
            cases.append(CaseResult(raw["value"], None, *spent))
        elif "not_json" in raw:
            shown = _json_type(raw["not_json"])
            cases.append(CaseResult(None, f"returned a {shown}, which is not JSON", *spent))
        else:
            cases.append(CaseResult(None, f"raised {exception_name(raw.get('error'))}", *spent))
    return tuple(cases), None


def _spent(raw: Mapping[str, JSON]) -> tuple[float, bool]:
    """Pure: a case's CPU seconds and entropy flag as the harness reported them, bounded."""
    cpu = raw.get("cpu")
    seconds = float(cpu) if isinstance(cpu, int | float) and not isinstance(cpu, bool) else 0.0
    return min(max(seconds, 0.0), 1e6), raw.get("entropy") is True


# -- choosing and making the box -----------------------------------------------------------


def sandbox_mode(environ: Mapping[str, str] | None = None) -> SandboxMode:
    """The mode `ACCORD_SANDBOX` sets (`bwrap` when unset).

    Raises SandboxUnavailable for any other value: a typo must not turn the box off.
    """
    env = os.environ if environ is None else environ
    value = env.get(SANDBOX_ENV, BOXED).strip() or BOXED
    if value == BOXED:
        return BOXED
    if value == UNBOXED:
        return UNBOXED
    raise SandboxUnavailable(
        f"{SANDBOX_ENV}={value!r} names no sandbox mode: use {BOXED} (the default) or "
        f"{UNBOXED} (runs strangers' code unboxed; only for a trusted local setup)"
    )


@dataclass(frozen=True)
class InterpreterView:
    """What the box shows of the host: read-only binds, symlinks, and directories masked."""

    interpreter: str
    binds: tuple[str, ...]
    symlinks: tuple[tuple[str, str], ...]
    masks: tuple[str, ...]


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


@functools.cache
def interpreter_view() -> InterpreterView:
    """The running interpreter's binary, standard library and shared libraries, as paths.

    Raises SandboxUnavailable when the interpreter or its standard library cannot be found.
    """
    interpreter = os.path.realpath(sys.executable)
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    if not os.path.isfile(interpreter) or not os.path.isfile(os.path.join(stdlib, "os.py")):
        raise SandboxUnavailable(
            f"cannot find the interpreter ({interpreter}) and its standard library ({stdlib})"
        )
    binds: list[str] = []
    symlinks: list[tuple[str, str]] = []
    for top in ("/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(top):
            symlinks.append((os.readlink(top), top))
        elif os.path.isdir(top):
            binds.append(top)
    for libs in ("/usr/lib", "/usr/lib64", "/usr/lib32"):
        if os.path.isdir(libs) and not os.path.islink(libs):
            binds.append(libs)
    for path in (interpreter, stdlib):
        if not _under(path, binds):
            binds.append(path)
    libdir = sysconfig.get_config_var("LIBDIR")
    soname = sysconfig.get_config_var("INSTSONAME")
    if libdir and soname and sysconfig.get_config_var("Py_ENABLE_SHARED"):
        shared = os.path.realpath(os.path.join(libdir, soname))
        if os.path.isfile(shared) and not _under(shared, binds):
            binds.append(shared)
    # Installed packages are not the interpreter: every site directory inside a bind is masked.
    sites = {os.path.join(stdlib, "site-packages"), os.path.join(stdlib, "dist-packages")}
    sites |= set(glob.glob("/usr/lib/python3*/*-packages"))
    sites |= {*site.getsitepackages(), site.getusersitepackages()}
    sites = {os.path.realpath(p) for p in sites}
    masks = tuple(sorted(p for p in sites if os.path.isdir(p) and _under(p, binds)))
    return InterpreterView(interpreter, tuple(binds), tuple(symlinks), masks)


def box_environment() -> dict[str, str]:
    """The whole environment of boxed code: nothing of the host's."""
    return {
        "PATH": "/nonexistent",
        "HOME": BOX_TMP,
        "TMPDIR": BOX_TMP,
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }


def bwrap_arguments(view: InterpreterView, limits: SandboxLimits, seccomp_fd: int) -> list[str]:
    """Pure: bubblewrap's options for one run (everything between `bwrap` and the command)."""
    args = [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--disable-userns",
        "--uid",
        str(BOX_UID),
        "--gid",
        str(BOX_UID),
        "--hostname",
        "box",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
    ]
    for path in view.binds:
        args += ["--ro-bind", path, path]
    for target, path in view.symlinks:
        args += ["--symlink", target, path]
    for path in view.masks:
        args += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]
    args += [
        "--dev",
        "/dev",
        "--size",
        str(max(limits.tmp_bytes // 4, 64 * 1024)),
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--size",
        str(limits.tmp_bytes),
        "--tmpfs",
        BOX_TMP,
        "--remount-ro",  # the box's own root: bwrap makes it a tmpfs with no size limit
        "/",
        "--chdir",
        BOX_TMP,
    ]
    for key, value in box_environment().items():
        args += ["--setenv", key, value]
    args += ["--seccomp", str(seccomp_fd)]
    return args


def _bwrap_path() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed, so strangers' code cannot be boxed: install "
            f"the bubblewrap package (`make setup` does), or set {SANDBOX_ENV}={UNBOXED} only "
            "for a trusted local setup"
        )
    return found


# -- running -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Exit:
    stdout: bytes
    stderr: bytes
    returncode: int
    ended_by: str | None


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _communicate(process: subprocess.Popen[bytes], request: bytes, limits: SandboxLimits) -> _Exit:
    """Feed stdin, read stdout and stderr with bounds, and end the run at its wall clock or
    output limit (killing the process group, which takes the box's PID namespace with it)."""
    assert process.stdin and process.stdout and process.stderr
    deadline = time.monotonic() + limits.wall_seconds
    selector = selectors.DefaultSelector()
    out, err = bytearray(), bytearray()
    pending = memoryview(request)
    os.set_blocking(process.stdin.fileno(), False)
    selector.register(process.stdin, selectors.EVENT_WRITE)
    selector.register(process.stdout, selectors.EVENT_READ, out)
    selector.register(process.stderr, selectors.EVENT_READ, err)
    ended_by: str | None = None
    try:
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                ended_by = "wall"
                break
            for key, _ in selector.select(remaining):
                if key.fileobj is process.stdin:
                    try:
                        written = os.write(process.stdin.fileno(), pending[:65536])
                    except BlockingIOError:
                        written = 0
                    except BrokenPipeError:  # the box stopped reading: the rest is not needed
                        written = len(pending)
                    pending = pending[written:]
                    if not pending:
                        selector.unregister(process.stdin)
                        process.stdin.close()
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                sink: bytearray = key.data
                cap = limits.output_bytes if sink is out else STDERR_BYTES
                if len(sink) < cap:
                    sink += chunk[: cap - len(sink)]
                if sink is out and len(out) >= limits.output_bytes:
                    ended_by = "output"
                    break
            if ended_by:
                break
    finally:
        selector.close()
        if ended_by:
            _kill_group(process.pid)
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
        except subprocess.TimeoutExpired:
            ended_by = ended_by or "wall"
            _kill_group(process.pid)
            process.wait()
        _kill_group(process.pid)
        for stream in (process.stdin, process.stdout, process.stderr):
            with contextlib.suppress(OSError):
                stream.close()
    return _Exit(bytes(out), bytes(err), process.returncode, ended_by)


def _harness_limits(limits: SandboxLimits, processes: int) -> str:
    return json.dumps(
        {
            "cpu_seconds": limits.cpu_seconds,
            "memory_bytes": limits.memory_bytes,
            "file_bytes": limits.file_bytes,
            "open_files": limits.open_files,
            "processes": processes,
            "print_chars": limits.print_chars,
            "result_bytes": limits.output_bytes // 2,
            "marker": RESULT_MARKER,
            "started": STARTED_MARKER,
        }
    )


def _run_boxed(request: bytes, limits: SandboxLimits) -> _Exit:
    """Raises SandboxUnavailable when bubblewrap or libseccomp is missing or cannot start."""
    bwrap = _bwrap_path()
    view = interpreter_view()
    program = filter_program()
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)  # a few KiB: fits the pipe's buffer
        os.close(write_end)
        write_end = -1
        command = [
            bwrap,
            *bwrap_arguments(view, limits, read_end),
            view.interpreter,
            "-S",
            "-s",
            "-P",
            "-c",
            HARNESS,
            _harness_limits(limits, limits.processes),
        ]
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={},
                cwd="/",
                start_new_session=True,
                close_fds=True,
                pass_fds=(read_end,),
            )
        except OSError as exc:
            raise SandboxUnavailable(f"cannot start bubblewrap ({bwrap}): {exc}") from exc
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    return _communicate(process, request, limits)


def _run_unboxed(request: bytes, limits: SandboxLimits) -> _Exit:
    """Raises ExamError when the interpreter cannot be started."""
    with tempfile.TemporaryDirectory(prefix="accord-unboxed-", ignore_cleanup_errors=True) as root:
        environment = box_environment() | {"HOME": root, "TMPDIR": root, "PATH": "/usr/bin:/bin"}
        try:
            process = subprocess.Popen(
                # No RLIMIT_NPROC here: unboxed, it would count every process of the user.
                [sys.executable, "-S", "-s", "-P", "-c", HARNESS, _harness_limits(limits, 0)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=root,
                env=environment,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise ExamError(f"cannot start the sandbox interpreter: {exc}") from exc
        return _communicate(process, request, limits)


_BOX_CHECKED: list[bool] = []


def check_box(mode: SandboxMode | None = None) -> SandboxMode:
    """The mode strangers' code will run in; for `bwrap`, finds bubblewrap and proves the box
    can be made by running a trivial function in it (once per process until it succeeds).

    Raises SandboxUnavailable naming the cause when it cannot.
    """
    chosen = sandbox_mode() if mode is None else mode
    if chosen == UNBOXED:
        return chosen
    _bwrap_path()  # cheap, and the tool may have gone since the last proof
    if _BOX_CHECKED:
        return chosen
    request = _request("def f():\n    return 1\n", "f", [[]], DEFAULT_WORLD)
    exit_ = _run_boxed(request, DEFAULT_LIMITS)
    results, failure = _interpret(
        exit_.stdout, exit_.stderr, exit_.returncode, exit_.ended_by, DEFAULT_LIMITS, "f", 1, 2
    )
    if failure is not None or results[0].value != 1:
        said = exit_.stderr.decode("utf-8", "replace").strip().splitlines()
        cause = said[-1][:300] if said else (failure or "it returned the wrong value")
        raise SandboxUnavailable(
            f"the box cannot be made here: bubblewrap said {cause!r}. Unprivileged user "
            "namespaces may be disabled (sysctl user.max_user_namespaces, "
            "kernel.unprivileged_userns_clone) or restricted by AppArmor "
            "(kernel.apparmor_restrict_unprivileged_userns)"
        )
    _BOX_CHECKED.append(True)
    return chosen


def box_workers(environ: Mapping[str, str] | None = None) -> int:
    """How many boxes run at once in this process (`ACCORD_BOX_WORKERS`; default one per core);
    further runs wait their turn, so a flood of checks queues instead of taking the machine.

    Raises SandboxUnavailable for a value that is not a whole number from 1 to 256.
    """
    env = os.environ if environ is None else environ
    raw = env.get(BOX_WORKERS_ENV, "").strip()
    if not raw:
        return max(1, os.cpu_count() or 1)
    if not raw.isdigit() or not 1 <= int(raw) <= 256:
        raise SandboxUnavailable(
            f"{BOX_WORKERS_ENV}={raw!r}: how many boxes may run at once, a whole number 1..256"
        )
    return int(raw)


@functools.cache
def _box_slots(workers: int) -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(workers)


def _request(
    source: str, function_name: str, cases: Sequence[Sequence[JSON]], world: Frozen
) -> bytes:
    """Raises ExamError when the inputs are not JSON."""
    try:
        return json.dumps(
            {
                "source": source,
                "function": function_name,
                "cases": [list(c) for c in cases],
                "frozen": {"at": world.at, "seed": world.seed},
            }
        ).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ExamError(f"sandbox inputs must be JSON: {exc}") from exc


def _never_started(exit_: _Exit, mode: SandboxMode) -> SandboxUnavailable:
    """The error of a run whose harness never started: the box could not be made this time
    (bubblewrap refused, no PIDs or memory left, the host too loaded to start it in time)."""
    said = exit_.stderr.decode("utf-8", "replace").strip().splitlines()
    cause = said[-1][:300] if said else f"exit {exit_.returncode}, ended by {exit_.ended_by}"
    where = "the box" if mode == BOXED else "the unboxed interpreter"
    return SandboxUnavailable(
        f"{where} could not be made for this run ({cause!r}); nothing ran: try again later"
    )


def run_function_cases(
    source: str,
    function_name: str,
    cases: Sequence[Sequence[JSON]],
    limits: SandboxLimits = DEFAULT_LIMITS,
    *,
    mode: SandboxMode | None = None,
    world: Frozen = DEFAULT_WORLD,
) -> SandboxRun:
    """Define `source` in a fresh box, call `function_name(*args)` per case, in `world`.

    Each call starts from the state the source left after loading (the generators reseeded
    as they were), so calls of a deterministic function on the same arguments agree. At most
    `box_workers()` runs are in boxes at once per process; the others wait their turn.
    `mode` defaults to what `ACCORD_SANDBOX` says. Every failure of the code itself (syntax
    error, exception, timeout, memory, output flood, missing function, a forbidden system call)
    is reported in the result, never raised. Raises SandboxUnavailable when the box cannot be
    made, at the first probe or for this run (nothing ran), and ExamError when the inputs are
    not JSON or the unboxed interpreter cannot start.
    """
    request = _request(source, function_name, cases, world)
    chosen = check_box(mode)
    with _box_slots(box_workers()):  # the wall clock starts once the box does, not in the queue
        exit_ = _run_boxed(request, limits) if chosen == BOXED else _run_unboxed(request, limits)
    if STARTED_MARKER.encode("utf-8") not in exit_.stdout:
        raise _never_started(exit_, chosen)
    results, failure = _interpret(
        exit_.stdout,
        exit_.stderr,
        exit_.returncode,
        exit_.ended_by,
        limits,
        function_name,
        len(cases),
        source.count("\n") + 1,
    )
    return SandboxRun(results, failure, chosen)
