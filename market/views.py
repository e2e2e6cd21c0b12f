"""The task view: one row per task, folded from the log by the same state machine as
`accord.market.tasks.replay`, and indexed for the lists users ask for (see `accord.ledger.views`).

    view_tasks              one row per task (keyed by the subject of its events): its
                            stored state, requester, posted index, bidding end (epoch µs),
                            winner, price (decimal text: wei exceed 64 bits), the posted spec
                            and, when its events do not replay, the `problem`
    view_task_capabilities  (capability, posted index) -> task, with the task's state and
                            bidding end copied, indexed by (capability, state, posted index)

So "tasks taking bids for capability X, 50 at a time after a cursor" is one indexed range
query. The clock is applied at query time exactly as `clock_state` does: a stored `bidding`
task is `bidding` while its bidding window is open and `revealing` after.

A task whose events do not replay (a log written by hand, or before the log refused repeats)
keeps the state it reached and its `problem`; the lists leave it out, as `Market.task` refuses
it. The audit never reads this view: it replays the signed entries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from functools import cache, lru_cache
from types import SimpleNamespace
from typing import Any

from sqlalchemy import (
    BigInteger,
    Index,
    Integer,
    String,
    Table,
    and_,
    bindparam,
    delete,
    func,
    insert,
    select,
    tuple_,
    update,
)
from sqlmodel import Column, Field, SQLModel

from accord.ledger.database import driver_mark, upsert_sql
from accord.ledger.errors import MalformedError, QueryError
from accord.ledger.events import parse_time
from accord.ledger.views import (
    ViewEntry,
    check_limit,
    encode_cursor,
    from_micros,
    int_key,
    micros,
)
from accord.market import sealed
from accord.market.errors import MarketError
from accord.market.money import Wei
from accord.market.reputation import (
    Payment,
    RequesterRecord,
    SettledWork,
    TrackRecords,
    Unit,
    settled_work,
    settlement_payouts,
    work_by_agent,
)
from accord.market.states import TASK_STATES
from accord.market.tasks import (
    BID_COMMITTED,
    BID_REVEALED,
    CAPABILITY_PATTERN,
    REVIEW_GIVEN,
    SETTLEMENT_COMPUTED,
    TASK_AWARDED,
    TASK_EXPIRED,
    TASK_KINDS,
    TASK_POSTED,
    TASK_SETTLED,
    Task,
    TaskEvent,
    TaskSpec,
    step,
)

VIEW_NAME = "tasks"
REPUTATION_VIEW = "reputation"
BID_VIEW = "bids"
LIFECYCLE_KINDS = frozenset(TASK_KINDS) - {BID_COMMITTED, BID_REVEALED}
"""The events that move a task (bids and reviews do not; `Market.task` replays these)."""
_IN_CHUNK = 500


class TaskRow(SQLModel, table=True):
    __tablename__ = "view_tasks"
    __table_args__ = (
        Index("ix_view_tasks_state_posted", "state", "posted_index"),
        Index("ix_view_tasks_requester_posted", "requester", "posted_index"),
        Index("ix_view_tasks_changed", "changed_us", "task_id"),
    )

    subject: str = Field(primary_key=True)
    task_id: str
    posted_index: int = Field(sa_column=Column(BigInteger, nullable=False, unique=True))
    requester: str
    state: str
    posted_at: str
    bidding_ends_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    escrowed: bool
    winner: str | None = None
    price: str | None = None
    delivered_index: int | None = Field(default=None, sa_column=Column(BigInteger))
    delivered_at: str | None = None
    changed_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    """When its last lifecycle entry was logged (epoch µs): A2A lists tasks by it."""
    duplicates: str
    spec: str
    problem: str | None = None


class TaskCapabilityRow(SQLModel, table=True):
    __tablename__ = "view_task_capabilities"
    __table_args__ = (
        Index("ix_view_task_capabilities_lookup", "capability", "state", "posted_index"),
    )

    capability: str = Field(primary_key=True)
    posted_index: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    subject: str = Field(index=True)
    state: str
    bidding_ends_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    listed: bool


TASKS: Table = TaskRow.__table__  # type: ignore[attr-defined]
CAPABILITIES: Table = TaskCapabilityRow.__table__  # type: ignore[attr-defined]


@dataclass
class _Folded:
    """A task as far as the view has folded it."""

    subject: str
    posted_index: int
    task: Task
    spec: dict[str, Any] = field(hash=False)
    changed_us: int = 0
    problem: str | None = None


@dataclass(frozen=True)
class TaskPage:
    """One page of a task list, in log order of posting; `next_cursor` resumes after it
    (None on the last page)."""

    tasks: tuple[Task, ...]
    next_cursor: str | None


class TaskView:
    """The task projection (`accord.ledger.views.Projection`)."""

    name = VIEW_NAME
    tables: Sequence[Table] = (TASKS, CAPABILITIES)

    def apply(self, connection: Any, entries: Sequence[ViewEntry]) -> None:
        moving = [entry for entry in entries if entry.event.kind in LIFECYCLE_KINDS]
        if not moving:
            return
        subjects = sorted({entry.event.subject for entry in moving})
        folded = {row.subject: row for row in _load(connection, subjects)}
        touched: set[str] = set()
        for entry in moving:
            subject = entry.event.subject
            current = folded.get(subject)
            if current is not None and current.problem is not None:
                continue  # the replay stops at its first failure, so does the view
            if fold(folded, entry):
                touched.add(subject)
        if touched:
            _store(connection, [folded[subject] for subject in sorted(touched)])

    def reset(self, connection: Any) -> None:
        connection.execute(delete(CAPABILITIES))
        connection.execute(delete(TASKS))


def fold(folded: dict[str, _Folded], entry: ViewEntry) -> bool:
    """Fold one lifecycle entry into `folded` (by subject) as `replay` would; an entry that
    does not replay is recorded as the task's problem. Returns whether a task changed. Pure."""
    event = entry.event
    current = folded.get(event.subject)
    try:
        moved = TaskEvent(entry.index, event.kind, event.actor, parse_time(event.at), event.body)
        if current is None:
            if event.kind != TASK_POSTED:
                return False  # not a task: `Market.task` finds no posting either
            task = step(None, moved)
            folded[event.subject] = _Folded(
                event.subject, entry.index, task, dict(event.body["spec"]), micros(moved.at)
            )
            return True
        current.task = step(current.task, moved)
        current.changed_us = micros(moved.at)
    except (MarketError, MalformedError, KeyError, TypeError, ValueError) as exc:
        if current is None:
            return False  # a posting that is no task spec: no task
        current.problem = f"entry {entry.index} ({event.kind}) does not replay: {exc}"
    return True


