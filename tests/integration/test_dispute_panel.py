"""Disputes decided by kit agents, each in its own process with its own keys, against a real
service (uvicorn on 127.0.0.1) on a real anvil: the Done-when of the dispute panel.

A lone bidder (the hosted reference agent) wins at the whole budget; the requester
(`accord.kit.Requester`, its own did:key and Ethereum account) rejects a part, bonding the
dispute's fee from its own account because the price leaves nothing for it. `accord agent run`
processes sit as panelists: the service draws them with the hash of the block after the one the
rejection names, calls each at its own `/panel`, and each does the part again with its own
handler, commits, then reveals. The audit replays the draw, the votes and the money.

- Right work rejected: the team wins, the requester's bond pays the panel.
- Garbage rejected: the panel finds for the requester, the team is not paid for the part, the
  panel is paid from the team's pay and the requester's bond comes back.
- A drawn panelist that went away: its seat is replaced once, in rank order, and it is paid
  nothing.
- A kit leader (`accord agent run --price`, its own keys and funded payout account) wins,
  leads and delivers; the requester rejects a part and the leader answers the dispute with a
  bond of its own from another process of its own (`accord agent answer`):
  winning, the answer comes back whole; losing (garbage delivered), it pays the coherent
  seats and the rest comes back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from eth_account import Account

import accord.coordinator.service
from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.client import AccordClient
from accord.coordinator.service import run_awarded_task
from accord.identity.agents import AgentRecord
from accord.identity.payout import bind_payout_address
from accord.identity.payout_accounts import PAYOUT_BOUND_KIND
from accord.kit import Requester, Wallet
from accord.kit.agent import load_key
from accord.kit.wallet import write_key_file
from accord.ledger.chain import make_web3
from accord.ledger.devnet import find_free_port
from accord.ledger.events import parse_time
from accord.ledger.signing import Ed25519Signer, write_keyfile
from accord.ledger.wiring import devnet_for
from accord.market.lifecycle import run_due
from accord.market.money import Wei
from accord.market.panel import COMMIT_WINDOW_S, panel_pay
from accord.market.payouts import dispute_fee
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.settlement import logged_settlement
from accord.market.work import ReviewCheck
from tests.api.test_app import FIGURES, PART, SALT, SUM_RIGHT
from tests.api.test_outside_requester import fund, hex_key
from tests.audit.conftest import World
from tests.integration.anvil_world import anvil_settings, open_anvil_world
from tests.market.panelists import jurors
from tests.processes import JsonLines, stop_process
from tests.serving import serve

pytestmark = pytest.mark.devnet

REPO = Path(__file__).resolve().parents[2]
BUDGET = Wei(10**16)
FEE = dispute_fee(BUDGET)
SPEC = {
    "title": "Add the figures",
    "budget": str(BUDGET),
    "bidding": "5s",
    "reveal": "5s",
    "parts": [PART],
}
TIP = {
    "id": "tip",
    "capability": "arithmetic",
    "input": {**FIGURES, "figures": ["12.50", "3.25"]},
}
TIP_RIGHT = {**SUM_RIGHT, "id": "tip-right", "part": "tip", "within": "15.75"}
TWO_PARTS = {
    **SPEC,
    "parts": [PART, TIP],
    "checks": [
        {"id": "sum-review", "weight": 2, "kind": "review", "part": "sum"},
        {"id": "tip-review", "weight": 1, "kind": "review", "part": "tip"},
        TIP_RIGHT,
    ],
}
"""Two parts of one skill, each reviewed, half the weight on each: the requester rejects the
sum and lets the tip be. The tip's `expect` can say no, so the posting is taken before any
panelist is there."""
REVIEWED = {**SPEC, "checks": [SUM_RIGHT, {"id": "sum-review", "kind": "review", "part": "sum"}]}
"""One part, its sum checked and reviewed (taken before any panelist is there)."""


def kit_environment() -> dict[str, str]:
    """A kit process's environment: this one's, without the service's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCORD_")}
    env["PYTHONPATH"] = str(REPO)
    return env


