"""Any DID can request: a requester the service holds no key for posts a task signed by its own
did:key and funds the escrow from its own Ethereum account, over HTTP, A2A and the CLI.

The service runs under uvicorn on 127.0.0.1 over a world opened as the CLI opens it, on a real
anvil devnet managed by accord (`tests.integration.anvil_world`), with one clock the test moves
(no waiting for windows). Each requester is a fresh did:key with a fresh Ethereum account
funded from one of anvil's default accounts; it prepares, signs and posts through
`accord.kit.Requester` (or raw signed httpx), deposits with `accord.kit.Wallet`, and the market's
lifecycle round (`accord.market.lifecycle.run_due`) sees the deposit, or refuses a deposit that is
not the task's.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
)
from eth_account import Account
from google.protobuf import struct_pb2
from google.protobuf.json_format import ParseDict
from typer.testing import CliRunner

from accord.api.app import create_app
from accord.api.cli import app as cli_app
from accord.api.routes.deps import ApiConfig
from accord.client import AccordClient, ApiError
from accord.coordinator.service import run_awarded_task
from accord.identity.http_auth import AccordAuth
from accord.kit import Requester, Wallet
from accord.kit.wallet import WalletError, write_key_file
from accord.ledger.chain import make_web3
from accord.ledger.contracts import load_artifact
from accord.ledger.devnet import find_free_port
from accord.ledger.events import Entry, format_time, make_entry, parse_time
from accord.ledger.signing import Ed25519Signer, write_keyfile
from accord.ledger.wiring import devnet_for
from accord.market.escrow import ESCROW_CONTRACT, EscrowRefusedError, open_intent, task_id_hash
from accord.market.lifecycle import run_due
from accord.market.money import Wei
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.tasks import TASK_POSTED
from tests.api.test_a2a_server import a2a_client, accord
from tests.api.test_app import PART, SALT, SUM_RIGHT, assert_problem
from tests.audit.conftest import World
from tests.integration.anvil_world import anvil_settings, open_anvil_world
from tests.serving import serve

FUNDER_KEY = "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a"
"""anvil's fifth default account: funds the fresh accounts (the operator and the service's
devnet requester use the first two)."""
BUDGET = Wei(10**16)
SPEC: dict[str, Any] = {
    "title": "Add the figures",
    "budget": str(BUDGET),
    "bidding": "5s",
    "reveal": "5s",
    "parts": [PART],
    "checks": [SUM_RIGHT, {"id": "sum-review", "weight": 1, "kind": "review", "part": "sum"}],
}
pytestmark = pytest.mark.devnet


@dataclass
class Service:
    url: str
    world: World
    rpc_url: str
    bidder: Ed25519Signer

    def chain(self) -> dict[str, Any]:
        data: dict[str, Any] = httpx.get(f"{self.url}/chain").json()
        return data

    def log_size(self) -> int:
        return self.world.ledger.store.size()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    settings = anvil_settings(tmp_path_factory.mktemp("outside") / "home", find_free_port())
    try:
        world = open_anvil_world(settings)
        record = world.onboarding.registry.new_agent("ada", now=world.clock())
        [outcome] = world.onboarding.onboard(record, ["arithmetic"], item_count=5)
        assert outcome.exam.passed
        bidder = world.onboarding.registry.signer(record)
        app = create_app(
            settings,
            config=ApiConfig(rate=1000.0, burst=10_000.0),
            context=world.context,
            anchors=world.anchors,
            escrow_chain=world.escrow_chain,
        )
        with serve(app, ws="none") as url:
            yield Service(url, world, devnet_for(settings).rpc_url, bidder)
    finally:
        devnet_for(settings).down()


def fund(rpc_url: str, address: str, wei: int = 10**18) -> None:
    """Send `wei` to `address` from anvil's fifth default account, mined."""
    w3 = make_web3(rpc_url)
    funder = Account.from_key(FUNDER_KEY)
    tx = {
        "to": address,
        "value": wei,
        "gas": 21_000,
        "nonce": w3.eth.get_transaction_count(funder.address, "pending"),
        "chainId": w3.eth.chain_id,
        "maxFeePerGas": 10**11,
        "maxPriorityFeePerGas": 10**9,
    }
    sent = w3.eth.send_raw_transaction(funder.sign_transaction(tx).raw_transaction)
    w3.eth.wait_for_transaction_receipt(sent, timeout=30)


def fresh_requester(service: Service, client: AccordClient) -> Requester:
    """A requester with a fresh did:key (the client's) and a fresh, funded account."""
    account = Account.create()
    fund(service.rpc_url, account.address)
    wallet = Wallet.connect(hex_key(account), service.chain())
    return Requester(client, wallet)