def _load(connection: Any, subjects: Sequence[str]) -> list[_Folded]:
    loaded = []
    for start in range(0, len(subjects), _IN_CHUNK):
        chunk = subjects[start : start + _IN_CHUNK]
        rows = connection.execute(select(TASKS).where(TASKS.c.subject.in_(chunk))).all()
        for row in rows:
            spec = json.loads(row.spec)
            task = task_of(row, spec)
            index, changed = int(row.posted_index), int(row.changed_us)
            loaded.append(_Folded(row.subject, index, task, spec, changed, row.problem))
    return loaded


def _store(connection: Any, tasks: Sequence[_Folded]) -> None:
    subjects = [t.subject for t in tasks]
    for start in range(0, len(subjects), _IN_CHUNK):
        chunk = subjects[start : start + _IN_CHUNK]
        connection.execute(delete(CAPABILITIES).where(CAPABILITIES.c.subject.in_(chunk)))
        connection.execute(delete(TASKS).where(TASKS.c.subject.in_(chunk)))
    rows, capability_rows = [], []
    for folded in tasks:
        task = folded.task
        ends = micros(task.bidding_ends)
        rows.append(
            {
                "subject": folded.subject,
                "task_id": task.task_id,
                "posted_index": folded.posted_index,
                "requester": task.requester,
                "state": task.state,
                "posted_at": task.posted_at.isoformat(),
                "bidding_ends_us": ends,
                "escrowed": task.escrowed,
                "winner": task.winner,
                "price": None if task.price is None else str(task.price),
                "delivered_index": task.delivered_index,
                "delivered_at": None
                if task.delivered_at is None
                else task.delivered_at.isoformat(),
                "changed_us": folded.changed_us,
                "duplicates": json.dumps(list(task.duplicates)),
                "spec": json.dumps(folded.spec, sort_keys=True, separators=(",", ":")),
                "problem": folded.problem,
            }
        )
        for capability in task.spec.capabilities:
            capability_rows.append(
                {
                    "capability": capability,
                    "posted_index": folded.posted_index,
                    "subject": folded.subject,
                    "state": task.state,
                    "bidding_ends_us": ends,
                    "listed": folded.problem is None,
                }
            )
    connection.execute(insert(TASKS), rows)
    if capability_rows:
        connection.execute(insert(CAPABILITIES), capability_rows)


@lru_cache(maxsize=4096)
def parsed_spec(text: str) -> TaskSpec:
    """The spec of a view row's JSON text, parsed once per text (a posted spec never changes,
    and a TaskSpec is immutable): a list page of open tasks is mostly SQL after the first.
    Raises TaskError when the text is not a task spec."""
    return TaskSpec.from_json(json.loads(text))