@dataclass(frozen=True)
class KitLeader:
    """A self-custody leader: `accord agent run` with its keys in `folder`."""

    did: str
    lines: JsonLines
    folder: Path
    account: str
    """Its payout account (bound on the escrow's chain, funded on anvil): its pay is credited
    there, and its answers bond from it."""


@contextmanager
def panelist(url: str, folder: Path, name: str, options: Sequence[str] = ()) -> Iterator[JsonLines]:
    """`accord agent run` in its own process, its keys in `folder`, credentialed in
    arithmetic, bidding on nothing: it only sits on panels (or is hired onto a team). With
    `options` (`--price`, `--no-panel`, `--handler` ...), it bids and leads as they say."""
    folder.mkdir()
    signer = Ed25519Signer.generate()
    write_keyfile(folder / "key.json", signer)
    write_key_file(folder / "eth.json")
    argv = [
        *(sys.executable, "-m", "accord.api.cli", "agent", "run", "--server", url),
        *("--key", str(folder / "key.json"), "--eth-key", str(folder / "eth.json")),
        *("--name", name, "-c", "arithmetic", "--items", "5", "--poll", "0.2"),
        "--allow-private",
        *options,
    ]
    with (folder / "stderr.log").open("w") as errors:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=errors, text=True, env=kit_environment(), cwd=REPO
        )
    try:
        yield JsonLines(process, name)
    finally:
        stop_process(process, timeout=30)


