"""Opening a ledger without a chain loads no chain client: the commands that need no chain
(`accord agent …`, `credential …`, `task show`) do not pay for importing web3 and
eth_account, about a second of every such `accord` run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

OPEN_WITHOUT_A_CHAIN = """
import sys
from ledger.runtime import open_ledger
from ledger.settings import Settings
ledger = open_ledger(Settings.from_env({"ACCORD_HOME": sys.argv[1]}))
assert ledger.anchorer is None
print(sorted(m for m in ("web3", "eth_account", "ledger.anchoring") if m in sys.modules))
"""


def test_a_ledger_opened_without_a_chain_imports_no_chain_client(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", OPEN_WITHOUT_A_CHAIN, str(tmp_path / "home")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
