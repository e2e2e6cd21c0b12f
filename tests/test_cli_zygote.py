"""The CLI tests' zygote (tests/cli_zygote.py) stands in for a fresh `python -m accord.api.cli`:
for the same command and environment, a forked child answers what a fresh interpreter answers
(exit code, stdout, stderr), and a command that outlives its timeout is killed and reported as
subprocess.TimeoutExpired, as subprocess.run reports it."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from tests.accord_cli import cli_environ, run_accord, run_unforked

COMMANDS = [
    ("--version",),  # exit 0
    ("task", "show", "task-nope", "--json"),  # a refusal as JSON, its exit code
    ("task", "post", "--budget", "many"),  # refused by the parser (exit 2), as text
    ("no-such-command",),
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: " ".join(args))
def test_a_forked_command_answers_as_a_fresh_interpreter(tmp_path: Path, args: tuple[str]) -> None:
    forked = run_accord(cli_environ(tmp_path / "forked"), *args)
    fresh = run_unforked(cli_environ(tmp_path / "fresh"), *args)
    normalized = [
        (
            r.returncode,
            r.stdout.replace(str(tmp_path / name), "HOME"),
            r.stderr.replace(str(tmp_path / name), "HOME"),
        )
        for r, name in ((forked, "forked"), (fresh, "fresh"))
    ]
    assert normalized[0] == normalized[1]
    assert forked.args == fresh.args


def test_a_command_past_its_timeout_is_killed_and_reported(tmp_path: Path) -> None:
    # `ledger verify` opens the log database, here a "PostgreSQL" that takes the connection
    # and never answers: the command waits until it is killed, however fast the machine (a
    # home without a database was refused at once, inside the timeout on a fast machine)
    home = tmp_path / "home"
    home.mkdir()
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        environ = cli_environ(home, ACCORD_DB_URL=f"postgresql+psycopg://accord@127.0.0.1:{port}/x")
        with pytest.raises(subprocess.TimeoutExpired):
            run_accord(environ, "ledger", "verify", timeout=0.05)
    assert run_accord(cli_environ(tmp_path / "after"), "--version").returncode == 0
