"""Audits are cheap to ask for, and a quiet service anchors its tail: a real service (uvicorn on
loopback) over the audit's in-process world (`tests.audit.conftest`).

No test races the wall clock: a held computation is released by the test once what it waits
for has happened (bounded by a generous timeout that only a broken build reaches), and the
anchor timer is waited for by its rounds."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from typer.testing import CliRunner

import accord.api.routes.market as market_routes
from accord.api.app import create_app
from accord.api.audits import AuditCache
from accord.api.cli import app as cli
from accord.api.problems import ProblemError
from accord.api.routes.deps import ApiConfig, ApiState
from accord.audit.checks import AuditReport
from accord.ledger.service import AnchorTimer
from tests.audit.conftest import World, build_world, post_task
from tests.serving import serve

GENEROUS_S = 120.0
"""How long a test waits for what must happen before it gives up (a broken build only)."""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """One settled task (`world.task_id`) and, beside it, another just posted."""
    world = build_world(tmp_path_factory.mktemp("audits") / "home")
    settled = world.task_id
    world.other_task_id = post_task(world)  # type: ignore[attr-defined]
    world.task_id = settled
    return world


class Counted:
    """Wraps a function of the routes' module: counts its calls and may hold them until
    `release` (each call waits for it, at most GENEROUS_S)."""

    def __init__(self, real: Callable[..., Any], *, hold: bool = False) -> None:
        self.real = real
        self.calls = 0
        self.started = threading.Event()
        self._released = threading.Event()
        if not hold:
            self._released.set()
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.calls += 1
        self.started.set()
        assert self._released.wait(GENEROUS_S), "the test never released the computation"
        return self.real(*args, **kwargs)

    def release(self) -> None:
        self._released.set()


def app_for(world: World, **config: Any) -> Any:
    return create_app(
        world.settings,
        config=ApiConfig(**config),
        context=world.context,
        anchors=world.anchors,
        escrow_chain=world.escrow_chain,
    )


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Counted, Counted]]:
    """(the audits computed, the audit keys asked for) by `GET /tasks/{id}/audit`; the
    audits are held until the test releases them."""
    audits = Counted(market_routes.audit_task, hold=True)
    keys = Counted(market_routes.audit_key)
    monkeypatch.setattr(market_routes, "audit_task", audits)
    monkeypatch.setattr(market_routes, "audit_key", keys)
    yield audits, keys
    audits.release()


def test_fifty_concurrent_audits_of_one_task_are_one_computation(
    world: World, counted: tuple[Counted, Counted]
) -> None:
    """The audit is held until all 50 requests have asked for its key: 49 of them wait for
    the one computation under way, and all get the same report."""
    audits, keys = counted
    app = app_for(world)
    url_of = f"/tasks/{world.task_id}/audit"
    with serve(app) as url, httpx.Client(base_url=url, timeout=GENEROUS_S) as client:
        with ThreadPoolExecutor(50) as pool:
            answers = [pool.submit(client.get, url_of) for _ in range(50)]
            deadline = time.monotonic() + GENEROUS_S
            while keys.calls < 50 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert keys.calls == 50
            audits.release()
            replies = [answer.result() for answer in answers]
        assert {reply.status_code for reply in replies} == {200}
        assert len({reply.text for reply in replies}) == 1
        assert replies[0].json()["verdict"] == "PASS"
        assert audits.calls == 1
        # later askers are served the stored report, the explorer's page too
        assert client.get(url_of).json() == replies[0].json()
        page = client.get(f"/explorer/tasks/{world.task_id}")
        assert page.status_code == 200 and 'id="verdict">PASS<' in page.text
    assert audits.calls == 1
    state: ApiState = app.state.accord
    assert state.audits.computed == 1


def test_a_caller_over_its_limit_gets_429_with_retry_after(
    world: World, counted: tuple[Counted, Counted]
) -> None:
    audits, _ = counted
    app = app_for(world, audits_per_caller=1)
    with serve(app) as url, httpx.Client(base_url=url, timeout=GENEROUS_S) as client:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(client.get, f"/tasks/{world.task_id}/audit")
            assert audits.started.wait(GENEROUS_S)
            refused = client.get(f"/tasks/{world.other_task_id}/audit")  # type: ignore[attr-defined]
            page = client.get(f"/explorer/tasks/{world.other_task_id}")  # type: ignore[attr-defined]
            audits.release()
            assert first.result().status_code == 200
        for reply in (refused, page):
            assert reply.status_code == 429, reply.text
            assert reply.headers["content-type"].startswith("application/problem+json")
            assert int(reply.headers["Retry-After"]) >= 1
            assert "already runs 1 audits at once" in reply.json()["detail"]
        again = client.get(f"/tasks/{world.other_task_id}/audit")  # type: ignore[attr-defined]
        assert again.status_code == 200 and again.json()["verdict"] == "PENDING"
    assert audits.calls == 2


def test_the_service_limits_audits_in_all() -> None:
    """Two callers, one computation at a time in all: the second caller is refused while
    the first one's runs, and served after it."""
    cache = AuditCache(per_caller=2, total=1)
    running = threading.Event()
    release = threading.Event()

    def slow() -> AuditReport:
        running.set()
        assert release.wait(GENEROUS_S)
        return AuditReport("task-a")

    async def scenario() -> None:
        first = asyncio.ensure_future(cache.report("address a", None, slow))
        while not running.is_set():
            await asyncio.sleep(0.01)
        with pytest.raises(ProblemError) as refused:
            await cache.report("address b", ("task-b", 1, (0, None), (0, None)), slow)
        assert refused.value.status == 429 and "the service already runs 1" in refused.value.detail
        release.set()
        assert (await first).task_id == "task-a"
        later = await cache.report("address b", ("task-b", 1, (0, None), (0, None)), slow)
        assert later.task_id == "task-a"

    asyncio.run(scenario())
    assert cache.computed == 2
    with pytest.raises(ValueError, match="at least 1"):
        AuditCache(per_caller=0, total=1)


