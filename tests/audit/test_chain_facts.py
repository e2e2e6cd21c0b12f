"""`audit --json` says what to look up on chain: every payout (agent, address, wei), the escrow
and registry addresses, and the transaction of each escrow step and of each anchor the audit
proved the task's entries against. Each is checked here against the chain itself."""

from __future__ import annotations

from typing import Any

from accord.audit.checks import audit_task
from accord.ledger.events import Entry
from accord.market.settlement import SETTLEMENT_COMPUTED
from tests.audit.conftest import World


def _facts(world: World) -> dict[str, Any]:
    report = audit_task(
        world.ledger.store, world.task_id, anchors=world.anchors, escrow=world.escrow_chain
    )
    assert report.ok, [s.to_json() for s in report.steps]
    on_chain: dict[str, Any] = report.to_json()["facts"]["on_chain"]
    return on_chain


def test_the_report_lists_payouts_addresses_and_transactions(world: World) -> None:
    facts = _facts(world)
    assert facts["error"] is None

    # every payout of the signed settlement, and the chain paid exactly those
    (computed,) = world.ledger.store.find(kind=SETTLEMENT_COMPUTED, subject=world.task_id)
    body = Entry.from_bytes(computed.data).event.body
    assert {p["agent"]: p["wei"] for p in facts["payouts"]} == body["payouts"]
    assert {p["agent"]: p["address"] for p in facts["payouts"]} == body["payees"]
    assert {world.agents[n].did for n in ("linus",)} <= {p["agent"] for p in facts["payouts"]}
    events = world.escrow_chain.events(world.task_id)
    (settled,) = [e for e in events if e.name == "Settled"]
    paid = {a.lower(): str(w) for a, w in zip(settled.payees, settled.amounts, strict=True)}
    assert paid == {p["address"].lower(): p["wei"] for p in facts["payouts"] if p["wei"] != "0"}

    # the escrow: its address and its opening and settling transactions
    escrow = facts["escrow"]
    assert escrow["address"] == world.escrow_chain.escrow_address()
    assert [t["event"] for t in escrow["transactions"]] == ["Opened", "Settled"]
    assert [t["tx_hash"] for t in escrow["transactions"]] == [
        "0x" + e.tx_hash.hex() for e in events if e.name in ("Opened", "Settled")
    ]

    # the registry: its address, and the anchors that hold the task's entries
    registry = facts["registry"]
    assert registry["address"] == world.anchors.registry_address()
    on_chain = {a.size: a for a in world.anchors.anchors(world.ledger.store.log_id)}
    assert registry["anchors"], "the task's entries are anchored"
    for anchor in registry["anchors"]:
        found = on_chain[anchor["size"]]
        assert anchor["tx_hash"] == "0x" + found.tx_hash.hex()
        assert anchor["root"] == found.root.hex()
        assert anchor["block_number"] == found.block_number
