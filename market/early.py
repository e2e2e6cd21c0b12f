"""Settling before the review window ends: once nothing is left for the requester to say.

A delivered task waits out its review window only for its requester's reviews. When its spec
has no review check, or its requester has accepted every review check (its own signed
`review.given`, the first for each check), the window has nothing left to decide: the lifecycle
settles it at once (`accord.market.lifecycle.due`). A rejection opens a dispute, which waits
for the window's end as before; nobody but the requester can move a settlement earlier. An
inconclusive python check is the requester's to contest in the window, so a task the operator
found one in (`checks.previewed`) waits for the window's end too.

The settlement and the audit read the reviews the same way either side of the window's end
(`accord.market.check_io.LogReviews`: a review given before the settlement was computed
counts), so an early settlement is re-checked like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from accord.market.service import Market, task_event
from accord.market.tasks import REVIEW_GIVEN, Task, TaskEvent
from accord.market.work import PythonCheck, ReviewCheck

MAX_REVIEWS = 1000
"""At most this many `review.given` entries of one task are read (a spec has at most that many
checks, and each is reviewed once)."""


def accepted_in_full(task: Task, reviews: Sequence[TaskEvent]) -> bool:
    """Pure: whether `task`'s requester has nothing left to review: its spec has no review
    check, or the requester's first review of each review check accepts it."""
    first: dict[str, object] = {}
    for event in sorted(reviews, key=lambda e: e.index):
        if event.kind == REVIEW_GIVEN and event.actor == task.requester:
            first.setdefault(str(event.body.get("check")), event.body.get("verdict"))
    return all(
        first.get(check.check_id) == "accept"
        for check in task.spec.requester_checks
        if isinstance(check, ReviewCheck)
    )


def settle_early(market: Market, tasks: Iterable[Task]) -> frozenset[str]:
    """The delivered tasks among `tasks` that are looked at before their review window ends
    (read from the log): those `accepted_in_full` lets settle, unless the operator's
    `checks.previewed` names an inconclusive python check of theirs (its requester may
    contest it until the window ends, so the task waits for it); and, once, those with a
    python check and reviews still to give, whose python checks are previewed so that the
    requester learns in its window which are inconclusive."""
    ready = set()
    now = market.clock()
    for task in tasks:
        if task.state != "delivered":
            continue
        previewed = market.previewed(task.task_id)
        if previewed:
            continue
        reviews = _reviews(market, task.task_id)
        if accepted_in_full(task, reviews) or (
            previewed is None
            and task.review_ends is not None
            and now < task.review_ends
            and any(isinstance(c, PythonCheck) for c in task.spec.requester_checks)
        ):
            ready.add(task.task_id)
    return frozenset(ready)


def _reviews(market: Market, task_id: str) -> list[TaskEvent]:
    stored = market.ledger.store.find(subject=task_id, kind=REVIEW_GIVEN, limit=MAX_REVIEWS)
    return [task_event(entry) for entry in stored]
