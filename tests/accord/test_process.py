"""`import accord` changes nothing of the host's process: no import hook on `sys.meta_path` or
`sys.path_hooks`, the recursion limit where the host put it. Only the `accord` command and the
service prepare their process (accord/_process.py). Each case runs in a fresh interpreter.
(A module that imports web3 gets py_ecc's limit of 100,000 from web3 itself, as any host of
web3 does: tests/accord/test_stack.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SNAPSHOT = """
import logging, signal, warnings
def snapshot():
    return {
        "meta_path": [type(finder).__qualname__ for finder in sys.meta_path],
        "path_hooks": [repr(hook) for hook in sys.path_hooks],
        "recursion_limit": sys.getrecursionlimit(),
        "switch_interval": sys.getswitchinterval(),
        "excepthook": repr(sys.excepthook),
        "warning_filters": len(warnings.filters),
        "root_log_handlers": len(logging.getLogger().handlers),
        "signals": {n: repr(signal.getsignal(n)) for n in (signal.SIGINT, signal.SIGTERM)},
    }
"""

LIBRARY_IMPORTS = [
    "import accord",
    "import accord; accord.Wei, accord.AccordError, accord.TaskSpec",
    "import accord.ledger.merkle, accord.ledger.canonical, accord.ledger.sealing",
    "import accord.market.sealed, accord.market.shapley, accord.market.tasks",
    "import accord.identity.credentials, accord.coordinator.conversation",
    "import accord.api.cli",  # importing the CLI's module is not running the command
]


def _run(code: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    answer: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return answer


@pytest.mark.parametrize("imports", LIBRARY_IMPORTS)
def test_importing_accord_changes_no_process_state(imports: str) -> None:
    answer = _run(
        f"""
import json, sys
sys.setrecursionlimit(2_345)
{SNAPSHOT}
before = snapshot()
{imports}
print(json.dumps({{"before": before, "after": snapshot()}}))
"""
    )
    assert answer["after"] == answer["before"]


def test_the_command_prepares_its_process() -> None:
    """The `accord` command's entry point installs the BLS deferral (the same `main` the
    console script and `python -m accord.api.cli` run)."""
    answer = _run(
        f"""
import json, sys
{SNAPSHOT}
from accord.api.cli import main
sys.argv = ["accord", "--version"]
try:
    main()
except SystemExit:
    pass
print(json.dumps(snapshot()))
"""
    )
    assert answer["meta_path"][0] == "_KeyfileFinder"  # type: ignore[index]