@dataclass
class Disputes:
    """A served market on anvil with the hosted bidder `ada`, a requester holding its own
    keys, and the kit panelists started in their own processes (`jurors`, by DID)."""

    world: World
    url: str
    rpc_url: str
    ada: Ed25519Signer
    bidder: AccordClient
    requester: Requester
    account_key: str
    """The requester's Ethereum account key (a restarted requester connects with it)."""
    folder: Path
    stack: ExitStack
    jurors: dict[str, JsonLines] = field(default_factory=dict)

    def seat_jurors(self, count: int) -> None:
        """`count` more panelist processes, run until the harness ends, each once ready
        (registered, credentialed in arithmetic by its exam, its payout account bound)."""
        first = len(self.jurors)
        started = [
            self.stack.enter_context(panelist(self.url, self.folder / f"juror{i}", f"juror{i}"))
            for i in range(first, first + count)
        ]
        for lines in started:
            self.jurors[lines.wait_for("ready")["did"]] = lines

    def lone_bid(self, spec: dict[str, Any]) -> str:
        """`spec` posted and funded by the requester, won by `ada` alone at the whole
        budget, and worked by its team (`run_awarded_task`): the task's id."""
        world, requester, bidder = self.world, self.requester, self.bidder
        posted = requester.post(spec)
        requester.deposit(posted)
        requester.wait_until_bidding(posted, timeout=30)
        task_id = posted.task_id
        bidder.commit(task_id, commit_bid(self.ada, task_id, Wei(10**15), SALT).to_json())
        world.clock.advance(5)
        bidder.request(
            "POST",
            f"/tasks/{task_id}/reveals",
            json=reveal_bid(self.ada, task_id, Wei(10**15), SALT).to_json(),
        )
        world.clock.advance(5)
        run_due(world.context)
        assert world.market.task(task_id).price == BUDGET  # a lone bidder is paid it all
        run_awarded_task(world.context, task_id)
        return task_id

    def kit_leader(self, handler: str = "reference") -> KitLeader:
        """`accord agent run` bidding the whole budget on every arithmetic task and leading
        the teams of those it wins, sitting on no panel, once ready; its payout account funded
        on anvil (the answers' bonds come from it)."""
        options = ("--price", str(BUDGET), "--no-panel", "--handler", handler)
        folder = self.folder / "leader"
        lines = self.stack.enter_context(panelist(self.url, folder, "kai", options))
        account = str(lines.wait_for("payout")["address"])
        did = str(lines.wait_for("ready")["did"])
        fund(self.rpc_url, account)
        return KitLeader(did, lines, folder, account)

    def led_bid(self, spec: dict[str, Any], leader: KitLeader) -> str:
        """`spec` posted and funded by the requester, won by `leader` alone at the whole
        budget, and led and delivered by it in its own process: the task's id."""
        world, requester = self.world, self.requester
        posted = requester.post(spec)
        requester.deposit(posted)
        requester.wait_until_bidding(posted, timeout=30)
        task_id = posted.task_id
        leader.lines.wait_for("committed", task_id=task_id)
        world.clock.set(world.market.task(task_id).bidding_ends)
        leader.lines.wait_for("revealed", task_id=task_id)
        world.clock.set(world.market.task(task_id).reveal_ends)
        run_due(world.context)
        task = world.market.task(task_id)
        assert task.winner == leader.did and task.price == BUDGET  # alone: the whole budget
        leader.lines.wait_for("delivered", task_id=task_id)
        return task_id

    def answer(self, leader: KitLeader, task_id: str, check: str, amount: int) -> dict[str, Any]:
        """`leader`'s answer to the rejection of `check`, bonding `amount` wei from its own
        account (`answering`), as it printed it."""
        done = self.answering(leader.folder, task_id, check, amount)
        assert done.returncode == 0, done.stderr
        answered: dict[str, Any] = json.loads(done.stdout)
        return answered

    def answering(
        self, keys: Path, task_id: str, check: str, amount: int
    ) -> subprocess.CompletedProcess[str]:
        """`accord agent answer` in a process of its own with the key files in `keys` (a kit
        agent's folder: `key.json`, its did:key, and `eth.json`, the account it bonds from)."""
        argv = [sys.executable, "-m", "accord.api.cli", "agent", "answer", task_id, check]
        argv += ["--amount", str(amount), "--server", self.url, "--json"]
        argv += ["--key", str(keys / "key.json"), "--eth-key", str(keys / "eth.json")]
        return subprocess.run(
            argv, capture_output=True, text=True, env=kit_environment(), cwd=REPO, timeout=120
        )

    def rebind_pay(self, leader: KitLeader) -> str:
        """`leader` binds a fresh account for its pay (its own `payout.bound` over HTTP,
        signed by its DID key and the account's, as the kit binds its first): the answers it
        sent stay its old account's. The new account's address."""
        account = Account.create()
        with AccordClient(self.url, signer=load_key(leader.folder / "key.json")) as client:
            path = f"/agents/{quote(leader.did, safe='')}"
            info = client.get(f"{path}/next-seq")
            now = parse_time(str(info["server_time"]))
            binding = bind_payout_address(client.signer, account, int(info["chain_id"]), "pay", now)
            entry = client.entry(PAYOUT_BOUND_KIND, leader.did, {"binding": binding})
            bound = client.post(f"{path}/payout", {"entry": entry})
        assert bound["address"] == account.address
        return str(account.address)

    def reject(self, task_id: str, check: str, reason: str) -> dict[str, Any]:
        """The requester's rejection (bonding the fee), and the block its panel's seed is."""
        given = self.requester.review(task_id, check, "reject", reason)
        assert self.world.escrow_chain.bonded(task_id) == FEE
        make_web3(self.rpc_url).provider.make_request("evm_mine", [])  # type: ignore[arg-type]
        return given

    def settle(self) -> dict[str, str]:
        """One lifecycle round: each due task's outcome."""
        return {d.due.task_id: d.outcome for d in run_due(self.world.context)}

    def audit(self, task_id: str) -> dict[str, Any]:
        anchorer = self.world.ledger.anchorer
        assert anchorer is not None
        anchorer.anchor_latest()
        report: dict[str, Any] = httpx.get(f"{self.url}/tasks/{task_id}/audit", timeout=120).json()
        return report


