"""Several processes, one database: two `accord serve` processes on one PostgreSQL, appending
concurrently, as two machines behind a load balancer would.

The home (keys, the devnet, the escrow deployment) is prepared in this process: bidders are
examined and credentialed, tasks are posted with their budgets escrowed on a real anvil. Then
two services are started as subprocesses on free loopback ports with the same
`ACCORD_DB_URL`, and many signed requests are sent to both at once: sealed-bid commitments from
every bidder to every task, the same commitment sent to both services at the same moment, and
DID-auth registrations of fresh agents at both services at once. Afterwards the log must hold
every admitted request exactly once: indices 0..n-1 with none missing or repeated, every
actor's seq growing in index order, each bid admitted once (the copy refused with a 409
problem), each agent registered once, and `accord ledger verify` passing.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.client import AccordClient, ApiError
from accord.identity.presentations import create_presentation
from accord.ledger.database import make_engine
from accord.ledger.devnet import find_free_port
from accord.ledger.events import Entry
from accord.ledger.settings import Settings
from accord.ledger.signing import Signer
from accord.ledger.store import LogStore
from accord.ledger.wiring import devnet_for, prepare_home, utc_now
from accord.market.money import parse_amount
from accord.market.sealed import commit_bid
from accord.market.wiring import DEVNET_REQUESTER_KEY, MarketContext, open_market
from tests.accord_cli import run_accord
from tests.integration.anvil_world import anvil_settings, settings_env
from tests.ledger.conftest import postgres_schema_url
from tests.specs import single_part_spec

pytestmark = [pytest.mark.devnet, pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[2]
BIDDERS = 10
TASKS = 3
NEWCOMERS = 6
SERVICE_START_TIMEOUT = 60.0


@dataclass
class Service:
    """One `accord serve` subprocess; it is stopped (and waited for) when the test ends."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path


def start_service(settings: Settings, port: int, log: Path) -> Service:
    env = {
        **os.environ,
        **settings_env(settings),
        "PYTHONPATH": str(REPO),
        "ACCORD_PUBLIC_URL": f"http://127.0.0.1:{port}",
    }
    for name in ("ACCORD_RPC_URL", "ACCORD_REQUESTER_ETH_KEY"):
        env.pop(name, None)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "accord.api.cli", "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    return Service(f"http://127.0.0.1:{port}", process, log)


