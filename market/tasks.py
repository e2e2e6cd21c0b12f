"""Tasks and their lifecycle: a pure state machine over signed ledger events.

    posted ─escrow.opened─► bidding ─(time)─► revealing ─(time)─► awarded ─► running
       │                                                     │                 │
       └──────────────(never escrowed)                       └► expired ─► refunded
    running ─task.delivered─► delivered ─settlement─► settled

A task's state is never stored by itself: `replay(events)` folds the task's ledger events, in
log order, through `step`, and the clock only decides when bidding and revealing end. So anyone
holding the log recomputes every task exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any, Literal

from ledger.events import parse_time
from market.auction import PAYMENT_RULES, PaymentRule, ScoringWeights
from market.errors import AuctionError, TaskError, TransitionError
from market.money import Wei, wei

TaskState = Literal[
    "posted",
    "bidding",
    "revealing",
    "awarded",
    "running",
    "delivered",
    "settled",
    "expired",
    "refunded",
    "cancelled",
]

# Event kinds of the market, in the ledger.
TASK_POSTED = "task.posted"
ESCROW_OPENED = "escrow.opened"
BID_COMMITTED = "bid.committed"
BID_REVEALED = "bid.revealed"
TASK_AWARDED = "task.awarded"
TASK_EXPIRED = "task.expired"
ESCROW_REFUNDED = "escrow.refunded"
TASK_STARTED = "task.started"
TASK_DELIVERED = "task.delivered"
TASK_SETTLED = "task.settled"
TASK_CANCELLED = "task.cancelled"
"""Logged by the requester of a posted task whose escrow never opened: nothing was deposited,
nothing can be bid, and the task ends."""
TASK_KINDS = (
    TASK_POSTED,
    ESCROW_OPENED,
    BID_COMMITTED,
    BID_REVEALED,
    TASK_AWARDED,
    TASK_EXPIRED,
    ESCROW_REFUNDED,
    TASK_STARTED,
    TASK_DELIVERED,
    TASK_SETTLED,
    TASK_CANCELLED,
)

TITLE_MAX = 200
DESCRIPTION_MAX = 10_000
MIN_WINDOW = timedelta(seconds=1)
MAX_WINDOW = timedelta(days=30)
DEFAULT_WEIGHTS = ScoringWeights(Fraction(1, 2), Fraction(1, 2))
CAPABILITY_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class RubricCheck:
    """One weighted check of the evaluator that scores a deliverable (used at settlement)."""

    check_id: str
    weight: int
    description: str
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.check_id,
            "weight": self.weight,
            "description": self.description,
            "params": dict(self.params),
        }


@dataclass(frozen=True)
class TaskSpec:
    """What a requester posts. Validated on construction; raises TaskError naming the field."""

    title: str
    description: str
    capabilities: tuple[str, ...]
    budget: Wei
    bidding: timedelta
    reveal: timedelta
    delivery: timedelta
    rule: PaymentRule = "second-score"
    weights: ScoringWeights = DEFAULT_WEIGHTS
    evaluator: tuple[RubricCheck, ...] = ()
    pay_by_quality: bool = False
    """Scale the amount paid by the delivered quality v(N) (the rest returns to the requester)."""

    def __post_init__(self) -> None:
        if not isinstance(self.title, str) or not self.title.strip():
            raise TaskError("a task needs a title")
        if len(self.title) > TITLE_MAX:
            raise TaskError(f"the title is longer than {TITLE_MAX} characters")
        if not isinstance(self.description, str) or len(self.description) > DESCRIPTION_MAX:
            raise TaskError(f"the description must be text of at most {DESCRIPTION_MAX} characters")
        if not self.capabilities:
            raise TaskError("name at least one required capability (--capability)")
        for capability in self.capabilities:
            if not CAPABILITY_PATTERN.match(capability):
                raise TaskError(f"{capability!r} is not a capability name")
        if len(set(self.capabilities)) != len(self.capabilities):
            raise TaskError("a capability is named twice")
        wei(self.budget)
        if self.budget == 0:
            raise TaskError("the budget must be more than 0 wei")
        for name in ("bidding", "reveal", "delivery"):
            window = getattr(self, name)
            if not MIN_WINDOW <= window <= MAX_WINDOW:
                raise TaskError(f"the {name} window must be between 1 s and 30 days")
        if self.rule not in PAYMENT_RULES:
            raise TaskError(f"the payment rule must be one of {', '.join(PAYMENT_RULES)}")
        weights = (self.weights.reputation, self.weights.exam)
        if sum(weights) > 1 or any(w > 1 for w in weights):
            raise TaskError("scoring weights must lie in [0, 1] and sum to at most 1")
        for check in self.evaluator:
            if check.weight <= 0:
                raise TaskError(f"rubric check {check.check_id!r} needs a positive weight")

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "description": self.description,
            "capabilities": list(self.capabilities),
            "budget": str(self.budget),
            "bidding_seconds": int(self.bidding.total_seconds()),
            "reveal_seconds": int(self.reveal.total_seconds()),
            "delivery_seconds": int(self.delivery.total_seconds()),
            "rule": self.rule,
            "weights": {
                "reputation": str(self.weights.reputation),
                "exam": str(self.weights.exam),
            },
            "evaluator": [check.to_json() for check in self.evaluator],
            "pay_by_quality": self.pay_by_quality,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> TaskSpec:
        """Raises TaskError for anything that is not a task spec."""
        try:
            weights = value["weights"]
            return cls(
                title=value["title"],
                description=value["description"],
                capabilities=tuple(value["capabilities"]),
                budget=Wei(int(value["budget"])),
                bidding=timedelta(seconds=int(value["bidding_seconds"])),
                reveal=timedelta(seconds=int(value["reveal_seconds"])),
                delivery=timedelta(seconds=int(value["delivery_seconds"])),
                rule=value["rule"],
                weights=ScoringWeights(Fraction(weights["reputation"]), Fraction(weights["exam"])),
                evaluator=tuple(
                    RubricCheck(c["id"], int(c["weight"]), c["description"], c.get("params", {}))
                    for c in value["evaluator"]
                ),
                pay_by_quality=bool(value.get("pay_by_quality", False)),
            )
        except (KeyError, TypeError, ValueError, ZeroDivisionError, AuctionError) as exc:
            raise TaskError(f"not a task spec: {exc!r}") from exc


@dataclass(frozen=True)
class TaskEvent:
    """A ledger event of one task, as the state machine sees it."""

    index: int
    kind: str
    actor: str
    at: datetime
    body: Mapping[str, Any] = field(hash=False)


@dataclass(frozen=True)
class Task:
    """A task as replayed from its events at one moment."""

    task_id: str
    requester: str
    spec: TaskSpec
    posted_at: datetime
    state: TaskState
    escrowed: bool = False
    winner: str | None = None
    price: Wei | None = None
    delivered_index: int | None = None

    @property
    def bidding_ends(self) -> datetime:
        return self.posted_at + self.spec.bidding

    @property
    def reveal_ends(self) -> datetime:
        return self.bidding_ends + self.spec.reveal

    @property
    def delivery_deadline(self) -> datetime:
        return self.reveal_ends + self.spec.delivery

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.task_id,
            "state": self.state,
            "requester": self.requester,
            "spec": self.spec.to_json(),
            "posted_at": self.posted_at.isoformat(),
            "bidding_ends": self.bidding_ends.isoformat(),
            "reveal_ends": self.reveal_ends.isoformat(),
            "delivery_deadline": self.delivery_deadline.isoformat(),
            "escrowed": self.escrowed,
            "winner": self.winner,
            "price": None if self.price is None else str(self.price),
        }


def clock_state(task: Task, now: datetime) -> TaskState:
    """The state with the clock taken into account: an escrowed task takes sealed bids until
    its bidding window ends, then reveals, and stays revealing until the auction is cleared."""
    if task.state == "bidding" and now >= task.bidding_ends:
        return "revealing"
    return task.state


def step(task: Task | None, event: TaskEvent) -> Task:
    """Apply one event. Raises TransitionError when the lifecycle does not allow it and
    TaskError when the event is malformed."""
    if task is None:
        if event.kind != TASK_POSTED:
            raise TaskError(f"a task starts with {TASK_POSTED}, not {event.kind}")
        return Task(
            task_id=str(event.body.get("task_id", "")),
            requester=event.actor,
            spec=TaskSpec.from_json(event.body["spec"]),
            posted_at=event.at,
            state="posted",
        )
    match event.kind:
        case "escrow.opened":
            _require(task, "posted", "escrowed")
            return replace(task, state="bidding", escrowed=True)
        case "bid.committed" | "bid.revealed":
            return task  # bids do not move the task; their windows are checked on admission
        case "task.awarded":
            _require(task, "bidding", "awarded")
            return replace(
                task,
                state="awarded",
                winner=str(event.body["winner"]),
                price=Wei(int(event.body["price"])),
            )
        case "task.expired":
            _require(task, "bidding", "expired")
            return replace(task, state="expired")
        case "escrow.refunded":
            _require(task, ("expired", "posted"), "refunded")
            return replace(task, state="refunded")
        case "task.started":
            _require(task, "awarded", "started")
            return replace(task, state="running")
        case "task.delivered":
            _require(task, "running", "delivered")
            return replace(task, state="delivered", delivered_index=event.index)
        case "task.settled":
            _require(task, "delivered", "settled")
            return replace(task, state="settled")
        case "task.cancelled":
            _require(task, "posted", "cancelled")
            if event.actor != task.requester:
                raise TaskError(f"only the requester {task.requester} cancels {task.task_id}")
            return replace(task, state="cancelled")
        case _:
            raise TaskError(f"{event.kind} is not a task event")


def replay(events: Iterable[TaskEvent]) -> Task:
    """Fold a task's events, in log order. Raises TaskError when there are none."""
    task: Task | None = None
    for event in events:
        task = step(task, event)
    if task is None:
        raise TaskError("no such task")
    return task


def _require(task: Task, states: TaskState | tuple[TaskState, ...], action: str) -> None:
    allowed = (states,) if isinstance(states, str) else states
    if task.state not in allowed:
        raise TransitionError(task.task_id, task.state, action)


def event_time(text: str) -> datetime:
    """The datetime of a ledger event's `at`."""
    return parse_time(text)
