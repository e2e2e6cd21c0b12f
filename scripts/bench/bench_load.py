"""load: reads and a benign settlement while a hostile task is settled and strangers post.

Setup, untimed: a managed anvil `Devnet` on a free port in a tmp `ACCORD_HOME` (always
stopped), the TaskEscrow deployed, the market opened as `open_market` does (SQLite, WAL) on a
test clock (`ACCORD_TEST_CLOCK`, a file this bench moves on); two agents onboarded in
`arithmetic`. Per repetition two phases' tasks are posted with their escrow, bid on, awarded and
run by the hosted team, so that they are delivered and wait for their review windows (each
has a review check nobody answers, so it settles when its window ends):

- the quiet phase: one benign task (an `expect` check);
- the loaded phase: the same benign task, and a hostile one, posted before it (so the
  lifecycle's rounds, which take due tasks in the order they were posted, come to it first),
  whose python checks take all the time their limits allow: 4 spin (each inconclusive at
  3 s of CPU: two calls of its 1 s limit, plus the interpreter) and 2 sleep (each
  inconclusive at the 11 s wall-clock backstop).

The service runs as `uvicorn` (one worker, a subprocess on 127.0.0.1) with its lifecycle worker
every 0.2 s, so it settles due tasks by itself. A phase moves the clock past its tasks' review
windows (each phase's window is an hour longer than the last), then, until the benign task is
settled, 4 threads read another task (`GET /tasks/{id}`, unsigned), and in the loaded phase 2
threads of strangers (fresh did:keys with fresh, empty accounts) post tasks as outside
requesters do (`POST /tasks/prepare`, then the signed `task.posted` to `POST /tasks`) and 2
threads ask for the hostile task's audit (`GET /tasks/{id}/audit`, unsigned).

Measured per phase: the read latency p99 (client-side, ms) and the settle latency of the benign
task (from the clock's move to its `settled` state, s). Medians over the repetitions; the ratio
is loaded / quiet, in the same run.

Run alone: `.venv/bin/python scripts/bench/bench_load.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from _common import (
    Goal,
    Measure,
    Section,
    percentile,
    progress,
    run_alone,
    temp_root,
    wait_healthy,
)
from eth_account import Account

from accord.coordinator.service import run_awarded_task
from accord.identity.challenges import REGISTRY
from accord.identity.http_auth import AccordAuth
from accord.ledger.chain import DEVNET_OPERATOR_KEY
from accord.ledger.devnet import find_free_port
from accord.ledger.events import parse_time
from accord.ledger.fast_entries import make_entry
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer
from accord.ledger.wiring import devnet_for
from accord.market.escrow import ensure_escrow
from accord.market.money import Wei
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.tasks import spec_from_request
from accord.market.wiring import DEVNET_REQUESTER_KEY, ESCROW_DEPLOYMENT_FILE, open_market

HERE = Path(__file__).resolve().parent
READERS = 4
STRANGERS = 2
AUDITORS = 2
GOAL_READ_P99_MS = 200.0
SPIN = "def check(outputs):\n    while True:\n        pass\n"
SLEEP = "import time\ndef check(outputs):\n    time.sleep(3600)\n    return False\n"
EXAMPLE_INPUT, EXAMPLE_OUTPUT = REGISTRY["arithmetic"].example()


def service() -> Any:
    """The uvicorn factory (`bench_load:service`): the service over `$ACCORD_HOME`, its
    lifecycle every 0.2 s, rate limits far above the load."""
    from accord.api.app import create_app
    from accord.api.routes.deps import ApiConfig

    config = ApiConfig(rate=1e9, burst=1e9, lifecycle_interval=0.2, post_burst=10**6)
    return create_app(Settings.from_env(), config=config)


def _request(title: str, review_hours: int, hostile: bool) -> dict[str, Any]:
    checks: list[dict[str, Any]] = [
        {"id": "right", "kind": "expect", "part": "sum", "path": "$", "equals": EXAMPLE_OUTPUT},
        # a review nobody gives: the task settles when its window ends, not at delivery
        {"id": "looks-right", "kind": "review", "part": "sum"},
    ]
    if hostile:
        for n in range(4):
            checks.append({"id": f"spin-{n}", "kind": "python", "reads": ["sum"], "code": SPIN})
        for n in range(2):
            checks.append({"id": f"sleep-{n}", "kind": "python", "reads": ["sum"], "code": SLEEP})
        for check in checks[2:]:
            check["cpu_seconds"] = 1
    return {
        "title": title,
        "budget": "0.01eth",
        "bidding": "1h",
        "reveal": "1h",
        "delivery": "1d",
        "review": f"{review_hours}h",
        "parts": [{"id": "sum", "capability": "arithmetic", "input": EXAMPLE_INPUT}],
        "checks": checks,
    }


def _advance(clock: Path, seconds: float) -> None:
    offset = float(clock.read_text()) if clock.exists() else 0.0
    clock.write_text(str(offset + seconds))


class Phase:
    """Threads that load the service until `stop`, and what they measured."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.stop = threading.Event()
        self.reads: list[float] = []
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []

    def start(self, worker: Callable[[httpx.Client], None], count: int) -> None:
        def loop() -> None:
            with httpx.Client(base_url=self.base, timeout=120) as client:
                while not self.stop.is_set():
                    try:
                        worker(client)
                    except httpx.HTTPError as exc:
                        self.errors.append(repr(exc))

        for _ in range(count):
            thread = threading.Thread(target=loop, daemon=True)
            thread.start()
            self.threads.append(thread)

    def read(self, path: str) -> Callable[[httpx.Client], None]:
        def one(client: httpx.Client) -> None:
            started = time.perf_counter()
            answer = client.get(path)
            self.reads.append((time.perf_counter() - started) * 1_000)
            if answer.status_code != 200:
                self.errors.append(f"read answered {answer.status_code}")

        return one

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=180)