def task_of(row: Any, spec: dict[str, Any] | None = None) -> Task:
    """The Task a view row holds (what `replay` gives for its events). Raises TaskError when
    the stored spec is not a task spec."""
    return Task(
        task_id=row.task_id,
        requester=row.requester,
        spec=parsed_spec(row.spec) if spec is None else TaskSpec.from_json(spec),
        posted_at=datetime.fromisoformat(row.posted_at),
        state=row.state,
        escrowed=bool(row.escrowed),
        winner=row.winner,
        price=None if row.price is None else Wei(int(row.price)),
        delivered_index=None if row.delivered_index is None else int(row.delivered_index),
        delivered_at=None if row.delivered_at is None else datetime.fromisoformat(row.delivered_at),
        duplicates=tuple(json.loads(row.duplicates)),
    )


_TASK_COLUMNS = tuple(TASKS.c.keys())


@lru_cache(maxsize=4096)
def listed_task(values: tuple[Any, ...]) -> Task:
    """`task_of` the row of `view_tasks` with these values (in the table's column order),
    built once per distinct row: a Task is immutable, and the lists of open tasks return the
    same rows request after request (a row that changes is another key). Raises TaskError
    when the stored spec is not a task spec."""
    return task_of(SimpleNamespace(**dict(zip(_TASK_COLUMNS, values, strict=True))))


# -- queries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskQuery:
    """A task list query, validated on construction (raises QueryError naming the parameter).

    `state` is a state as users see it (`bidding` and `revealing` by the clock), `capability`
    one the task needs, `requester` its DID; `limit` 1..200 (None: 50); `cursor` the
    `next_cursor` of the previous page.
    """

    state: str | None = None
    capability: str | None = None
    requester: str | None = None
    limit: int | None = None
    cursor: str | None = None
    after: int | None = field(init=False, default=None)
    size: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in TASK_STATES:
            raise QueryError(
                "state", f"{self.state!r} is not a task state (one of {', '.join(TASK_STATES)})"
            )
        if self.capability is not None and not CAPABILITY_PATTERN.fullmatch(self.capability):
            raise QueryError("capability", f"{self.capability[:80]!r} is not a capability name")
        if self.requester is not None and not 0 < len(self.requester) <= 200:
            raise QueryError("requester", "the requester is a DID of at most 200 characters")
        object.__setattr__(self, "size", check_limit(self.limit))
        object.__setattr__(self, "after", int_key(VIEW_NAME, self.cursor))


def list_tasks(connection: Any, query: TaskQuery, now: datetime) -> TaskPage:
    """One page of tasks matching `query` at `now`, from the view: one indexed query, the
    statement built once per shape of query (`_page_statement`).

    Raises TaskError when a stored spec does not parse (a view edited by hand: reindex it).
    """
    window: str | None = None
    state = query.state
    if state in _BY_CLOCK:
        window, state = state, "bidding"
    statement = _page_statement(
        query.capability is not None,
        window,
        state is not None,
        query.requester is not None,
        query.after is not None,
    )
    values = {
        "capability": query.capability,
        "now_us": micros(now),
        "state": state,
        "requester": query.requester,
        "after": query.after,
        "limit": query.size + 1,
    }
    rows = connection.execute(statement, values).all()
    more = len(rows) > query.size
    rows = rows[: query.size]
    cursor = encode_cursor(VIEW_NAME, str(rows[-1].posted_index)) if more else None
    return TaskPage(tuple(listed_task(tuple(row)) for row in rows), cursor)


_BY_CLOCK = ("bidding", "revealing")
"""The states the clock decides: a stored `bidding` task bids until `bidding_ends_us`."""


@cache
def _page_statement(
    by_capability: bool, window: str | None, by_state: bool, by_requester: bool, after: bool
) -> Any:
    """The statement of a task list page of one shape (built once: building and keying a
    statement cost more than running it). Parameters: capability, state, now_us (`window`
    `bidding`: bidding has not ended by then; `revealing`: it has), requester, after (the
    cursor's posted index), limit. By capability, the task rows are joined to the
    capability index's, whose copies of the state, bidding end and posted index are filtered
    and ordered by; otherwise the task rows' own."""
    if by_capability:
        source = CAPABILITIES
        joined = TASKS.join(CAPABILITIES, TASKS.c.subject == CAPABILITIES.c.subject)
        statement = select(TASKS).select_from(joined)
        wanted = [
            CAPABILITIES.c.capability == bindparam("capability", type_=String),
            CAPABILITIES.c.listed,
        ]
    else:
        source = TASKS
        statement = select(TASKS)
        wanted = [TASKS.c.problem.is_(None)]
    if by_state:
        wanted.append(source.c.state == bindparam("state", type_=String))
    now_us = bindparam("now_us", type_=BigInteger)
    if window == "bidding":
        wanted.append(source.c.bidding_ends_us > now_us)
    elif window == "revealing":
        wanted.append(source.c.bidding_ends_us <= now_us)
    if by_requester:
        wanted.append(TASKS.c.requester == bindparam("requester", type_=String))
    if after:
        wanted.append(source.c.posted_index > bindparam("after", type_=BigInteger))
    limit = bindparam("limit", type_=Integer)
    return statement.where(and_(*wanted)).order_by(source.c.posted_index).limit(limit)