@contextmanager
def disputes(tmp_path: Path) -> Iterator[Disputes]:
    """The harness: anvil, the world and its service, a fresh requester with a funded account;
    the panelists are started by the test (`seat_jurors`), everything stopped after."""
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
            client = stack.enter_context(AccordClient(url, signer=Ed25519Signer.generate()))
            bidder = stack.enter_context(AccordClient(url, signer=ada))
            account = Account.create()
            fund(rpc_url, account.address)
            requester = Requester(client, Wallet.connect(hex_key(account), client.get("/chain")))
            yield Disputes(
                world, url, rpc_url, ada, bidder, requester, hex_key(account), tmp_path, stack
            )
    finally:
        devnet_for(settings).down()


def test_a_panel_of_three_agent_processes_decides_a_lone_bidders_dispute(tmp_path: Path) -> None:
    with disputes(tmp_path) as market:
        world, requester = market.world, market.requester
        # four: the hosted winner may hire one of them for its team, which then sits on no
        # panel over its own work
        market.seat_jurors(4)
        task_id = market.lone_bid(SPEC)
        # the reference agent's sum is right; the requester rejects it anyway, bonding
        given = market.reject(task_id, "sum-review", "the sum is wrong")
        world.clock.advance(3601)  # the review window closes: the service settles
        done = market.settle()
        assert done[task_id] == "done", run_due(world.context)
        assert requester.task(task_id)["state"] == "settled"
        assert requester.credit() == 0  # the whole budget paid, the bond to the panel
        report = market.audit(task_id)
        assert report["verdict"] == "PASS", report["steps"]

        body = logged_settlement(world.market, task_id)
        assert body is not None
        [review] = [c for c in body["checks"] if c["id"] == "sum-review"]
        assert review["passed"] is True, review
        panel = review["record"]["dispute"]["panel"]
        assert review["record"]["entry"] == given["index"]
        team = set(body["producers"].values())
        assert len(panel["seats"]) == 3 and set(panel["seats"]) <= set(market.jurors) - team
        assert sorted(panel["coherent"]) == sorted(panel["seats"])
        assert all(vote == "team" for vote in panel["votes"].values())
        shares = panel_pay(FEE, panel["seats"], panel["coherent"])
        assert body["panel_payouts"] == {did: str(w) for did, w in sorted(shares.items())}
        for did, wei in shares.items():  # each juror bound its own payout account
            assert world.escrow_chain.credit(body["payees"][did]) == wei


class _SumAnsweredWrong:
    """The hosted agent's adapter, except that the part `sum` is answered wrong in the right
    shape."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def run(self, task: Any) -> Any:
        answer = self.inner.run(task)
        if task.item.get("item_id", task.sub_id) != "sum":
            return answer
        return {key: "0" for key in answer} if isinstance(answer, dict) else "1"


def test_a_requester_who_rejects_garbage_wins_and_the_team_is_not_paid_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The team delivers a wrong sum; the requester rejects it, bonding the fee. The panelists
    each do the sum again, find it wrong and vote for the requester: the sum's review fails,
    the team is paid the tip's half alone, less the panel's pay (the loser's stake), and the
    requester gets the sum's half and its whole bond back. The audit replays it."""
    real = accord.coordinator.service.adapter_for

    def adapter_for(record: AgentRecord, timeout: float, **options: Any) -> Any:
        return _SumAnsweredWrong(real(record, timeout, **options))

    with disputes(tmp_path) as market:
        world, requester = market.world, market.requester
        monkeypatch.setattr(accord.coordinator.service, "adapter_for", adapter_for)
        task_id = market.lone_bid(TWO_PARTS)
        monkeypatch.undo()
        # the panelists come after the team was formed: the winner did both parts itself
        market.seat_jurors(3)
        [delivered] = [p for p in requester.deliverable(task_id)["parts"] if p["part"] == "sum"]
        assert delivered["output"] != "163.69", delivered
        given = market.reject(task_id, "sum-review", "the figures add up to 163.69")
        world.clock.advance(3601)  # the review window closes (the tip's review is silent)
        done = market.settle()
        assert done[task_id] == "done", run_due(world.context)
        assert requester.task(task_id)["state"] == "settled"
        # the unpaid half of the budget, and the whole bond: the team's pay paid the panel
        assert requester.credit() == BUDGET // 2 + FEE
        report = market.audit(task_id)
        assert report["verdict"] == "PASS", report["steps"]

        body = logged_settlement(world.market, task_id)
        assert body is not None
        results = {c["id"]: c for c in body["checks"]}
        assert results["sum-review"]["passed"] is False and results["tip-review"]["passed"] is True
        dispute = results["sum-review"]["record"]["dispute"]
        assert dispute["winner"] == "requester"
        assert results["sum-review"]["record"]["entry"] == given["index"]
        panel = dispute["panel"]
        team = set(body["producers"].values())
        assert len(panel["seats"]) == 3 and set(panel["seats"]) <= set(market.jurors) - team
        assert all(vote == "requester" for vote in panel["votes"].values())
        assert sorted(panel["coherent"]) == sorted(panel["seats"])
        assert body["paid_share"] == "1/2"  # the tip's checks alone are paid for
        # the team: the tip's half of the price, less the panel's fee (from the loser's stake)
        assert int(body["amount"]) == BUDGET // 2 - FEE
        assert sum(int(w) for w in body["payouts"].values()) == BUDGET // 2 - FEE
        shares = panel_pay(FEE, panel["seats"], panel["coherent"])
        assert body["panel_payouts"] == {did: str(w) for did, w in sorted(shares.items())}
        for did, wei in shares.items():
            assert world.escrow_chain.credit(body["payees"][did]) == wei


