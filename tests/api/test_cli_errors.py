"""Every bad input or unusable environment ends in one line on stderr and the documented exit
code (0 success, 1 a failure the message explains, 2 bad input); read commands start no devnet
and create no home. `accord` runs in a subprocess, with no devnet running."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from accord.ledger.devnet import find_free_port
from accord.ledger.signing import Ed25519Signer, write_keyfile
from tests.accord_cli import cli_environ, run_accord


def accord(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`accord ARGS` with home `home`, a devnet port nobody uses, and `env` on top."""
    environ = cli_environ(home, columns=80, ACCORD_DEVNET_PORT=str(find_free_port()), **env)
    return run_accord(environ, *args, timeout=60)


def one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with one logged note (appended with no chain: it stays unanchored)."""
    path = tmp_path_factory.mktemp("cli") / "home"
    result = accord(path, "ledger", "append", "--kind", "note.added")
    assert result.returncode == 0, result.stderr
    return path


def test_a_huge_from_index_is_bad_input(home: Path) -> None:
    line = one_line(accord(home, "ledger", "show", "--from", "99999999999999999999"), 2)
    assert "--from" in line


@pytest.mark.parametrize("target", ["/nonexistent/x.html", "/"])
def test_an_html_report_that_cannot_be_written_is_bad_input(home: Path, target: str) -> None:
    line = one_line(accord(home, "audit", "task-any", "--html", target), 2)
    assert target in line


@pytest.mark.parametrize(
    "command",
    [
        ("task", "show", "task-nope"),
        ("task", "bids", "task-nope"),
        ("task", "award", "task-nope"),
        ("task", "award", "task-nope", "--wait"),
        ("task", "cancel", "task-nope"),
        ("task", "run", "task-nope"),
        ("task", "result", "task-nope"),
        ("task", "review", "task-nope", "--check", "c", "--accept"),
        ("task", "settle", "task-nope"),
        ("task", "file", "task-nope", "0" * 64),
        ("bid", "commit", "task-nope", "--agent", "ada", "--price", "1wei"),
        ("bid", "reveal", "task-nope", "--agent", "ada"),
        ("audit", "task-nope"),
        ("conversation", "list", "--task", "task-nope"),
    ],
)
def test_an_unknown_task_is_exit_2_in_every_command(home: Path, command: tuple[str, ...]) -> None:
    line = one_line(accord(home, *command), 2)
    assert "no task 'task-nope'" in line, line
    assert not (home / "devnet").exists()  # refused before any devnet is started


@pytest.mark.parametrize(
    ("command", "empty"),
    [
        (("task", "list"), {"tasks": [], "next_cursor": None}),
        (("conversation", "list"), []),
    ],
)
def test_reading_starts_no_devnet(home: Path, command: tuple[str, ...], empty: object) -> None:
    result = accord(home, *command, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == empty
    assert not (home / "devnet").exists()


def test_an_unknown_conversation_is_one_line_and_starts_no_devnet(home: Path) -> None:
    assert "conv-nope" in one_line(accord(home, "conversation", "show", "conv-nope"), 1)
    assert not (home / "devnet").exists()


@pytest.mark.parametrize("command", [("ledger", "show"), ("task", "list"), ("audit", "t")])
def test_a_read_creates_no_home(tmp_path: Path, command: tuple[str, ...]) -> None:
    missing = tmp_path / "missing"
    line = one_line(accord(missing, *command), 1)
    assert "no accord home" in line
    assert not missing.exists()


@pytest.mark.parametrize(
    "command",
    [("ledger", "append", "--kind", "note.added"), ("devnet", "up")],
)
def test_a_file_as_home_is_one_line(tmp_path: Path, command: tuple[str, ...]) -> None:
    path = tmp_path / "file"
    path.write_text("")
    assert "is not a folder" in one_line(accord(path, *command), 1)
    below = one_line(accord(path / "below", *command), 1)
    assert "cannot create" in below or "no accord home" in below


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
def test_another_users_home_is_one_line(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    line = one_line(accord(theirs, "ledger", "append", "--kind", "note.added"), 1)
    assert "another user" in line


def test_an_rpc_url_that_is_no_url_is_bad_input(home: Path) -> None:
    line = one_line(accord(home, "ledger", "show", ACCORD_RPC_URL="notaurl"), 2)
    assert "ACCORD_RPC_URL" in line


def test_a_rejection_without_a_reason_is_bad_input_and_logs_nothing(home: Path) -> None:
    before = accord(home, "ledger", "show", "--json")
    line = one_line(accord(home, "task", "review", "task-any", "--check", "c", "--reject"), 2)
    assert "--reason" in line
    assert accord(home, "ledger", "show", "--json").stdout == before.stdout


@pytest.mark.parametrize(
    ("amount", "key", "named"),
    [
        ("lots", "key.json", "lots"),  # not an amount
        ("1000", "missing.json", "missing.json"),  # no such did:key file: none is made
    ],
)
def test_a_dispute_answer_with_bad_input_sends_nothing(
    home: Path, tmp_path: Path, amount: str, key: str, named: str
) -> None:
    """`accord agent answer` reads the amount and the key files before it reaches the service
    or the chain (port 9 answers nothing)."""
    write_keyfile(tmp_path / "key.json", Ed25519Signer.generate())
    args = ("agent", "answer", "task-x", "sum-review", "--amount", amount)
    args += ("--server", "http://127.0.0.1:9", "--key", str(tmp_path / key))
    line = one_line(accord(home, *args), 2)
    assert named in line
    assert not (tmp_path / "missing.json").exists()