def wait_until_up(service: Service) -> None:
    deadline = time.monotonic() + SERVICE_START_TIMEOUT
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            pytest.fail(f"the service exited: {service.log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{service.url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    pytest.fail(f"the service at {service.url} did not start: {service.log.read_text()[-2000:]}")


def stop(service: Service) -> None:
    if service.process.poll() is None:
        service.process.terminate()
        try:
            service.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            service.process.kill()
            service.process.wait(timeout=10)


@dataclass
class Home:
    settings: Settings
    context: MarketContext
    bidders: list[Signer]
    newcomers: list[Signer]
    tasks: list[str]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    """Credentialed bidders, fresh (unregistered) agents and escrowed tasks, on PostgreSQL
    and a real anvil devnet; the devnet is stopped afterwards."""
    with postgres_schema_url() as db_url:
        settings = anvil_settings(tmp_path / "home", find_free_port(), db_url=db_url)
        prepare_home(settings)
        context = open_market(settings)  # starts the devnet, deploys the escrow once
        try:
            registry = context.onboarding.registry
            bidders = []
            for number in range(BIDDERS):
                record = registry.new_agent(f"bidder-{number}", runtime="reference", now=utc_now())
                outcomes = context.onboarding.onboard(record, ["arithmetic"], item_count=3)
                assert all(outcome.credential_id is not None for outcome in outcomes)
                bidders.append(registry.signer(record))
            newcomers = [
                registry.signer(
                    registry.new_agent(f"newcomer-{number}", runtime="reference", now=utc_now())
                )
                for number in range(NEWCOMERS)
            ]
            requester = registry.signer(
                registry.new_agent("requester", runtime="reference", now=utc_now())
            )
            tasks = [
                context.market.post(
                    requester,
                    single_part_spec(window_s=600),
                    requester_key=DEVNET_REQUESTER_KEY,
                ).task_id
                for _ in range(TASKS)
            ]
            yield Home(settings, context, bidders, newcomers, tasks)
        finally:
            context.market.ledger.store.engine.dispose()
            # what `accord devnet down` does, without a fresh interpreter's 2.5 s of imports
            devnet_for(settings).down()


@pytest.fixture
def services(home: Home, tmp_path: Path) -> Iterator[list[Service]]:
    """Two `accord serve` processes on the home's database, stopped when the test ends."""
    started: list[Service] = []
    try:
        for number in range(2):
            port = find_free_port()
            started.append(start_service(home.settings, port, tmp_path / f"serve-{number}.log"))
        for service in started:
            wait_until_up(service)
        yield started
    finally:
        for service in started:
            stop(service)


@dataclass(frozen=True)
class Outcome:
    """One request's answer: its JSON on success, else its status and problem reason."""

    what: tuple[str, ...]
    server: int
    answer: dict[str, Any] | None
    status: int | None = None
    reason: str | None = None
    message: str = ""


def send(what: tuple[str, ...], server: int, call: Callable[[], Any]) -> Outcome:
    try:
        return Outcome(what, server, call())
    except ApiError as exc:
        return Outcome(what, server, None, exc.status, exc.reason, str(exc))


def register(service: Service, signer: Signer) -> dict[str, Any]:
    """DID-auth through the service: a challenge, then a presentation over it."""
    with AccordClient(service.url, signer=signer) as client:
        issued = client.request("POST", "/registration/challenge")
        presentation = create_presentation(
            signer, [], issued["challenge"], issued["domain"], utc_now()
        )
        answer: dict[str, Any] = client.request(
            "POST",
            "/registration",
            json={"challenge": issued["challenge"], "presentation": presentation},
        )
        return answer


def test_two_services_on_one_database_admit_each_request_once(
    home: Home, services: list[Service]
) -> None:
    price = parse_amount("0.1eth")
    commitments = {
        (task, bidder.did): commit_bid(bidder, task, price, secrets.token_bytes(32))
        for task in home.tasks
        for bidder in home.bidders
    }
    signers = {bidder.did: bidder for bidder in home.bidders}
    # Most commitments go to both services at the same moment; the others to one of them.
    doubled = {key for key in commitments if key[1] != home.bidders[0].did}
    together = {key: threading.Barrier(2) for key in doubled}

    def commit(key: tuple[str, str], server: int) -> Outcome:
        task, bidder = key
        client = AccordClient(services[server].url, signer=signers[bidder])
        with client:
            if key in together:
                together[key].wait(timeout=30)
            return send(
                ("commit", task, bidder),
                server,
                lambda: client.commit(task, commitments[key].to_json()),
            )

    jobs: list[tuple[Callable[..., Outcome], tuple[Any, ...]]] = []
    for number, key in enumerate(sorted(commitments)):
        if key in doubled:
            jobs += [(commit, (key, 0)), (commit, (key, 1))]
        else:
            jobs.append((commit, (key, number % 2)))
    for signer in home.newcomers:  # each newcomer registers at both services at once
        for server in (0, 1):
            jobs.append(
                (
                    lambda s, n: send(("register", s.did), n, lambda: register(services[n], s)),
                    (signer, server),
                )
            )
    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(lambda job: job[0](*job[1]), jobs))

    # Each commitment admitted exactly once; a copy sent to the other service is a 409.
    by_key: dict[tuple[str, ...], list[Outcome]] = {}
    for outcome in outcomes:
        by_key.setdefault(outcome.what, []).append(outcome)
    for key in commitments:
        answers = by_key[("commit", *key)]
        admitted = [a for a in answers if a.answer is not None]
        assert len(admitted) == 1, answers
        for refused in (a for a in answers if a.answer is None):
            assert (refused.status, refused.reason) == (409, "second-bid"), refused
    # Each newcomer registered once; the other service answers "already" or a 409 problem.
    for signer in home.newcomers:
        answers = by_key[("register", signer.did)]
        fresh = [a for a in answers if a.answer is not None and not a.answer["already"]]
        assert len(fresh) == 1, answers
        for other in answers:
            if other is fresh[0]:
                continue
            if other.answer is not None:
                assert other.answer == {**fresh[0].answer, "already": True}, answers
            else:
                assert other.status == 409, other

    # The log: contiguous, no duplicates, seqs grow, every admitted request where it says.
    engine = make_engine(home.settings.db_url)
    try:
        store = LogStore(engine, home.settings.log_id)
        entries = list(store.entries())
        size = store.size()
    finally:
        engine.dispose()
    assert [stored.index for stored in entries] == list(range(size))
    assert len({stored.data for stored in entries}) == size
    events = [Entry.from_bytes(stored.data).event for stored in entries]
    last_seq: dict[str, int] = {}
    for event in events:
        assert event.seq > last_seq.get(event.actor, 0), event
        last_seq[event.actor] = event.seq
    committed = Counter(
        (event.subject, event.body["commitment"]["bidder"])  # type: ignore[index]
        for event in events
        if event.kind == "bid.committed"
    )
    assert committed == Counter(commitments.keys())
    for outcome in outcomes:
        if outcome.what[0] == "commit" and outcome.answer is not None:
            event = events[outcome.answer["index"]]
            assert event.kind == "bid.committed" and event.subject == outcome.what[1]
    registered = Counter(event.actor for event in events if event.kind == "agent.registered")
    assert all(registered[signer.did] == 1 for signer in home.newcomers), registered

    # `accord ledger verify` in a process of its own, forked from the tests' CLI zygote
    verified = run_accord(
        {**os.environ, **settings_env(home.settings), "PYTHONPATH": str(REPO)},
        *("ledger", "verify", "--json"),
    )
    assert verified.returncode == 0, (verified.stdout, verified.stderr)
    report = json.loads(verified.stdout)
    assert (report["verdict"], report["size"]) == ("PASS", size)
