"""Strangers' code never runs under the write lock or on the event loop: while the service's
lifecycle settles a task whose python checks are slow (each sleeps 2 s in the box, within its
limits), reads of another task stay fast, a signed `POST /tasks/{id}/sealed` (which takes the
write lock) answers at once, and the write lock itself is free while the checks run.

Nothing here races the wall clock: the checks' sleeps only make the settlement last longer;
the bounds are generous upper bounds (2 s) on what takes milliseconds when it is right."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

import accord.market.settlement as settlement
from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig, ApiState
from accord.coordinator.service import run_awarded_task
from accord.identity.http_auth import AccordAuth
from accord.market.errors import SettlementWaits
from accord.market.lifecycle import LifecycleWorker
from accord.market.precheck import Precheck
from accord.market.settlement import SETTLE_RECHECKS, logged_settlement, settle_task
from tests.audit.conftest import (
    REQUESTER_KEY,
    World,
    build_world,
    onboard_agents,
    open_world,
    post_task,
    sealed_auction,
)
from tests.serving import serve
from tests.specs import invoice_spec_with

SLOW_CHECK = """
import time


def check(outputs):
    time.sleep(2)
    return True
"""
SLOW_CHECKS = 3
BOUND_S = 2.0
"""p99 of the reads, and the longest wait for the write lock or a sealed output's answer."""
GENEROUS_S = 300.0


def slow_checks() -> list[dict[str, Any]]:
    return [
        {
            "id": f"slow-{n}",
            "weight": 1,
            "kind": "python",
            "reads": ["lines-sum"],
            "code": SLOW_CHECK,
            "cpu_seconds": 2,
        }
        for n in range(SLOW_CHECKS)
    ]


def delivered_with_slow_checks(world: World) -> str:
    spec = invoice_spec_with(*slow_checks())
    task = world.market.post(world.requester, spec, requester_key=REQUESTER_KEY)
    world.task_id = task.task_id
    sealed_auction(world)
    run_awarded_task(world.context, world.task_id)
    world.clock.advance(1)
    assert world.market.task(task.task_id).state == "delivered"
    return task.task_id


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def test_reads_stay_fast_while_a_task_with_slow_checks_is_settled(tmp_path: Any) -> None:
    world = open_world(tmp_path / "home")
    onboard_agents(world)
    settling = delivered_with_slow_checks(world)
    other = post_task(world)
    app = create_app(
        world.settings,
        config=ApiConfig(lifecycle_interval=0.05, rate=10_000.0, burst=10_000.0),
        context=world.context,
        anchors=world.anchors,
        escrow_chain=world.escrow_chain,
    )
    state: ApiState = app.state.accord
    reads: list[float] = []
    sealed: list[float] = []
    lock_waits: list[float] = []
    answers: list[int] = []
    read_answers: list[int] = []
    done = threading.Event()

    def settled() -> bool:
        return world.market.task(settling).state == "settled"

    def timed(samples: list[float], call: Any) -> Any:
        started = time.monotonic()
        result = call()
        samples.append(time.monotonic() - started)
        return result

    def read_other(client: httpx.Client) -> None:
        while not done.is_set():
            reply = timed(reads, lambda: client.get(f"/tasks/{other}"))
            read_answers.append(reply.status_code)

    def send_sealed(client: httpx.Client) -> None:
        auth = AccordAuth(world.requester)
        while not done.is_set():
            reply = timed(
                sealed,
                lambda: client.post(f"/tasks/{settling}/sealed", content=b"{}", auth=auth),
            )
            answers.append(reply.status_code)
            time.sleep(0.05)

    def probe_lock() -> None:
        while not done.is_set():
            if timed(lock_waits, lambda: state.write_lock.acquire(timeout=GENEROUS_S)):
                state.write_lock.release()
            time.sleep(0.02)

    with serve_with_lifespan(app) as url, httpx.Client(base_url=url, timeout=GENEROUS_S) as client:
        worker = app.state.lifecycle
        assert isinstance(worker, LifecycleWorker)
        threads = [
            threading.Thread(target=read_other, args=(client,)),
            threading.Thread(target=send_sealed, args=(client,)),
            threading.Thread(target=probe_lock),
        ]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        world.clock.set(world.market.task(settling).review_ends)  # the settlement is due
        try:
            while not settled():
                assert worker.rounds < 100_000, "the task was never settled"
                time.sleep(0.05)
        finally:
            done.set()
            for thread in threads:
                thread.join(GENEROUS_S)
        took = time.monotonic() - started
    # the checks did run, slowly, while the samples were taken
    assert took >= 2  # at least one check's sleep (however many boxes run at once)
    assert set(read_answers) == {200}
    assert len(reads) >= 20 and len(sealed) >= 5 and len(lock_waits) >= 20
    assert p99(reads) < BOUND_S, sorted(reads)[-5:]
    assert max(sealed) < BOUND_S, sorted(sealed)[-5:]
    assert max(lock_waits) < BOUND_S, sorted(lock_waits)[-5:]
    assert answers and all(400 <= code < 500 for code in answers), set(answers)
    settlement = world.market.task(settling)
    assert settlement.state == "settled"


