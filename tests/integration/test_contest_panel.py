"""A contested inconclusive python check decided by kit agents, each in its own process, against
a real service (uvicorn on 127.0.0.1) on a real anvil (the harness of
`tests.integration.test_dispute_panel`).

A lone bidder delivers a right sum; the requester's python check on it draws entropy, so it is
inconclusive. The service's lifecycle looks at the delivered task at once, finds it so, logs
`checks.previewed` and holds the settlement for the review window; the requester
(`accord.kit.Requester`, its own keys) reads it, and contests the check, bonding the dispute's
fee from its own account. After the window the service draws the panel and calls the
panelists' own `/panel`: each re-runs the check in its own box (inconclusive there too), does
the sum again with its own handler, finds it right and votes for the team. The check passes,
the bond pays the panel, and the audit replays it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accord.market.panel import panel_pay
from accord.market.settlement import logged_settlement
from tests.api.test_app import SUM_RIGHT
from tests.integration.test_dispute_panel import FEE, SPEC, disputes

pytestmark = pytest.mark.devnet

DICE = {
    "id": "dice",
    "weight": 1,
    "kind": "python",
    "part": "sum",
    "code": "import random\ndef check(outputs):\n    return random.random() < 2\n",
}
CONTESTED = {**SPEC, "checks": [SUM_RIGHT, DICE]}


def test_a_contested_inconclusive_check_is_decided_by_agent_processes(tmp_path: Path) -> None:
    with disputes(tmp_path) as market:
        world, requester = market.world, market.requester
        market.seat_jurors(4)
        task_id = market.lone_bid(CONTESTED)
        assert requester.inconclusive(task_id) == {}  # nobody has looked yet
        # nothing to review, so the lifecycle looks at once: an inconclusive check holds it
        assert market.settle()[task_id] == "waits"
        named = requester.inconclusive(task_id)
        assert list(named) == ["dice"] and "entropy" in named["dice"]
        assert market.settle() == {}  # held for the window, not looked at again
        market.reject(task_id, "dice", "a coin decides this check, not the sum")
        world.clock.advance(3601)  # the review window closes
        done = market.settle()
        assert done[task_id] == "done", done
        assert requester.credit() == 0  # the whole budget paid, the bond to the panel
        report = market.audit(task_id)
        assert report["verdict"] == "PASS", report["steps"]

        body = logged_settlement(world.market, task_id)
        assert body is not None
        [dice] = [c for c in body["checks"] if c["id"] == "dice"]
        assert dice["passed"] is True and dice["inconclusive"] is True, dice
        panel = dice["record"]["dispute"]["panel"]
        assert all(vote == "team" for vote in panel["votes"].values())
        assert sorted(panel["coherent"]) == sorted(panel["seats"])
        shares = panel_pay(FEE, panel["seats"], panel["coherent"])
        assert body["panel_payouts"] == {did: str(w) for did, w in sorted(shares.items())}
