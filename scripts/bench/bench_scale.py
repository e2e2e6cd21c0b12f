"""scale: the read routes, the CLI listing, bid commits and reindexing as the log grows to 10^6.

Seeding, untimed. For each size (10^4, 10^5 and 10^6 events; `--quick` stops at 10^5,
`--sizes` picks others) two fresh homes are seeded with the very same signed entries, one on
SQLite (a file, WAL) and one on PostgreSQL (a fresh database on `$ACCORD_TEST_PG_URL`: run under
`scripts/with_postgres.sh`, as `make bench` does; without it the PostgreSQL columns are
skipped). Both homes share one operator key. Seeding goes through the Python API, not the
service: `make_entry` signs every event and `LogStore.append_batch` appends them 5,000 per
transaction with the market's read views attached (folded in each append's transaction), as the
service appends; the agents' and credentials' rows are inserted the way
onboarding inserts them. The log, as the market and onboarding would have logged it:

- agents (10,000; a tenth of the events at smaller sizes): each an Ed25519 did:key with its
  own signed `agent.registered` (a DID-auth presentation's proof) and a real
  `CapabilityCredential` (eddsa-jcs-2022, signed by the operator, a status-list entry) logged
  as `credential.issued`, in one of three capabilities;
- tasks (a tenth of the events, at most 100,000): `task.posted` by a requester agent (a
  one-part spec in one of the three capabilities) and `escrow.opened` by the operator; every
  tenth task still takes bids (a 20-day window), the others closed hours ago;
- the rest are sealed bids: `bid.committed` by the operator holding the commitment signed by
  an agent credentialed for the task's capability (about 6 to 8 per task).

The event times grow from three days ago to now, so the seeded log replays like a real one and
`accord ledger verify` passes on it.

Every size is seeded first; then each repetition is a round over every home (size and
backend), the sizes in turn from a start that rotates between rounds, so that a slower stretch
of a shared machine falls on every size alike and the 10^6-over-10^4 ratios compare like with
like. Each home's devnet and two service processes start once, before the rounds, and stay
up (warm, as a running service is) until the last; a round measures each home once.

Measured, per size and backend, through real HTTP (the service factory of `bench_api`, i.e.
`create_app` with rate limits out of the way, under uvicorn on 127.0.0.1, as two separate
processes on two ports; both open the market on a warm-up request, whose time is reported):
p50 and p99 client-side latency of one keep-alive client sending, one after another,
`GET /tasks?state=bidding&capability=X&limit=50`, `GET /tasks/{id}` (random tasks) and
discovery `GET /agents?capability=X&need=...`; each route gets up to R requests within a time
budget (a route slower than the budget is reported from the requests it got).
`accord task list --state bidding --limit 50 --json` wall time (a subprocess, once a round;
the command opens the market itself). Signed bid commits per second: fresh commitments from
credentialed agents to the open tasks, each request signed by its agent before the clock
starts, sent on 16 keep-alive connections alternating between the two processes, every
answer must be 201 (measured right after the warm-up, before the reads: a read the client
gave up on at its 60 s timeout keeps a service busy). `accord ledger reindex` wall time,
where the command exists, once, after the rounds. The goals: p99 ≤ 20 ms for each route at
10^6 events, within 1.5 times its 10^4 figure, and ≥ 300 bid commits/s with two processes
on PostgreSQL.

Beside discovery's route, its query alone: `accord.market.discovery.ranked_page` called in the bench
process on its own connection to the home's database (the same capability, need and page of
50; 200 calls a round), p50 and p99: what the database and the ranking cost without HTTP, the
service and the views' level check around them.

Run alone: `scripts/with_postgres.sh .venv/bin/python scripts/bench/bench_scale.py [--quick]`;
`--sizes 10000,100000` and `--backends sqlite` pick the sizes and backends, `--only discovery`
(any of commits, bidding, task, discovery, listing, reindex) the measurements.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pickle
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from _common import (
    TIMES,
    Goal,
    Measure,
    Section,
    console,
    parser,
    percentile,
    progress,
    reps_of,
    show,
    temp_root,
    wait_healthy,
)
from sqlalchemy import create_engine, insert, text
from sqlalchemy.engine import make_url

from accord.identity.agents import Agent, AgentRecord
from accord.identity.challenges import REGISTRY
from accord.identity.credentials import issue_capability_credential, transcript_reference
from accord.identity.http_auth import AccordAuth
from accord.identity.issuance import DEFAULT_VALIDITY, ISSUED_EVENT_KIND, IssuedCredential
from accord.identity.onboarding import open_onboarding
from accord.identity.presentations import create_presentation
from accord.identity.registration import REGISTERED_KIND
from accord.identity.status import StatusList, status_entry, status_list_credential
from accord.identity.status_lists import PublishedStatusList
from accord.ledger.database import make_engine
from accord.ledger.devnet import find_free_port
from accord.ledger.events import Entry, format_time
from accord.ledger.fast_entries import make_entry
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer, load_or_create_keyfile
from accord.ledger.wiring import (
    OPERATOR_KEYFILE,
    devnet_for,
    open_ledger,
    prepare_home,
)
from accord.market import sealed
from accord.market.discovery import ranked_page
from accord.market.escrow import address_of
from accord.market.money import Wei
from accord.market.projections import read_views
from accord.market.tasks import BID_COMMITTED, ESCROW_OPENED, TASK_POSTED, TaskSpec
from accord.market.wiring import DEVNET_REQUESTER_KEY
from accord.market.work import Part

HERE = Path(__file__).resolve().parent
PG_ENV = "ACCORD_TEST_PG_URL"
SIZES = (10_000, 100_000, 1_000_000)
BACKENDS = ("sqlite", "postgres")
CAPABILITIES = ("arithmetic", "extraction", "retrieval")
MAX_AGENTS = 10_000
MAX_TASKS = 100_000
OPEN_EVERY = 10
SEED_BATCH = 5_000
CONNECTIONS = 16
COMMITS = 1_000
COMMITS_QUICK = 300
ROUTE_BUDGET_S = 20.0
PROBE_ENTRIES = 1_000
CLI_TIMEOUT_S = 300.0
WARM_UP_TIMEOUT_S = 1800.0
GOAL_P99_MS = 20.0
GOAL_FLAT = 1.5
GOAL_COMMITS = 300.0
NEED = "careful arithmetic agent"
PAGE = 50
QUERY_CALLS = 200
MEASUREMENTS = ("commits", "bidding", "task", "discovery", "listing", "reindex")
"""What `--only` picks from: the commit rate, the three routes, the CLI listing, reindex."""
BUDGET = Wei(10**16)


# -- the seeded log (pure: rng and clock passed in) ---------------------------------------------


@dataclass(frozen=True)
class Plan:
    """How many agents, tasks and bids a log of `events` entries holds."""

    events: int
    agents: int
    tasks: int

    @classmethod
    def of(cls, events: int) -> Plan:
        return cls(events, min(MAX_AGENTS, events // 10), min(MAX_TASKS, events // 10))

    @property
    def bids(self) -> int:
        return self.events - 2 * self.agents - 2 * self.tasks


@dataclass
class Seed:
    """The signers and rows of a seeded home, and a stream of its signed entries."""

    plan: Plan
    operator: Ed25519Signer
    log_id: str
    status_url: str
    domain: str
    start: datetime
    rng: random.Random
    agents: list[Ed25519Signer] = field(default_factory=list)
    credentialed: dict[str, list[int]] = field(default_factory=dict)
    agent_rows: list[dict[str, Any]] = field(default_factory=list)
    credential_rows: list[dict[str, Any]] = field(default_factory=list)
    open_tasks: list[tuple[str, str]] = field(default_factory=list)
    """(task id, capability) of the tasks still taking bids."""
    all_tasks: list[str] = field(default_factory=list)
    bidders: dict[str, set[int]] = field(default_factory=dict)
    seqs: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.agents = [Ed25519Signer(self.rng.randbytes(32)) for _ in range(self.plan.agents)]
        for k in range(self.plan.agents):
            self.credentialed.setdefault(CAPABILITIES[k % len(CAPABILITIES)], []).append(k)

    def _at(self, index: int) -> datetime:
        span = timedelta(days=3) - timedelta(minutes=5)
        return self.start + span * (index / max(1, self.plan.events))

    def _entry(
        self, signer: Ed25519Signer, index: int, kind: str, subject: str, body: dict[str, Any]
    ) -> Entry:
        seq = self.seqs.get(signer.did, 0) + 1
        self.seqs[signer.did] = seq
        return make_entry(
            signer, kind=kind, seq=seq, at=self._at(index), subject=subject, body=body
        )

    def entries(self) -> Iterator[Entry]:
        """Every entry in log order (filling the agent and credential rows as it goes)."""
        index = 0
        for k, agent in enumerate(self.agents):
            at = self._at(index)
            name = f"agent-{k:05d}"
            challenge = uuid.UUID(int=self.rng.getrandbits(128)).hex
            proof = create_presentation(agent, [], challenge, self.domain, at)["proof"]
            self.agent_rows.append(
                AgentRecord(name, agent.did, "reference", None, format_time(at)).to_json()
            )
            body = {"name": name, "domain": self.domain, "challenge": challenge, "proof": proof}
            yield self._entry(agent, index, REGISTERED_KIND, agent.did, body)
            index += 1
            yield self.credential_entry(k, index)
            index += 1
        bids_left = self.plan.bids
        escrow_from = address_of(DEVNET_REQUESTER_KEY)
        for t in range(self.plan.tasks):
            capability = CAPABILITIES[t % len(CAPABILITIES)]
            task_id = f"task-{t:016x}"
            taking_bids = t % OPEN_EVERY == OPEN_EVERY - 1
            spec = _spec(t, capability, taking_bids)
            requester_k = self.rng.randrange(len(self.agents))
            requester = self.agents[requester_k]
            body = {"task_id": task_id, "spec": spec.to_json(), "escrow_from": escrow_from}
            yield self._entry(requester, index, TASK_POSTED, task_id, body)
            index += 1
            opened = {
                "task_id": task_id,
                "deposit": str(BUDGET),
                "tx_hash": "0x" + hashlib.sha256(task_id.encode()).hexdigest(),
                "block_number": 1,
            }
            yield self._entry(self.operator, index, ESCROW_OPENED, task_id, opened)
            index += 1
            self.all_tasks.append(task_id)
            if taking_bids:
                self.open_tasks.append((task_id, capability))
            count = bids_left // (self.plan.tasks - t)
            bids_left -= count
            pool = self.credentialed[capability]
            chosen = self.rng.sample(pool, min(count, len(pool)))
            # the requester counts as a bidder already: the commits measured later pick
            # fresh bidders, and a requester's bid on its own task is refused (self-bid)
            self.bidders[task_id] = set(chosen) | {requester_k}
            for k in chosen:
                price = Wei(10**14 + self.rng.randrange(10**15))
                commitment = sealed.commit_bid(
                    self.agents[k], task_id, price, self.rng.randbytes(32)
                )
                body = {"commitment": commitment.to_json(), "exam_score": "1"}
                yield self._entry(self.operator, index, BID_COMMITTED, task_id, body)
                index += 1

    def credential_entry(self, k: int, index: int) -> Entry:
        """Agent k's credential, issued and logged as onboarding issues it."""
        agent = self.agents[k]
        at = self._at(index)
        capability = CAPABILITIES[k % len(CAPABILITIES)]
        credential_id = uuid.UUID(int=self.rng.getrandbits(128)).urn
        document = issue_capability_credential(
            self.operator,
            agent.did,
            capability,
            5,
            5,
            5,
            transcript_reference(self.log_id, index),
            hashlib.sha256(credential_id.encode()).hexdigest(),
            status_entry(self.status_url, k),
            at,
            DEFAULT_VALIDITY,
            credential_id=credential_id,
        )
        self.credential_rows.append(
            {
                "id": credential_id,
                "agent_did": agent.did,
                "capability": capability,
                "status_index": k,
                "exam_id": f"seeded-{k}",
                "issued_at": document["validFrom"],
                "document": json.dumps(document, sort_keys=True),
            }
        )
        body = {
            "credentialId": credential_id,
            "agent": agent.did,
            "capability": capability,
            "examId": f"seeded-{k}",
            "statusListIndex": k,
            "validUntil": document["validUntil"],
            "credential": document,
        }
        return self._entry(self.operator, index, ISSUED_EVENT_KIND, credential_id, body)