def hex_key(account: Any) -> str:
    return "0x" + bytes(account.key).hex()


def lifecycle(service: Service) -> dict[str, tuple[str, str]]:
    """One lifecycle round, as `accord serve` runs every few seconds: task id -> outcome."""
    done = run_due(service.world.context)
    return {d.due.task_id: (d.outcome, d.detail) for d in done}


# -- the outside requester's flow ---------------------------------------------------------------


def test_an_outside_requester_posts_deposits_and_the_task_opens_for_bids(
    service: Service,
) -> None:
    me = Ed25519Signer.generate()
    chain = service.chain()
    assert chain["rpc_url"] == service.rpc_url and chain["open_function"] == "open(bytes32,uint64)"
    assert chain["escrow_contract"] == service.world.escrow.escrow_address()
    with AccordClient(service.url, signer=me) as client:
        requester = fresh_requester(service, client)
        before = service.log_size()
        prepared = requester.prepare(SPEC)
        assert service.log_size() == before  # preparing logs nothing
        assert prepared["body"]["escrow_from"] == requester.wallet.address
        posted = requester.post(SPEC, idempotency_key=prepared["idempotency_key"])
        assert posted.task_id == prepared["task_id"]
        assert posted.answer["state"] == "posted" and posted.answer["requester"] == me.did
        # the deposit to make: TaskEscrow.open(taskIdHash, delivery deadline), the budget
        call = posted.escrow
        task = service.world.market.task(posted.task_id)
        deadline = int(task.escrow_deadline.timestamp())
        contract = make_web3(service.rpc_url).eth.contract(
            address=chain["escrow_contract"], abi=load_artifact(ESCROW_CONTRACT).abi
        )
        data = contract.encode_abi("open", [task_id_hash(posted.task_id), deadline])
        assert (call["to"], call["from"], call["value"], call["chain_id"]) == (
            chain["escrow_contract"],
            requester.wallet.address,
            str(BUDGET),
            chain["chain_id"],
        )
        assert (call["data"], call["deadline"]) == (data, deadline)
        # task.posted is the requester's own entry; the service holds no key of it
        [stored] = service.world.ledger.store.find(kind=TASK_POSTED, subject=posted.task_id)
        assert Entry.from_bytes(stored.data).event.actor == me.did
        keys = [p.read_text() for p in service.world.settings.keys_dir.rglob("*.json")]
        assert not any(me.did in text for text in keys)
        requester.deposit(posted)
        opened = requester.wait_until_bidding(posted, timeout=10)
        assert opened["state"] == "bidding" and opened["escrowed"] is True
        record = service.world.escrow.chain.escrow(posted.task_id)
        assert record is not None and record.requester == requester.wallet.address
        # it takes sealed bids
        with AccordClient(service.url, signer=service.bidder) as bidder:
            commitment = commit_bid(service.bidder, posted.task_id, Wei(10**15), SALT)
            bidder.commit(posted.task_id, commitment.to_json())
        # a retry of the posting answers the same task, and logs nothing new
        size = service.log_size()
        again = requester.post(SPEC, idempotency_key=posted.idempotency_key)
        assert again.task_id == posted.task_id and service.log_size() == size


def test_a_stranger_or_a_wrong_deadline_does_not_open_bidding(service: Service) -> None:
    me = Ed25519Signer.generate()
    with AccordClient(service.url, signer=me) as client:
        requester = fresh_requester(service, client)
        # (1) a stranger front-runs the opening, with the right amount and deadline
        posted = requester.post(SPEC)
        stranger = Account.create()
        fund(service.rpc_url, stranger.address)
        chain = service.world.escrow.chain
        intent = open_intent(posted.task_id, BUDGET, int(posted.escrow["deadline"]))
        tx = chain.build_tx(hex_key(stranger), intent)
        chain.broadcast(tx)
        assert chain.wait_for_receipt(tx.tx_hash, 30) is not None
        outcome, detail = lifecycle(service)[posted.task_id]
        assert outcome == "waits" and stranger.address in detail, detail
        assert requester.task(posted.task_id)["state"] == "posted"
        with pytest.raises(EscrowRefusedError, match="AlreadyOpened"):
            requester.deposit(posted)  # the key on chain is taken
        # the requester ends the task with its own signed cancellation, and posts again
        assert requester.cancel(posted.task_id)["state"] == "cancelled"
        # (2) its own deposit, but with another deadline
        second = requester.post(SPEC)
        wrong = open_intent(second.task_id, BUDGET, int(second.escrow["deadline"]) + 60)
        tx = chain.build_tx(requester.wallet._key, wrong)
        chain.broadcast(tx)
        assert chain.wait_for_receipt(tx.tx_hash, 30) is not None
        outcome, detail = lifecycle(service)[second.task_id]
        assert outcome == "waits" and "deadline" in detail, detail
        assert requester.task(second.task_id)["state"] == "posted"
        assert not service.world.ledger.store.find(kind="escrow.opened", subject=second.task_id)