# -- bids ------------------------------------------------------------------------------------


class BidRow(SQLModel, table=True):
    """One bidder's sealed bid on one task: what `Market.bids` shows (the bid book's view)."""

    __tablename__ = "view_bids"

    subject: str = Field(primary_key=True)
    bidder: str = Field(primary_key=True)
    first_index: int = Field(sa_column=Column(BigInteger, nullable=False))
    """Where the bidder first committed: the order bids are shown in."""
    committed_index: int = Field(sa_column=Column(BigInteger, nullable=False))
    commitment: str
    revealed: bool = False
    price: str | None = None


BIDS: Table = BidRow.__table__  # type: ignore[attr-defined]


class BidBookView:
    """The bid projection: the admitted commitments and reveals of each task, as
    `accord.market.service.BidBook` folds them (a body that is no bid is skipped)."""

    name = BID_VIEW
    tables: Sequence[Table] = (BIDS,)

    def apply(self, connection: Any, entries: Sequence[ViewEntry]) -> None:
        moves = [bid_move(entry) for entry in entries if entry.event.kind in _BID_KINDS]
        folded_moves = [move for move in moves if move is not None]
        if not folded_moves:
            return
        pairs = {(move[0], move[1]) for move in folded_moves}
        if len(pairs) == len(folded_moves) and all(move[3] is not None for move in folded_moves):
            # Commitments only, one per bidder (a bid commit's append): one upsert, with no
            # read first, does what the fold below does (a row already there keeps where it
            # began and its reveal).
            connection.exec_driver_sql(
                _commitments_upsert(driver_mark(connection)),
                [
                    # in the order of _COMMITMENT_ROW
                    (subject, bidder, index, index, digest, False, None)
                    for subject, bidder, index, digest, _price in folded_moves
                ],
            )
            return
        subjects = sorted({subject for subject, _ in pairs})
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for start in range(0, len(subjects), _IN_CHUNK):
            # by task (the key's prefix: an index range on SQLite too, where a (task, bidder)
            # row-value IN list is a scan of the table), keeping the pairs asked for
            chunk = subjects[start : start + _IN_CHUNK]
            found = connection.execute(select(BIDS).where(BIDS.c.subject.in_(chunk))).all()
            rows.update(
                ((row.subject, row.bidder), dict(row._mapping))
                for row in found
                if (row.subject, row.bidder) in pairs
            )
        stored = set(rows)
        touched: set[tuple[str, str]] = set()
        for subject, bidder, index, digest, price in folded_moves:
            row = rows.get((subject, bidder))
            if digest is not None:  # a commitment: the latest one counts, shown where it began
                first = index if row is None else row["first_index"]
                rows[subject, bidder] = {
                    "subject": subject,
                    "bidder": bidder,
                    "first_index": first,
                    "committed_index": index,
                    "commitment": digest,
                    "revealed": False if row is None else row["revealed"],
                    "price": None if row is None else row["price"],
                }
            elif row is not None:  # a reveal of a commitment
                row.update(revealed=True, price=price)
            else:
                continue
            touched.add((subject, bidder))
        keys = sorted(touched)
        changed = [rows[key] for key in keys if key in stored]
        if changed:  # a reveal, or a commitment again (a log from before bids were once)
            connection.execute(
                update(BIDS)
                .where(
                    BIDS.c.subject == bindparam("key_subject"),
                    BIDS.c.bidder == bindparam("key_bidder"),
                )
                .values({name: bindparam(f"new_{name}") for name in _BID_FIELDS}),
                [
                    {
                        "key_subject": row["subject"],
                        "key_bidder": row["bidder"],
                        **{f"new_{name}": row[name] for name in _BID_FIELDS},
                    }
                    for row in changed
                ],
            )
        fresh = [rows[key] for key in keys if key not in stored]
        if fresh:
            connection.execute(insert(BIDS), fresh)

    def reset(self, connection: Any) -> None:
        connection.execute(delete(BIDS))


@lru_cache(maxsize=2)
def _commitments_upsert(mark: str) -> str:
    """INSERT into the bid view, or on a (task, bidder) already there set only its latest
    commitment: SQL text for the driver (parameter marker `mark`), run at every bid commit."""
    return upsert_sql(
        mark, BIDS, _COMMITMENT_ROW, ["subject", "bidder"], ["committed_index", "commitment"]
    )


