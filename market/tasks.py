"""Tasks and their lifecycle: a pure state machine over signed ledger events.

    posted ─escrow.opened─► bidding ─(time)─► revealing ─(time)─► awarded ─► running
       │                                                     │                 │
       ├──────────────(never escrowed)                       └► expired ─► refunded
       ├─task.cancelled (its requester) ─► cancelled
       └─task.closed (the operator: not funded when bidding ended) ─► closed
    running ─task.delivered─► delivered ─settlement─► settled

A task's state is never stored by itself: `replay(events)` folds the task's ledger events, in
log order, through `step`, and the clock only decides when bidding and revealing end. So anyone
holding the log recomputes every task exactly.

Lifecycle events happen once per task (`ONCE_PER_TASK`); the log refuses a second one. A log
written before it did may hold repeats: `step` keeps the first and records the index of each
repeat in `Task.duplicates`, so the task still replays and the audit can name them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction
from functools import cached_property
from typing import Any

from accord.market.auction import PAYMENT_RULES, PaymentRule, ScoringWeights
from accord.market.errors import AuctionError, LimitError, TaskError, TransitionError, WorkError
from accord.market.money import Wei, parse_amount, wei
from accord.market.states import TaskState
from accord.market.work import (
    Check,
    Part,
    check_to_json,
    default_checks,
    file_refs,
    parse_check,
    parse_checks,
    parse_parts,
    part_dependencies,
    rubric,
)

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
SETTLEMENT_COMPUTED = "settlement.computed"
"""The operator's computed settlement of a task (logged by `accord.market.settlement`)."""
SETTLEMENT_RELEASED = "settlement.released"
"""A payout a settlement held (its payee had bound no payout account), released to the account
its owner bound since: logged once per task and payee by `accord.market.settlement`, after
`TaskEscrow.release`."""
REVIEW_GIVEN = "review.given"
CHECKS_PREVIEWED = "checks.previewed"
"""The operator's notice, once per task while its review window is open, of the python checks
it found inconclusive on the delivered outputs (`{"task_id", "inconclusive": {check id:
detail}, "until"}`): the requester may contest those, and only those, by rejecting them in the
window; a settlement waits for the window's end while one is named
(`accord.market.settlement`)."""
TASK_CLOSED = "task.closed"
"""Logged by the operator for a posted task still not funded when its bidding window ended:
the task ends, with the reason, and the service stops looking at the chain for it."""
ONCE_PER_TASK = (
    ESCROW_OPENED,
    TASK_AWARDED,
    TASK_EXPIRED,
    ESCROW_REFUNDED,
    TASK_STARTED,
    TASK_DELIVERED,
    TASK_SETTLED,
    TASK_CLOSED,
)
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
    REVIEW_GIVEN,
    TASK_CANCELLED,
    TASK_CLOSED,
)

TITLE_MAX = 200
DESCRIPTION_MAX = 10_000
MIN_WINDOW = timedelta(seconds=1)
MAX_WINDOW = timedelta(days=30)
DEFAULT_REVIEW = timedelta(hours=1)
SETTLEMENT_GRACE = timedelta(days=2)
"""How long after the last review window can close the service has to settle before the
requester may refund its escrow on chain by itself (`Task.escrow_deadline`)."""
DEFAULT_WEIGHTS = ScoringWeights(Fraction(1, 2), Fraction(1, 2))
CAPABILITY_PATTERN = re.compile(r"^([a-z][a-z0-9_-]{0,63}|[0-9a-f]{64})$")
"""A capability's name (a built-in's), or a skill's id (64 hex digits, which may start with a
digit)."""


compact_json = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
"""JSON text as the service's JSON answers are encoded (Starlette's JSONResponse: UTF-8 left
unescaped, no spaces, NaN refused with ValueError), for parts of an answer encoded ahead."""