def serve_with_lifespan(app: Any) -> Any:
    return serve(app, lifespan="on")


class LoggingLock:
    """The write lock, taken after a writer logged an entry about the task (a remark: what a
    review logged while the checks ran would be) on each of its first `times` takings."""

    def __init__(self, world: World, times: int) -> None:
        self.world = world
        self.times = times
        self.lock = threading.RLock()

    def __enter__(self) -> None:
        if self.times > 0:
            self.times -= 1
            self.world.ledger.append(
                self.world.requester, "task.comment", subject=self.world.task_id, body={}
            )
        self.lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.lock.__exit__(*exc)


def counting_computations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    computed: list[str] = []
    real = settlement._compute

    def compute(market: Any, onboarding: Any, task: Any, judge: Any) -> Any:
        computed.append(task.task_id)
        return real(market, onboarding, task, judge)

    monkeypatch.setattr(settlement, "_compute", compute)
    return computed


def test_checks_run_again_when_the_task_s_log_changed_while_they_ran(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = build_world(tmp_path / "home", until="delivered")
    computed = counting_computations(monkeypatch)
    outcome = settle_task(
        world.market, world.onboarding, world.task_id, lock=LoggingLock(world, times=1)
    )
    assert not outcome.already and computed == [world.task_id] * 2
    assert world.market.task(world.task_id).state == "settled"
    assert logged_settlement(world.market, world.task_id) is not None


def test_a_log_that_keeps_changing_makes_the_settlement_wait(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = build_world(tmp_path / "home", until="delivered")
    computed = counting_computations(monkeypatch)
    with pytest.raises(SettlementWaits, match="kept changing while its checks ran"):
        settle_task(
            world.market, world.onboarding, world.task_id, lock=LoggingLock(world, times=99)
        )
    assert len(computed) == SETTLE_RECHECKS
    assert logged_settlement(world.market, world.task_id) is None  # nothing logged on a guess
    assert world.market.task(world.task_id).state == "delivered"
    outcome = settle_task(world.market, world.onboarding, world.task_id)  # the next round
    assert world.market.task(world.task_id).state == "settled" and not outcome.already


class FlagLock:
    """A lock that says whether it is held, and how often it was taken."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.held = False
        self.taken = 0

    def __enter__(self) -> None:
        self.lock.__enter__()
        self.held, self.taken = True, self.taken + 1

    def __exit__(self, *exc: object) -> None:
        self.held = False
        self.lock.__exit__(*exc)


def test_a_hosted_team_runs_the_requesters_checks_without_the_write_lock(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`POST /tasks/{id}/run` holds the write lock for the task's transitions only: the
    team's precheck (the requester's python checks, strangers' code) runs without it."""
    world = open_world(tmp_path / "home")
    onboard_agents(world)
    task = world.market.post(
        world.requester, invoice_spec_with(*slow_checks()[:1]), requester_key=REQUESTER_KEY
    )
    world.task_id = task.task_id
    sealed_auction(world)
    lock = FlagLock()
    held_during_checks: list[bool] = []
    real = Precheck.failing

    def failing(self: Precheck, part_id: str, output: Any) -> Any:
        held_during_checks.append(lock.held)
        return real(self, part_id, output)

    monkeypatch.setattr(Precheck, "failing", failing)
    run_awarded_task(world.context, world.task_id, lock=lock)
    assert world.market.task(world.task_id).state == "delivered"
    assert held_during_checks and not any(held_during_checks)
    assert lock.taken >= 2  # the start, and the delivery