#: A commitment's row in the bid view, as `_commitments_upsert` takes it.
_COMMITMENT_ROW = (
    "subject",
    "bidder",
    "first_index",
    "committed_index",
    "commitment",
    "revealed",
    "price",
)


_BID_KINDS = frozenset({BID_COMMITTED, BID_REVEALED})
_BID_FIELDS = ("first_index", "committed_index", "commitment", "revealed", "price")


def bid_move(entry: ViewEntry) -> tuple[str, str, int, str | None, str | None] | None:
    """(task subject, bidder, index, commitment digest, None) of a commitment, (subject, bidder,
    index, None, price) of a reveal; None for a body that is no bid (pure)."""
    event = entry.event
    try:
        if event.kind == BID_COMMITTED:
            commitment = sealed.Commitment.from_json(event.body["commitment"])
            return event.subject, commitment.bidder, entry.index, commitment.digest.hex(), None
        reveal = sealed.Reveal.from_json(event.body["reveal"])
        return event.subject, reveal.bidder, entry.index, None, str(reveal.price)
    except (MarketError, KeyError, TypeError, ValueError):
        return None


def bids_of(connection: Any, subject: str) -> list[BidRow]:
    """The bids on a task from the view, in the order their bidders first committed."""
    rows = connection.execute(
        select(BIDS).where(BIDS.c.subject == subject).order_by(BIDS.c.first_index)
    ).all()
    return [BidRow.model_validate(dict(row._mapping)) for row in rows]


# -- reputation ------------------------------------------------------------------------------


class TrackRecordRow(SQLModel, table=True):
    """One unit of an agent's track record (`accord.market.reputation.Unit`): a settled task
    (`task.settled` at `entry_index`) in which it made scored parts of `capability`."""

    __tablename__ = "view_track_record"

    did: str = Field(primary_key=True)
    capability: str = Field(primary_key=True)
    entry_index: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    requester: str
    k: int
    """The k-th settled task between this requester and this agent."""
    parts: int
    passed: str
    """The sum of the parts' scores, as `n/d`."""


class WorkPairRow(SQLModel, table=True):
    """A requester and an agent that made parts of its settled tasks, and how many such tasks:
    the edges of the circles (`accord.market.reputation.circles`) and each pair's k so far."""

    __tablename__ = "view_work_pairs"

    requester: str = Field(primary_key=True)
    agent: str = Field(primary_key=True)
    tasks: int


class ForfeitRow(SQLModel, table=True):
    """A commitment never revealed, as `task.awarded` or `task.expired` names it; it counts
    in each capability of its task (`subject`, the task view's capability rows)."""

    __tablename__ = "view_forfeits"

    did: str = Field(primary_key=True)
    entry_index: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    position: int = Field(primary_key=True)
    """The place of the agent in the entry's list (a repeat counts again, as in the log)."""
    subject: str = Field(index=True)


class PaymentRow(SQLModel, table=True):
    """Wei a task's settlement (`settlement.computed`) pays a player for the work; `requester`
    and `settled_index` once its `task.settled` is applied (`accord.market.reputation.Payment`:
    its requester's standing)."""

    __tablename__ = "view_payments"
    __table_args__ = (Index("ix_view_payments_requester", "requester"),)

    subject: str = Field(primary_key=True)
    payee: str = Field(primary_key=True)
    wei: str
    """Decimal wei."""
    requester: str | None = None
    settled_index: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class RejectionRow(SQLModel, table=True):
    """A review check rejected (`review.given`, verdict reject): its signer counts it in its
    requester record when it is the task's requester (the task view says); `overturned` once
    the settlement's dispute found for the team."""

    __tablename__ = "view_rejections"
    __table_args__ = (Index("ix_view_rejections_actor", "actor"),)

    subject: str = Field(primary_key=True)
    check_id: str = Field(primary_key=True)
    actor: str
    entry_index: int = Field(sa_column=Column(BigInteger, nullable=False))
    overturned: bool = False


TRACK_RECORD: Table = TrackRecordRow.__table__  # type: ignore[attr-defined]
WORK_PAIRS: Table = WorkPairRow.__table__  # type: ignore[attr-defined]
FORFEITS: Table = ForfeitRow.__table__  # type: ignore[attr-defined]
REJECTIONS: Table = RejectionRow.__table__  # type: ignore[attr-defined]
PAYMENTS: Table = PaymentRow.__table__  # type: ignore[attr-defined]


