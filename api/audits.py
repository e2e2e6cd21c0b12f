"""Audits served cheaply: `GET /tasks/{id}/audit` and the explorer's task page.

An audit (`accord.audit.checks.audit_task`) reads the whole log and the chain; it is a pure
function of the log at a size and the chain at a head. So `AuditCache` computes it once per
`AuditKey` (the task, the log's size, the anchor chain's and the escrow chain's head block,
number and hash) and serves the stored report to everyone who asks for the same key; those
who ask while it is being computed wait for that one computation, on the event loop, without
holding a worker thread. A computation runs to its end and is kept whatever becomes of the
request that started it (a client that goes away cancels only its own wait). The cache lives
in this process (each `accord serve` process computes its own): a bounded LRU of `entries`
reports.

A report is not stored when part of it could not be re-run here (an `unchecked` step: the box
for strangers' code could not be made), since that depends on this machine, not on the log;
nor a FAIL, which a chain read that timed out under load may have caused and which the next
request computes anew; nor when the chain's head could not be read (no key).

Computations are limited: at most `per_caller` at once for one caller (its client address)
and `total` at once in this process; above either, 429 with Retry-After (problem+json). A
cached report and a wait for a running computation cost nothing and are not limited.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

from starlette.concurrency import run_in_threadpool

from accord.api.problems import ProblemError
from accord.audit.checks import AuditReport
from accord.ledger.chain import TxChain
from accord.ledger.errors import ChainError
from accord.ledger.store import LogStore

AuditKey = tuple[str, int, tuple[int, bytes | None], tuple[int, bytes | None]]
"""(task id, log size, anchor chain head, escrow chain head): what an audit is a function of."""

DEFAULT_ENTRIES = 128


def audit_key(store: LogStore, task_id: str, anchors: TxChain, escrow: TxChain) -> AuditKey | None:
    """The key of `task_id`'s audit now; None when a chain's head cannot be read (the audit
    then says what the chain answered, uncached). Raises StoreError when the log cannot be
    read."""
    try:
        return (task_id, store.size(), _head(anchors), _head(escrow))
    except ChainError:
        return None


def _head(chain: TxChain) -> tuple[int, bytes | None]:
    number = chain.block_number()
    return number, chain.block_hash(number)


class AuditCache:
    """Audit reports by `AuditKey`, each computed once, computations limited per caller and
    in total (see the module docstring). `computed` counts the computations started."""

    def __init__(self, per_caller: int, total: int, entries: int = DEFAULT_ENTRIES) -> None:
        """Raises ValueError when a bound is below 1."""
        if per_caller < 1 or total < 1 or entries < 1:
            raise ValueError("the audit limits and the cache's size must be at least 1")
        self.per_caller = per_caller
        self.total = total
        self.entries = entries
        self.computed = 0
        self._lock = threading.Lock()
        self._done: OrderedDict[AuditKey, AuditReport] = OrderedDict()
        self._running: dict[AuditKey, Future[AuditReport]] = {}
        self._by_caller: dict[str, int] = {}
        self._in_flight = 0
        self._last_seconds = 1.0
        self._tasks: set[asyncio.Future[None]] = set()

    async def report(
        self, caller: str, key: AuditKey | None, compute: Callable[[], AuditReport]
    ) -> AuditReport:
        """The report for `key`: stored, awaited from the computation under way, or computed
        now by `compute` in a worker thread. Raises ProblemError 429 (with Retry-After) when
        a computation is needed and `caller`, or the process, already runs as many as it may;
        what `compute` raises, to it and to everyone waiting for it."""
        stored: AuditReport | None = None
        running: Future[AuditReport] | None = None
        with self._lock:  # never held across an await
            if key is not None:
                stored = self._done.get(key)
                if stored is not None:
                    self._done.move_to_end(key)
                else:
                    running = self._running.get(key)
            if stored is None and running is None:
                running = self._admit(caller, key)
                admitted = True
            else:
                admitted = False
        if stored is not None:
            return stored
        assert running is not None
        if admitted:
            # A task of its own: the computation ends, is stored and gives its place back
            # whatever becomes of this request (a client that goes away cancels only its wait).
            task = asyncio.ensure_future(self._compute(caller, key, running, compute))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(asyncio.wrap_future(running))

    async def _compute(
        self,
        caller: str,
        key: AuditKey | None,
        future: Future[AuditReport],
        compute: Callable[[], AuditReport],
    ) -> None:
        """Run `compute` in a worker thread; its report or error goes to `future`."""
        started = time.monotonic()
        try:
            report = await run_in_threadpool(compute)
        except asyncio.CancelledError:  # the service stops
            self._release(caller, key, time.monotonic() - started, None)
            future.cancel()
            raise
        except Exception as exc:  # to every waiter, never lost in this task
            self._release(caller, key, time.monotonic() - started, None)
            future.set_exception(exc)
            return
        self._release(caller, key, time.monotonic() - started, report)
        future.set_result(report)

    def _admit(self, caller: str, key: AuditKey | None) -> Future[AuditReport]:
        """Take a computation's place for `caller` (the lock held). Raises ProblemError 429."""
        if self._by_caller.get(caller, 0) >= self.per_caller:
            raise self._busy(f"{caller} already runs {self.per_caller} audits at once")
        if self._in_flight >= self.total:
            raise self._busy(f"the service already runs {self.total} audits at once")
        self._by_caller[caller] = self._by_caller.get(caller, 0) + 1
        self._in_flight += 1
        self.computed += 1
        future: Future[AuditReport] = Future()
        if key is not None:
            self._running[key] = future
        return future

    def _release(
        self, caller: str, key: AuditKey | None, seconds: float, report: AuditReport | None
    ) -> None:
        """Give the computation's place back; store `report` under `key` first (so that no
        one asking meanwhile finds neither it nor its computation)."""
        with self._lock:
            if (
                key is not None
                and report is not None
                and all(step.status not in ("unchecked", "fail") for step in report.steps)
            ):
                self._done[key] = report
                while len(self._done) > self.entries:
                    self._done.popitem(last=False)
            left = self._by_caller.get(caller, 1) - 1
            if left > 0:
                self._by_caller[caller] = left
            else:
                self._by_caller.pop(caller, None)
            self._in_flight -= 1
            if key is not None:
                self._running.pop(key, None)
            self._last_seconds = seconds

    def _busy(self, why: str) -> ProblemError:
        seconds = max(1, math.ceil(self._last_seconds))
        return ProblemError(
            429,
            f"{why}: try again in {seconds} s (an audit already computed is served at once)",
            headers={"Retry-After": str(seconds)},
        )
