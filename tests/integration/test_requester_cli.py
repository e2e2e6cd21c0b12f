"""A requester's and an agent's whole jobs with `accord` commands only, each in a folder of its
own holding only its own files, against `accord serve` on a real anvil (issue 45, items 4-5).

- **the requester** makes its keys (`accord key new --eth`), funds its account on the
  service's devnet (`accord devnet fund --server`), posts a spec naming a document it uploads
  (`accord task post --server --key --eth-key`), reads the deliverable (`accord task result
  --server --key`), accepts the one review early (`accord task review --accept`): the task
  settles at once, the clock never reaching the review window's end; then it takes back the
  unpaid rest of its budget (`accord task withdraw`);
- **the agent** runs the kit (`accord agent run`, keys made by `accord key new --eth`, a
  payout account holding no ether): its lines say when it was given its part and how it ended;
  it withdraws its pay with `accord agent withdraw --server --key` (the devnet covers its gas);
- **an auditor** with the URL only: the early settlement passes the audit.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.kit.wallet import Wallet, WalletError, read_key_file
from accord.ledger.devnet import find_free_port
from tests.accord_cli import cli_environ, run_accord
from tests.clocks import advance_clock_file
from tests.integration.anvil_world import anvil_settings
from tests.integration.test_three_parties import REPO, service_environ, started, wait_until_up
from tests.processes import STEP_TIMEOUT
from tests.specs import INVOICE_PATH, field

pytestmark = pytest.mark.devnet

SPEC: dict[str, Any] = {
    "title": "The invoice's total",
    "budget": "0.05eth",
    "bidding": "60s",
    "reveal": "60s",
    "delivery": "30m",
    "review": "1h",
    "rule": "first-score",  # one bidder: paid its own price, the rest goes back
    "parts": [
        {
            "id": "fields",
            "capability": "extraction",
            "input": {
                "document": {"$file": "invoice.txt"},
                "fields": {"total": field("amount", "the total payable, tax included")},
            },
        }
    ],
    "checks": [
        {
            "id": "total-right",
            "weight": 2,
            "kind": "expect",
            "part": "fields",
            "path": "$.total",
            "equals": "3128.46",
        },
        {"id": "looks-right", "weight": 1, "kind": "review", "part": "fields"},
    ],
}


class Party:
    """A folder of its own, and `accord` run with no home of its own there."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(mode=0o700)
        self.folder = folder
        self.environ = {**cli_environ(folder / ".accord"), "PYTHONPATH": str(REPO)}

    def json(self, *args: str) -> Any:
        done = run_accord(self.environ, *args, "--json")
        assert done.returncode == 0, f"accord {' '.join(args)}: {done.stdout}{done.stderr}"
        return json.loads(done.stdout)

    def path(self, name: str) -> str:
        return str(self.folder / name)