def test_a_panelist_that_does_not_answer_is_replaced_once_and_paid_nothing(
    tmp_path: Path,
) -> None:
    """The first drawn panelist's process has stopped before the service calls it: the other
    two commit, the commit window closes (the market's clock is moved past it), the seat goes
    to the first reserve in rank order, which commits and votes; the silent panelist is paid
    nothing, the three who sat at the end share the requester's bond. The audit replays the
    replacement."""
    with disputes(tmp_path) as market:
        world, requester = market.world, market.requester
        task_id = market.lone_bid(REVIEWED)
        market.seat_jurors(4)  # after the team was formed: three sit, one is the reserve
        market.reject(task_id, "sum-review", "the sum is wrong")
        world.clock.advance(3601)
        task = world.market.task(task_id)
        [check] = [c for c in task.spec.requester_checks if c.check_id == "sum-review"]
        assert isinstance(check, ReviewCheck)
        # the draw is the rule's, logged once: whoever draws it first, the settlement reads it
        drawn = world.market.panels.draw(task, check).panel
        gone, reserve = drawn.seats[0], drawn.reserves[0]
        stop_process(market.jurors[gone].process)

        assert market.settle()[task_id] == "waits"  # two committed, one seat silent
        world.clock.advance(COMMIT_WINDOW_S)  # the commit window closes
        assert market.settle()[task_id] == "waits"  # the silent seat is replaced
        done = market.settle()  # the reserve commits, all three reveal
        assert done[task_id] == "done", run_due(world.context)
        assert requester.credit() == 0
        report = market.audit(task_id)
        assert report["verdict"] == "PASS", report["steps"]

        body = logged_settlement(world.market, task_id)
        assert body is not None
        [review] = [c for c in body["checks"] if c["id"] == "sum-review"]
        assert review["passed"] is True, review
        panel = review["record"]["dispute"]["panel"]
        assert panel["replaced"] == {gone: reserve}
        assert panel["seats"] == [reserve, *drawn.seats[1:]]
        assert gone not in panel["votes"] and sorted(panel["coherent"]) == sorted(panel["seats"])
        shares = panel_pay(FEE, panel["seats"], panel["coherent"])
        assert gone not in shares and reserve in shares and sum(shares.values()) == FEE
        assert body["panel_payouts"] == {did: str(w) for did, w in sorted(shares.items())}


