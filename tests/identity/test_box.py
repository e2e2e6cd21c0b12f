"""The box at its seam (`run_function_cases`): the hostile corpus of tests/hostile_code.py
fails inside it while a benign program passes; nothing reaches the home, the loopback or the
log's words; nothing outlives a run; and where the box cannot be made, nothing runs.

The same corpus runs through settlement, the audit and the python exam in
tests/integration/test_hostile_code.py.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from accord.identity.challenges.sandbox import (
    BOX_TMP,
    Frozen,
    SandboxLimits,
    box_workers,
    bwrap_arguments,
    check_box,
    exception_name,
    interpreter_view,
    run_function_cases,
    sandbox_mode,
)
from accord.identity.errors import SandboxUnavailable
from tests.hostile_code import (
    BENIGN,
    Listener,
    Target,
    home_files,
    hostile_programs,
    survivors,
)

LIMITS = SandboxLimits(cpu_seconds=1, wall_seconds=20.0)
PROJECT = Path(__file__).resolve().parents[2]
OUTPUTS = {"lines-sum": "12.50"}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home as an attacker would find it: keys and a database."""
    home = tmp_path_factory.mktemp("home")
    (home / "keys").mkdir()
    (home / "keys" / "operator.json").write_text(json.dumps({"seed": secrets.token_hex(32)}))
    (home / "accord.db").write_bytes(b"SQLite format 3\x00" + bytes(4080))
    return home


def test_the_hostile_corpus_fails_in_the_box_and_touches_nothing(home: Path) -> None:
    marker = f"accord-survivor-{secrets.token_hex(8)}"
    before = home_files(home)
    key_before = (home / "keys" / "operator.json").read_text()
    with Listener() as listener:
        programs = hostile_programs(Target(home, listener.port, marker))
        outcomes = {}
        for name, source in programs.items():
            run = run_function_cases(source, "check", [[OUTPUTS]], LIMITS)
            assert run.mode == "bwrap"
            worked = run.failure is None and run.results[0].value is True
            outcomes[name] = (worked, run.failure or run.results[0].error)
    assert not [name for name, (worked, _) in outcomes.items() if worked], outcomes
    assert listener.received == [], "something reached the loopback listener"
    assert home_files(home) == before
    assert (home / "keys" / "operator.json").read_text() == key_before
    assert survivors(marker) == []
    # what comes back is the host's words: the smuggler's secret is not among them
    said = json.dumps(outcomes)
    assert "LEAK" not in said and marker not in said and key_before not in said
    assert outcomes["smuggle a secret through the verdict"][1] == "raised ValueError"
    assert "CPU time limit" in str(outcomes["spin past the CPU limit"][1])
    benign = run_function_cases(BENIGN, "check", [[OUTPUTS]], LIMITS)
    assert benign.failure is None and benign.results[0].value is True


def test_the_box_sees_only_the_runtime() -> None:
    source = (
        "import os\n"
        "def check():\n"
        "    return [sorted(os.listdir('/')), sorted(os.listdir('/dev')), os.getcwd(),\n"
        "            os.getuid(), sorted(os.environ), os.path.exists('/proc'),\n"
        "            open('/proc/self/status').read() if os.path.exists('/proc') else None]\n"
    )
    run = run_function_cases(source, "check", [[]], LIMITS)
    assert run.failure is None, run.failure
    top, dev, cwd, uid, environment, has_proc, _ = run.results[0].value  # type: ignore[misc]
    assert set(top) <= {"usr", "lib", "lib64", "lib32", "libx32", "dev", "tmp", "root", "opt"}
    assert "etc" not in top and "home" not in top and "work" not in top
    devices = {"null", "zero", "full", "random", "urandom", "tty", "shm", "pts", "ptmx"}
    assert set(dev) <= devices | {"fd", "stdin", "stdout", "stderr", "core"}
    assert (cwd, uid, has_proc) == (BOX_TMP, 65534, False)
    assert not [key for key in environment if key.startswith(("ACCORD", "PG", "OPENAI"))]