def _spec(t: int, capability: str, taking_bids: bool) -> TaskSpec:
    window = timedelta(days=20) if taking_bids else timedelta(hours=1)
    return TaskSpec(
        title=f"seeded task {t}",
        description=f"a seeded {capability} task",
        parts=(Part("part", capability, REGISTRY[capability].example()[0]),),
        budget=BUDGET,
        bidding=window,
        reveal=window,
        delivery=timedelta(days=30),
    )


# -- homes --------------------------------------------------------------------------------------


@dataclass
class Home:
    backend: str
    settings: Settings
    env: dict[str, str]


def _pg_database(base: str, name: str) -> str:
    """A fresh database `name` on the PostgreSQL server of `base` (dropped first if there)."""
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return make_url(base).set(database=name).render_as_string(hide_password=False)


def make_homes(
    work: Path, size: int, operator_key: Path, backends: Sequence[str] = BACKENDS
) -> list[Home]:
    """A home per backend for `size` events (PostgreSQL only when `$ACCORD_TEST_PG_URL` is
    set), each holding a copy of `operator_key`."""
    homes = []
    for backend in backends:
        if backend == "postgres" and not os.environ.get(PG_ENV):
            continue
        env = {
            "ACCORD_HOME": str(work / f"{backend}-{size}"),
            "ACCORD_DEVNET_PORT": str(find_free_port()),
            "ACCORD_ANCHOR_EVERY": "1000000000",
            "ACCORD_ANCHOR_INTERVAL": "1000000000",
        }
        if backend == "postgres":
            env["ACCORD_DB_URL"] = _pg_database(os.environ[PG_ENV], f"accord_scale_{size}")
        settings = Settings.from_env(env)
        prepare_home(settings)
        settings.keys_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(operator_key, settings.keys_dir / OPERATOR_KEYFILE)
        homes.append(Home(backend, settings, env))
    return homes


