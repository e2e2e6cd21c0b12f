"""A dispute decided by three kit agents, each in its own process with its own keys, against a
real service (uvicorn on 127.0.0.1) on a real anvil: the Done-when of the dispute panel.

A lone bidder (the hosted reference agent) wins at the whole budget and does the part right;
the requester (`accord.kit.Requester`, its own did:key and Ethereum account) rejects it anyway,
bonding the dispute's fee from its own account because the price leaves nothing for it. Three
`accord agent run` processes sit as panelists: the service draws them with the hash of the
block after the one the rejection names, calls each at its own `/panel`, and each does the part
again with its own handler, commits, then reveals. The team wins, the requester's bond pays the
three, and the audit replays the draw, the votes and the money.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from eth_account import Account

from accord.api.app import create_app
from accord.api.client import AccordClient
from accord.api.routes.deps import ApiConfig
from accord.coordinator.service import run_awarded_task
from accord.kit import Requester, Wallet
from accord.kit.wallet import write_key_file
from accord.ledger.chain import make_web3
from accord.ledger.devnet import find_free_port
from accord.ledger.signing import Ed25519Signer, write_keyfile
from accord.ledger.wiring import devnet_for
from accord.market.lifecycle import run_due
from accord.market.money import Wei
from accord.market.panel import panel_pay
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.settlement import logged_settlement
from accord.market.work import dispute_fee
from tests.api.test_app import PART, SALT
from tests.api.test_outside_requester import fund, hex_key
from tests.integration.anvil_world import anvil_settings, open_anvil_world
from tests.processes import JsonLines, stop_process
from tests.serving import serve

pytestmark = pytest.mark.devnet

REPO = Path(__file__).resolve().parents[2]
BUDGET = Wei(10**16)
SPEC = {
    "title": "Add the figures",
    "budget": str(BUDGET),
    "bidding": "5s",
    "reveal": "5s",
    "parts": [PART],
}


@contextmanager
def panelist(url: str, folder: Path, name: str) -> Iterator[JsonLines]:
    """`accord agent run` in its own process, its keys in `folder`, credentialed in
    arithmetic, bidding on nothing: it only sits on panels."""
    folder.mkdir()
    signer = Ed25519Signer.generate()
    write_keyfile(folder / "key.json", signer)
    write_key_file(folder / "eth.json")
    argv = [
        *(sys.executable, "-m", "accord.api.cli", "agent", "run", "--server", url),
        *("--key", str(folder / "key.json"), "--eth-key", str(folder / "eth.json")),
        *("--name", name, "-c", "arithmetic", "--items", "5", "--poll", "0.2"),
        "--allow-private",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCORD_")}
    env["PYTHONPATH"] = str(REPO)
    with (folder / "stderr.log").open("w") as errors:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=errors, text=True, env=env, cwd=REPO
        )
    try:
        yield JsonLines(process, name)
    finally:
        stop_process(process, timeout=30)


def test_a_panel_of_three_agent_processes_decides_a_lone_bidders_dispute(tmp_path: Path) -> None:
    settings = anvil_settings(tmp_path / "home", find_free_port())
    try:
        world = open_anvil_world(settings)
        world.onboarding.registry.allow_private_agents = True  # the panelists listen on loopback
        record = world.onboarding.registry.new_agent("ada", now=world.clock())
        [outcome] = world.onboarding.onboard(record, ["arithmetic"], item_count=5)
        assert outcome.exam.passed
        ada = world.onboarding.registry.signer(record)
        world.onboarding.bind_payout(record, world.escrow.chain_id())
        app = create_app(
            settings,
            config=ApiConfig(rate=1000.0, burst=10_000.0),
            context=world.context,
            anchors=world.anchors,
            escrow_chain=world.escrow_chain,
        )
        rpc_url = devnet_for(settings).rpc_url
        with serve(app, ws="none") as url, ExitStack() as stack:
            # four: the hosted winner may hire one of them for its team, which then sits on
            # no panel over its own work
            jurors = [
                stack.enter_context(panelist(url, tmp_path / f"juror{i}", f"juror{i}"))
                for i in range(4)
            ]
            dids = sorted(lines.wait_for("ready")["did"] for lines in jurors)

            me = Ed25519Signer.generate()
            client = stack.enter_context(AccordClient(url, signer=me))
            bidder = stack.enter_context(AccordClient(url, signer=ada))
            account = Account.create()
            fund(rpc_url, account.address)
            requester = Requester(client, Wallet.connect(hex_key(account), client.get("/chain")))
            posted = requester.post(SPEC)
            requester.deposit(posted)
            requester.wait_until_bidding(posted, timeout=30)
            task_id = posted.task_id
            bidder.commit(task_id, commit_bid(ada, task_id, Wei(10**15), SALT).to_json())
            world.clock.advance(5)
            bidder.request(
                "POST",
                f"/tasks/{task_id}/reveals",
                json=reveal_bid(ada, task_id, Wei(10**15), SALT).to_json(),
            )
            world.clock.advance(5)
            run_due(world.context)
            task = world.market.task(task_id)
            assert task.price == BUDGET  # a lone bidder is paid the whole budget
            run_awarded_task(world.context, task_id)

            # the reference agent's sum is right; the requester rejects it anyway, bonding
            given = requester.review(task_id, "sum-review", "reject", "the sum is wrong")
            fee = dispute_fee(BUDGET)
            assert world.escrow_chain.bonded(task_id) == fee
            make_web3(rpc_url).provider.make_request("evm_mine", [])  # type: ignore[arg-type]
            world.clock.advance(3601)  # the review window closes: the service settles
            done = {d.due.task_id: d.outcome for d in run_due(world.context)}
            assert done[task_id] == "done", run_due(world.context)
            assert requester.task(task_id)["state"] == "settled"
            assert requester.credit() == 0  # the whole budget paid, the bond to the panel
            anchorer = world.ledger.anchorer
            assert anchorer is not None
            anchorer.anchor_latest()
            report = httpx.get(f"{url}/tasks/{task_id}/audit", timeout=120).json()
            assert report["verdict"] == "PASS", report["steps"]

        body = logged_settlement(world.market, task_id)
        assert body is not None
        [review] = [c for c in body["checks"] if c["id"] == "sum-review"]
        assert review["passed"] is True, review
        panel = review["record"]["dispute"]["panel"]
        assert review["record"]["entry"] == given["index"]
        team = set(body["producers"].values())
        assert len(panel["seats"]) == 3 and set(panel["seats"]) <= set(dids) - team
        assert sorted(panel["coherent"]) == sorted(panel["seats"])
        assert all(vote == "team" for vote in panel["votes"].values())
        shares = panel_pay(fee, panel["seats"], panel["coherent"])
        assert body["panel_payouts"] == {did: str(w) for did, w in sorted(shares.items())}
        for did, wei in shares.items():  # each juror bound its own payout account
            assert world.escrow_chain.credit(body["payees"][did]) == wei
    finally:
        devnet_for(settings).down()
