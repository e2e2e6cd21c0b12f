"""Three parties, each in its own process with its own keys, and one service that holds none
of them: the Done-when of self-custody.

- **the service**: `accord serve` over its own home (SQLite, a managed anvil); it runs the
  lifecycle by itself (award, settle), on a test clock the test moves (ACCORD_TEST_CLOCK);
- **two agents**: `accord agent run`, each with its did:key and payout account in a folder
  of its own; they register, sit their exams, bid, and the winner leads its team in its own
  process, the other working for it and signing its own reports; each withdraws its pay;
- **a requester**: `tests.integration.a2a_requester`, an a2a-sdk client with its own did:key
  and Ethereum account: it posts by A2A with its own signed `task.posted`, makes the deposit
  itself, follows the task's stream to its settled artifact and takes back the unpaid rest.

After the processes start the test only moves the clock. Then it checks that no key of any
party is anywhere in the service's home, that each act in the log is signed by its own party,
and that the audit (`accord audit`, over the service's home and the chain) passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.client import AccordClient
from accord.kit.wallet import write_key_file
from accord.ledger.devnet import find_free_port
from accord.ledger.events import Entry
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer, write_keyfile
from accord.ledger.wiring import open_store
from accord.market.sealed import (
    Commitment,
    Reveal,
    verify_commitment_signature,
    verify_reveal_signature,
)
from tests.accord_cli import cli_environ, run_accord
from tests.api.test_outside_requester import fund
from tests.clocks import advance_clock_file
from tests.integration.anvil_world import anvil_settings, settings_env
from tests.processes import STEP_TIMEOUT, JsonLines, stop_process
from tests.specs import invoice_request

pytestmark = pytest.mark.devnet

REPO = Path(__file__).resolve().parents[2]
CAPABILITIES = ("arithmetic", "extraction")


@dataclass
class Party:
    name: str
    folder: Path
    signer: Ed25519Signer
    eth_file: Path

    @property
    def eth_key(self) -> str:
        return str(json.loads(self.eth_file.read_text())["key"])


def party(root: Path, name: str, rpc_url: str, wei: int) -> Party:
    """A folder of the party's own: its did:key, and an Ethereum account funded with `wei`."""
    folder = root / name
    folder.mkdir(mode=0o700)
    signer = Ed25519Signer.generate()
    write_keyfile(folder / "key.json", signer)
    eth_file = folder / "eth.json"
    fund(rpc_url, write_key_file(eth_file), wei)
    return Party(name, folder, signer, eth_file)


@contextmanager
def started(name: str, argv: list[str], env: dict[str, str], log: Path) -> Iterator[JsonLines]:
    with log.open("w") as errors:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=errors, text=True, env=env, cwd=REPO
        )
    try:
        yield JsonLines(process, name)
    finally:
        stop_process(process, timeout=30)


