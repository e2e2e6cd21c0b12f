"""What `accord` prints, as a script sees it: `--version`, errors as JSON under `--json`, and
output written to a pipe that is never wrapped. `accord` runs in a subprocess, no devnet."""

from __future__ import annotations

import json
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from tests.api.test_cli_errors import accord


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with one agent whose name is long enough to push its DID past 80 columns."""
    path = tmp_path_factory.mktemp("output") / "home"
    result = accord(path, "agent", "new", "an-agent-with-a-rather-long-name")
    assert result.returncode == 0, result.stderr
    return path


def json_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The message of a JSON error on stdout, after checking its exit code and that stderr
    holds no second report of it."""
    assert result.returncode == code, (result.stdout, result.stderr)
    error = json.loads(result.stdout)
    assert error["code"] == code and set(error) == {"error", "code"}, error
    assert "error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    return str(error["error"])


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    result = accord(tmp_path / "home", "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"accord {metadata.version('accord')}\n"
    assert not (tmp_path / "home").exists()  # it reads nothing, creates nothing


def test_an_unknown_task_is_a_json_error_with_exit_2(home: Path) -> None:
    message = json_error(accord(home, "task", "show", "task-nosuch", "--json"), 2)
    assert "task-nosuch" in message


def test_bad_input_is_a_json_error_with_exit_2(home: Path) -> None:
    message = json_error(accord(home, "ledger", "show", "--from", str(2**64), "--json"), 2)
    assert "--from" in message


def test_input_the_parser_refuses_is_a_json_error_too(home: Path) -> None:
    message = json_error(accord(home, "ledger", "show", "--limit", "0", "--json"), 2)
    assert "--limit" in message


def test_without_json_the_error_stays_one_line_on_stderr(home: Path) -> None:
    result = accord(home, "task", "show", "task-nosuch")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error:") and len(result.stderr.splitlines()) == 1


def test_piped_output_keeps_each_did_on_one_line(home: Path) -> None:
    listed = json.loads(accord(home, "agent", "list", "--json").stdout)
    [agent] = listed
    did = str(agent["did"])
    shown = accord(home, "agent", "list")  # COLUMNS=80, stdout a pipe
    assert shown.returncode == 0, shown.stderr
    assert did in shown.stdout, shown.stdout
    assert max(len(line) for line in shown.stdout.splitlines()) > 80
    created = accord(home, "agent", "new", "another-agent-with-a-long-name")
    assert (
        json.loads(
            accord(home, "agent", "show", "another-agent-with-a-long-name", "--json").stdout
        )["did"]
        in created.stdout
    )


def test_counts_agree_with_their_number(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for name, title in (("ada", "1 agent"), ("bob", "2 agents")):
        assert accord(home, "agent", "new", name).returncode == 0
        shown = accord(home, "agent", "list")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[0].strip() == title, shown.stdout
