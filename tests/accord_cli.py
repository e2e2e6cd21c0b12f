"""The `accord` command line run as a person or a script runs it: a subprocess with its own
ACCORD_HOME, none of the caller's chain, database or requester settings.

    cli = AccordCli(tmp_path / "home", find_free_port())   # a devnet of its own on that port
    cli.json("devnet", "up")
    cli.run("task", "show", "nope", check=2)

The `accord` fixture (tests/conftest.py) gives a test one, with its devnet stopped afterwards.
Its market runs on a test clock (ACCORD_TEST_CLOCK) that `advance` moves on, so a test closes
a bidding or reveal window by advancing the clock, never by sleeping through it.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.clocks import advance_clock_file

CLEARED = ("ACCORD_RPC_URL", "ACCORD_DB_URL", "ACCORD_REQUESTER_ETH_KEY")
"""Settings of the caller's environment that would point `accord` somewhere else."""

TIMEOUT = 120

ACCORD_ARGV = (sys.executable, "-m", "accord.api.cli")
"""How a test starts `accord` unforked: `python -m accord.api.cli`."""


def cli_environ(home: Path, *, columns: int = 200, **settings: str) -> dict[str, str]:
    """The environment of an `accord` run with home `home`: the caller's, without CLEARED,
    with `COLUMNS` (how wide a table may print) and then `settings` on top."""
    environ = {**os.environ, "ACCORD_HOME": str(home), "COLUMNS": str(columns)}
    for name in CLEARED:
        environ.pop(name, None)
    return {**environ, **settings}


def run_accord(
    environ: dict[str, str], *args: str, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """`accord ARGS` (as `python -m accord.api.cli`) in `environ`, its output captured as text.

    The process is forked from this test process's zygote (tests/cli_zygote.py), which has
    imported accord once; with ACCORD_TEST_NO_ZYGOTE=1 in the caller's environment it is a
    fresh interpreter instead. Raises subprocess.TimeoutExpired after `timeout` seconds."""
    if os.environ.get("ACCORD_TEST_NO_ZYGOTE") == "1":
        return run_unforked(environ, *args, timeout=timeout)
    return _ZYGOTE.run(list(args), environ, timeout)


def run_unforked(
    environ: dict[str, str], *args: str, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """`accord ARGS` in a fresh interpreter (what the zygote's children stand in for)."""
    return subprocess.run(
        [*ACCORD_ARGV, *args], env=environ, capture_output=True, text=True, timeout=timeout
    )


class _Zygote:
    """This process's `python -m tests.cli_zygote`, started at the first command and stopped
    when this process exits. One command at a time (a lock), as a test runs them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: subprocess.Popen[bytes] | None = None
        self.folder = Path()
        self.socket = Path()
        self.count = 0

    def _start(self) -> None:
        root = Path(__file__).resolve().parent.parent
        self.folder = Path(tempfile.mkdtemp(prefix="accord-zygote-"))
        self.socket = self.folder / "socket"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_zygote", str(self.socket)],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the CLI zygote did not start (exit {self.process.wait()})")
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.folder != Path():
            shutil.rmtree(self.folder, ignore_errors=True)

    def run(
        self, args: list[str], environ: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        with self.lock:
            if self.process is None or self.process.poll() is not None:
                self._start()
            self.count += 1
            out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
            request = {
                "argv": args,
                "env": environ,
                "cwd": os.getcwd(),
                "stdout": str(out),
                "stderr": str(err),
                "timeout": timeout,
            }
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.connect(str(self.socket))
                connection.sendall(json.dumps(request).encode() + b"\n")
                answer = json.loads(connection.makefile("rb").readline())
            stdout, stderr = out.read_text(), err.read_text()
            out.unlink()
            err.unlink()
        argv = [*ACCORD_ARGV, *args]
        if answer.get("timeout"):
            raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
        return subprocess.CompletedProcess(argv, int(answer["returncode"]), stdout, stderr)


_ZYGOTE = _Zygote()


class AccordCli:
    """Runs `accord` in a subprocess with its own ACCORD_HOME and, given a `port`, its own
    devnet there (anchoring only when asked: every 1,000 entries)."""

    def __init__(self, home: Path, port: int | None = None) -> None:
        self.home = home
        # anchoring only when asked: not after 1,000 entries, nor after a minute of the real
        # time (on a loaded machine a few commands take that long, and an append would anchor)
        devnet = (
            {}
            if port is None
            else {
                "ACCORD_DEVNET_PORT": str(port),
                "ACCORD_ANCHOR_EVERY": "1000",
                "ACCORD_ANCHOR_INTERVAL": "1000000",
            }
        )
        self.clock_file = home.parent / f"{home.name}.clock"
        """The market's test clock (ACCORD_TEST_CLOCK): seconds ahead of the real time."""
        self.env = cli_environ(home, ACCORD_TEST_CLOCK=str(self.clock_file), **devnet)

    def advance(self, seconds: float) -> None:
        """Move the market's clock on by `seconds`: a window closes when the test says, not
        when a slow machine gets there."""
        advance_clock_file(self.clock_file, seconds)

    def run(self, *args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
        """`accord ARGS`; unless `check` is None, fails the test on another exit code."""
        result = run_accord(self.env, *args)
        if check is not None:
            assert result.returncode == check, (args, result.stdout, result.stderr)
        return result

    def json(self, *args: str, check: int = 0) -> Any:
        """`accord ARGS --json`, its stdout parsed."""
        return json.loads(self.run(*args, "--json", check=check).stdout)

    def ledger_size(self) -> int:
        """How many entries the home's SQLite log holds."""
        with sqlite3.connect(self.home / "accord.db") as db:
            (count,) = db.execute("SELECT COUNT(*) FROM ledger_entries").fetchone()
        return int(count)