def wait_until_up(url: str, process: JsonLines, log: Path) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        if process.process.poll() is not None:
            pytest.fail(f"the service exited: {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    pytest.fail(f"the service did not start: {log.read_text()[-3000:]}")


def service_environ(settings: Settings, url: str, clock: Path) -> dict[str, str]:
    """The environment of an `accord serve` process on `settings`, public at `url`, its
    market clock in the file `clock`, agents on loopback allowed, the lifecycle every 0.2 s."""
    return {
        **cli_environ(settings.home),
        **settings_env(settings),
        "PYTHONPATH": str(REPO),
        "ACCORD_TEST_CLOCK": str(clock),
        "ACCORD_ALLOW_PRIVATE_AGENTS": "1",  # the agents listen on loopback here
        "ACCORD_LIFECYCLE_INTERVAL": "0.2",
        "ACCORD_PUBLIC_URL": url,
    }


def test_a_requester_two_agents_and_a_service_sharing_no_key(tmp_path: Path) -> None:
    settings = anvil_settings(tmp_path / "service", find_free_port())
    port = find_free_port()
    url = f"http://127.0.0.1:{port}"
    clock = tmp_path / "service.clock"
    service_env = service_environ(settings, url, clock)
    up = run_accord(service_env, "devnet", "up", "--json")
    assert up.returncode == 0, up.stderr
    rpc_url = json.loads(up.stdout)["rpc_url"]
    outside = {k: v for k, v in os.environ.items() if not k.startswith("ACCORD_")}
    outside["PYTHONPATH"] = str(REPO)
    parties = tmp_path / "parties"
    parties.mkdir()
    requester = party(parties, "requester", rpc_url, 2 * 10**18)
    kai = party(parties, "kai", rpc_url, 10**17)  # gas for its withdrawals
    kim = party(parties, "kim", rpc_url, 10**17)
    spec = parties / "requester" / "task.json"
    spec.write_text(json.dumps(invoice_request(bidding="60s", reveal="60s", delivery="1h")))

    def agent_argv(agent: Party, price: str) -> list[str]:
        return [
            *(sys.executable, "-m", "accord.api.cli", "agent", "run", "--server", url),
            *("--key", str(agent.folder / "key.json"), "--eth-key", str(agent.eth_file)),
            *("--name", agent.name, "--price", price, "--items", "5", "--poll", "0.2"),
            *("--allow-private", "--withdraw"),
            *[arg for capability in CAPABILITIES for arg in ("-c", capability)],
        ]

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
            agents = {
                agent.name: stack.enter_context(
                    started(
                        agent.name,
                        agent_argv(agent, price),
                        outside,
                        tmp_path / f"{agent.name}.log",
                    )
                )
                for agent, price in ((kai, "0.2eth"), (kim, "0.3eth"))
            }
            for lines in agents.values():
                lines.wait_for("ready")
            asking = stack.enter_context(
                started(
                    "the requester",
                    [
                        *(sys.executable, "-m", "tests.integration.a2a_requester"),
                        *("--server", url, "--key", str(requester.folder / "key.json")),
                        *("--eth-key", str(requester.eth_file), "--spec", str(spec)),
                    ],
                    outside,
                    tmp_path / "requester.log",
                )
            )
            task_id = asking.wait_for("deposited")["task_id"]
            for lines in agents.values():
                lines.wait_for("committed", task_id=task_id)
            advance_clock_file(clock, 61)  # bidding closes
            for lines in agents.values():
                lines.wait_for("revealed", task_id=task_id)
            advance_clock_file(clock, 61)  # the reveal window closes: the service awards
            agents["kai"].wait_for("notice", task_id=task_id)
            agents["kai"].wait_for("delivered", task_id=task_id)
            advance_clock_file(clock, 2 * 3600)  # the review window closes: the service settles
            settled = asking.wait_for("settled", task_id=task_id)
            assert settled["accord"]["state"] == "settled"
            paid = {did: int(w) for did, w in settled["accord"]["settlement"]["payouts"].items()}
            assert paid[kai.signer.did] > 0 and paid[kim.signer.did] > 0, paid
            for name in ("kai", "kim"):
                assert int(agents[name].wait_for("withdrew")["amount"]) > 0
            assert int(asking.wait_for("withdrew")["amount"]) > 0  # the unpaid rest
            assert asking.process.wait(timeout=STEP_TIMEOUT) == 0
            audit_from_outside(url, tmp_path / "auditor", task_id, requester, kai, kim)
        check_the_service(settings, service_env, task_id, requester, kai, kim)
    finally:
        run_accord(service_env, "devnet", "down")


def audit_from_outside(
    url: str, folder: Path, task_id: str, requester: Party, kai: Party, kim: Party
) -> None:
    """An auditor in an empty folder with the service's URL only: the audit passes, names each
    signer's custody from the log, and the winner's credential verifies; no home is made."""
    folder.mkdir()
    environ = {**cli_environ(folder / ".accord"), "PYTHONPATH": str(REPO)}
    audit = run_accord(environ, "audit", task_id, "--server", url, "--json")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    report = json.loads(audit.stdout)
    assert report["verdict"] == "PASS", report
    custody = report["facts"]["custody"]
    assert custody[kai.signer.did] == custody[kim.signer.did] == "self"
    assert custody[requester.signer.did] == "unregistered"  # its own key, never hosted
    winner = report["facts"]["winner"]
    # the audit may have spent this address's read allowance: the client waits it out
    with AccordClient(url) as reader:
        [first, *_] = reader.get(f"/agents/{winner}")["credentials"]
    verified = run_accord(
        environ, "credential", "verify", f"{url}/credentials/{first['id']}", "--json"
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["subject"] == winner
    assert list(folder.iterdir()) == []


def check_the_service(
    settings: Any,
    service_env: dict[str, str],
    task_id: str,
    requester: Party,
    kai: Party,
    kim: Party,
) -> None:
    # No party's key is anywhere in the service's home.
    secrets = {
        p.name: [
            p.eth_key.removeprefix("0x"),
            json.loads((p.folder / "key.json").read_text())["seed"],
        ]
        for p in (requester, kai, kim)
    }
    for path in settings.home.rglob("*"):
        if path.is_file():
            data = path.read_bytes().lower()
            for name, keys in secrets.items():
                for key in keys:
                    assert key.lower().encode() not in data, f"{name}'s key is in {path}"

    # Each act is signed by its own party.
    store = open_store(settings)
    actors: dict[str, set[str]] = {}
    bidders: list[str] = []
    for stored in store.find(subject=task_id, limit=10_000):
        event = Entry.from_bytes(stored.data).event
        actors.setdefault(event.kind, set()).add(event.actor)
        if event.kind == "bid.committed":
            commitment = Commitment.from_json(event.body["commitment"])
            verify_commitment_signature(commitment)
            bidders.append(commitment.bidder)
        if event.kind == "bid.revealed":
            reveal = Reveal.from_json(event.body["reveal"])
            verify_reveal_signature(reveal)
            bidders.append(reveal.bidder)
    assert actors["task.posted"] == {requester.signer.did}
    # a bid is logged by the service that admitted it, and signed inside by its bidder
    assert sorted(bidders) == sorted([kai.signer.did, kim.signer.did] * 2)
    assert actors["task.started"] == actors["task.delivered"] == {kai.signer.did}
    conversation = set()
    for stored in store.find(kind="conversation.message", limit=10_000):
        conversation.add(Entry.from_bytes(stored.data).event.actor)
    assert conversation == {kai.signer.did, kim.signer.did}
    assert len(actors["task.awarded"]) == 1 and actors["task.awarded"].isdisjoint(
        {requester.signer.did, kai.signer.did, kim.signer.did}
    )

    # The audit passes over the service's home and the chain, and names each custody.
    audit = run_accord(service_env, "audit", task_id, "--json")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    report = json.loads(audit.stdout)
    assert report["verdict"] == "PASS", report
    custody = report["facts"]["custody"]
    assert custody[kai.signer.did] == custody[kim.signer.did] == "self"