def _stranger_posts(request: dict[str, Any]) -> Callable[[httpx.Client], None]:
    """A fresh did:key posts from its own (empty) account, as an outside requester does:
    `POST /tasks/prepare`, then its signed `task.posted` to `POST /tasks`."""

    def one(client: httpx.Client) -> None:
        stranger = Ed25519Signer.generate()
        auth = AccordAuth(stranger)
        key = {"Idempotency-Key": "load"}
        body = {"spec": request, "escrow_from": Account.create().address}
        prepared = client.post("/tasks/prepare", json=body, headers=key, auth=auth)
        if prepared.status_code != 200:
            if prepared.status_code not in (402, 429):
                raise httpx.HTTPError(f"a stranger's prepare answered {prepared.status_code}")
            return
        shown = prepared.json()
        entry = make_entry(
            stranger,
            kind=shown["kind"],
            seq=shown["seq"],
            at=parse_time(shown["server_time"]),
            subject=shown["subject"],
            body=shown["body"],
        ).to_json()
        posted = client.post("/tasks", json={"entry": entry}, headers=key, auth=auth)
        if posted.status_code not in (201, 400, 402, 429):  # 400: dated before a clock move
            raise httpx.HTTPError(f"a stranger's posting answered {posted.status_code}")

    return one


def _audits(path: str) -> Callable[[httpx.Client], None]:
    def one(client: httpx.Client) -> None:
        client.get(path)
        time.sleep(0.05)

    return one


def _settled_within(base: str, task_id: str, limit_s: float) -> float:
    """Seconds until the task reads `settled` (polled every 50 ms); nan past `limit_s`."""
    started = time.perf_counter()
    with httpx.Client(base_url=base, timeout=60) as client:
        while time.perf_counter() - started < limit_s:
            if client.get(f"/tasks/{task_id}").json().get("state") == "settled":
                return time.perf_counter() - started
            time.sleep(0.05)
    return float("nan")


