"""accord keeps the interpreter's recursion limit where it was (accord/_stack.py): with
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


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    ("first", "limit"),
    [
        ("import accord.ledger.chain.web3_chain", 1_000),  # web3 under accord
        ("import accord.market.escrow.values", 1_000),  # eth_account alone
        ("import web3, accord", 1_000),  # web3 before accord: Python's default
        ("import sys; sys.setrecursionlimit(3_000); import accord.kit.wallet", 3_000),
    ],
)
def test_the_limit_stays_and_deep_json_is_a_recursion_error(first: str, limit: int) -> None:
    result = _run(f"{first}\nimport sys\nprint(sys.getrecursionlimit())\n{DEEP_JSON}")
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.split() == [str(limit), "RecursionError"]


def test_the_guard_is_needed_web3_alone_raises_the_limit() -> None:
    """What the guard undoes: py_ecc raises the limit (if it ever stops, accord/_stack.py can
    go)."""
    result = _run("import sys, web3; print(sys.getrecursionlimit())")
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 100_000