def seed_homes(homes: Sequence[Home], plan: Plan, rng: random.Random) -> Seed:
    """Append the plan's entries to every home's log and insert the agent and credential
    rows. Returns the seed (what the measurements need: open tasks, bidders, signers)."""
    ledgers = [open_ledger(home.settings) for home in homes]
    for ledger in ledgers:  # the views the market keeps, folded in each append as it folds them
        for projection in read_views(ledger.operator.did):
            ledger.store.attach(projection)
    onboardings = [
        open_onboarding(home.settings, ledger) for home, ledger in zip(homes, ledgers, strict=True)
    ]
    first = onboardings[0]
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
    seed = Seed(
        plan,
        ledgers[0].operator,
        ledgers[0].log_id,
        first.status_list_url,
        first.domain,
        start,
        rng,
    )
    status = status_list_credential(seed.operator, seed.status_url, StatusList.empty(), now=start)
    batch: list[Entry] = []
    done = 0

    def flush() -> None:
        nonlocal done
        for ledger in ledgers:
            ledger.store.append_batch(batch)
        done += len(batch)
        if done % (SEED_BATCH * 20) == 0 or done == plan.events:
            progress(f"scale: {done:,}/{plan.events:,} entries seeded")
        batch.clear()

    for entry in seed.entries():
        batch.append(entry)
        if len(batch) == SEED_BATCH:
            flush()
    if batch:
        flush()
    for onboarding in onboardings:
        with onboarding.engine.begin() as connection:
            connection.execute(
                insert(PublishedStatusList.__table__),  # type: ignore[attr-defined]
                [{"url": seed.status_url, "document": json.dumps(status, sort_keys=True)}],
            )
            connection.execute(insert(Agent.__table__), seed.agent_rows)  # type: ignore[attr-defined]
            connection.execute(
                insert(IssuedCredential.__table__),  # type: ignore[attr-defined]
                seed.credential_rows,
            )
    for ledger in ledgers:
        assert ledger.store.size() == plan.events, (ledger.store.size(), plan.events)
        ledger.store.engine.dispose()
    return seed


