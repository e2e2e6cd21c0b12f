"""An auditor with nothing but a URL: `accord audit TASK --server URL`, `accord ledger verify
--server URL` and `accord credential verify URL`, run in an empty folder against a real service
(the audit world's collaboration on a real anvil, served over HTTP on 127.0.0.1).

The audit reads the service's published log and checkpoints and the chain the service names; it
passes, names each signer's custody from the log (the requester signed with a key of its own and
never registered: `unregistered`, never `hosted`), and leaves no home behind. A service that
answers with an altered entry, leaves one out, or names another contract as its escrow, fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.coordinator.service import run_awarded_task
from accord.ledger.devnet import find_free_port
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer
from accord.ledger.wiring import devnet_for
from accord.market.settlement import settle_task
from tests.accord_cli import cli_environ, run_accord
from tests.audit.conftest import World, onboard_agents, post_task, sealed_auction
from tests.integration.anvil_world import open_anvil_world
from tests.serving import serve

pytestmark = pytest.mark.devnet


@dataclass
class Served:
    url: str
    world: World
    auditor: Path
    rpc_url: str

    def accord(self, *args: str) -> tuple[int, Any, str]:
        """`accord ARGS --json` as the auditor: its own empty folder, no accord home."""
        environ = cli_environ(self.auditor / ".accord")
        done = run_accord(environ, *args, "--json")
        try:
            answer = json.loads(done.stdout)
        except ValueError:
            answer = None
        return done.returncode, answer, done.stderr


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("outside")
    port = find_free_port()
    url = f"http://127.0.0.1:{port}"
    settings = Settings.from_env(
        {
            "ACCORD_HOME": str(root / "service"),
            "ACCORD_DEVNET_PORT": str(find_free_port()),
            "ACCORD_ANCHOR_EVERY": "1000000",
            "ACCORD_ANCHOR_INTERVAL": "1000000",
            "ACCORD_PUBLIC_URL": url,  # the credentials name the status list served here
        }
    )
    try:
        world = open_anvil_world(settings)
        onboard_agents(world)
        world.requester = Ed25519Signer.generate()  # a requester whose key the service never had
        post_task(world)
        sealed_auction(world)
        run_awarded_task(world.context, world.task_id)
        world.clock.advance(1)
        settle_task(world.market, world.onboarding, world.task_id)
        assert world.ledger.anchorer is not None
        assert world.ledger.anchorer.anchor_latest().status in ("confirmed", "already-anchored")
        app = create_app(
            settings, config=ApiConfig(rate=1000.0, burst=10_000.0), context=world.context
        )
        auditor = root / "auditor"
        auditor.mkdir()
        with serve(app, port=port):
            yield Served(url, world, auditor, devnet_for(settings).rpc_url)
        assert list(auditor.iterdir()) == [], "the auditor's folder gained files"
    finally:
        devnet_for(settings).down()


Forgery = Callable[[str, Any], Any]
"""Rewrites the JSON the service answered at a path: what a dishonest service would serve."""


@contextmanager
def forging(upstream: str, forge: Forgery) -> Iterator[str]:
    """A service on 127.0.0.1 that answers every GET as `upstream` does, but for what `forge`
    rewrites; yields its URL."""

    async def relay(request: Request) -> Response:
        path = request.url.path
        async with httpx.AsyncClient(base_url=upstream, timeout=60) as client:
            answer = await client.get(path, params=request.query_params)
        if answer.headers.get("content-type", "").startswith("application/json"):
            body = json.dumps(forge(path, answer.json())).encode()
        else:
            body = answer.content
        media = answer.headers.get("content-type", "application/json")
        return Response(body, status_code=answer.status_code, media_type=media)

    app = Starlette(routes=[Route("/{path:path}", relay, methods=["GET"])])
    with serve(app) as url:
        yield url


def test_an_auditor_with_only_the_url_audits_the_task_and_passes(served: Served) -> None:
    world = served.world
    code, report, errors = served.accord("audit", world.task_id, "--server", served.url)
    assert code == 0, (report, errors)
    assert report["verdict"] == "PASS" and [s["status"] for s in report["steps"]] == ["pass"] * 7
    # custody, from the log: the agents this service made are hosted; the requester signed
    # with its own key and never registered
    custody = report["facts"]["custody"]
    assert custody[world.requester.did] == "unregistered"
    assert {custody[a.did] for a in world.agents.values() if a.did in custody} == {"hosted"}
    # the chain's facts it read: the registry and the escrow the service runs
    on_chain = report["facts"]["on_chain"]
    assert on_chain["escrow"]["address"] == world.escrow.chain.escrow_address()
    assert world.ledger.anchorer is not None
    assert on_chain["registry"]["address"] == world.ledger.anchorer.chain.registry_address()
    assert not (served.auditor / ".accord").exists()
    # the readable report, where the auditor asks for it
    page = served.auditor.parent / "report.html"
    code, _, errors = served.accord(
        "audit", world.task_id, "--server", served.url, "--html", str(page)
    )
    assert code == 0 and "PASS" in page.read_text(), errors

    code, verified, errors = served.accord("ledger", "verify", "--server", served.url)
    assert code == 0 and verified["verdict"] == "PASS", (verified, errors)
    assert [s["status"] for s in verified["steps"]] == ["pass"] * 6
    assert not (served.auditor / ".accord").exists()


def test_the_winners_credential_verifies_with_no_home(served: Served) -> None:
    world = served.world
    winner = world.market.task(world.task_id).winner
    assert winner is not None
    [first, *_] = world.onboarding.credentials_of(winner)
    at = f"{served.url}/credentials/{first['id']}"
    code, answer, errors = served.accord("credential", "verify", at)
    assert code == 0, (answer, errors)
    assert answer["valid"] is True and answer["subject"] == winner
    assert answer["issuer"] == world.ledger.operator.did
    assert served.url in answer["trusted_because"]
    # as a file, held to an issuer the auditor names: another issuer is refused
    document = served.auditor.parent / "credential.json"
    document.write_text(json.dumps(first["document"]))
    code, answer, _ = served.accord(
        "credential", "verify", str(document), "--issuer", world.ledger.operator.did
    )
    assert code == 0 and answer["valid"] is True
    stranger = Ed25519Signer.generate().did
    code, answer, _ = served.accord("credential", "verify", str(document), "--issuer", stranger)
    assert code == 1 and answer == {
        "valid": False,
        "step": "issuer",
        "reason": f"{world.ledger.operator.did} is not a trusted issuer",
    }
    # a file names no one to trust by itself: its status list's service is the credential's
    # own choice, not the verifier's
    code, answer, errors = served.accord("credential", "verify", str(document))
    assert code == 1 and "vouches for no issuer" in str(answer) + errors, (answer, errors)
    assert not (served.auditor / ".accord").exists()


def _altered_title(path: str, answer: Any) -> Any:
    """The task's posting, its title changed (its signature kept)."""
    if path == "/ledger/entries":
        for entry in answer["entries"]:
            if entry["event"]["kind"] == "task.posted":
                entry["event"]["body"]["spec"]["title"] = "something else"
    return answer


