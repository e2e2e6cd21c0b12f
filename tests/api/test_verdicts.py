"""Verdicts both sides can trust, end to end over anvil, a real HTTP server on 127.0.0.1 and
the `accord` CLI, on SQLite and PostgreSQL.

A requester's python checks run in a fixed world (`accord.market.check_io.check_world`): the
clock stands at the task's posting and entropy comes from a seed of the task and check. So a
check that reads the clock, public in the spec and passing while agents read the task, still
passes at settlement hours later and in an audit an hour after that; a check that draws
entropy, and one that sleeps past its limit, are inconclusive and never cost the team.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.identity.http_auth import AccordAuth
from accord.ledger.devnet import find_free_port
from accord.ledger.settings import Settings
from accord.ledger.signing import Signer
from accord.ledger.wiring import devnet_for
from accord.market.money import Wei
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.wiring import MarketContext, open_market
from tests.accord_cli import cli_environ, run_accord
from tests.clocks import advance_clock_file
from tests.ledger.conftest import postgres_schema_url
from tests.serving import serve

pytestmark = pytest.mark.devnet

PRICES = {"ada": Wei(12 * 10**16), "linus": Wei(10 * 10**16)}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def service(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, MarketContext, dict[str, Signer], dict[str, str]]]:
    with _database(request.param, tmp_path) as db_url:
        environ = {
            "ACCORD_HOME": str(tmp_path / "home"),
            "ACCORD_DB_URL": db_url,
            "ACCORD_DEVNET_PORT": str(find_free_port()),
            "ACCORD_TEST_CLOCK": str(tmp_path / "clock"),  # windows close when the test says
            "ACCORD_ALLOW_TEST_CLOCK": "1",
        }
        settings = Settings.from_env(environ)
        devnet = devnet_for(settings)
        devnet.up()
        try:
            context = open_market(settings)
            registry = context.onboarding.registry
            signers: dict[str, Signer] = {}
            for name in PRICES:
                record = registry.new_agent(name, now=datetime.now(UTC), runtime="reference")
                outcomes = context.onboarding.onboard(record, ["arithmetic"], item_count=5)
                assert all(o.credential_id is not None for o in outcomes)
                signers[name] = registry.signer(record)
            requester = registry.new_agent("req", now=datetime.now(UTC))
            context.onboarding.register(requester)
            signers["req"] = registry.signer(requester)
            signers["operator"] = context.market.ledger.operator
            config = ApiConfig(rate=1000.0, burst=10_000.0)
            app = create_app(settings, config=config, context=context)
            with serve(app) as url:
                yield url, context, signers, environ
        finally:
            devnet.down()


class _database:
    """A database URL for the backend: a file for SQLite, a fresh schema on PostgreSQL."""

    def __init__(self, backend: str, tmp_path: Path) -> None:
        self.backend, self.tmp_path = backend, tmp_path
        self._pg: Any = None

    def __enter__(self) -> str:
        if self.backend == "sqlite":
            return f"sqlite:///{self.tmp_path / 'accord.db'}"
        self._pg = postgres_schema_url()
        return str(self._pg.__enter__())

    def __exit__(self, *exc: object) -> None:
        if self._pg is not None:
            self._pg.__exit__(*exc)


def _call(url: str, signer: Signer | None, method: str, path: str, **kwargs: Any) -> httpx.Response:
    auth = AccordAuth(signer) if signer is not None else None
    with httpx.Client(base_url=url, auth=auth, timeout=120) as client:
        return client.request(method, path, **kwargs)


def _python(check_id: str, code: str, cpu: int = 1) -> dict[str, Any]:
    return {
        "id": check_id,
        "weight": 1,
        "kind": "python",
        "reads": ["sum"],
        "code": code,
        "cpu_seconds": cpu,
    }


def _spec(posted: int) -> dict[str, Any]:
    """Two arithmetic parts. On "sum": one plain check, one reading the clock (it passes only
    within 10 minutes after `posted`), one drawing entropy, one sleeping past its limit. On
    "other": one check that is wrong about correct work."""
    in_time = (
        "import time\n"
        f"POSTED = {posted}\n"
        "def check(outputs):\n"
        "    return outputs['sum'] == '2045.50' and POSTED <= time.time() < POSTED + 600\n"
    )
    dice = "import random\ndef check(outputs):\n    return random.random() < 0.5\n"
    sleepy = "import time\ndef check(outputs):\n    time.sleep(3600)\n    return False\n"
    return {
        "title": "Add the invoice lines",
        "budget": "0.5eth",
        "bidding": "1h",
        "reveal": "1h",
        "delivery": "30m",
        "review": "1h",
        "parts": [
            {
                "id": "sum",
                "capability": "arithmetic",
                "input": {"kind": "figures", "figures": ["1200.00", "845.50"], "operation": "sum"},
            },
            {
                "id": "other",
                "capability": "arithmetic",
                "input": {"kind": "figures", "figures": ["1.00", "2.00"], "operation": "sum"},
            },
        ],
        "checks": [
            {"id": "right", "kind": "expect", "part": "sum", "path": "$", "equals": "2045.50"},
            _python("in-time", in_time),
            _python("dice", dice),
            _python("sleepy", sleepy),
            # wrong about correct work: "other" is not paid for, so the requester never reads it
            {"id": "wrong", "kind": "expect", "part": "other", "path": "$", "equals": "4"},
        ],
    }


def test_checks_decide_from_their_outputs_at_settlement_and_in_the_audit(
    service: tuple[str, MarketContext, dict[str, Signer], dict[str, str]], tmp_path: Path
) -> None:
    url, context, signers, environ = service
    req = signers["req"]
    # A task no machine can decide, on a service with no judge, is refused before anything is
    # logged or escrowed, with what to add.
    size = context.market.ledger.store.size()
    review_only = {
        **_spec(0),
        "checks": [{"id": "looks-right", "kind": "review", "reads": ["sum"]}],
    }
    refused = _call(url, req, "POST", "/tasks", json=review_only)
    assert refused.status_code == 422, refused.text
    assert refused.json()["path"] == "$.checks" and "expect" in refused.json()["detail"]
    assert context.market.ledger.store.size() == size
    # The market's clock runs a day ahead of the host's, so a check that read the host's clock
    # (as the box's code did before its world was fixed) would fail however fast the test runs.
    advance_clock_file(tmp_path / "clock", 86400)
    posted = _call(url, req, "POST", "/tasks", json=_spec(int(time.time()) + 86400 - 5))
    assert posted.status_code == 201, posted.text
    task_id = posted.json()["task_id"]

    salts = {name: secrets.token_bytes(32) for name in PRICES}
    for name, price in PRICES.items():
        commitment = commit_bid(signers[name], task_id, price, salts[name]).to_json()
        sent = _call(url, signers[name], "POST", f"/tasks/{task_id}/commitments", json=commitment)
        assert sent.status_code == 201, sent.text
    advance_clock_file(tmp_path / "clock", 3600)
    for name, price in PRICES.items():
        reveal = reveal_bid(signers[name], task_id, price, salts[name]).to_json()
        sent = _call(url, signers[name], "POST", f"/tasks/{task_id}/reveals", json=reveal)
        assert sent.status_code == 201, sent.text
    advance_clock_file(tmp_path / "clock", 3600)
    awarded = _call(url, req, "POST", f"/tasks/{task_id}/award")
    assert awarded.status_code == 200, awarded.text
    price = int(awarded.json()["price"])
    ran = _call(url, signers["operator"], "POST", f"/tasks/{task_id}/run")
    assert ran.status_code == 200, ran.text
    # looked at in its review window (as the lifecycle's first round would): the dice and the
    # sleeper are inconclusive, `checks.previewed` names them, and the settlement waits
    held = _call(url, req, "POST", f"/tasks/{task_id}/settle")
    assert held.status_code == 409, held.text
    assert "python checks dice, sleepy" in held.json()["detail"], held.text

    # settled hours after the posting (the review window over): the clock-reading check still
    # reads the posting time, and neither the dice nor the sleeper costs the team anything
    advance_clock_file(tmp_path / "clock", 7200)
    settled = _call(url, req, "POST", f"/tasks/{task_id}/settle")
    assert settled.status_code == 200, settled.text
    # every check on "sum" counts for the team: 4 of the 5 weights
    assert int(settled.json()["amount"]) == price * 4 // 5
    result = _call(url, req, "GET", f"/tasks/{task_id}/deliverable").json()
    checks = {c["id"]: c for c in result["checks"]}
    assert [k for k, c in checks.items() if not c["passed"]] == ["wrong"], checks
    assert not checks["in-time"].get("inconclusive"), checks["in-time"]
    assert checks["dice"]["inconclusive"] and "entropy" in checks["dice"]["detail"]
    assert checks["sleepy"]["inconclusive"] and "wall-clock" in checks["sleepy"]["detail"]
    parts = {entry["part"]: entry for entry in result["parts"]}
    assert parts["sum"]["output"] == "2045.50"
    # nothing is read that wasn't paid for: "other" stays sealed, its commitment in the log
    assert "output" not in parts["other"] and result["withheld"] == ["other"]
    assert parts["other"]["output_sha256"]

    # an hour later, the service's audit and the CLI's agree: PASS, not "recomputes to fail"
    advance_clock_file(tmp_path / "clock", 3600)
    anchorer = context.market.ledger.anchorer
    assert anchorer is not None
    anchorer.anchor_latest()
    report = _call(url, None, "GET", f"/tasks/{task_id}/audit").json()
    assert report["verdict"] == "PASS", report
    done = run_accord(
        cli_environ(Path(environ["ACCORD_HOME"]), **environ), "audit", task_id, "--json"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["verdict"] == "PASS"