def test_a_restarted_requester_bonds_for_the_rejections_the_log_holds(tmp_path: Path) -> None:
    """The requester rejects the sum, bonding one fee, and stops; started again with the same
    keys (nothing in memory), it reads its rejections back from the log (its own signed
    entries only) and bonds the second fee before it rejects the tip, which the service
    takes. Another requester's reading counts none of them."""
    with disputes(tmp_path) as market:
        world, requester = market.world, market.requester
        task_id = market.lone_bid(TWO_PARTS)
        jurors(world, 3)  # a panel can be drawn: the rejections are taken
        market.reject(task_id, "sum-review", "the sum is wrong")
        assert requester.rejections(task_id) == ["sum-review"]

        chain = requester.client.get("/chain")
        with AccordClient(market.url, signer=requester.client.signer) as client:
            restarted = Requester(client, Wallet.connect(market.account_key, chain))
            assert restarted.rejections(task_id) == ["sum-review"]
            given = restarted.review(task_id, "tip-review", "reject", "the tip is wrong")
        assert given["verdict"] == "reject"
        assert world.escrow_chain.bonded(task_id) == 2 * FEE
        assert requester.rejections(task_id) == ["sum-review", "tip-review"]
        with AccordClient(market.url, signer=Ed25519Signer.generate()) as client:
            other = Requester(client, Wallet.connect(market.account_key, chain))
            assert other.rejections(task_id) == []


ANSWER_BOND = Wei(2 * FEE + 7)
"""The team's answer: more than the dispute's fee (and odd), so what comes back of it is told
apart from the fee's shares and the pay."""


def payout_account(lines: JsonLines) -> str:
    """The payout account a kit process bound, as its own `payout` line says."""
    return str(lines.wait_for("payout")["address"])


def test_a_kit_leader_answers_a_rejection_of_right_work_and_gets_its_bond_back_whole(
    tmp_path: Path,
) -> None:
    """A kit leader (its own process, keys and funded account) wins alone and delivers a right
    sum; the requester rejects it, bonding the fee; the leader answers from another process of
    its own with a bond from its account (`accord agent answer`; a panelist's answer and one
    under the fee are refused, nothing sent), then binds another account for its pay. The
    panel finds for the team: on chain, the answer comes back whole to its account, the whole
    price goes to the pay account, the requester's bond pays the three coherent panelists and
    the requester gets nothing back. The audit, holding the answer to the chain's `Answered`
    events, passes."""
    with disputes(tmp_path) as market:
        world, requester, chain = market.world, market.requester, market.world.escrow_chain
        leader = market.kit_leader()
        task_id = market.led_bid(REVIEWED, leader)
        market.seat_jurors(3)  # after the team was formed: none of them is on it
        given = market.reject(task_id, "sum-review", "the sum is wrong")
        # a panelist is not on the team: its answer is refused before anything is sent;
        # so is the leader's under the dispute's fee
        accounts = {did: payout_account(lines) for did, lines in market.jurors.items()}
        [juror0, *_] = market.jurors
        juror0_account = accounts[juror0]
        fund(market.rpc_url, juror0_account)
        stranger = market.answering(market.folder / "juror0", task_id, "sum-review", FEE)
        assert stranger.returncode == 2, stranger
        assert "not on the team" in json.loads(stranger.stdout)["error"]
        assert chain.answered(task_id, juror0_account) == 0
        short = market.answering(leader.folder, task_id, "sum-review", FEE - 1)
        assert short.returncode == 2, short
        assert f"at least the dispute's fee, {FEE} wei" in json.loads(short.stdout)["error"]
        assert chain.answered(task_id, leader.account) == 0
        answered = market.answer(leader, task_id, "sum-review", ANSWER_BOND)
        assert answered["amount"] == str(ANSWER_BOND) and answered["account"] == leader.account
        assert answered["already"] is False
        assert chain.answered(task_id, leader.account) == ANSWER_BOND
        assert chain.credit(leader.account) == 0
        again = market.answer(leader, task_id, "sum-review", ANSWER_BOND)  # a retry: the same
        assert again == answered | {"already": True}
        assert chain.answered(task_id, leader.account) == ANSWER_BOND  # nothing sent twice
        pay = market.rebind_pay(leader)  # its pay apart from its answer, to tell them apart

        world.clock.advance(3601)  # the review window closes: the service settles
        done = market.settle()
        assert done[task_id] == "done", run_due(world.context)
        assert requester.task(task_id)["state"] == "settled"

        # the chain: the answer whole to its account, the price to the leader's pay account,
        # the requester's bond to the panel
        assert chain.credit(leader.account) == ANSWER_BOND
        assert chain.credit(pay) == BUDGET
        assert requester.credit() == 0
        body = logged_settlement(world.market, task_id)
        assert body is not None
        [review] = [c for c in body["checks"] if c["id"] == "sum-review"]
        assert review["passed"] is True, review
        dispute = review["record"]["dispute"]
        assert dispute["winner"] == "team" and review["record"]["entry"] == given["index"]
        assert dispute["answer"]["by"] == leader.did
        assert dispute["answer"]["amount"] == str(ANSWER_BOND)
        assert set(body["producers"].values()) == {leader.did}
        panel = dispute["panel"]
        assert sorted(panel["coherent"]) == sorted(panel["seats"]) == sorted(market.jurors)
        shares = panel_pay(FEE, panel["seats"], panel["coherent"])
        assert sum(shares.values()) == FEE
        for did, wei in shares.items():
            assert chain.credit(accounts[did]) == wei

        report = market.audit(task_id)
        assert report["verdict"] == "PASS", report["steps"]


