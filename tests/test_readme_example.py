"""The Python example of docs/python.md (linked from the README) runs as written, in a fresh home
with its own devnet."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accord.ledger.devnet import find_free_port

pytestmark = pytest.mark.devnet

PAGE = Path(__file__).resolve().parents[1] / "docs" / "python.md"
EXAMPLE = re.compile(r"<!-- example: python -->\n```python\n(.*?)```", re.S)


def test_the_python_example_runs(tmp_path: Path) -> None:
    [code] = EXAMPLE.findall(PAGE.read_text())
    env = {
        **os.environ,
        "ACCORD_HOME": str(tmp_path / "home"),
        "ACCORD_DEVNET_PORT": str(find_free_port()),
    }
    for name in ("ACCORD_RPC_URL", "ACCORD_DB_URL", "ACCORD_REQUESTER_ETH_KEY"):
        env.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "2045.50", result.stdout
    assert "ETH" in lines[2]


def test_import_accord_is_cheap_and_lazy() -> None:
    code = "import sys, accord; print('accord.market.service' in sys.modules, accord.__version__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    loaded, version = result.stdout.split()
    assert loaded == "False" and version
    assert (
        subprocess.run(
            [sys.executable, "-c", "import accord; accord.Wei; accord.open_home; accord.Client"],
            capture_output=True,
        ).returncode
        == 0
    )