def test_the_view_binds_no_home_project_or_etc(home: Path) -> None:
    view = interpreter_view()
    for path in view.binds:
        assert not path.startswith(str(PROJECT)), path
        assert not path.startswith(str(home)), path
        assert not path.startswith(("/etc", "/home", "/var", "/work")), path
    assert all(mask.endswith(("site-packages", "dist-packages")) for mask in view.masks)
    args = bwrap_arguments(view, LIMITS, 9)
    for flag in (
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ):
        assert flag in args
    assert args[args.index("--cap-drop") + 1] == "ALL"
    assert args[args.index("--seccomp") + 1] == "9"
    assert "--bind" not in args and "--dev-bind" not in args, "nothing writable from the host"
    assert args[args.index("/tmp") + 1 : args.index("/tmp") + 3] == ["--remount-ro", "/"]


def test_the_box_holds_no_privilege_and_no_terminal() -> None:
    """NO_NEW_PRIVS, an empty capability bounding set, a session of the box's own (its leader
    is the box's init or the interpreter) and no controlling terminal to inject into."""
    source = (
        "import ctypes, os\n"
        "def check():\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    no_new_privs = libc.prctl(39, 0, 0, 0, 0)  # PR_GET_NO_NEW_PRIVS\n"
        "    bounding = [libc.prctl(23, cap, 0, 0, 0) for cap in range(41)]  # PR_CAPBSET_READ\n"
        "    try:\n"
        "        open('/dev/tty', 'w')\n"
        "        tty = 'opened'\n"
        "    except OSError as exc:\n"
        "        tty = type(exc).__name__\n"
        "    return [no_new_privs, max(bounding), os.getsid(0) in (1, os.getpid()), tty]\n"
    )
    run = run_function_cases(source, "check", [[]], LIMITS)
    assert run.failure is None, run.failure
    assert run.results[0].value == [1, 0, True, "OSError"]


def test_a_thread_bomb_gets_one_thread_whoever_runs_the_box() -> None:
    """The filter denies every clone, so boxed code runs one thread: a bomb starts none, as
    root (whom RLIMIT_NPROC does not bind) as for any user, and leaves nothing behind."""
    marker = f"accord-thread-{secrets.token_hex(6)}"
    source = (
        "import threading, time\n"
        "def check():\n"
        "    started = 0\n"
        "    for _ in range(5000):\n"
        "        try:\n"
        f"            threading.Thread(target=time.sleep, args=(60,), name='{marker}').start()\n"
        "            started += 1\n"
        "        except RuntimeError:\n"
        "            pass\n"
        "    return [started, threading.active_count()]\n"
    )
    run = run_function_cases(source, "check", [[]], LIMITS)
    assert run.failure is None, run.failure
    assert run.results[0].value == [0, 1]
    assert survivors(marker) == []


NOBODY = 65534
AS_NOBODY = """
import json, site, sys
site.addsitedir(sys.argv[1])
from accord.identity.challenges.sandbox import SandboxLimits, run_function_cases
limits = SandboxLimits(cpu_seconds=1, wall_seconds=20.0)
run = run_function_cases(sys.argv[2], "check", [[]], limits)
print(json.dumps({"failure": run.failure, "values": [r.value for r in run.results]}))
"""


def thread_bomb(marker: str) -> str:
    return (
        "import threading, time\n"
        "def check():\n"
        "    started = 0\n"
        "    for _ in range(5000):\n"
        "        try:\n"
        f"            threading.Thread(target=time.sleep, args=(60,), name='{marker}').start()\n"
        "            started += 1\n"
        "        except RuntimeError:\n"
        "            pass\n"
        "    return [started, threading.active_count()]\n"
    )