def test_a_kit_leader_that_answers_a_rejection_of_garbage_pays_the_panel_from_its_answer(
    tmp_path: Path,
) -> None:
    """The kit leader delivers a wrong sum (its handler) and a right tip; the requester
    rejects the sum, bonding the fee, and the leader answers with a bond of its own. The panel
    finds for the requester: on chain, the leader is credited the tip's half of the price
    whole (the panel is paid from its answer, not its pay) and what is left of its answer; the
    requester gets the sum's half and its whole bond back; the coherent panelists are paid
    their shares. The audit passes."""
    with disputes(tmp_path) as market:
        world, requester, chain = market.world, market.requester, market.world.escrow_chain
        leader = market.kit_leader("python:tests.integration.dispute_handlers:sum_answered_wrong")
        task_id = market.led_bid(TWO_PARTS, leader)
        market.seat_jurors(3)
        [delivered] = [p for p in requester.deliverable(task_id)["parts"] if p["part"] == "sum"]
        assert delivered["output"] != "163.69", delivered
        market.reject(task_id, "sum-review", "the figures add up to 163.69")
        market.answer(leader, task_id, "sum-review", ANSWER_BOND)
        assert chain.answered(task_id, leader.account) == ANSWER_BOND
        pay = market.rebind_pay(leader)  # its pay apart from its answer, to tell them apart

        world.clock.advance(3601)  # the review window closes (the tip's review is silent)
        done = market.settle()
        assert done[task_id] == "done", run_due(world.context)

        body = logged_settlement(world.market, task_id)
        assert body is not None
        results = {c["id"]: c for c in body["checks"]}
        assert results["sum-review"]["passed"] is False and results["tip-review"]["passed"] is True
        dispute = results["sum-review"]["record"]["dispute"]
        assert dispute["winner"] == "requester" and dispute["answer"]["by"] == leader.did
        assert set(body["producers"].values()) == {leader.did}
        panel = dispute["panel"]
        assert sorted(panel["coherent"]) == sorted(panel["seats"]) == sorted(market.jurors)
        assert all(vote == "requester" for vote in panel["votes"].values())
        shares = panel_pay(FEE, panel["seats"], panel["coherent"])
        assert sum(shares.values()) == FEE

        # the chain: the tip's half whole to the leader's pay account, the panel's pay from
        # the answer, the rest of the answer back to its account
        assert chain.credit(pay) == BUDGET // 2
        assert chain.credit(leader.account) == ANSWER_BOND - FEE
        assert requester.credit() == BUDGET // 2 + FEE  # the sum's half, the bond whole
        for did, wei in shares.items():
            assert chain.credit(payout_account(market.jurors[did])) == wei

        report = market.audit(task_id)
        assert report["verdict"] == "PASS", report["steps"]