def test_with_no_bids_the_refund_goes_to_the_requesters_own_account(service: Service) -> None:
    me = Ed25519Signer.generate()
    with AccordClient(service.url, signer=me) as client:
        requester = fresh_requester(service, client)
        posted = requester.post(SPEC)
        requester.deposit(posted)
        assert requester.wait_until_bidding(posted, timeout=10)["state"] == "bidding"
        service.world.clock.advance(11)  # past bidding and reveal, nobody bid
        assert lifecycle(service)[posted.task_id] == ("done", "expired: no valid bid")
        assert requester.task(posted.task_id)["state"] == "refunded"
        assert requester.credit() == BUDGET
        w3 = make_web3(service.rpc_url)
        balance = w3.eth.get_balance(requester.wallet.address)  # type: ignore[arg-type]
        sent = requester.withdraw()  # signed with its own key
        assert sent.tx_hash and requester.credit() == 0
        after = w3.eth.get_balance(requester.wallet.address)  # type: ignore[arg-type]
        assert balance < after < balance + BUDGET  # the budget back, less the gas


# -- refusals: clear problems, nothing logged ---------------------------------------------------


def signed_post(url: str, signer: Ed25519Signer, entry: Any, key: str | None) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return httpx.post(
        f"{url}/tasks", json={"entry": entry}, headers=headers, auth=AccordAuth(signer)
    )


def entry_of(signer: Ed25519Signer, prepared: dict[str, Any], **changes: Any) -> dict[str, Any]:
    fields = {
        "kind": prepared["kind"],
        "seq": prepared["seq"],
        "at": parse_time(prepared["server_time"]),
        "subject": prepared["subject"],
        "body": prepared["body"],
        **changes,
    }
    return make_entry(signer, **fields).to_json()


def test_bad_postings_get_clear_problems_and_log_nothing(service: Service) -> None:
    me = Ed25519Signer.generate()
    other = Ed25519Signer.generate()
    account = Account.create().address
    url = service.url
    auth = AccordAuth(me)
    before = service.log_size()

    def prepare(address: str = account, key: str = "k1") -> httpx.Response:
        body = {"spec": SPEC, "escrow_from": address}
        return httpx.post(
            f"{url}/tasks/prepare", json=body, headers={"Idempotency-Key": key}, auth=auth
        )

    detail = assert_problem(prepare("0x1234"), 400)["detail"]
    assert "not an Ethereum address" in detail
    k = next(k for k, c in enumerate(account) if k > 1 and c.isalpha())
    bad_sum = account[:k] + account[k].swapcase() + account[k + 1 :]  # a wrong EIP-55 checksum
    assert "checksum" in assert_problem(prepare(bad_sum), 400)["detail"]
    bad_spec = httpx.post(
        f"{url}/tasks/prepare",
        json={"spec": {**SPEC, "parts": []}, "escrow_from": account},
        auth=auth,
    )
    assert bad_spec.status_code == 422, bad_spec.text
    prepared = prepare().json()
    # an entry signed by somebody else than the caller
    theirs = entry_of(other, prepared)
    assert "signed by" in assert_problem(signed_post(url, me, theirs, "k1"), 403)["detail"]
    # a body that is not the one the service would log (the account in lower case)
    body = {**prepared["body"], "escrow_from": account.lower()}
    altered = entry_of(me, prepared, body=body)
    detail = assert_problem(signed_post(url, me, altered, "k1"), 400)["detail"]
    assert "body" in detail
    # no idempotency key, or another key than the task id derives from
    entry = entry_of(me, prepared)
    assert "Idempotency-Key" in assert_problem(signed_post(url, me, entry, None), 400)["detail"]
    assert "names task" in assert_problem(signed_post(url, me, entry, "k2"), 400)["detail"]
    # dated far from the service's clock
    stale = entry_of(me, prepared, at=parse_time(prepared["server_time"]) - timedelta(minutes=10))
    assert "sign it again" in assert_problem(signed_post(url, me, stale, "k1"), 400)["detail"]
    # a forged signature
    forged = {
        **entry,
        "sig": entry["sig"][:-4] + ("AAAA" if entry["sig"][-4:] != "AAAA" else "BBBB"),
    }
    assert_problem(signed_post(url, me, forged, "k1"), 400)
    # a hosted-style posting by a DID the service holds no key for, as before
    hosted = httpx.post(f"{url}/tasks", json=SPEC, auth=auth)
    assert "holds a key" in assert_problem(hosted, 403)["detail"]
    assert service.log_size() == before
    # the right one is posted; the same key with another spec is then a conflict
    assert signed_post(url, me, entry, "k1").status_code == 201
    other_spec = prepare(key="k1").json()  # same key, same spec: the same body
    assert other_spec["task_id"] == prepared["task_id"]
    changed = httpx.post(
        f"{url}/tasks/prepare",
        json={"spec": {**SPEC, "title": "Other"}, "escrow_from": account},
        headers={"Idempotency-Key": "k1"},
        auth=auth,
    ).json()
    conflict = entry_of(me, changed, seq=changed["seq"])
    assert_problem(signed_post(url, me, conflict, "k1"), 409)


