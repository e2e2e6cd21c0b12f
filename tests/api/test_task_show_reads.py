"""`accord task show` reads a task from the log and the views alone (accord.market.task_reads):
it loads no market service, no onboarding and no chain client, which is what keeps the read
command's start-up short (scripts/bench/bench_cli.py times it)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer
from accord.ledger.wiring import open_ledger, prepare_home
from accord.market.money import parse_amount
from accord.market.tasks import TASK_POSTED, TaskSpec
from accord.market.work import Part
from tests.accord_cli import cli_environ

HEAVY = (
    "accord.market.service",
    "accord.identity.onboarding",
    "accord.ledger.service",
    "web3",
    "eth_account",
    "httpx",
    "fastapi",
)
"""What a read of one task has no use for."""
FIGURES = {"kind": "figures", "figures": ["1.5"], "operation": "sum"}

SHOW = """
import json, runpy, sys
heavy = sys.argv[2:]
sys.argv = ["accord", "task", "show", sys.argv[1], "--json"]
try:
    runpy.run_module("accord.api.cli", run_name="__main__")
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "loaded": [m for m in heavy if m in sys.modules]}))
"""


def _home_with_a_task(home: Path) -> tuple[str, str]:
    """A home whose log holds one posted task (no chain: never escrowed); its id and the
    requester's DID."""
    settings = Settings.from_env({"ACCORD_HOME": str(home)})
    prepare_home(settings)
    ledger = open_ledger(settings)
    requester = Ed25519Signer.generate()
    spec = TaskSpec(
        title="Add these",
        description="",
        parts=(
            Part("sum", "arithmetic", {"kind": "figures", "figures": ["1.5"], "operation": "sum"}),
        ),
        budget=parse_amount("0.1eth"),
        bidding=timedelta(seconds=30),
        reveal=timedelta(seconds=30),
        delivery=timedelta(minutes=10),
    )
    ledger.append(
        requester,
        TASK_POSTED,
        subject="task-shown",
        body={"task_id": "task-shown", "spec": spec.to_json(), "escrow_from": "0x" + "11" * 20},
    )
    return "task-shown", requester.did


def test_task_show_reads_without_the_market_service(tmp_path: Path) -> None:
    home = tmp_path / "home"
    task_id, requester = _home_with_a_task(home)
    done = subprocess.run(
        [sys.executable, "-c", SHOW, task_id, *HEAVY],
        env=cli_environ(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    *shown, last = done.stdout.strip().splitlines()
    assert json.loads(last) == {"code": 0, "loaded": []}
    task = json.loads("\n".join(shown))
    assert task["task_id"] == task_id and task["state"] == "posted"
    assert task["requester_record"] == {
        "requester": requester,
        "tasks_posted": 1,
        "tasks_settled": 0,
        "reviews_rejected": 0,
        "rejections_overturned": 0,
    }