# -- measuring ----------------------------------------------------------------------------------


@dataclass
class Services:
    """Two service processes over one home (the factory of `bench_api`), stopped by `stop`."""

    bases: list[str]
    processes: list[subprocess.Popen[bytes]]

    @classmethod
    def start(cls, home: Home, count: int = 2) -> Services:
        bases, processes = [], []
        for _ in range(count):
            port = find_free_port()
            command = [sys.executable, "-m", "uvicorn", "bench_api:service", "--factory"]
            command += ["--app-dir", str(HERE), "--host", "127.0.0.1", "--port", str(port)]
            command += ["--log-level", "warning", "--no-access-log"]
            environment = {**os.environ, **home.env, "PYTHONPATH": str(HERE.parents[1])}
            processes.append(subprocess.Popen(command, env=environment))
            bases.append(f"http://127.0.0.1:{port}")
        services = cls(bases, processes)
        try:
            for base, process in zip(bases, processes, strict=True):
                wait_healthy(base, process, seconds=120)
        except BaseException:
            services.stop()
            raise
        return services

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def services_cpu(services: Services) -> float | None:
    """The CPU seconds (user and system) the service processes have used so far, from
    /proc; None where there is no /proc."""
    total = 0.0
    for process in services.processes:
        try:
            fields = Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def latencies(
    base: str, paths: Sequence[str], budget: float, timeout: float = 60.0
) -> tuple[list[float], int]:
    """Client-side milliseconds of GET `paths`, one after another on one keep-alive client,
    until `budget` seconds are spent (at least one request); and how many were not 200 (or
    not answered within `timeout` seconds)."""
    took: list[float] = []
    bad = 0
    deadline = time.perf_counter() + budget
    with httpx.Client(base_url=base, timeout=timeout) as client:
        for path in paths:
            start = time.perf_counter()
            try:
                ok = client.get(path).status_code == 200
            except httpx.TimeoutException:
                ok = False
            took.append((time.perf_counter() - start) * 1_000)
            bad += not ok
            if time.perf_counter() > deadline:
                break
    return took, bad