# -- A2A and the CLI ------------------------------------------------------------------------------


def test_an_a2a_client_with_its_own_did_posts_and_deposits(service: Service) -> None:
    me = Ed25519Signer.generate()
    message_id = str(uuid.uuid4())
    with AccordClient(service.url, signer=me) as client:
        requester = fresh_requester(service, client)
        prepared = requester.prepare(SPEC, idempotency_key=message_id)
    entry = entry_of(me, prepared)
    metadata = ParseDict({"accord": {"entry": entry}}, struct_pb2.Struct())
    message = Message(
        message_id=message_id,
        role=Role.ROLE_USER,
        parts=[Part(text="post the task my entry signs")],
        metadata=metadata,
    )

    async def post() -> Any:
        async with a2a_client(service.url, me) as a2a:
            events = [
                event async for event in a2a.send_message(SendMessageRequest(message=message))
            ]
            [event] = events
            return event.task

    task = asyncio.run(post())
    data = accord(task)
    assert task.id == prepared["task_id"] and data["state"] == "posted"
    assert data["requester"] == me.did
    call = data["escrow"]
    assert call["from"] == requester.wallet.address and call["value"] == str(BUDGET)
    requester.wallet.deposit(task.id, {**call, "deadline": int(call["deadline"])})
    lifecycle(service)

    async def get() -> Any:
        async with a2a_client(service.url, me) as a2a:
            return await a2a.get_task(GetTaskRequest(id=task.id))

    assert accord(asyncio.run(get()))["state"] == "bidding"
    # a posted task it never funded, cancelled over A2A with its own signed task.cancelled
    with AccordClient(service.url, signer=me) as client:
        unfunded = Requester(client, requester.wallet).post(SPEC)
        cancelled = client.entry("task.cancelled", unfunded.task_id, {"task_id": unfunded.task_id})
    request = CancelTaskRequest(
        id=unfunded.task_id,
        metadata=ParseDict({"accord": {"entry": cancelled}}, struct_pb2.Struct()),
    )

    async def cancel() -> Any:
        async with a2a_client(service.url, me) as a2a:
            return await a2a.cancel_task(request)

    assert accord(asyncio.run(cancel()))["state"] == "cancelled"