@dataclass(frozen=True)
class TaskSpec:
    """What a requester posts: the terms, and the work (parts and checks, `accord.market.work`).

    Validated on construction; raises TaskError naming the field (WorkError naming the JSON
    path for parts and checks). The parts' inputs are checked against their capabilities'
    schemas when the spec is read from a request (`spec_from_request`), where the files are.
    """

    title: str
    description: str
    parts: tuple[Part, ...]
    budget: Wei
    bidding: timedelta
    reveal: timedelta
    delivery: timedelta
    checks: tuple[Check, ...] = ()
    """The requester's checks; empty means each part's output-schema check plus a review."""
    files: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    """The files the inputs reference: sha256 → {name, size}."""
    review: timedelta = DEFAULT_REVIEW
    """How long after delivery the requester may review; an unreviewed check is then accepted."""
    rule: PaymentRule = "second-score"
    weights: ScoringWeights = DEFAULT_WEIGHTS

    def __post_init__(self) -> None:
        if not isinstance(self.title, str) or not self.title.strip():
            raise TaskError("a task needs a title")
        if len(self.title) > TITLE_MAX:
            raise TaskError(f"the title is longer than {TITLE_MAX} characters")
        if not isinstance(self.description, str) or len(self.description) > DESCRIPTION_MAX:
            raise TaskError(f"the description must be text of at most {DESCRIPTION_MAX} characters")
        if not self.parts:
            raise WorkError(
                "a task needs at least one part: [{id, capability, input}]", path="$.parts"
            )
        for capability in self.capabilities:
            if not CAPABILITY_PATTERN.fullmatch(capability):
                raise TaskError(f"{capability!r} is not a capability name")
        wei(self.budget)
        if self.budget == 0:
            raise TaskError("the budget must be more than 0 wei")
        for name in ("bidding", "reveal", "delivery", "review"):
            window = getattr(self, name)
            if not MIN_WINDOW <= window <= MAX_WINDOW:
                raise TaskError(f"the {name} window must be between 1 s and 30 days")
        if self.rule not in PAYMENT_RULES:
            raise TaskError(f"the payment rule must be one of {', '.join(PAYMENT_RULES)}")
        weights = (self.weights.reputation, self.weights.exam)
        if sum(weights) > 1 or any(w > 1 for w in weights):
            raise TaskError("scoring weights must lie in [0, 1] and sum to at most 1")
        part_ids = {p.part_id for p in self.parts}
        for k, check in enumerate(self.checks):
            if check.weight <= 0:
                raise WorkError(
                    f"check {check.check_id!r} needs a positive weight",
                    path=f"$.checks[{k}].weight",
                )
            missing = [p for p in check.reads if p not in part_ids]
            if missing:
                raise WorkError(
                    f"check {check.check_id!r} reads no part {missing[0]!r}",
                    path=f"$.checks[{k}].reads",
                )
        for k, part in enumerate(self.parts):
            for sha in file_refs(part.input):
                if sha not in self.files:
                    raise WorkError(
                        f"part {part.part_id!r} names a file not stored with the task",
                        path=f"$.parts[{k}].input",
                    )
        part_dependencies(self.parts)  # a part made of a missing part, or a cycle: refused

    @property
    def capabilities(self) -> tuple[str, ...]:
        """The capabilities the parts need, each once, in the order the parts name them: a
        bidder must hold every one."""
        return tuple(dict.fromkeys(p.capability for p in self.parts))

    @property
    def requester_checks(self) -> tuple[Check, ...]:
        """The checks the requester gave, or the defaults when it gave none."""
        return self.checks or default_checks(self.parts)

    @property
    def rubric(self) -> tuple[Check, ...]:
        """The requester's checks and the contract holder's plan and assembly checks."""
        return rubric(self.parts, self.requester_checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "description": self.description,
            "capabilities": list(self.capabilities),
            "parts": [part.to_json() for part in self.parts],
            "checks": [check_to_json(check) for check in self.checks],
            "files": {sha: dict(meta) for sha, meta in self.files.items()},
            "budget": str(self.budget),
            "bidding_seconds": int(self.bidding.total_seconds()),
            "reveal_seconds": int(self.reveal.total_seconds()),
            "delivery_seconds": int(self.delivery.total_seconds()),
            "review_seconds": int(self.review.total_seconds()),
            "rule": self.rule,
            "weights": {
                "reputation": str(self.weights.reputation),
                "exam": str(self.weights.exam),
            },
        }

    @cached_property
    def json_text(self) -> str:
        """`to_json()` as `compact_json` encodes it, worked out once per spec (a spec never
        changes; the task view hands out one TaskSpec per stored spec text,
        `accord.market.views.parsed_spec`, so a list of the same open tasks encodes each spec
        once). Raises ValueError for a check weight that is not a finite number."""
        return compact_json(self.to_json())

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> TaskSpec:
        """A spec as logged in `task.posted` (validated when it was posted; checks are not
        compiled again here). Raises TaskError for anything that is not a task spec."""
        try:
            weights = value["weights"]
            parts = tuple(
                Part(str(p["id"]), str(p["capability"]), dict(p["input"])) for p in value["parts"]
            )
            part_ids = {p.part_id for p in parts}
            checks = tuple(
                parse_check(c, f"$.checks[{k}]", part_ids, compile_code=False)
                for k, c in enumerate(value.get("checks", []))
            )
            return cls(
                title=value["title"],
                description=value["description"],
                parts=parts,
                checks=checks,
                files={str(k): dict(v) for k, v in value.get("files", {}).items()},
                budget=Wei(int(value["budget"])),
                bidding=timedelta(seconds=int(value["bidding_seconds"])),
                reveal=timedelta(seconds=int(value["reveal_seconds"])),
                delivery=timedelta(seconds=int(value["delivery_seconds"])),
                review=timedelta(
                    seconds=int(value.get("review_seconds", DEFAULT_REVIEW.total_seconds()))
                ),
                rule=value["rule"],
                weights=ScoringWeights(Fraction(weights["reputation"]), Fraction(weights["exam"])),
            )
        except WorkError:
            raise
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
    delivered_at: datetime | None = None
    duplicates: tuple[int, ...] = ()
    """Log indexes of lifecycle events repeated after the first (ignored by the replay)."""

    @property
    def review_ends(self) -> datetime | None:
        """When the requester's review window closes (None before delivery)."""
        return None if self.delivered_at is None else self.delivered_at + self.spec.review

    @property
    def bidding_ends(self) -> datetime:
        return self.posted_at + self.spec.bidding

    @property
    def reveal_ends(self) -> datetime:
        return self.bidding_ends + self.spec.reveal

    @property
    def delivery_deadline(self) -> datetime:
        return self.reveal_ends + self.spec.delivery

    @property
    def escrow_deadline(self) -> datetime:
        """The deadline the escrow is opened with, after which the requester may take its
        deposit back on chain by itself: the latest a delivery's review window can close, and
        `SETTLEMENT_GRACE` for the service to settle. Before it only the operator's settlement
        moves the money, so a requester cannot take back a deposit its team's work has
        earned while the work is reviewed or settled."""
        return self.delivery_deadline + self.spec.review + SETTLEMENT_GRACE

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "state": self.state,
            "requester": self.requester,
            "spec": self.spec.to_json(),
            **self._after_spec(),
        }

    def json_text(self, state: str) -> str:
        """`to_json()` with `state` for the stored state (the clock's, `clock_state`), as
        `compact_json` encodes it; all but the state is encoded once per Task (the task
        lists hand out one Task per view row, `accord.market.views.listed_task`). Raises
        ValueError for a spec that JSON cannot hold (a check weight that is no finite
        number)."""
        before, after = self._json_around_state
        return f"{before}{compact_json(state)}{after}"

    @cached_property
    def _json_around_state(self) -> tuple[str, str]:
        """`to_json()`'s text before and after the state's value."""
        before = compact_json({"task_id": self.task_id})[:-1]
        after = compact_json(self._after_spec())[1:]
        requester = compact_json(self.requester)
        return (
            f'{before},"state":',
            f',"requester":{requester},"spec":{self.spec.json_text},{after}',
        )

    def _after_spec(self) -> dict[str, Any]:
        """`to_json()`'s fields after the spec, in order."""
        return {
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
    """Apply one event. A repeat of a once-per-task event already applied is kept aside in
    `duplicates`. Raises TransitionError when the lifecycle does not allow it and TaskError
    when the event is malformed."""
    if task is not None and event.kind in ONCE_PER_TASK and _applied(task, event.kind):
        return replace(task, duplicates=(*task.duplicates, event.index))
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
            if task.state == "closed":
                # Its deposit came after all, once the posting was closed: it goes back (the
                # lifecycle refunds an expired escrowed task), the task stays ended.
                return replace(task, state="expired", escrowed=True)
            _require(task, "posted", "escrowed")
            return replace(task, state="bidding", escrowed=True)
        case "bid.committed" | "bid.revealed" | "review.given":
            # Bids and reviews do not move the task; their windows are checked on admission.
            return task
        case "task.awarded":
            _require(task, "bidding", "awarded")
            return replace(
                task,
                state="awarded",
                winner=str(event.body["winner"]),
                price=Wei(int(event.body["price"])),
            )
        case "task.expired":
            # No valid bid was revealed, or the winner did not deliver by the deadline.
            _require(task, ("bidding", "awarded", "running"), "expired")
            return replace(task, state="expired")
        case "escrow.refunded":
            _require(task, ("expired", "posted"), "refunded")
            return replace(task, state="refunded")
        case "task.started":
            _require(task, "awarded", "started")
            return replace(task, state="running")
        case "task.delivered":
            _require(task, "running", "delivered")
            return replace(
                task, state="delivered", delivered_index=event.index, delivered_at=event.at
            )
        case "task.settled":
            _require(task, "delivered", "settled")
            return replace(task, state="settled")
        case "task.cancelled":
            _require(task, "posted", "cancelled")
            if event.actor != task.requester:
                raise TaskError(f"only the requester {task.requester} cancels {task.task_id}")
            return replace(task, state="cancelled")
        case "task.closed":
            if task.state != "posted":
                # Its deposit was logged, or its requester cancelled it, first (another
                # process): the close changes nothing.
                return task
            if event.at < task.bidding_ends:
                raise TaskError(
                    f"{task.task_id} is closed at {event.at.isoformat()}, before its bidding "
                    f"window ended at {task.bidding_ends.isoformat()}"
                )
            return replace(task, state="closed")
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


def _applied(task: Task, kind: str) -> bool:
    """Whether the once-per-task event `kind` is already folded into `task` (pure)."""
    match kind:
        case "escrow.opened":
            return task.escrowed
        case "task.awarded":
            return task.winner is not None
        case "task.expired":  # a refund follows an expiry, or a never escrowed posting
            return task.state == "expired" or (task.state == "refunded" and task.escrowed)
        case "escrow.refunded":
            return task.state == "refunded"
        case "task.started":
            return task.state in ("running", "delivered", "settled")
        case "task.delivered":
            return task.delivered_index is not None
        case "task.settled":
            return task.state == "settled"
        case "task.closed":
            return task.state == "closed"
        case _:
            return False


def _require(task: Task, states: TaskState | tuple[TaskState, ...], action: str) -> None:
    allowed = (states,) if isinstance(states, str) else states
    if task.state not in allowed:
        raise TransitionError(task.task_id, task.state, action)


_DURATION = re.compile(r"^\s*([0-9]+)\s*(s|m|h|d)\s*$")
_BARE_NUMBER = re.compile(r"^\s*([0-9]{1,30})\s*$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_TEXT = 40
_MAX_SECONDS = int(MAX_WINDOW.total_seconds())


def duration_seconds(text: str) -> int | None:
    """The seconds `text` names: `30s`, `5m`, `2h` or `1d`, spaces around allowed; None for
    anything else (a bare number among them: `30` could mean seconds or minutes) or more than
    MAX_DURATION_TEXT characters. Pure; the caller bounds it (`parse_window`)."""
    match = _DURATION.match(text) if len(text) <= MAX_DURATION_TEXT else None
    if match is None:
        return None
    return int(match.group(1)) * _DURATION_UNITS[match.group(2)]


def duration_hint(text: str) -> str:
    """Pure: how to write `text` as a duration: `write 30s` for a bare `30`, else examples."""
    bare = _BARE_NUMBER.match(text)
    if bare is not None:
        return f"a duration needs a unit: write {bare.group(1)}s (or m, h, d)"
    return "write e.g. 30s, 5m, 2h or 1d"


def parse_window(value: Any, what: str) -> timedelta:
    """`30s`, `5m`, `2h` or `1d`, within 1 s and 30 days (a bare number is refused: the money
    rides on whether `30` meant seconds or minutes).

    Raises LimitError beyond 30 days, TaskError for anything else.
    """
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    seconds = duration_seconds(text) if isinstance(text, str) else None
    if seconds is None:
        if isinstance(text, str) and _DURATION.match(text):  # digits past the length limit
            raise LimitError(f"the {what} window {text!r} is beyond 30 days", _MAX_SECONDS)
        hint = duration_hint(text) if isinstance(text, str) else "write e.g. 30s, 5m or 2h"
        raise TaskError(f"the {what} window {value!r} is not a duration: {hint}")
    if seconds > _MAX_SECONDS:
        raise LimitError(f"the {what} window {value!r} is beyond 30 days", _MAX_SECONDS)
    window = timedelta(seconds=seconds)
    if window < MIN_WINDOW:
        raise TaskError(f"the {what} window must be at least 1 s, not {value!r}")
    return window


REQUEST_FIELDS = {
    "title",
    "description",
    "budget",
    "bidding",
    "reveal",
    "delivery",
    "review",
    "rule",
    "parts",
    "checks",
}


def request_of(logged: Any) -> dict[str, Any]:
    """Pure: a spec as `task.posted` logs it (`TaskSpec.to_json`) written back as a request
    (the body of `POST /tasks`), so that `spec_from_request` normalizes it again and a
    requester's own `task.posted` can be checked against what the service would log.

    Raises WorkError when `logged` is not a logged spec.
    """
    if not isinstance(logged, Mapping):
        raise WorkError("$.spec: the entry's body has no task spec (a JSON object)", path="$.spec")
    try:
        request = {
            "title": logged["title"],
            "description": logged["description"],
            "budget": str(logged["budget"]),
            "bidding": f"{int(logged['bidding_seconds'])}s",
            "reveal": f"{int(logged['reveal_seconds'])}s",
            "delivery": f"{int(logged['delivery_seconds'])}s",
            "review": f"{int(logged['review_seconds'])}s",
            "rule": logged["rule"],
            "parts": logged["parts"],
            "checks": logged["checks"],
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise WorkError(
            f"$.spec: not a task spec as POST /tasks/prepare gives it (missing or bad {exc})",
            path="$.spec",
        ) from exc
    return request


def spec_from_request(
    data: Any, files: Mapping[str, tuple[str, str]], *, budget: Wei | None = None
) -> TaskSpec:
    """A spec from what a requester sends (a spec file, or the body of `POST /tasks`):

        {"title", "description", "budget": "0.5eth", "bidding": "30s", "reveal": "30s",
         "delivery": "10m", "review": "1h", "rule", "parts", "checks"}

    `files` maps the sha256 of every file the inputs reference to its (name, text). `budget`,
    when given, is the budget already parsed by the caller. Raises WorkError naming the JSON
    path of the first problem, TaskError or AmountError for the terms.
    """
    if not isinstance(data, Mapping):
        raise WorkError("a task spec is a JSON object")
    if "pay_by_quality" in data:
        raise WorkError(
            "$.pay_by_quality: every task is now paid by the share of its checks' weight that "
            "passes (the rest goes back to you); remove the field",
            path="$.pay_by_quality",
        )
    unknown = set(data) - REQUEST_FIELDS
    if unknown:
        name = sorted(unknown)[0]
        raise WorkError(
            f"$.{name}: unknown field (known: {', '.join(sorted(REQUEST_FIELDS))})",
            path=f"$.{name}",
        )
    text_of = {sha: text for sha, (_, text) in files.items()}
    parts = parse_parts(data.get("parts"), text_of)
    checks = parse_checks(data.get("checks"), parts) if data.get("checks") else ()
    referenced = {sha for part in parts for sha in file_refs(part.input)}
    rule = data.get("rule", "second-score")
    if rule not in PAYMENT_RULES:
        raise TaskError(f"the payment rule must be one of {', '.join(PAYMENT_RULES)}")
    amount = budget
    if amount is None:
        raw_budget = data.get("budget")
        if not isinstance(raw_budget, str | int) or isinstance(raw_budget, bool):
            raise WorkError(
                '$.budget: write the most the task pays, e.g. "0.5eth"', path="$.budget"
            )
        amount = parse_amount(str(raw_budget))
    return TaskSpec(
        title=data.get("title", ""),
        description=data.get("description", ""),
        parts=parts,
        checks=checks,
        files={
            sha: {"name": files[sha][0], "size": len(files[sha][1].encode())}
            for sha in sorted(referenced)
        },
        budget=amount,
        bidding=parse_window(data.get("bidding", "30s"), "bidding"),
        reveal=parse_window(data.get("reveal", "30s"), "reveal"),
        delivery=parse_window(data.get("delivery", "10m"), "delivery"),
        review=parse_window(data.get("review", "1h"), "review"),
        rule=rule,
    )
