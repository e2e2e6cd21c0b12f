"""The `accord` command and the service keep the interpreter's recursion limit where it was
(accord/_stack.py, run by accord._process before anything heavy loads): with
py_ecc's 100,000, a JSON document nested 100,000 deep killed the process with SIGSEGV inside
`json.loads`. Each case runs in a fresh interpreter, so a regression is a dead child (exit
-11), not a dead test worker."""

from __future__ import annotations

import subprocess
import sys

import pytest

DEEP_JSON = """
import json
try:
    json.loads("[" * 100_000)
except RecursionError:
    print("RecursionError")
"""


PREPARED = "from accord._process import prepare_process\nprepare_process()\n"
CLI_MAIN = """
import sys
from accord.api.cli import main
sys.argv = ["accord", "--version"]
try:
    main()
except SystemExit:
    pass
"""
SERVICE = """
import tempfile
from accord.api.app import create_app
from accord.ledger.settings import Settings
create_app(Settings.from_env({"ACCORD_HOME": tempfile.mkdtemp()}))
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    ("first", "limit"),
    [
        (f"{PREPARED}import accord.ledger.chain.web3_chain", 1_000),  # web3 under accord
        (f"{PREPARED}import accord.market.escrow.values", 1_000),  # eth_account alone
        (f"import web3\n{PREPARED}", 1_000),  # web3 first: Python's default
        (f"import sys; sys.setrecursionlimit(3_000)\n{PREPARED}import accord.kit.wallet", 3_000),
        (f"{CLI_MAIN}import accord.ledger.chain.web3_chain", 1_000),  # the `accord` command
        (f"{SERVICE}import accord.ledger.chain.web3_chain", 1_000),  # the service
    ],
)
def test_the_limit_stays_and_deep_json_is_a_recursion_error(first: str, limit: int) -> None:
    result = _run(f"{first}\nimport sys\nprint(sys.getrecursionlimit())\n{DEEP_JSON}")
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.split()[-2:] == [str(limit), "RecursionError"]  # after any output


def test_the_guard_is_needed_web3_alone_raises_the_limit() -> None:
    """What the guard undoes: py_ecc raises the limit (if it ever stops, accord/_stack.py can
    go)."""
    result = _run("import sys, web3; print(sys.getrecursionlimit())")
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 100_000