def test_a_report_that_could_not_be_re_run_here_is_not_stored() -> None:
    """An `unchecked` step depends on this machine's box, not on the log: asked again, the
    audit runs again."""
    from accord.ledger.verify import StepResult

    cache = AuditCache(per_caller=1, total=1)
    key = ("task-a", 3, (1, b"h"), (1, b"h"))
    unchecked = AuditReport("task-a", [StepResult(6, "settlement", "unchecked", "no box")])
    for _ in range(2):
        asyncio.run(cache.report("address a", key, lambda: unchecked))
    assert cache.computed == 2
    passed = AuditReport("task-a", [StepResult(1, "signatures", "pass", "")])
    key2 = ("task-a", 4, (1, b"h"), (1, b"h"))
    for _ in range(2):
        asyncio.run(cache.report("address a", key2, lambda: passed))
    assert cache.computed == 3


def test_a_quiet_service_anchors_its_tail_on_time(tmp_path: Path) -> None:
    """`accord serve`'s anchor timer: nothing is appended after the requester's remark, yet
    once ACCORD_ANCHOR_INTERVAL has passed on the market's clock the service anchors it; until
    then the audit of the task, in progress, says PENDING at step 2, never FAIL."""
    world = build_world(tmp_path / "home", until="delivered")
    anchorer = world.ledger.anchorer
    assert anchorer is not None
    anchorer.anchor_latest()
    anchorer.every_seconds = 60
    world.ledger.append(
        world.requester, "task.comment", subject=world.task_id, body={"text": "any news?"}
    )
    size = world.ledger.store.size()
    app = app_for(world, anchor_tick=0.05)
    with serve(app, lifespan="on") as url, httpx.Client(base_url=url, timeout=GENEROUS_S) as client:
        timer = app.state.anchor_timer
        assert isinstance(timer, AnchorTimer)
        audit = client.get(f"/tasks/{world.task_id}/audit").json()
        assert audit["verdict"] == "PENDING" and audit["failed_step"] is None
        assert audit["steps"][1]["status"] == "pending"
        rounds = timer.rounds
        while timer.rounds < rounds + 5:
            time.sleep(0.05)
        assert world.anchors.latest_size(world.ledger.log_id) < size  # not due yet
        world.clock.advance(60)
        while world.anchors.latest_size(world.ledger.log_id) < size:
            assert timer.rounds < rounds + 4000, "the service never anchored its tail"
            time.sleep(0.05)
        audit = client.get(f"/tasks/{world.task_id}/audit").json()
        assert audit["steps"][1]["status"] == "pass", audit
        assert audit["verdict"] == "PENDING"  # delivered, not settled yet: steps 6 and 7 wait


def test_accord_serve_runs_the_anchor_timer_and_reads_the_audit_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`accord serve` looks a quarter of ACCORD_ANCHOR_INTERVAL apart (the app it hands to
    uvicorn, which is not started here), and takes the audit limits from the environment."""
    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(app))
    env = {
        "ACCORD_HOME": str(tmp_path / "home"),
        "ACCORD_ANCHOR_INTERVAL": "8",
        "ACCORD_AUDITS_PER_CALLER": "3",
        "ACCORD_AUDITS_TOTAL": "9",
    }
    result = CliRunner().invoke(cli, ["serve"], env=env)
    assert result.exit_code == 0, result.output
    config: ApiConfig = served[0].state.accord.config
    assert config.anchor_tick == 2 and config.lifecycle_interval == 5
    assert (config.audits_per_caller, config.audits_total) == (3, 9)
    state: ApiState = served[0].state.accord
    assert (state.audits.per_caller, state.audits.total) == (3, 9)
    for bad in ("0", "two"):
        with pytest.raises(ValueError, match="ACCORD_AUDITS_TOTAL"):
            ApiConfig.from_env({"ACCORD_AUDITS_TOTAL": bad})


def test_a_caller_that_goes_away_does_not_lose_the_computation() -> None:
    """The request that started an audit is cancelled (its client went away) while the
    audit runs: the audit still ends, is kept, and gives its place back."""
    cache = AuditCache(per_caller=1, total=1)
    running = threading.Event()
    release = threading.Event()
    key = ("task-a", 5, (2, b"h"), (2, b"h"))

    def slow() -> AuditReport:
        running.set()
        assert release.wait(GENEROUS_S)
        return AuditReport("task-a")

    async def scenario() -> None:
        first = asyncio.ensure_future(cache.report("address a", key, slow))
        waiter = asyncio.ensure_future(cache.report("address b", key, slow))
        while not running.is_set():
            await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        release.set()
        assert (await waiter).task_id == "task-a"
        assert (await cache.report("address a", key, slow)).task_id == "task-a"
        other = await cache.report("address a", ("task-b", 5, (2, b"h"), (2, b"h")), slow)
        assert other.task_id == "task-a"  # its place was given back

    asyncio.run(scenario())
    assert cache.computed == 2
