"""What the service does by itself when a task's window closes, so that no task waits for
someone at the CLI (`accord serve` runs it every few seconds; `LifecycleWorker`):

    revealing, its reveal window over   award by the auction rule (and tell a winner that
                                        keeps its own key, `accord.market.notices`), or expire the
                                        task and refund its deposit when no valid bid was
                                        revealed
    awarded or running, its delivery    expire it: its winner forfeits (its track record
    deadline over                       counts it) and the whole deposit goes back
    awarded or running, its leader      expire it early, the same way (`Market.expire_silent`):
    silent for `LEADER_SILENCE`         nothing about it logged nor signed by its winner
    expired, its refund not made        refund (`Market.recover`: a crash between the two)
    posted, its deposit on chain        log `escrow.opened` (`Market.recover`); an escrow under
                                        its key that is not its deposit (another account, amount
                                        or deadline) waits, saying why
    posted, its bidding window over     close it (`Market.close_unfunded`: `task.closed`, with
                                        the reason), unless its deposit came after all: it
                                        leaves the rounds, which no longer read the chain for it
    delivered, its review window over   settle: checks, Shapley split, paid on chain (at
    (or every review accepted, or none  once when nothing is left to review:
    in its spec)                        `accord.market.early`); one
                                        that waits (a dispute whose evaluator is away, a
                                        judge that does not answer) is tried again later

Each is safe from several service processes at once: a lifecycle event is logged once per task
(the store refuses a second: `TransitionError` or `AlreadyLoggedError` is a race another
process won, not a failure), the escrow pays out once, and a settler that loses the race takes
what the winner logged (`accord.market.settlement`). What the chain refuses is tried again on the
next round. `due` is the pure rule; `run_due` does one round.

Every transition of a task, and the shell that makes it (the I/O around the pure rule). The
one rule that moves a task between states is `accord.market.tasks.step` (the states are
`accord.market.states`); a shell checks who may act, logs the signed event, and moves money:

    1. post      `Market.post` (the operator signs) / `Market.post_signed` (the requester's
                 own `task.posted`), market/service.py; its deposit: `Market.escrow_task`,
                 or the requester's wallet and then `Market.recover` (`escrow.opened`)
    2. commit    `Market.commit`, market/service.py; the bid's own checks in
                 `accord.market.sealed` (`commit_bid` makes one)
    3. reveal    `Market.reveal`, market/service.py; checks in `accord.market.sealed`
    4. award     `Market.award`, market/service.py (the rule: `accord.market.auction`), run
                 here when the reveal window closes; the winner told by
                 `accord.market.notices`
    5. start     `Market.start` for a winner the service runs (`run_awarded_task`,
                 coordinator/service.py); the winner's own `task.started` for one that keeps
                 its key (`admit_work_entry`, coordinator/contract_work.py)
    6. deliver   `Market.deliver`, through the same two homes as start
    7. review    `Market.review` / `Market.review_signed`, market/service.py (what a rejection
                 must hold: `rejection_terms`, and `accord.market.payouts` for the fee); a
                 rejection's dispute: `accord.market.disputes`, `accord.market.panel`
    8. settle    `settle_task`, market/settlement.py (checks, Shapley, the pay on chain), run
                 here when the review window closes or at once (`accord.market.early`)
    9. expire    `Market.expire_undelivered` and `Market.expire_silent`, market/service.py,
                 run here; the refund `Market.recover`; before any bid, `Market.cancel`
                 (its requester) and `Market.close_unfunded` (here)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from accord.ledger.errors import AccordError, AlreadyLoggedError
from accord.ledger.service import Periodic
from accord.market.errors import SettlementWaits, TransitionError
from accord.market.notices import tell_winner
from accord.market.tasks import Task, clock_state
from accord.market.wiring import MarketContext

Action = Literal["award", "recover", "expire", "silent", "settle", "close"]
WATCHED_STATES = ("revealing", "expired", "posted", "awarded", "running", "delivered")
"""The states `due` may act on: the worker lists only these (one indexed query each)."""
LEADER_SILENCE = timedelta(minutes=15)
"""How long a task's leader may be silent (nothing about the task logged, nothing signed by
the winner) before the task ends early with a refund: three times the time a leader waits to
declare a member absent (`accord.coordinator.conversation.NO_SHOW_AFTER`), so a leader waiting
out a member that went away is never taken for gone."""
WAITING_RETRY = timedelta(minutes=1)
"""How long a settlement that waits is left before it is tried again."""

log = logging.getLogger("accord.lifecycle")


@dataclass(frozen=True)
class Due:
    task_id: str
    action: Action


@dataclass(frozen=True)
class Done:
    """What one action came to: `done` (this process did it), `elsewhere` (another process
    had), `waits` or `failed`, with the reason."""

    due: Due
    outcome: Literal["done", "elsewhere", "waits", "failed"]
    detail: str = ""


def due(
    tasks: Iterable[Task],
    now: datetime,
    last_active: Mapping[str, datetime] | None = None,
    accepted: frozenset[str] = frozenset(),
) -> list[Due]:
    """Pure: what is due for `tasks` at `now` (see the module's table), in the order given;
    `last_active` gives, by task id, when an awarded or running task's leader was last heard
    from (`Market.last_activity`; a task it does not name is never taken as silent); the
    delivered tasks in `accepted` settle before their review window ends
    (`accord.market.early`)."""
    found = []
    last_active = last_active or {}
    for task in tasks:
        state = clock_state(task, now)
        if state == "revealing" and now >= task.reveal_ends:
            found.append(Due(task.task_id, "award"))
        elif state == "posted" and now >= task.bidding_ends:
            found.append(Due(task.task_id, "close"))
        elif state in ("expired", "posted"):
            found.append(Due(task.task_id, "recover"))
        elif state in ("awarded", "running") and now >= task.delivery_deadline:
            found.append(Due(task.task_id, "expire"))
        elif (
            state in ("awarded", "running")
            and task.task_id in last_active
            and now - last_active[task.task_id] >= LEADER_SILENCE
        ):
            found.append(Due(task.task_id, "silent"))
        elif (
            state == "delivered"
            and task.review_ends is not None
            and (now >= task.review_ends or task.task_id in accepted)  # market/early.py
        ):
            found.append(Due(task.task_id, "settle"))
    return found


SETTLE_WORKERS = 4
"""Settlements a lifecycle round runs at once (their checks queue for the box's own pool,
`ACCORD_BOX_WORKERS`)."""


def _settle(context: MarketContext, item: Due, lock: AbstractContextManager[Any] | None) -> Done:
    """One due settlement (`settle_task`), its outcome as a Done; never raises for an
    expected failure."""
    from accord.market.settlement import settle_task

    try:
        outcome = settle_task(context.market, context.onboarding, item.task_id, lock=lock)
    except (TransitionError, AlreadyLoggedError) as exc:
        return Done(item, "elsewhere", str(exc))
    except SettlementWaits as exc:
        return Done(item, "waits", str(exc))
    except AccordError as exc:
        return Done(item, "failed", str(exc))
    return Done(item, "elsewhere" if outcome.already else "done", "settled")


def run_due(
    context: MarketContext,
    *,
    skip: Callable[[Due], bool] = lambda _: False,
    lock: AbstractContextManager[Any] | None = None,
) -> list[Done]:
    """One round: every action due now, but those `skip` names. Never raises for an
    expected failure: each outcome is returned (and logged).

    `lock` (the service's write lock) is held for each action, one at a time, and for a
    settlement only while it logs and pays: its checks, strangers' code, run before
    (`accord.market.settlement.settle_task`), so no writer of the process waits for them.
    Due settlements run side by side (`SETTLE_WORKERS`), beside the other actions: a task
    whose checks take their whole limits holds back no other task (with no `lock` given,
    one of the round's own serialises what they log and pay)."""
    from accord.market.early import settle_early

    lock = threading.RLock() if lock is None else lock
    held = lock
    market = context.market
    now = market.clock()
    tasks = [task for state in WATCHED_STATES for task in market.iter_tasks(state=state)]
    results: list[Done] = []
    recovered: set[str] | None = None
    # Only a leader that keeps its own key leads in a process of its own that may go away;
    # the service runs a hosted winner's team itself.
    last_active = {
        task.task_id: market.last_activity(task)
        for task in tasks
        if task.state in ("awarded", "running")
        and now < task.delivery_deadline
        and task.winner is not None
        and not _key_held(context, task.winner)
    }
    items = [
        item for item in due(tasks, now, last_active, settle_early(market, tasks)) if not skip(item)
    ]
    settling = [item for item in items if item.action == "settle"]
    # Settlements run side by side: one task's slow checks (strangers' code, in the box's
    # bounded pool) never hold back another task's settlement, nor the other actions.
    pool = ThreadPoolExecutor(SETTLE_WORKERS, "accord-settle") if settling else None
    settled = {item.task_id: pool.submit(_settle, context, item, lock) for item in settling if pool}
    for item in items:
        if item.action == "settle":
            continue
        try:
            if item.action == "award":
                with held:
                    outcome = market.award(item.task_id)
                tell_winner(context, item.task_id)  # a signed notice, sent in the background
                detail = "expired: no valid bid" if outcome.winner is None else "awarded"
                results.append(Done(item, "done", detail))
            elif item.action == "recover":
                if recovered is None:
                    with held:
                        recovered = set(market.recover())
                if item.task_id in recovered:
                    results.append(Done(item, "done", "brought level with the chain"))
                elif item.task_id in market.unmatched_deposits:
                    results.append(Done(item, "waits", market.unmatched_deposits[item.task_id]))
            elif item.action == "close":
                with held:
                    closed = market.close_unfunded(item.task_id)
                detail = "not funded by the end of bidding: closed"
                if closed.state != "closed":
                    detail = "its deposit came after all: escrow opened"
                results.append(Done(item, "done", detail))
            elif item.action == "expire":
                with held:
                    market.expire_undelivered(item.task_id)
                results.append(Done(item, "done", "not delivered by the deadline: refunded"))
            elif item.action == "silent":
                with held:
                    market.expire_silent(item.task_id, LEADER_SILENCE)
                results.append(Done(item, "done", "its leader went away: refunded early"))
        except (TransitionError, AlreadyLoggedError) as exc:
            results.append(Done(item, "elsewhere", str(exc)))
        except SettlementWaits as exc:
            results.append(Done(item, "waits", str(exc)))
        except AccordError as exc:
            results.append(Done(item, "failed", str(exc)))
    if pool is not None:
        results += [settled[item.task_id].result() for item in settling]
        pool.shutdown()
    for result in results:
        level = logging.WARNING if result.outcome == "failed" else logging.INFO
        log.log(
            level,
            "%s %s: %s %s",
            result.due.action,
            result.due.task_id,
            result.outcome,
            result.detail,
        )
    return results


def _key_held(context: MarketContext, did: str) -> bool:
    """Whether the service holds `did`'s key (its team is run here, `POST /tasks/{id}/run`)."""
    registry = context.onboarding.registry
    record = registry.records([did]).get(did)
    return record is not None and registry.key_path(record.name).exists()


class LifecycleWorker(Periodic):
    """Runs `run_due` every `interval` seconds in a daemon thread until `stop`, each action
    under `lock` (the service's write lock: one writer at a time in this process), a
    settlement's checks outside it (see `run_due`). An action that waits or failed (a chain
    away, a dispute's panel still voting) is left for `WAITING_RETRY` (on the market's clock)
    before it is tried again."""

    def __init__(
        self,
        context: Callable[[], MarketContext],
        interval: float,
        lock: threading.RLock,
    ) -> None:
        if interval <= 0:
            raise ValueError("the lifecycle interval must be positive")
        super().__init__("accord-lifecycle", interval)
        self._context = context
        self.interval = interval
        self._lock = lock
        self._waiting: dict[str, datetime] = {}

    def run_once(self) -> list[Done]:
        """One round now (what the thread does every `interval`)."""
        context = self._context()
        now = context.market.clock()
        results = run_due(
            context, skip=lambda item: self._waiting.get(item.task_id, now) > now, lock=self._lock
        )
        for result in results:
            if result.outcome in ("waits", "failed"):
                self._waiting[result.due.task_id] = now + WAITING_RETRY
            else:
                self._waiting.pop(result.due.task_id, None)
        self.rounds += 1
        return results
