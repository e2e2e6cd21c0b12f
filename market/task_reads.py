"""Reading one task from the log, without the market service: what `accord task show` and
`Market.task` both run. It imports no chain client, no onboarding and no service, so a read
command starts in a fraction of the time a write command does (scripts/bench/bench_cli.py).

A task is its lifecycle events replayed (`accord.market.tasks.replay`); its requester's
record is read from the task and reputation views, brought level with the log first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accord.ledger.events import Entry, Event, parse_time
from accord.ledger.views import reading
from accord.market.errors import TaskError
from accord.market.tasks import BID_COMMITTED, BID_REVEALED, TASK_KINDS, Task, TaskEvent, replay

if TYPE_CHECKING:
    from accord.ledger.log import StoredEntry
    from accord.ledger.store import LogStore
    from accord.market.reputation import RequesterRecord

MAX_TASK_EVENTS = 100_000
"""The most events of one kind read for a task at once."""
LIFECYCLE_KINDS = tuple(kind for kind in TASK_KINDS if kind not in (BID_COMMITTED, BID_REVEALED))
"""The events that move a task (bids do not)."""


def as_task_event(index: int, event: Event) -> TaskEvent:
    """A task's event as `tasks.replay` folds it."""
    return TaskEvent(index, event.kind, event.actor, parse_time(event.at), event.body)


def task_event(stored: StoredEntry) -> TaskEvent:
    """The stored entry at its index, as `tasks.replay` folds it."""
    return as_task_event(stored.index, Entry.from_bytes(stored.data).event)


def task_entries(store: LogStore, task_id: str) -> list[StoredEntry]:
    """The task's lifecycle entries, in log order (one indexed query). Raises StoreError."""
    return store.find(subject=task_id, kinds=LIFECYCLE_KINDS, limit=MAX_TASK_EVENTS)


def read_task(store: LogStore, task_id: str) -> Task:
    """The task replayed from its events. Raises TaskError when there is none (and what
    `replay` raises for events that do not replay), StoreError."""
    events = [task_event(stored) for stored in task_entries(store, task_id)]
    if not events:
        raise TaskError(f"no task {task_id!r} (see `accord task list`)")
    return replay(event for event in events if event.kind in TASK_KINDS)


def read_requester_record(store: LogStore, did: str) -> RequesterRecord:
    """What bidders see of a requester (`accord.market.reputation.RequesterRecord`), from the
    task and reputation views (attached here when the market has not: the same views, folded
    the same way). Raises StoreError."""
    from accord.market.views import REPUTATION_VIEW, ReputationView, TaskView, requester_record_of
    from accord.market.views import VIEW_NAME as TASK_VIEW

    store.attach(TaskView())
    store.attach(ReputationView())
    with reading(store, REPUTATION_VIEW, TASK_VIEW) as connection:
        return requester_record_of(connection, did)