class ReputationView:
    """The reputation projection: each agent's track record units and forfeits, the pairs
    that settled work, what settled tasks paid (their requesters' standing), and the review
    checks requesters rejected (`accord.market.reputation`)."""

    name = REPUTATION_VIEW
    tables: Sequence[Table] = (TRACK_RECORD, WORK_PAIRS, FORFEITS, REJECTIONS, PAYMENTS)

    def apply(self, connection: Any, entries: Sequence[ViewEntry]) -> None:
        computed = [entry for entry in entries if entry.event.kind == SETTLEMENT_COMPUTED]
        if computed:
            _fold_payouts(connection, computed)
        works = [w for w in (settled_of(entry) for entry in entries) if w is not None]
        if works:
            _fold_works(connection, works)
            _date_payments(connection, works)
        forfeits = [
            {"did": did, "entry_index": entry.index, "position": k, "subject": entry.event.subject}
            for entry in entries
            for k, did in enumerate(forfeited_in(entry))
        ]
        if forfeits:
            connection.execute(insert(FORFEITS), forfeits)
        rejections = [entry for entry in entries if rejected_check(entry) is not None]
        if rejections:
            _fold_rejections(connection, rejections)
        overturned = [
            {"key_subject": entry.event.subject, "key_check": check}
            for entry in entries
            for check in overturned_checks(entry)
        ]
        if overturned:
            connection.execute(
                update(REJECTIONS)
                .where(
                    REJECTIONS.c.subject == bindparam("key_subject"),
                    REJECTIONS.c.check_id == bindparam("key_check"),
                )
                .values(overturned=True),
                overturned,
            )

    def reset(self, connection: Any) -> None:
        for table in (PAYMENTS, REJECTIONS, FORFEITS, WORK_PAIRS, TRACK_RECORD):
            connection.execute(delete(table))


def settled_of(entry: ViewEntry) -> SettledWork | None:
    """The track record of a `task.settled` entry (None for anything else, or a body that
    carries none). Pure."""
    if entry.event.kind != TASK_SETTLED:
        return None
    return settled_work(entry.index, entry.event.subject, entry.event.body)


def forfeited_in(entry: ViewEntry) -> list[str]:
    """The agents a `task.awarded` or `task.expired` entry names as forfeited, in order
    (nothing for anything else, or a body it cannot read). Pure."""
    if entry.event.kind not in (TASK_AWARDED, TASK_EXPIRED):
        return []
    found = entry.event.body.get("forfeited", [])
    if not isinstance(found, list) or not all(isinstance(did, str) for did in found):
        return []
    return list(found)


def overturned_checks(entry: ViewEntry) -> list[str]:
    """The review checks a `settlement.computed` entry's disputes found for the team: the
    requester's rejections overturned (nothing for anything else). Pure."""
    if entry.event.kind != SETTLEMENT_COMPUTED:
        return []
    found = []
    for check in entry.event.body.get("checks", []):
        record = check.get("record") if isinstance(check, dict) else None
        dispute = record.get("dispute") if isinstance(record, dict) else None
        if isinstance(dispute, dict) and dispute.get("winner") == "team":
            found.append(str(check.get("id")))
    return found


def rejected_check(entry: ViewEntry) -> str | None:
    """The check a `review.given` entry rejects (None for anything else). Pure."""
    event = entry.event
    check = event.body.get("check")
    if event.kind != REVIEW_GIVEN or event.body.get("verdict") != "reject":
        return None
    return check if isinstance(check, str) and check else None


def _fold_works(connection: Any, works: Sequence[SettledWork]) -> None:
    """Each settled work's units, k counted on from the stored pairs (see `fold_track_records`)."""
    wanted = {(w.requester, agent) for w in works for agent in work_by_agent(w)}
    counts: dict[tuple[str, str], int] = {}
    for requester in sorted({r for r, _ in wanted}):
        rows = connection.execute(
            select(WORK_PAIRS.c.agent, WORK_PAIRS.c.tasks).where(
                WORK_PAIRS.c.requester == requester
            )
        ).all()
        counts.update(((requester, agent), int(n)) for agent, n in rows)
    stored = set(counts)
    units = []
    for work in works:
        for agent, by_capability in sorted(work_by_agent(work).items()):
            k = counts[work.requester, agent] = counts.get((work.requester, agent), 0) + 1
            units += [
                {
                    "did": agent,
                    "capability": capability,
                    "entry_index": work.index,
                    "requester": work.requester,
                    "k": k,
                    "parts": parts,
                    "passed": f"{passed.numerator}/{passed.denominator}",
                }
                for capability, (parts, passed) in sorted(by_capability.items())
                if parts
            ]
    if units:
        connection.execute(insert(TRACK_RECORD), units)
    changed = [
        {"key_requester": r, "key_agent": a, "new_tasks": counts[r, a]}
        for r, a in sorted(wanted & stored)
    ]
    if changed:
        connection.execute(
            update(WORK_PAIRS)
            .where(
                WORK_PAIRS.c.requester == bindparam("key_requester"),
                WORK_PAIRS.c.agent == bindparam("key_agent"),
            )
            .values(tasks=bindparam("new_tasks")),
            changed,
        )
    fresh = [
        {"requester": r, "agent": a, "tasks": counts[r, a]} for r, a in sorted(wanted - stored)
    ]
    if fresh:
        connection.execute(insert(WORK_PAIRS), fresh)


