"""Parts that feed one another, led by a self-custody winner (issue 44, item 7): the kit
leader gives `vat` out only once `net` is reported, and the member given `vat` checks the
`net` output it is sent against the commitment `net`'s producer reported before it answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.audit.checks import audit_task
from accord.identity.http_auth import AccordAuth
from accord.kit.agent import fixed_price
from accord.ledger.events import Entry
from accord.market.lifecycle import run_due
from accord.market.money import Wei
from accord.market.tasks import SETTLEMENT_COMPUTED
from accord.market.wiring import MarketContext
from tests.accord.test_kit_leader import ETH, kit_agent
from tests.market.test_part_inputs import vat_request
from tests.served_world import open_world


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("ACCORD_ALLOW_PRIVATE_AGENTS", "1")
    with open_world(tmp_path, allow_private=True) as opened:
        yield opened


def test_a_kit_leader_runs_net_then_vat_and_its_member_checks_the_net_it_is_given(
    world: dict[str, Any],
) -> None:
    context: MarketContext = world["context"]
    said: dict[str, list[tuple[str, dict[str, Any]]]] = {"kai": [], "kim": []}
    kai = kit_agent(world, "kai", 3 * ETH // 10, said["kai"])
    kim = kit_agent(world, "kim", 4 * ETH // 10, said["kim"])
    # The rule policy gives `net` to the least loaded member, the lower DID first, and `vat`
    # then to the other: the winner (the lower bid) is the lower DID, so a member that keeps
    # its own key, not the leader, is given `vat` and checks the `net` it is sent.
    if kai.did > kim.did:
        said["kai"], said["kim"] = said["kim"], said["kai"]
        kai, kim = kim, kai
        kai.strategy, kim.strategy = (
            fixed_price(Wei(3 * ETH // 10)),
            fixed_price(Wei(4 * ETH // 10)),
        )
    try:
        for agent in (kai, kim):
            agent.join(agent.start())
        with httpx.Client(base_url=world["url"], timeout=30) as http:
            request = {**vat_request(), "bidding": "1h", "reveal": "1h", "delivery": "1h"}
            posted = http.post("/tasks", json=request, auth=AccordAuth(world["req"]))
        assert posted.status_code == 201, posted.text
        task_id = str(posted.json()["task_id"])
        for agent in (kai, kim):
            agent.step()  # commit
        world["clock"].advance(3600)
        for agent in (kai, kim):
            agent.step()  # reveal
        world["clock"].advance(3600)
        run_due(context)
        assert context.market.task(task_id).winner == kai.did
        kai.step()
        [leading] = [t for t in kai._threads if t.name == f"lead-{task_id}"]
        leading.join(timeout=120)
        assert context.market.task(task_id).state == "delivered"
        answered = {
            fields["part"]: name
            for name, lines in said.items()
            for event, fields in lines
            if event == "answered"
        }
        assert answered == {"net": "kai", "vat": "kim"}, said

        world["clock"].advance(3 * 24 * 3600)  # the review window closes
        run_due(context)
        found = context.market.ledger.store.find(kind=SETTLEMENT_COMPUTED, subject=task_id)
        body = Entry.from_bytes(found[0].data).event.body
        verdicts = {c["id"]: c["passed"] for c in body["checks"]}
        assert verdicts["net-right"] and verdicts["vat-right"], body["checks"]
        anchorer = context.market.ledger.anchorer
        assert anchorer is not None
        anchorer.anchor_latest()
        report = audit_task(
            context.market.ledger.store,
            task_id,
            anchors=world["anchors"],
            escrow=world["escrow_chain"],
            outputs=context.market.sealed_bytes,
        )
        assert report.ok, report.to_json()
    finally:
        for agent in (kai, kim):
            agent.stop()