def accord_cli(home: Home, *args: str, timeout: float = CLI_TIMEOUT_S) -> tuple[float, int, str]:
    """(wall seconds, exit status, its error) of `accord ARGS` on the home (-1: timed out).
    With --json an error is a JSON object on stdout, else a line on stderr."""
    env = {**os.environ, **home.env, "PYTHONPATH": str(HERE.parents[1]), "COLUMNS": "200"}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "accord.api.cli", *args],
            env=env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, -1, f"timed out after {timeout:.0f} s"
    seconds = time.perf_counter() - start
    if done.returncode == 0:
        return seconds, 0, ""
    try:
        return seconds, done.returncode, str(json.loads(done.stdout)["error"])
    except (ValueError, KeyError, TypeError):
        return seconds, done.returncode, done.stderr or done.stdout


def commits_per_second(
    services: Services, seed: Seed, count: int, rng: random.Random
) -> tuple[float, int]:
    """Fresh signed commitments from credentialed agents to the open tasks over `CONNECTIONS`
    keep-alive connections, alternating between the processes: (commits/s, answers other
    than 201).

    Each agent signs its request (RFC 9421, a fresh nonce) before the clock starts, as agents
    on their own machines would; the timed part sends them and the services verify every
    signature, nonce and credential. The sender is one asyncio loop writing the requests'
    bytes: with httpx in 16 threads the bench process spent about 3 ms of CPU per request,
    as much as a service, on the two cores they share."""
    requests: list[tuple[str, bytes]] = []
    while len(requests) < count:
        task_id, capability = seed.open_tasks[len(requests) % len(seed.open_tasks)]
        fresh = [k for k in seed.credentialed[capability] if k not in seed.bidders[task_id]]
        k = rng.choice(fresh)
        seed.bidders[task_id].add(k)
        signer = seed.agents[k]
        commitment = sealed.commit_bid(signer, task_id, Wei(10**15), rng.randbytes(32))
        base = services.bases[len(requests) % len(services.bases)]
        url = f"{base}/tasks/{task_id}/commitments"
        request = AccordAuth(signer)(httpx.Request("POST", url, json=commitment.to_json()))
        requests.append((base, _wire(request)))
    return asyncio.run(_send_all(requests))