def _fold_payouts(connection: Any, entries: Sequence[ViewEntry]) -> None:
    """The payouts of each task's first `settlement.computed` (a repeat only a hand-written
    log holds adds nothing; see `accord.market.reputation.payments`)."""
    subjects = sorted({entry.event.subject for entry in entries})
    seen: set[str] = set()
    for start in range(0, len(subjects), _IN_CHUNK):
        chunk = subjects[start : start + _IN_CHUNK]
        found = select(PAYMENTS.c.subject).where(PAYMENTS.c.subject.in_(chunk)).distinct()
        seen.update(str(subject) for subject in connection.execute(found).scalars())
    rows = []
    for entry in entries:
        subject = entry.event.subject
        if subject in seen:
            continue
        seen.add(subject)
        rows += [
            {"subject": subject, "payee": payee, "wei": str(wei)}
            for payee, wei in sorted(settlement_payouts(entry.event.body).items())
        ]
    if rows:
        connection.execute(insert(PAYMENTS), rows)


def _date_payments(connection: Any, works: Sequence[SettledWork]) -> None:
    """Each settled work's payouts get its requester and its `task.settled` index (the first
    settlement of a task dates them)."""
    connection.execute(
        update(PAYMENTS)
        .where(PAYMENTS.c.subject == bindparam("key_subject"), PAYMENTS.c.settled_index.is_(None))
        .values(requester=bindparam("new_requester"), settled_index=bindparam("new_index")),
        [
            {"key_subject": w.task_id, "new_requester": w.requester, "new_index": w.index}
            for w in works
        ],
    )


def _payments_of(connection: Any, requesters: Sequence[str]) -> dict[str, list[Payment]]:
    """What the settled tasks of `requesters` paid, by requester, in log order (the requester
    left out as a payee, as `accord.market.reputation.work_payments` does)."""
    found: dict[str, list[Payment]] = {}
    for start in range(0, len(requesters), _IN_CHUNK):
        chunk = requesters[start : start + _IN_CHUNK]
        rows = connection.execute(
            select(PAYMENTS.c.requester, PAYMENTS.c.settled_index, PAYMENTS.c.payee, PAYMENTS.c.wei)
            .where(PAYMENTS.c.requester.in_(chunk), PAYMENTS.c.settled_index.is_not(None))
            .order_by(PAYMENTS.c.settled_index, PAYMENTS.c.payee)
        ).all()
        for requester, index, payee, wei in rows:
            if payee != requester:
                payment = Payment(int(index), str(requester), str(payee), int(wei))
                found.setdefault(str(requester), []).append(payment)
    return found


def _fold_rejections(connection: Any, entries: Sequence[ViewEntry]) -> None:
    """The first rejection of each (task, check) is kept (a repeat only a hand-written log
    holds adds nothing)."""
    subjects = sorted({entry.event.subject for entry in entries})
    seen: set[tuple[str, str]] = set()
    for start in range(0, len(subjects), _IN_CHUNK):
        chunk = subjects[start : start + _IN_CHUNK]
        rows = connection.execute(
            select(REJECTIONS.c.subject, REJECTIONS.c.check_id).where(
                REJECTIONS.c.subject.in_(chunk)
            )
        ).all()
        seen.update((str(subject), str(check)) for subject, check in rows)
    fresh = []
    for entry in entries:
        check = rejected_check(entry)
        key = (entry.event.subject, str(check))
        if check is None or key in seen:
            continue
        seen.add(key)
        fresh.append(
            {
                "subject": key[0],
                "check_id": key[1],
                "actor": entry.event.actor,
                "entry_index": entry.index,
            }
        )
    if fresh:
        connection.execute(insert(REJECTIONS), fresh)


def work_pairs(connection: Any) -> frozenset[tuple[str, str]]:
    """Every (requester, agent) pair that settled work: the circles' graph."""
    rows = connection.execute(select(WORK_PAIRS.c.requester, WORK_PAIRS.c.agent)).all()
    return frozenset((str(r), str(a)) for r, a in rows)