def as_nobody(setpriv: str, interpreter: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`interpreter` run by uid and gid 65534 with no other groups, in a bare environment."""
    return subprocess.run(
        [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", interpreter, *args],
        capture_output=True,
        text=True,
        cwd="/",
        env={"HOME": "/tmp", "PATH": "/usr/bin:/bin", "ACCORD_SANDBOX": "bwrap"},
        timeout=120,
    )


def nobodys_interpreter(setpriv: str) -> str | None:
    """An interpreter of this Python's version that uid 65534 can run, whose binary and
    standard library it can read (the box binds them) and that finds accord (this one, or the
    system's of the same version), or None."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    site_dir = sysconfig.get_paths()["purelib"]
    probe = (
        "import site, sys; site.addsitedir(sys.argv[1]); "
        "from accord.identity.challenges.sandbox import interpreter_view; "
        "interpreter_view(); print(sys.version)"
    )
    for candidate in (
        sys.executable,
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
    ):
        if not os.path.exists(candidate):
            continue
        found = as_nobody(setpriv, candidate, "-s", "-c", probe, site_dir)
        if found.returncode == 0 and found.stdout.startswith(version):
            return candidate
    return None


def test_a_thread_bomb_gets_one_thread_as_an_unprivileged_user() -> None:
    """The same bomb, with the box made by an unprivileged user (uid 65534), whom
    RLIMIT_NPROC binds: the filter lets no thread start either. When the tests run as root,
    the box is made in a child process run as uid 65534 (setpriv), with an interpreter that
    user can run; when they run as a user, here (the test above is then that case too)."""
    marker = f"accord-thread-{secrets.token_hex(6)}"
    if os.geteuid() != 0:
        run = run_function_cases(thread_bomb(marker), "check", [[]], LIMITS)
        assert run.failure is None, run.failure
        assert run.results[0].value == [0, 1]
        assert survivors(marker) == []
        return
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed: the box cannot be made as uid 65534")
    interpreter = nobodys_interpreter(setpriv)
    if interpreter is None:
        pytest.skip(
            f"no Python {sys.version_info.major}.{sys.version_info.minor} that uid 65534 can "
            f"run finds accord here ({sys.executable} is not readable by that user)"
        )
    site_dir = sysconfig.get_paths()["purelib"]
    done = as_nobody(setpriv, interpreter, "-s", "-c", AS_NOBODY, site_dir, thread_bomb(marker))
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"failure": None, "values": [[0, 1]]}
    assert survivors(marker) == []


def test_a_process_started_by_the_box_never_outlives_it() -> None:
    """Neither a thread nor a process can be started, so nothing of the run is left: the run
    ends when the function returns, and the PID namespace goes with its init."""
    marker = f"accord-thread-{secrets.token_hex(6)}"
    source = (
        "import os, threading, time\n"
        "def check():\n"
        "    refused = []\n"
        "    try:\n"
        "        threading.Thread(target=time.sleep, args=(60,)).start()\n"
        "    except RuntimeError:\n"
        "        refused.append('thread')\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        refused.append('fork')\n"
        f"    return [refused, '{marker}']\n"
    )
    run = run_function_cases(source, "check", [[]], LIMITS)
    assert run.results[0].value == [["thread", "fork"], marker]
    assert survivors(marker) == []


FROZEN_PROBE = (
    "import datetime, os, random, time, uuid\n"
    "def check(tag):\n"
    "    return [tag, time.time(), time.time_ns(), time.monotonic(), time.strftime('%Y-%m-%d'),\n"
    "            datetime.datetime.now().isoformat(), datetime.date.today().isoformat(),\n"
    "            random.random(), os.urandom(4).hex(), str(uuid.uuid4())]\n"
)


def test_the_world_in_the_box_is_fixed_by_its_clock_and_seed() -> None:
    world = Frozen(at=1_800_000_000, seed="task-1|check-a")
    first = run_function_cases(FROZEN_PROBE, "check", [["a"], ["a"]], LIMITS, world=world)
    again = run_function_cases(FROZEN_PROBE, "check", [["a"]], LIMITS, world=world)
    assert first.failure is None, first.failure
    value = first.results[0].value
    assert isinstance(value, list)
    assert value[1:7] == [
        1.8e9,
        1_800_000_000 * 10**9,
        0.0,
        "2027-01-15",
        "2027-01-15T08:00:00",
        "2027-01-15",
    ]
    assert first.results[1].value == value and again.results[0].value == value
    assert all(r.entropy for r in first.results)
    other = run_function_cases(
        FROZEN_PROBE, "check", [["a"]], LIMITS, world=Frozen(1_800_000_000, "task-2|check-a")
    )
    other_value = other.results[0].value
    assert isinstance(other_value, list) and other_value[7:] != value[7:]


def test_a_box_that_breaks_after_its_first_probe_raises_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A bubblewrap that stops working later (PIDs exhausted, a broken install) is the box
    not being made, never a verdict on the code: run_function_cases raises SandboxUnavailable."""
    check_box("bwrap")  # the first probe passes
    broken = tmp_path / "bwrap"
    broken.write_text(
        "#!/bin/sh\necho 'bwrap: Creating new namespace failed: No space' >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable, match="could not be made for this run"):
        run_function_cases(BENIGN, "check", [[OUTPUTS]], LIMITS)


def test_without_bubblewrap_nothing_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    planted = tmp_path / "ran"
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no bwrap to be found
    source = f"def check():\n    open({str(planted)!r}, 'w').write('ran')\n    return True\n"
    with pytest.raises(SandboxUnavailable, match="bubblewrap \\(bwrap\\) is not installed"):
        run_function_cases(source, "check", [[]], LIMITS)
    assert not planted.exists()


def test_a_typo_in_the_mode_does_not_turn_the_box_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCORD_SANDBOX", "off")
    with pytest.raises(SandboxUnavailable, match="names no sandbox mode"):
        run_function_cases(BENIGN, "check", [[OUTPUTS]], LIMITS)
    assert sandbox_mode({}) == "bwrap" and sandbox_mode({"ACCORD_SANDBOX": "none"}) == "none"


def test_the_operators_explicit_none_runs_unboxed_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCORD_SANDBOX", "none")
    run = run_function_cases(BENIGN, "check", [[OUTPUTS]], LIMITS)
    assert run.mode == "none" and run.results[0].value is True


def test_where_user_namespaces_are_off_the_box_says_why() -> None:
    """Inside a user namespace that may make no further one (as where the sysctl or AppArmor
    forbids them), the box cannot be made: check_box names the cause and nothing runs."""
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    probe = (
        "from accord.identity.challenges.sandbox import run_function_cases\n"
        "from accord.identity.errors import SandboxUnavailable\n"
        "try:\n"
        "    run_function_cases('def f():\\n    return 1\\n', 'f', [[]])\n"
        "    print('RAN')\n"
        "except SandboxUnavailable as exc:\n"
        "    print('REFUSED', exc)\n"
    )
    outer = [bwrap, "--unshare-user", "--disable-userns", "--bind", "/", "/"]
    outer += ["--dev-bind", "/dev", "/dev", "--proc", "/proc", "--chdir", str(PROJECT)]
    done = subprocess.run(
        [*outer, sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ACCORD_SANDBOX": "bwrap"},
        check=False,
    )
    assert done.stdout.startswith("REFUSED"), done.stdout + done.stderr
    assert "user namespaces" in done.stdout and "RAN" not in done.stdout


def test_only_builtin_exception_names_come_back() -> None:
    assert exception_name("KeyError") == "KeyError"
    assert exception_name("Seed00ff") == "an exception of a class that is not built in"
    assert exception_name({"x": 1}) == "an exception of a class that is not built in"


def test_check_box_reports_the_mode() -> None:
    assert check_box("bwrap") == "bwrap"
    assert check_box("none") == "none"


def test_boxes_run_a_few_at_a_time_and_the_rest_wait_their_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With one box at a time, four runs that each wait a second in the box take four seconds
    at least: a flood of checks queues instead of taking the machine."""
    monkeypatch.setenv("ACCORD_BOX_WORKERS", "1")
    source = "import time\ndef check():\n    time.sleep(1)\n    return True\n"
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda _: run_function_cases(source, "check", [[]], LIMITS), range(4)))
    assert time.monotonic() - started >= 4.0
    assert all(run.results[0].value is True for run in runs)


@pytest.mark.parametrize("value", ["0", "-1", "many", "257"])
def test_a_bad_box_worker_count_is_refused(value: str) -> None:
    with pytest.raises(SandboxUnavailable, match="ACCORD_BOX_WORKERS"):
        box_workers({"ACCORD_BOX_WORKERS": value})
    assert box_workers({"ACCORD_BOX_WORKERS": "3"}) == 3
    assert box_workers({}) >= 1
