"""`make demo` piped to a file or another program is never wrapped, as every `accord` command's
output is (README: output to a pipe is never wrapped, `make demo` included)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PRINTS = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("demo", sys.argv[1])
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)
demo.heading("accord demo: credentials, a paid task, a log anchored on chain")
line = "credential urn:uuid:" + "0123456789abcdef" * 8 + " issued to did:key:z6Mk" + "x" * 48
demo.console.print(line)
"""


def test_the_demo_writes_unwrapped_lines_to_a_pipe() -> None:
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(
        [sys.executable, "-c", PRINTS, str(REPO / "scripts" / "demo.py")],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    title, rule, credential = done.stdout.splitlines()
    assert title == "accord demo: credentials, a paid task, a log anchored on chain"
    assert rule == "─" * len(title)
    assert credential.startswith("credential urn:uuid:") and credential.endswith("x" * 48)
    assert len(credential) > 200