def test_the_cli_posts_to_a_server_signing_and_depositing_itself(
    service: Service, tmp_path: Path
) -> None:
    key_file = tmp_path / "me.json"
    write_keyfile(key_file, Ed25519Signer.generate())
    eth_file = tmp_path / "me.eth.json"
    fund(service.rpc_url, write_key_file(eth_file))
    spec_file = tmp_path / "task.json"
    spec_file.write_text(json.dumps(SPEC))
    args = ["task", "post", "--spec", str(spec_file), "--server", service.url]
    result = CliRunner().invoke(
        cli_app, [*args, "--key", str(key_file), "--eth-key", str(eth_file), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["state"] == "bidding" and data["deposit_tx"].startswith("0x")
    assert (
        data["escrow"]["from"] == Account.from_key(json.loads(eth_file.read_text())["key"]).address
    )
    # without the keys it says what to give (exit 2)
    missing = CliRunner().invoke(cli_app, [*args, "--json"])
    assert missing.exit_code == 2 and "--eth-key" in missing.output


def test_the_cli_cancels_with_the_requesters_own_key_and_reads_signed(
    service: Service, tmp_path: Path
) -> None:
    """`task cancel --server --key` signs its own task.cancelled; `task result --server`
    without --key says to give it (a read of the work is signed), and nothing is changed."""
    me = Ed25519Signer.generate()
    key_file = tmp_path / "me.json"
    write_keyfile(key_file, me)
    eth_file = tmp_path / "me.eth.json"
    fund(service.rpc_url, write_key_file(eth_file))
    with AccordClient(service.url, signer=me) as client:
        unfunded = Requester(client, Wallet.from_key_file(eth_file, service.chain()))
        first = unfunded.post(SPEC)  # and never funded
        task_id, posted_key = first.task_id, first.idempotency_key
    cli = CliRunner()
    unsigned = cli.invoke(cli_app, ["task", "result", task_id, "--server", service.url])
    assert unsigned.exit_code == 2 and "--key" in unsigned.output
    stranger = tmp_path / "stranger.json"
    write_keyfile(stranger, Ed25519Signer.generate())
    args = ["task", "cancel", task_id, "--server", service.url, "--json", "--key"]
    refused = cli.invoke(cli_app, [*args, str(stranger)])
    assert refused.exit_code == 1 and "only the requester" in refused.output
    cancelled = cli.invoke(cli_app, [*args, str(key_file)])
    assert cancelled.exit_code == 0, cancelled.output
    assert json.loads(cancelled.output)["state"] == "cancelled"
    # posting it again under the same key answers the task as it is: no money moves into it
    with AccordClient(service.url, signer=me) as client:
        requester = Requester(client, Wallet.from_key_file(eth_file, service.chain()))
        again = requester.post(SPEC, idempotency_key=posted_key)
        assert again.task_id == task_id and again.answer["state"] == "cancelled"
        with pytest.raises(WalletError, match="takes no deposit"):
            requester.deposit(again)
        assert requester.wallet.chain.escrow(task_id) is None


def test_server_time_is_the_services_clock(service: Service) -> None:
    """The entry is dated by the service's clock (which tests move), not this machine's."""
    me = Ed25519Signer.generate()
    with AccordClient(service.url, signer=me) as client:
        prepared = client.request(
            "POST", "/tasks/prepare", json={"spec": SPEC, "escrow_from": Account.create().address}
        )
    assert prepared["server_time"] == format_time(service.world.clock())
    with AccordClient(service.url) as anonymous, pytest.raises(ApiError, match="signer"):
        Requester(anonymous, Wallet.connect("0x" + "11" * 32, service.chain()))


def test_the_whole_task_of_an_outside_requester_through_settlement(service: Service) -> None:
    """Posted and paid by an outsider, won and done by a hosted agent: the requester reads the
    deliverable and reviews it with its own signed entries, and takes back the rest of its
    budget from its own account (this test moves the clock an hour on: it runs last)."""
    me = Ed25519Signer.generate()
    price = Wei(4 * 10**15)
    ada = service.bidder
    with (
        AccordClient(service.url, signer=me) as client,
        AccordClient(service.url, signer=ada) as bidder,
    ):
        requester = fresh_requester(service, client)
        posted = requester.post({**SPEC, "rule": "first-score"})
        requester.deposit(posted)
        requester.wait_until_bidding(posted, timeout=10)
        task_id = posted.task_id
        bidder.commit(task_id, commit_bid(ada, task_id, price, SALT).to_json())
        service.world.clock.advance(5)
        bidder.request(
            "POST",
            f"/tasks/{task_id}/reveals",
            json=reveal_bid(ada, task_id, price, SALT).to_json(),
        )
        service.world.clock.advance(5)
        assert lifecycle(service)[task_id] == ("done", "awarded")
        run_awarded_task(service.world.context, task_id)
        delivered = requester.deliverable(task_id)
        assert [part["part"] for part in delivered["parts"]] == ["sum"]
        given = requester.review(task_id, "sum-review", "accept")
        assert given["verdict"] == "accept"
        with pytest.raises(ApiError, match="already reviewed"):
            requester.review(task_id, "sum-review", "accept")
        service.world.clock.advance(3601)  # the review window closes; the service settles
        assert lifecycle(service)[task_id][0] == "done"
        assert requester.task(task_id)["state"] == "settled"
        assert requester.deliverable(task_id)["checks"] is not None
        assert requester.credit() == BUDGET - price  # the rest of the budget, back
        requester.withdraw()
        assert requester.credit() == 0
    # the audit holds: the requester's own signatures, its deposit on chain, the settlement
    anchorer = service.world.ledger.anchorer
    assert anchorer is not None
    anchorer.anchor_latest()
    report = httpx.get(f"{service.url}/tasks/{task_id}/audit", timeout=60).json()
    assert report["verdict"] == "PASS", report