def _dropped_entry(path: str, answer: Any) -> Any:
    """Entry 3 left out of the log."""
    if path == "/ledger/entries":
        answer["entries"] = [e for e in answer["entries"] if e["index"] != 3]
    return answer


def _other_escrow(path: str, answer: Any) -> Any:
    """The registry's address given as the escrow's: a contract that is no TaskEscrow."""
    if path == "/chain":
        answer["escrow_contract"] = answer["registry_contract"]
    return answer


def _altered_checkpoint(path: str, answer: Any) -> Any:
    """The first checkpoint's root changed (its signature kept)."""
    if path == "/ledger/checkpoints":
        signed = answer["checkpoints"][0]["checkpoint"]["checkpoint"]
        signed["root"] = "00" * 32
    return answer


@pytest.mark.parametrize(
    ("forge", "failure"),
    [
        (_altered_title, "signature"),
        (_altered_checkpoint, "a published checkpoint does not hold"),
        (_dropped_entry, "entry 3 is missing from the log"),
        (_other_escrow, "does not hold accord's TaskEscrow code"),
    ],
)
def test_a_forged_service_answer_fails_the_audit(
    served: Served, forge: Forgery, failure: str
) -> None:
    world = served.world
    with forging(served.url, forge) as url:
        code, report, errors = served.accord("audit", world.task_id, "--server", url)
        assert code == 1, (report, errors)
        if "error" in report:  # refused before any step: the chain it names is not accord's
            assert failure in report["error"], report
        else:
            assert report["verdict"] == "FAIL" and report["failed_step"] == 1, report
            assert failure in report["steps"][0]["detail"], report["steps"][0]
        code, verified, errors = served.accord("ledger", "verify", "--server", url)
        assert code == 1, (verified, errors)
    assert not (served.auditor / ".accord").exists()


def _no_rpc_url(path: str, answer: Any) -> Any:
    """A service on a chain it advertises no node of (an external chain)."""
    if path == "/chain":
        answer["rpc_url"] = None
    return answer


def test_the_auditor_reads_the_chain_through_its_own_node(served: Served) -> None:
    world = served.world
    with forging(served.url, _no_rpc_url) as url:
        code, answer, _ = served.accord("audit", world.task_id, "--server", url)
        assert code == 1 and "give --rpc-url, a node of chain 31337" in answer["error"]
        code, report, errors = served.accord(
            "audit", world.task_id, "--server", url, "--rpc-url", served.rpc_url
        )
        assert code == 0 and report["verdict"] == "PASS", (report, errors)
        code, answer, _ = served.accord(
            "audit", world.task_id, "--server", url, "--rpc-url", "http://127.0.0.1:1"
        )
        assert code == 1 and "does not answer" in answer["error"]
    code, answer, _ = served.accord("audit", world.task_id, "--rpc-url", served.rpc_url)
    assert code == 2 and "give --server URL too" in answer["error"]
    assert not (served.auditor / ".accord").exists()