def run(quick: bool, reps: int) -> Section:
    started = time.perf_counter()
    reps = min(reps, 2) if quick else min(reps, 5)
    section = Section(
        key="load",
        title="load: reads and a benign settlement while a hostile task settles",
        method=__doc__ or "",
    )
    quiet_p99 = Measure("read p99, quiet", "ms")
    loaded_p99 = Measure("read p99, under hostile load", "ms", baseline=quiet_p99.name)
    quiet_settle = Measure("benign settle latency, quiet", "s")
    loaded_settle = Measure(
        "benign settle latency, under hostile load", "s", baseline=quiet_settle.name
    )
    section.measures += [quiet_p99, loaded_p99, quiet_settle, loaded_settle]
    work = Path(tempfile.mkdtemp(prefix="accord-bench-load-", dir=temp_root()))
    clock = work / "clock"
    clock.write_text("0")
    env = {
        "ACCORD_HOME": str(work / "home"),
        "ACCORD_DEVNET_PORT": str(find_free_port()),
        "ACCORD_TEST_CLOCK": str(clock),
        "ACCORD_ALLOW_TEST_CLOCK": "1",  # a bench, which moves its market's clock itself
        "ACCORD_ANCHOR_EVERY": "1000000",
        "ACCORD_ANCHOR_INTERVAL": "1000000",
        "ACCORD_BOX_WORKERS": "2",
    }
    settings = Settings.from_env(env)
    devnet = devnet_for(settings)
    server: subprocess.Popen[bytes] | None = None
    try:
        settings.home.mkdir(parents=True, exist_ok=True)
        info = devnet.up()
        ensure_escrow(info.rpc_url, DEVNET_OPERATOR_KEY, settings.home / ESCROW_DEPLOYMENT_FILE)
        context = open_market(settings)
        market, onboarding = context.market, context.onboarding
        bidders = []
        for name in ("ada", "bob"):
            record = onboarding.registry.new_agent(name, now=datetime.now(UTC))
            onboarding.onboard(record, ["arithmetic"], item_count=5)
            bidders.append(onboarding.registry.signer(record))
        operator = market.ledger.operator
        # phase k's tasks are due once the clock is past a review of k + 1 hours
        phases: list[tuple[str, str | None]] = []
        for k in range(2 * reps):
            rough = None
            if k % 2 == 1:  # posted first, so a lifecycle round comes to it first
                rough = market.post(
                    operator,
                    spec_from_request(_request(f"hostile {k}", k + 1, True), {}),
                    requester_key=DEVNET_REQUESTER_KEY,
                ).task_id
            benign = market.post(
                operator,
                spec_from_request(_request(f"benign {k}", k + 1, False), {}),
                requester_key=DEVNET_REQUESTER_KEY,
            ).task_id
            phases.append((benign, rough))
        other = market.post(
            operator,
            spec_from_request(_request("read me", 24 * 29, False), {}),
            requester_key=DEVNET_REQUESTER_KEY,
        ).task_id
        every = [t for pair in phases for t in pair if t is not None]
        salt = bytes(range(32))
        for task_id in every:
            for n, bidder in enumerate(bidders):
                market.commit(commit_bid(bidder, task_id, Wei(10**15 + n), salt))
        _advance(clock, 3601)
        for task_id in every:
            for n, bidder in enumerate(bidders):
                market.reveal(reveal_bid(bidder, task_id, Wei(10**15 + n), salt))
        _advance(clock, 3601)
        for task_id in every:
            market.award(task_id)
            run_awarded_task(context, task_id)
        progress(f"load: {len(every)} tasks delivered")
        market.ledger.store.engine.dispose()

        port = find_free_port()
        base = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [
                sys.executable, "-m", "uvicorn", "bench_load:service", "--factory",
                "--app-dir", str(HERE), "--host", "127.0.0.1", "--port", str(port),
                "--log-level", "warning", "--no-access-log",
            ],
            env={**os.environ, **env, "PYTHONPATH": str(HERE.parents[1])},
        )  # fmt: skip
        wait_healthy(base, server)
        stranger_request = _request("a stranger's", 1, False)
        errors: list[str] = []
        for k, (benign, rough) in enumerate(phases):
            phase = Phase(base)
            phase.start(phase.read(f"/tasks/{other}"), READERS)
            if rough is not None:
                phase.start(_stranger_posts(stranger_request), STRANGERS)
                phase.start(_audits(f"/tasks/{rough}/audit"), AUDITORS)
            time.sleep(1.0)  # the load runs before the phase's tasks fall due
            _advance(clock, 3600)
            seconds = _settled_within(base, benign, 600)
            phase.end()
            errors += phase.errors[:3]
            p99 = percentile(phase.reads, 0.99) if phase.reads else float("nan")
            if rough is None:
                quiet_p99.samples.append(p99)
                quiet_settle.samples.append(seconds)
            else:
                loaded_p99.samples.append(p99)
                loaded_settle.samples.append(seconds)
                # the hostile task settles too, before the next phase starts
                _settled_within(base, rough, 600)
            progress(
                f"load: phase {k + 1}/{len(phases)}: p99 {p99:.1f} ms, settled in {seconds:.1f} s"
            )
        if errors:
            section.notes.append(f"errors seen: {errors[:5]}")
    except Exception as exc:
        section.error = f"{type(exc).__name__}: {exc}"
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        devnet.down()
        shutil.rmtree(work, ignore_errors=True)
    section.goals.append(
        Goal("read p99 under hostile load", GOAL_READ_P99_MS, loaded_p99.median, "ms", False)
    )
    section.notes.append(
        "the hostile task falls due with the benign one and comes first in the lifecycle's "
        "round: the benign task's settle latency under load says whether it waits behind it"
    )
    section.seconds = time.perf_counter() - started
    return section


if __name__ == "__main__":
    run_alone(run, "load: reads and a benign settlement under hostile load")