def test_a_requester_and_a_kit_agent_do_their_jobs_with_accord_commands(tmp_path: Path) -> None:
    settings = anvil_settings(tmp_path / "service", find_free_port())
    port = find_free_port()
    url = f"http://127.0.0.1:{port}"
    clock = tmp_path / "service.clock"
    service_env = service_environ(settings, url, clock)
    up = run_accord(service_env, "devnet", "up", "--json")
    assert up.returncode == 0, up.stderr
    requester = Party(tmp_path / "requester")
    agent = Party(tmp_path / "agent")
    try:
        with ExitStack() as stack:
            serve_log = tmp_path / "serve.log"
            service = stack.enter_context(
                started(
                    "the service",
                    [sys.executable, "-m", "accord.api.cli", "serve", "--port", str(port)],
                    service_env,
                    serve_log,
                )
            )
            wait_until_up(url, service, serve_log)

            # The requester's keys and ether, with accord commands only.
            mine = requester.json("key", "new", requester.path("me.json"), "--eth")
            assert Path(mine["eth_key_file"]) == requester.folder / "me.eth.json"
            funded = requester.json("devnet", "fund", mine["address"], "1eth", "--server", url)
            assert int(funded["balance"]) >= 10**18
            (requester.folder / "task.json").write_text(json.dumps(SPEC))
            shutil.copy(INVOICE_PATH, requester.folder / "invoice.txt")

            # The agent: keys made by accord; its payout account holds no ether.
            kai = agent.json("key", "new", agent.path("key.json"), "--eth")
            kit = stack.enter_context(
                started(
                    "kai",
                    [
                        *(sys.executable, "-m", "accord.api.cli", "agent", "run"),
                        *("--server", url, "--key", kai["key_file"], "--name", "kai"),
                        *("-c", "extraction", "--price", "0.01eth", "--items", "5"),
                        *("--poll", "0.2", "--allow-private"),
                    ],
                    agent.environ,
                    tmp_path / "kai.log",
                )
            )
            kit.wait_for("ready")

            posted = requester.json(
                *("task", "post", "--spec", requester.path("task.json"), "--server", url),
                *("--key", requester.path("me.json"), "--eth-key", requester.path("me.eth.json")),
            )
            task_id = posted["task_id"]
            assert posted["state"] == "bidding"
            kit.wait_for("committed", task_id=task_id)
            advance_clock_file(clock, 61)  # bidding closes
            kit.wait_for("revealed", task_id=task_id)
            advance_clock_file(clock, 61)  # the reveal window closes: the service awards
            given = kit.wait_for("given", task_id=task_id)
            assert given["part"] == "fields"
            kit.wait_for("answered", task_id=task_id, part="fields")
            kit.wait_for("delivered", task_id=task_id)

            result = requester.json(
                "task", "result", task_id, "--server", url, "--key", requester.path("me.json")
            )
            [part] = result["parts"]
            assert part["output"]["total"] == "3128.46"  # its review check reads it
            # a rejection is bonded from the requester's own account: without it, refused
            # before anything is sent
            unbonded = run_accord(
                requester.environ,
                *("task", "review", task_id, "--check", "looks-right", "--reject"),
                *("--reason", "wrong total", "--server", url, "--key", requester.path("me.json")),
                "--json",
            )
            assert unbonded.returncode == 2 and "--eth-key" in unbonded.stdout, unbonded.stdout
            requester.json(
                *("task", "review", task_id, "--check", "looks-right", "--accept"),
                *("--server", url, "--key", requester.path("me.json")),
            )
            task = settled(url, task_id)  # at once: the clock stays inside the review window
            price = int(task["price"])
            assert price == 10**16

            back = requester.json(
                "task", "withdraw", "--server", url, "--eth-key", requester.path("me.eth.json")
            )
            assert int(back["amount"]) == 5 * 10**16 - price
            # Its payout account holds no ether: off the service's devnet a withdrawal says so
            chain = {**httpx.get(f"{url}/chain", timeout=10).json(), "devnet": False}
            bare = Wallet.connect(read_key_file(Path(kai["eth_key_file"])), chain)
            with pytest.raises(WalletError, match="too little ether to pay the gas"):
                bare.withdraw()
            # and on it the gas is covered, as a hosted agent's is
            pay = agent.json("agent", "withdraw", "--server", url, "--key", kai["key_file"])
            assert int(pay["amount"]) > 0 and pay["address"] == kai["address"]

            audit = run_accord(requester.environ, "audit", task_id, "--server", url, "--json")
            assert audit.returncode == 0, audit.stdout + audit.stderr
            report = json.loads(audit.stdout)
            assert report["verdict"] == "PASS", report
            custody = report["facts"]["custody"]
            assert custody[kai["did"]] == "self" and custody[mine["did"]] == "unregistered"
        # each party's folder holds its own files only: no home it did not ask for
        assert sorted(p.name for p in requester.folder.iterdir()) == [
            "invoice.txt",
            "me.eth.json",
            "me.json",
            "task.json",
        ]
        assert sorted(p.name for p in agent.folder.iterdir()) == ["key.eth.json", "key.json"]
    finally:
        run_accord(service_env, "devnet", "down")


def settled(url: str, task_id: str) -> dict[str, Any]:
    """The task once the service's lifecycle has settled it (the clock is not moved)."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        task: dict[str, Any] = httpx.get(f"{url}/tasks/{task_id}", timeout=10).json()
        if task["state"] == "settled":
            return task
        time.sleep(0.2)
    pytest.fail(f"{task_id} was not settled before its review window ended: {task['state']}")


def test_no_home_is_made_by_the_commands_that_need_none(tmp_path: Path) -> None:
    """`key new` refuses to overwrite, and neither it nor a refused `devnet fund` makes a home."""
    party = Party(tmp_path / "someone")
    made = party.json("key", "new", party.path("me.json"))
    assert made["did"].startswith("did:key:") and "address" not in made
    again = run_accord(party.environ, "key", "new", party.path("me.json"), "--eth")
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert not (party.folder / "me.eth.json").exists()
    bad = run_accord(party.environ, "devnet", "fund", "0x12", "1eth")
    assert bad.returncode == 2 and "not an Ethereum address" in bad.stderr
    unitless = run_accord(party.environ, "devnet", "fund", "0x" + "ab" * 20, "1 bushel")
    assert unitless.returncode == 2
    assert os.listdir(party.folder) == ["me.json"]