def track_records_of(connection: Any, dids: Iterable[str]) -> TrackRecords:
    """The track records of `dids` from the view (with every pair, for the circles, and what
    their units' requesters paid, for their standing): what
    `accord.market.service.track_records_from_log` folds, read by agent. Reads the task view's
    capability rows (for forfeits): bring it level too."""
    wanted = sorted(set(dids))
    units: dict[tuple[str, str], list[Unit]] = {}
    forfeits: dict[tuple[str, str], int] = {}
    for start in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[start : start + _IN_CHUNK]
        rows = connection.execute(
            select(TRACK_RECORD)
            .where(TRACK_RECORD.c.did.in_(chunk))
            .order_by(TRACK_RECORD.c.did, TRACK_RECORD.c.capability, TRACK_RECORD.c.entry_index)
        ).all()
        for row in rows:
            unit = Unit(
                int(row.entry_index),
                row.requester,
                int(row.k),
                int(row.parts),
                Fraction(row.passed),
            )
            units.setdefault((row.did, row.capability), []).append(unit)
        counted = connection.execute(
            select(FORFEITS.c.did, CAPABILITIES.c.capability, func.count())
            .select_from(FORFEITS.join(CAPABILITIES, CAPABILITIES.c.subject == FORFEITS.c.subject))
            .where(FORFEITS.c.did.in_(chunk))
            .group_by(FORFEITS.c.did, CAPABILITIES.c.capability)
        ).all()
        forfeits.update(((str(did), str(c)), int(n)) for did, c, n in counted)
    requesters = sorted({unit.requester for found in units.values() for unit in found})
    paid = _payments_of(connection, requesters)
    return TrackRecords(
        {key: tuple(found) for key, found in units.items()},
        forfeits,
        work_pairs(connection),
        {requester: tuple(found) for requester, found in paid.items()},
    )


def requester_record_of(connection: Any, did: str) -> RequesterRecord:
    """The requester's record from the task and reputation views: its tasks, those settled,
    the review checks of its tasks it rejected, and those rejections a dispute overturned.
    One statement (`_requester_record_statement`), built once: every read of a task asks it,
    and building four selects per call cost more than the database's answers."""
    posted, settled, rejected, overturned = connection.execute(
        _requester_record_statement(), {"did": did}
    ).one()
    return RequesterRecord(did, int(posted), int(settled), int(rejected), int(overturned))


@cache
def _requester_record_statement() -> Any:
    """The four counts of `requester_record_of` for the bound `did`, as one statement of four
    scalar subqueries (its cache key is computed once, on this one object)."""
    mine = TASKS.c.requester == bindparam("did")
    rejections = REJECTIONS.join(TASKS, TASKS.c.subject == REJECTIONS.c.subject)
    rejected = (REJECTIONS.c.actor == bindparam("did"),)
    return select(
        select(func.count()).select_from(TASKS).where(mine).scalar_subquery(),
        select(func.count())
        .select_from(TASKS)
        .where(mine, TASKS.c.state == "settled")
        .scalar_subquery(),
        select(func.count()).select_from(rejections).where(mine, *rejected).scalar_subquery(),
        select(func.count())
        .select_from(rejections)
        .where(mine, *rejected, REJECTIONS.c.overturned.is_(True))
        .scalar_subquery(),
    )


@dataclass(frozen=True)
class ChangedPage:
    """Tasks newest change first, each with the time of its last lifecycle entry, and how
    many match in all."""

    tasks: tuple[tuple[Task, datetime], ...]
    total: int


def tasks_by_change(
    connection: Any,
    *,
    states: Iterable[str] | None,
    changed_after: datetime | None,
    before: tuple[datetime, str] | None,
    size: int,
) -> ChangedPage:
    """The tasks whose stored state is one of `states` (None: any) and whose last lifecycle
    entry came after `changed_after`, newest change first (then task id, descending), after
    the keyset `before` (the last (change, task id) of the previous page); at most `size`.
    Two indexed queries: the page and the count.

    Raises TaskError when a stored spec does not parse (a view edited by hand: reindex it).
    """
    wanted: list[Any] = [TASKS.c.problem.is_(None)]
    if states is not None:
        wanted.append(TASKS.c.state.in_(sorted(states)))
    if changed_after is not None:
        wanted.append(TASKS.c.changed_us > micros(changed_after))
    total = connection.execute(select(func.count()).select_from(TASKS).where(*wanted)).scalar_one()
    if before is not None:
        wanted.append(tuple_(TASKS.c.changed_us, TASKS.c.task_id) < (micros(before[0]), before[1]))
    rows = connection.execute(
        select(TASKS)
        .where(*wanted)
        .order_by(TASKS.c.changed_us.desc(), TASKS.c.task_id.desc())
        .limit(size)
    ).all()
    return ChangedPage(
        tuple((task_of(row), from_micros(int(row.changed_us))) for row in rows), int(total)
    )