def _wire(request: httpx.Request) -> bytes:
    """An HTTP/1.1 request's bytes, keep-alive."""
    lines = [f"{request.method} {request.url.raw_path.decode()} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in request.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + request.content


async def _send_all(requests: Sequence[tuple[str, bytes]]) -> tuple[float, int]:
    """Send every request on `CONNECTIONS` connections (spread over the bases as the requests
    are), each request after the previous answer on its connection: (requests/s, answers
    other than 201)."""
    by_base: dict[str, list[bytes]] = {}
    for base, wire in requests:
        by_base.setdefault(base, []).append(wire)
    per_base = max(1, CONNECTIONS // len(by_base))
    queues = [(base, iter(wires)) for base, wires in by_base.items()]
    refused = 0

    async def connection(base: str, wires: Iterator[bytes]) -> None:
        nonlocal refused
        url = httpx.URL(base)
        reader, writer = await asyncio.open_connection(url.host, url.port)
        try:
            for wire in wires:  # one shared iterator per base: each request is sent once
                writer.write(wire)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = None
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if length is None:  # uvicorn sizes every JSON answer; anything else is a bug
                    raise RuntimeError(f"an answer without Content-Length: {head!r}")
                await reader.readexactly(length)
                refused += status != 201
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(
        *(connection(base, wires) for base, wires in queues for _ in range(per_base))
    )
    return len(requests) / (time.perf_counter() - start), refused


def _label(size: int) -> str:
    return f"10^{len(str(size)) - 1}"


@dataclass
class HomeMeasures:
    """What one seeded home's rounds have measured so far: every measure in report order,
    the ones the goals read by route, and what failed."""

    tag: str
    rng: random.Random
    measures: dict[str, Measure] = field(default_factory=dict)
    for_goals: dict[str, Measure] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def measure(self, key: str, name: str, unit: str) -> Measure:
        if key not in self.measures:
            self.measures[key] = Measure(name, unit)
        return self.measures[key]


def cpu_probe(entry: Entry) -> float:
    """Milliseconds to parse and verify one signed entry `PROBE_ENTRIES` times, alone: a fixed
    piece of the services' own kind of work. A shared machine's speed drifts; the probe, taken
    before each home's round, says how fast the machine was while the bench ran."""
    start = time.perf_counter()
    for _ in range(PROBE_ENTRIES):
        Entry.from_bytes(entry.data).verify()
    return (time.perf_counter() - start) * 1_000


def home_tag(home: Home, size: int) -> str:
    return f"{_label(size)} events, {'SQLite' if home.backend == 'sqlite' else 'PostgreSQL'}"


@dataclass
class Serving:
    """A seeded home's devnet and two service processes, up from before the first round to
    after the last (so the rounds after the first find the services warm, as a service that
    has been running is)."""

    devnet: Any
    services: Services | None = None

    @classmethod
    def start(cls, home: Home, seed: Seed, into: HomeMeasures) -> Serving:
        """Start them and time the market's opening (each process's first request)."""
        serving = cls(devnet_for(home.settings))
        serving.devnet.up()
        try:
            serving.services = Services.start(home)
            warm = into.measure("warm", f"first request, the market opening ({into.tag})", "s")
            for base in serving.services.bases:
                path = f"/tasks/{seed.all_tasks[0]}"
                took, bad = latencies(base, [path], 0, WARM_UP_TIMEOUT_S)
                warm.samples.append(took[0] / 1_000)
                if bad:
                    into.failures.append(f"{into.tag}: the warm-up request failed")
        except BaseException:
            serving.stop()
            raise
        return serving

    def stop(self) -> None:
        if self.services is not None:
            self.services.stop()
        self.devnet.down()


def measure_round(
    home: Home,
    seed: Seed,
    services: Services,
    reps: int,
    commits: int,
    into: HomeMeasures,
    only: Sequence[str] = MEASUREMENTS,
) -> None:
    """One repetition of the measurements `only` of one seeded home but the market's opening
    and the reindex, added to `into`: a commit run, each route's latencies, discovery's query
    in process, one `accord task list`."""
    tag, rng = into.tag, into.rng
    # Commits first: a slow read abandoned by the client at its timeout would still be
    # running in the services and take the CPU from them.
    if "commits" in only:
        rate = into.measure("commits", f"signed bid commits, 2 processes ({tag})", "commits/s")
        spent = services_cpu(services)
        per_second, refused = commits_per_second(services, seed, commits, rng)
        rate.samples.append(per_second)
        if spent is not None and (now := services_cpu(services)) is not None:
            into.measure(
                "commit-cpu", f"service CPU per bid commit, both processes ({tag})", "ms"
            ).samples.append((now - spent) * 1000 / commits)
        into.for_goals["commits"] = rate
        if refused:
            into.failures.append(f"{tag}: {refused} of {commits} commits not answered 201")
        progress(f"scale: {tag}: {per_second:.0f} commits/s")
    capability = CAPABILITIES[0]
    routes: dict[str, tuple[str, Callable[[], str]]] = {
        "GET /tasks?state=bidding&capability=X&limit=50": (
            "bidding",
            lambda: f"/tasks?state=bidding&capability={CAPABILITIES[rng.randrange(3)]}&limit=50",
        ),
        "GET /tasks/{id}": ("task", lambda: f"/tasks/{rng.choice(seed.all_tasks)}"),
        "GET /agents?capability=X&need=... (discovery)": (
            "discovery",
            lambda: f"/agents?capability={capability}&need={NEED.replace(' ', '+')}",
        ),
    }
    for route, (measurement, path) in routes.items():
        if measurement not in only:
            continue
        p50 = into.measure(f"{route} p50", f"{route} p50 ({tag})", "ms")
        p99 = into.measure(f"{route} p99", f"{route} p99 ({tag})", "ms")
        took, bad = latencies(
            services.bases[0], [path() for _ in range(200)], ROUTE_BUDGET_S / reps
        )
        p50.samples.append(statistics.median(took))
        p99.samples.append(percentile(took, 0.99))
        into.for_goals[route] = p99
        if bad:
            into.failures.append(f"{tag}: {bad} of {len(took)} {route} not answered 200")
    if "discovery" in only:
        query_latencies(home, into)
    if "listing" in only:
        measure_listing(home, into)


def query_latencies(home: Home, into: HomeMeasures) -> None:
    """Discovery's query alone (`ranked_page`, the route's page) on the bench's own
    connection: `QUERY_CALLS` calls, p50 and p99 in ms."""
    name = f"discovery's query in process (ranked_page, {PAGE} a page)"
    p50 = into.measure("query p50", f"{name} p50 ({into.tag})", "ms")
    p99 = into.measure("query p99", f"{name} p99 ({into.tag})", "ms")
    engine = make_engine(home.settings.db_url)
    took: list[float] = []
    try:
        with engine.connect() as connection:
            for _ in range(QUERY_CALLS):
                start = time.perf_counter()
                ranked_page(
                    connection, CAPABILITIES[0], NEED, datetime.now(UTC), offset=0, size=PAGE
                )
                took.append((time.perf_counter() - start) * 1_000)
    finally:
        engine.dispose()
    p50.samples.append(statistics.median(took))
    p99.samples.append(percentile(took, 0.99))


def measure_listing(home: Home, into: HomeMeasures) -> None:
    """One `accord task list` of the bidding tasks, wall time."""
    tag = into.tag
    route = "accord task list --state bidding --limit 50"
    listing = into.measure(route, f"{route} ({tag})", "s")
    seconds, status, err = accord_cli(
        home, "task", "list", "--state", "bidding", "--limit", "50", "--json"
    )
    if status == 2 and "No such option" in err:  # before the read views
        listing.name = f"accord task list (every task: no --state/--limit yet) ({tag})"
        seconds, status, err = accord_cli(home, "task", "list", "--json")
    if status != 0:
        into.failures.append(f"{tag}: accord task list: {err.strip()[-200:]}")
    else:
        listing.samples.append(seconds)
        into.for_goals[route] = listing


def measure_reindex(home: Home, into: HomeMeasures) -> None:
    """`accord ledger reindex` wall time, once, after every round."""
    seconds, status, err = accord_cli(home, "ledger", "reindex", "--json", timeout=3600)
    if status == 0:
        reindex = into.measure("reindex", f"accord ledger reindex ({into.tag})", "s")
        reindex.samples.append(seconds)
        into.for_goals["reindex"] = reindex
    elif status == 2 and "No such command" in err:
        into.failures.append(f"{into.tag}: no `accord ledger reindex` command yet, not measured")
    else:
        into.failures.append(f"{into.tag}: accord ledger reindex: {err.strip()[-200:]}")


ByHome = dict[tuple[int, str], dict[str, Measure]]
"""The measures the goals read, by (size, backend)."""


def run(quick: bool, reps: int) -> Section:
    """The bench at 10^4, 10^5 and 10^6 events (quick: the first two), on both backends."""
    return measure(quick, reps)[0]


def measure(
    quick: bool,
    reps: int,
    sizes: Sequence[int] | None = None,
    backends: Sequence[str] = BACKENDS,
    only: Sequence[str] = MEASUREMENTS,
) -> tuple[Section, ByHome]:
    """The bench at `sizes` on `backends`, the measurements `only`: the section (with its
    goals) and its measures by (size, backend)."""
    started = time.perf_counter()
    title = "scale: reads, listing, bid commits and reindex from 10^4 to 10^6 events"
    if set(only) != set(MEASUREMENTS):
        title = f"scale, {', '.join(only)} only: from 10^4 to 10^6 events"
    section = Section(key="scale", title=title, method=__doc__ or "")
    sizes = sorted(sizes or (SIZES[:2] if quick else SIZES))
    commits = COMMITS_QUICK if quick else COMMITS
    work = Path(tempfile.mkdtemp(prefix="accord-bench-scale-", dir=temp_root()))
    by_size: ByHome = {}
    try:
        operator_key = work / OPERATOR_KEYFILE  # one operator for every home
        load_or_create_keyfile(operator_key)
        seeded: list[tuple[int, Home, Seed]] = []
        for size in sizes:  # every size is seeded first, so that the rounds can interleave
            plan = Plan.of(size)
            homes = make_homes(work, size, operator_key, backends)
            seeding = time.perf_counter()
            seed = seed_homes(homes, plan, random.Random(size))
            section.measures.append(
                Measure(
                    f"seeding {_label(size)} events into {' and '.join(h.backend for h in homes)}",
                    "events/s",
                    [size / (time.perf_counter() - seeding)],
                )
            )
            progress(
                f"scale: {size:,} events seeded ({plan.agents:,} agents, {plan.tasks:,} tasks, "
                f"{plan.bids:,} bids)"
            )
            seeded += [(size, home, seed) for home in homes]
        found = {
            (size, home.backend): HomeMeasures(home_tag(home, size), random.Random(size))
            for size, home, _ in seeded
        }
        probe = Measure(
            f"CPU probe: {PROBE_ENTRIES:,} signed entries parsed and verified, before each round",
            "ms",
        )
        section.measures.append(probe)
        probe_entry = make_entry(
            seeded[0][2].operator, kind="note.added", seq=1, at=datetime.now(UTC), body={"n": 1}
        )
        # Round r measures every home once, the sizes in turn from a rotating start: a
        # slower stretch of a shared machine falls on every size alike, so the 10^6 over
        # 10^4 ratios compare like with like.
        serving: dict[tuple[int, str], Serving] = {}
        try:
            for size, home, seed in seeded:
                key = (size, home.backend)
                serving[key] = Serving.start(home, seed, found[key])
            for rep in range(reps):
                shift = rep * len(seeded) // reps
                turn = seeded[shift:] + seeded[:shift]
                for size, home, seed in turn:
                    key = (size, home.backend)
                    services = serving[key].services
                    assert services is not None
                    probe.samples.append(cpu_probe(probe_entry))
                    measure_round(home, seed, services, reps, commits, found[key], only)
                progress(f"scale: round {rep + 1}/{reps} measured")
        finally:
            for each in serving.values():
                each.stop()
        for size, home, _ in seeded:
            if "reindex" in only:
                measure_reindex(home, found[(size, home.backend)])
        for size, home, _ in seeded:  # reported by size, then backend, as seeded
            measures = found[(size, home.backend)]
            section.measures += list(measures.measures.values())
            by_size[(size, home.backend)] = measures.for_goals
            section.notes += measures.failures
            if measures.failures and section.error is None:
                section.error = "; ".join(measures.failures[:3])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    add_goals(section, by_size)
    sending = (
        f"{commits} commits per repetition on {CONNECTIONS} connections from the bench process, "
        "each request signed by its agent before the clock starts (the sending still shares "
        "the machine's cores with both services and the database, so the rates are lower "
        "bounds). "
        if "commits" in only
        else ""
    )
    section.notes.append(
        f"Sizes {', '.join(f'{s:,}' for s in sizes)} events. {sending}Reads are one client, "
        "one request at a time."
    )
    section.seconds = time.perf_counter() - started
    return section, by_size


def add_goals(section: Section, by_size: ByHome) -> None:
    """The issue's goals from the measures by (size, backend): each route's p99 (the listing's
    wall time) at the largest size and its growth from the smallest, and the commit rate on
    PostgreSQL at the largest size."""
    sizes = sorted({size for size, _ in by_size})
    largest, smallest = sizes[-1], sizes[0]
    for backend in ("sqlite", "postgres"):
        top, bottom = by_size.get((largest, backend)), by_size.get((smallest, backend))
        if top is None or bottom is None:
            continue
        name = "SQLite" if backend == "sqlite" else "PostgreSQL"
        for route, measure in top.items():
            if route in ("commits", "reindex"):
                continue
            if not route.startswith("accord"):  # a command's wall time includes Python's
                # start-up (0.1 s and more): only its growth has a goal
                title = f"{route} p99, {_label(largest)} events, {name}"
                section.goals.append(
                    Goal(title, GOAL_P99_MS, measure.median, "ms", higher_is_better=False)
                )
            base = bottom[route].median
            section.goals.append(
                Goal(
                    f"{route}: {_label(largest)} over {_label(smallest)} events, {name}",
                    GOAL_FLAT,
                    measure.median / base if base else float("nan"),
                    TIMES,
                    higher_is_better=False,
                )
            )
    top_pg = by_size.get((largest, "postgres"))
    if top_pg is not None and "commits" in top_pg:
        section.goals.append(
            Goal(
                f"signed bid commits, 2 processes on PostgreSQL, {_label(largest)} events",
                GOAL_COMMITS,
                top_pg["commits"].median,
                "commits/s",
            )
        )
    elif top_pg is None:
        section.notes.append(
            f"PostgreSQL not measured: {PG_ENV} is unset (run under scripts/with_postgres.sh)"
        )


def main() -> None:
    args = parser("Reads, listing, bid commits and reindex as the log grows.")
    args.add_argument(
        "--sizes",
        default="",
        help="comma-separated log sizes (default 10000,100000,1000000; quick: the first two)",
    )
    args.add_argument("--backends", default=",".join(BACKENDS), help="sqlite,postgres")
    args.add_argument(
        "--only", default="", help=f"comma-separated subset of {','.join(MEASUREMENTS)}"
    )
    args.add_argument(
        "--save", type=Path, default=None, help="pickle the section and its measures there"
    )
    options = args.parse_args()
    sizes = [int(size) for size in options.sizes.split(",") if size.strip()]
    backends = [name.strip() for name in options.backends.split(",") if name.strip()]
    if set(backends) - set(BACKENDS):
        args.error(f"unknown backend in {backends}; choose from {list(BACKENDS)}")
    only = [name.strip() for name in options.only.split(",") if name.strip()] or MEASUREMENTS
    if set(only) - set(MEASUREMENTS):
        args.error(f"unknown measurement in {only}; choose from {list(MEASUREMENTS)}")
    section, by_size = measure(options.quick, reps_of(options), sizes, backends, only)
    if options.save is not None:
        with options.save.open("wb") as out:
            pickle.dump((section, by_size), out)
    show(section)
    console.print(f"[dim]{section.key}: {section.seconds:.0f} s[/dim]")
    sys.exit(0 if section.error is None and all(g.passed for g in section.goals) else 1)


if __name__ == "__main__":
    main()
