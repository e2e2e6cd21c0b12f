"""docs/testnet.md is true: its steps, run as written against a chain accord does not manage.

The "testnet" is an anvil this test starts itself with Sepolia's chain id (11155111), on a
port of its own; accord is only told its URL (ACCORD_RPC_URL), so the service manages no
devnet. `accord devnet fund --rpc-url` plays the faucet. Each party works in a folder of its
own with `accord` commands only: the operator (steps 1-3), a kit agent (4), a requester (5)
and an auditor (6).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.ledger.devnet import find_anvil, find_free_port, rpc_call
from tests.accord_cli import cli_environ, run_accord
from tests.clocks import advance_clock_file
from tests.integration.test_requester_cli import Party, settled
from tests.integration.test_three_parties import REPO, started, wait_until_up
from tests.processes import STEP_TIMEOUT, stop_process

pytestmark = pytest.mark.devnet

GUIDE = REPO / "docs" / "testnet.md"
SEPOLIA = 11155111

SPEC: dict[str, Any] = {
    "title": "Add the invoice lines",
    "budget": "0.01eth",
    "bidding": "60s",
    "reveal": "60s",
    "delivery": "30m",
    "review": "1h",
    "rule": "first-score",  # one bidder: paid its own price, the rest goes back
    "parts": [
        {
            "id": "sum",
            "capability": "arithmetic",
            "input": {"kind": "figures", "figures": ["1200.00", "845.50"], "operation": "sum"},
        }
    ],
    "checks": [{"id": "right", "kind": "expect", "part": "sum", "path": "$", "equals": "2045.50"}],
}


def external_anvil(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """An anvil accord did not start, with another chain id than its devnet's, answering:
    the process and its RPC URL. The port is taken afresh when another process (a parallel
    test's anvil) took the one chosen first: the answer must come from this anvil, with its
    chain id, or the test would run against the other's chain."""
    for _ in range(5):
        port = find_free_port()
        with log.open("w") as out:
            process = subprocess.Popen(
                [
                    *(str(find_anvil()), "--chain-id", str(SEPOLIA), "--port", str(port)),
                    *("--block-time", "0.5"),  # blocks come on their own, as on a public chain
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        url = f"http://127.0.0.1:{port}"
        taken = False  # another process holds the port
        deadline = time.monotonic() + STEP_TIMEOUT
        while not taken and time.monotonic() < deadline and process.poll() is None:
            try:
                answered = int(str(rpc_call(url, "eth_chainId")), 16)
            except Exception:
                time.sleep(0.1)
                continue
            if answered == SEPOLIA and process.poll() is None:
                return process, url
            taken = True
        stop_process(process, timeout=10)
        if not taken and "Address already in use" not in log.read_text():
            pytest.fail(f"anvil did not answer: {log.read_text()[-2000:]}")
    pytest.fail(f"anvil did not answer as its own chain: {log.read_text()[-2000:]}")


def test_the_testnet_guide_runs_against_a_chain_accord_does_not_manage(tmp_path: Path) -> None:
    guide = GUIDE.read_text()
    for setting in ("ACCORD_RPC_URL", "ACCORD_OPERATOR_ETH_KEY", "ACCORD_PUBLIC_RPC_URL"):
        assert f"export {setting}=" in guide
    port = find_free_port()
    url = f"http://127.0.0.1:{port}"
    clock = tmp_path / "service.clock"
    operator = Party(tmp_path / "operator")
    agent = Party(tmp_path / "agent")
    requester = Party(tmp_path / "requester")
    auditor = Party(tmp_path / "auditor")

    def faucet(address: str, amount: str) -> None:
        funded = operator.json("devnet", "fund", address, amount, "--rpc-url", rpc_url)
        assert int(funded["balance"]) > 0

    with ExitStack() as stack:
        chain, rpc_url = external_anvil(tmp_path / "anvil.log")
        stack.callback(stop_process, chain, timeout=10)

        # 1. The operator's account, funded by the faucet
        wallet = operator.json("key", "new", operator.path("operator.json"), "--eth")
        faucet(wallet["address"], "1eth")
        # 2. Settings: the operator's node, its key, the URL wallets are told, the public URL
        operator_key = json.loads(Path(wallet["eth_key_file"]).read_text())["key"]
        service_env = {
            **cli_environ(operator.folder / "service"),
            "PYTHONPATH": str(REPO),
            "ACCORD_RPC_URL": rpc_url,
            "ACCORD_OPERATOR_ETH_KEY": operator_key,
            "ACCORD_PUBLIC_RPC_URL": rpc_url,
            "ACCORD_PUBLIC_URL": url,
            "ACCORD_CONFIRMATIONS": "3",
            "ACCORD_TEST_CLOCK": str(clock),
            "ACCORD_ALLOW_PRIVATE_AGENTS": "1",  # the agent listens on loopback here
            "ACCORD_LIFECYCLE_INTERVAL": "0.2",
            "ACCORD_ANCHOR_INTERVAL": "0.5",
        }
        refused = run_accord(service_env, "devnet", "up")
        assert refused.returncode == 2 and "manages no devnet" in refused.stderr
        # 3. Deploy the contracts and serve
        anchored = run_accord(service_env, "ledger", "anchor", "--json")
        assert anchored.returncode == 0, anchored.stdout + anchored.stderr
        registry = json.loads((operator.folder / "service" / "deployment.json").read_text())
        assert registry["chainId"] == SEPOLIA
        service = stack.enter_context(
            started(
                "the service",
                [sys.executable, "-m", "accord.api.cli", "serve", "--port", str(port)],
                service_env,
                tmp_path / "serve.log",
            )
        )
        wait_until_up(url, service, tmp_path / "serve.log")
        advertised = httpx.get(f"{url}/chain", timeout=30).json()
        assert advertised["chain_id"] == SEPOLIA and advertised["devnet"] is False
        assert advertised["rpc_url"] == rpc_url
        assert advertised["registry_contract"] == registry["address"]

        # 4. An agent: its keys, its payout account funded for gas, the kit
        ada = agent.json("key", "new", agent.path("ada.json"), "--eth")
        faucet(ada["address"], "0.01eth")
        kit = stack.enter_context(
            started(
                "ada",
                [
                    *(sys.executable, "-m", "accord.api.cli", "agent", "run"),
                    *("--server", url, "--key", ada["key_file"], "--name", "ada"),
                    *("-c", "arithmetic", "--price", "0.001eth", "--items", "5"),
                    *("--poll", "0.2", "--allow-private"),
                ],
                agent.environ,
                tmp_path / "ada.log",
            )
        )
        kit.wait_for("ready")

        # 5. A requester: its keys, its account funded, the posting and its deposit
        me = requester.json("key", "new", requester.path("me.json"), "--eth")
        faucet(me["address"], "0.1eth")
        (requester.folder / "task.json").write_text(json.dumps(SPEC))
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
        kit.wait_for("delivered", task_id=task_id)
        task = settled(url, task_id)  # no review check: it settles once delivered
        assert int(task["price"]) == 10**15
        result = requester.json(
            "task", "result", task_id, "--server", url, "--key", requester.path("me.json")
        )
        assert result["parts"][0]["output"] == "2045.50"
        back = requester.json(
            "task", "withdraw", "--server", url, "--eth-key", requester.path("me.eth.json")
        )
        assert int(back["amount"]) == 10**16 - 10**15
        pay = agent.json("agent", "withdraw", "--server", url, "--key", ada["key_file"])
        assert int(pay["amount"]) > 0

        # 6. An auditor, with the service's URL and a node of its own
        report = audited(auditor, task_id, url, rpc_url)
        assert report["verdict"] == "PASS", report
        verified = run_accord(
            auditor.environ, "ledger", "verify", "--server", url, "--rpc-url", rpc_url
        )
        assert verified.returncode == 0, verified.stdout + verified.stderr
    assert list(auditor.folder.iterdir()) == []


def audited(auditor: Party, task_id: str, url: str, rpc_url: str) -> dict[str, Any]:
    """The auditor's report once the service has anchored the settlement (its timer runs)."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while True:
        done = run_accord(
            auditor.environ,
            *("audit", task_id, "--server", url, "--rpc-url", rpc_url, "--json"),
        )
        report: dict[str, Any] = json.loads(done.stdout)
        if report.get("verdict") != "PENDING" or time.monotonic() > deadline:
            return report
        time.sleep(0.3)
