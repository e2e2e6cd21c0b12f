"""Capability exams as ledger transcripts: commit, answer, grade, reveal, and re-grade.

One exam of one agent in one capability leaves these signed events, all with `subject` = the
exam id:

    exam.committed   by the operator   agent DID, capability, seed commitment, server nonce,
                                       item ids, per-item deadlines, start time
    exam.answered    by the AGENT      exam id, item id, answer            (one per answered item)
    exam.graded      by the operator   the revealed seed, per-item grades, earned/possible,
                                       passed, the log indices of the answers graded

Items are `capability.generate(item_seed(seed, agent_did, server_nonce), n)`, so answers copied
from another agent's or another attempt's exam answer different questions (and name item ids
that are not in this exam, which `answer` refuses outright). Anyone holding the log can run
`regrade_from_events` (on the verified events; `regrade_from_ledger` reads them from a store) to
regenerate the items from the revealed seed and re-grade the answers.

The pure core (`plan_exam`, `check_answer`, `check_rate_limit`, `grade_answers`) takes times,
seeds and nonces as arguments. `ExamService` is the edge: it draws the randomness, reads the
clock, keeps the secret seed and the attempt history in one small SQL table
(`identity_exam_attempts`) until the reveal, and appends the events through the `Ledger`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, Engine, delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Column, Field, SQLModel

from accord.identity.challenges import (
    JSON,
    Capability,
    ExamItem,
    Grade,
    get_capability,
    grade_before_deadline,
    item_seed,
    passes,
    score,
    seed_commitment,
)
from accord.identity.challenges.base import MAX_ITEMS_PER_CALL
from accord.identity.challenges.sandbox import check_box
from accord.identity.errors import (
    DeadlineError,
    ExamConflict,
    ExamError,
    RateLimitedError,
    SandboxUnavailable,
)
from accord.ledger.canonical import JSONValue
from accord.ledger.database import create_tables, db_reason
from accord.ledger.errors import LedgerError
from accord.ledger.events import Entry, Event, format_time, parse_time
from accord.ledger.service import Ledger
from accord.ledger.signing import Signer
from accord.ledger.store import LogStore
from accord.ledger.views import from_micros, micros

COMMITTED = "exam.committed"
ANSWERED = "exam.answered"
GRADED = "exam.graded"

SEED_BYTES = 32
NONCE_BYTES = 16
DEFAULT_SECONDS_PER_ITEM = 60
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_ATTEMPT_WINDOW = timedelta(hours=1)


# --- the pure core ------------------------------------------------------------------------


@dataclass(frozen=True)
class ExamPlan:
    """What the operator commits to before the exam (the body of `exam.committed`).

    `deadlines[i]` is the deadline of `item_ids[i]`: item i is due (i + 1) * seconds_per_item
    after the start, so an agent that answers in order has the same time for each item.
    """

    exam_id: str
    agent_did: str
    capability: str
    commitment: str
    server_nonce: bytes
    started_at: datetime
    item_ids: tuple[str, ...]
    deadlines: tuple[datetime, ...]

    def deadline_of(self, item_id: str) -> datetime:
        """Raises ExamError when `item_id` is not an item of this exam."""
        try:
            return self.deadlines[self.item_ids.index(item_id)]
        except ValueError:
            raise ExamError(f"item {item_id!r} is not part of exam {self.exam_id}") from None

    def to_body(self) -> dict[str, JSONValue]:
        return {
            "exam_id": self.exam_id,
            "agent": self.agent_did,
            "capability": self.capability,
            "seed_commitment": self.commitment,
            "server_nonce": self.server_nonce.hex(),
            "started_at": format_time(self.started_at),
            "item_ids": list(self.item_ids),
            "deadlines": [format_time(moment) for moment in self.deadlines],
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ExamPlan:
        """Raises ExamError when `body` is not an `exam.committed` body."""
        try:
            item_ids = tuple(str(item) for item in body["item_ids"])
            deadlines = tuple(parse_time(text) for text in body["deadlines"])
            plan = cls(
                exam_id=str(body["exam_id"]),
                agent_did=str(body["agent"]),
                capability=str(body["capability"]),
                commitment=str(body["seed_commitment"]),
                server_nonce=bytes.fromhex(body["server_nonce"]),
                started_at=parse_time(body["started_at"]),
                item_ids=item_ids,
                deadlines=deadlines,
            )
        except (KeyError, TypeError, ValueError, LedgerError) as exc:
            raise ExamError(f"malformed {COMMITTED} body: {exc}") from exc
        if len(plan.item_ids) != len(plan.deadlines):
            raise ExamError(f"malformed {COMMITTED} body: item ids and deadlines differ in number")
        return plan


def exam_items(capability: Capability, plan: ExamPlan, exam_seed: bytes) -> list[ExamItem]:
    """The items of `plan`, regenerated from the (revealed) seed.

    Raises ExamError when the seed does not match the plan's commitment or the regenerated item
    ids are not the committed ones.
    """
    if seed_commitment(exam_seed) != plan.commitment:
        raise ExamError(f"exam {plan.exam_id}: the seed does not match its commitment")
    seed = item_seed(exam_seed, plan.agent_did, plan.server_nonce)
    items = capability.generate(seed, len(plan.item_ids))
    if tuple(item.item_id for item in items) != plan.item_ids:
        raise ExamError(f"exam {plan.exam_id}: the regenerated items are not the committed ones")
    return items


def plan_exam(
    capability: Capability,
    *,
    exam_id: str,
    agent_did: str,
    exam_seed: bytes,
    server_nonce: bytes,
    started_at: datetime,
    item_count: int,
    seconds_per_item: int = DEFAULT_SECONDS_PER_ITEM,
) -> tuple[ExamPlan, list[ExamItem]]:
    """The plan to commit to and the items to hand out (pure).

    Raises ExamError for a short seed or nonce, a non-DID agent, an item count outside
    1..1000, a non-positive `seconds_per_item` or a naive `started_at`.
    """
    if isinstance(item_count, bool) or not 1 <= item_count <= MAX_ITEMS_PER_CALL:
        raise ExamError(f"an exam has 1..{MAX_ITEMS_PER_CALL} items, not {item_count!r}")
    if seconds_per_item <= 0:
        raise ExamError("seconds_per_item must be positive")
    if started_at.tzinfo is None:
        raise ExamError("the start time must be timezone-aware")
    seed = item_seed(exam_seed, agent_did, server_nonce)
    items = capability.generate(seed, item_count)
    # Times are logged to the millisecond; keep them exact so the log and memory agree.
    start = started_at.replace(microsecond=started_at.microsecond // 1000 * 1000)
    plan = ExamPlan(
        exam_id=exam_id,
        agent_did=agent_did,
        capability=capability.name,
        commitment=seed_commitment(exam_seed),
        server_nonce=server_nonce,
        started_at=start,
        item_ids=tuple(item.item_id for item in items),
        deadlines=tuple(
            start + timedelta(seconds=seconds_per_item * (i + 1)) for i in range(item_count)
        ),
    )
    return plan, items


def check_answer(
    plan: ExamPlan,
    *,
    answerer: str,
    item_id: str,
    answered_at: datetime,
    already_answered: Sequence[str] = (),
) -> None:
    """Whether `answerer` may answer `item_id` of `plan` at `answered_at` (pure).

    Raises ExamError when the answerer is not the examined agent, the item is not in this exam
    or was already answered; DeadlineError when the item's deadline has passed.
    """
    if answerer != plan.agent_did:
        raise ExamError(f"exam {plan.exam_id} is {plan.agent_did}'s, not {answerer}'s")
    deadline = plan.deadline_of(item_id)
    if item_id in already_answered:
        raise ExamError(f"item {item_id} of exam {plan.exam_id} is already answered")
    if answered_at > deadline:
        raise DeadlineError(
            f"item {item_id}: answered at {format_time(answered_at)}, "
            f"deadline {format_time(deadline)}"
        )


def check_rate_limit(
    previous_starts: Sequence[datetime],
    now: datetime,
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    window: timedelta = DEFAULT_ATTEMPT_WINDOW,
) -> None:
    """Allow at most `max_attempts` exam starts in any `window` (pure).

    Raises RateLimitedError with `retry_after` (seconds until the oldest attempt in the window
    leaves it) when `max_attempts` attempts already started within `window` before `now`.
    """
    recent = sorted(start for start in previous_starts if now - window < start <= now)
    if len(recent) < max_attempts:
        return
    oldest_that_counts = recent[len(recent) - max_attempts]
    retry_after = (oldest_that_counts + window - now).total_seconds()
    raise RateLimitedError(
        f"{len(recent)} exam attempts in the last {window}; try again in {retry_after:.0f} s",
        retry_after=retry_after,
    )


@dataclass(frozen=True)
class LoggedAnswer:
    """A signed answer as read from the log."""

    index: int
    item_id: str
    answer: JSON
    at: datetime


def grade_answers(
    capability: Capability,
    plan: ExamPlan,
    items: Sequence[ExamItem],
    answers: Mapping[str, LoggedAnswer],
) -> list[Grade]:
    """One grade per item, in item order: an answer logged after its deadline earns nothing,
    and an unanswered item is graded as the answer `null` (which earns nothing).

    Raises ExamError when an item cannot be graded (for `python`: the sandbox cannot start).
    """
    grades = []
    for item, deadline in zip(items, plan.deadlines, strict=True):
        logged = answers.get(item.item_id)
        if logged is None:
            grade = capability.grade(item, None)
            grades.append(Grade(item.item_id, 0, grade.possible, "no answer"))
            continue
        try:
            grades.append(
                grade_before_deadline(
                    capability, item, logged.answer, answered_at=logged.at, deadline=deadline
                )
            )
        except DeadlineError as exc:
            possible = capability.grade(item, None).possible
            grades.append(Grade(item.item_id, 0, possible, str(exc)))
    return grades


def runs_code(capability: Capability) -> bool:
    """Whether grading `capability` runs the answers as code (then it needs the box)."""
    return bool(getattr(capability, "runs_code", False))


def grade_json(grade: Grade) -> dict[str, JSONValue]:
    return {
        "item_id": grade.item_id,
        "earned": grade.earned,
        "possible": grade.possible,
        "reason": grade.reason,
    }


# --- re-grading from the log's verified events (pure) -----------------------------------------


def _exam_events(
    events: Iterable[tuple[int, Event]], kind: str, exam_id: str, actor: str | None = None
) -> list[tuple[int, Event]]:
    return [
        (index, event)
        for index, event in events
        if event.kind == kind
        and event.subject == exam_id
        and (actor is None or event.actor == actor)
    ]


def plan_from_events(
    exam_id: str, events: Iterable[tuple[int, Event]], operator_did: str | None = None
) -> ExamPlan:
    """The committed plan of `exam_id` among verified `events` (log index, event). Pure.

    Raises ExamError when there is no (or more than one) `exam.committed` event for it signed
    by `operator_did` (any signer when None), or its body is not a plan.
    """
    committed = _exam_events(events, COMMITTED, exam_id, operator_did)
    if len(committed) != 1:
        raise ExamError(f"no single {COMMITTED} event for exam {exam_id!r}")
    return ExamPlan.from_body(committed[0][1].body)


def answers_from_events(
    plan: ExamPlan, events: Iterable[tuple[int, Event]]
) -> dict[str, LoggedAnswer]:
    """The agent's answers of `plan` among verified `events`, in log order, first answer per
    item (later ones, and answers naming no item of the plan, are ignored). Pure."""
    answers: dict[str, LoggedAnswer] = {}
    for index, event in _exam_events(events, ANSWERED, plan.exam_id, plan.agent_did):
        body = event.body
        item_id = body.get("item_id")
        if body.get("exam_id") != plan.exam_id or not isinstance(item_id, str):
            continue
        if item_id in plan.item_ids and item_id not in answers:
            answer: Any = body.get("answer")
            answers[item_id] = LoggedAnswer(index, item_id, answer, parse_time(event.at))
    return answers


def regrade_from_events(
    exam_id: str, events: Sequence[tuple[int, Event]], operator_did: str | None = None
) -> tuple[int, int]:
    """Re-grade exam `exam_id` from the log's verified `events` (log index, event, in log
    order; those of other exams are skipped); returns (earned, possible). Pure but for
    grading code answers in the box.

    Takes the committed plan, the revealed seed (checked against the commitment), regenerates
    the items, re-grades the agent's answers and compares with the logged score.
    Raises ExamError when the exam is not graded, the seed does not match, the items differ
    from the committed ones, or the re-graded score is not the logged one.
    """
    plan = plan_from_events(exam_id, events, operator_did)
    graded = _exam_events(events, GRADED, exam_id, operator_did)
    if len(graded) != 1:
        raise ExamError(f"exam {exam_id!r} has no single {GRADED} event")
    body = graded[0][1].body
    try:
        seed = bytes.fromhex(str(body["seed"]))
        logged = (int(str(body["earned"])), int(str(body["possible"])))
    except (KeyError, ValueError) as exc:
        raise ExamError(f"malformed {GRADED} body: {exc}") from exc
    capability = get_capability(plan.capability)
    items = exam_items(capability, plan, seed)
    regraded = score(grade_answers(capability, plan, items, answers_from_events(plan, events)))
    if regraded != logged:
        raise ExamError(
            f"exam {exam_id}: re-graded {regraded[0]}/{regraded[1]}, "
            f"but the log says {logged[0]}/{logged[1]}"
        )
    return regraded


# --- reading transcripts from the log (the edge) ---------------------------------------------


def _verified_events(
    store: LogStore, exam_id: str, kinds: tuple[str, ...], actor: str | None = None
) -> list[tuple[int, Event]]:
    """The entries of `exam_id` of `kinds` (by `actor`, when given), each signature checked.
    Raises SignatureError when an entry does not verify."""
    limit = len(kinds) * (MAX_ITEMS_PER_CALL + 10)
    found = store.find(kinds=kinds, subject=exam_id, actor=actor, limit=limit)
    pairs = []
    for stored in found:
        entry = Entry.from_bytes(stored.data)
        entry.verify()
        pairs.append((stored.index, entry.event))
    return pairs


def read_plan(store: LogStore, exam_id: str, operator_did: str | None = None) -> ExamPlan:
    """The committed plan of `exam_id` (`plan_from_events`).

    Raises ExamError when there is no (or more than one) `exam.committed` event for it, or it
    is not signed by `operator_did` (when given); SignatureError when an entry does not verify.
    """
    events = _verified_events(store, exam_id, (COMMITTED,), operator_did)
    return plan_from_events(exam_id, events, operator_did)


def read_answers(store: LogStore, plan: ExamPlan) -> dict[str, LoggedAnswer]:
    """The agent's signed answers of `plan`, first answer per item (`answers_from_events`).

    Raises SignatureError when an entry does not verify.
    """
    return answers_from_events(
        plan, _verified_events(store, plan.exam_id, (ANSWERED,), plan.agent_did)
    )


def regrade_from_ledger(
    store: LogStore, exam_id: str, operator_did: str | None = None
) -> tuple[int, int]:
    """Re-grade exam `exam_id` from the log alone; returns (earned, possible): its entries
    read from `store`, each signature checked, then `regrade_from_events`.

    Raises ExamError when the exam is not graded, the seed does not match, the items differ
    from the committed ones, or the re-graded score is not the logged one; SignatureError when
    an entry does not verify.
    """
    events = _verified_events(store, exam_id, (COMMITTED, ANSWERED, GRADED))
    return regrade_from_events(exam_id, events, operator_did)


# --- the service (SQL + ledger edge) ------------------------------------------------------


class ExamAttempt(SQLModel, table=True):
    """One exam attempt. The seed is the operator's secret until `exam.graded` reveals it.

    Times are UTC microseconds since the Unix epoch.
    """

    __tablename__ = "identity_exam_attempts"

    exam_id: str = Field(primary_key=True)
    agent_did: str = Field(index=True)
    capability: str = Field(index=True)
    started_at: int = Field(sa_column=Column(BigInteger, nullable=False, index=True))
    seed_hex: str
    graded: bool = False


_ATTEMPTS = ExamAttempt.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ExamSession:
    """A started exam as the agent sees it: items without their private grading data."""

    exam_id: str
    plan: ExamPlan
    committed_index: int
    items: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class ExamResult:
    """A graded exam: the score, whether it passed, and where the grading is logged."""

    exam_id: str
    agent_did: str
    capability: str
    earned: int
    possible: int
    passed: bool
    item_count: int
    seed_commitment: str
    graded_index: int
    grades: tuple[Grade, ...]


GRADE_RECHECKS = 3
"""How often an exam's answers are graded again when one was logged while they were graded."""


@dataclass(frozen=True)
class _Graded:
    """What grading an exam's logged answers came to, before it is logged."""

    plan: ExamPlan
    seed: bytes
    item_count: int
    grades: tuple[Grade, ...]
    answer_indices: list[int]
    passed: bool
    sandbox: str | None


class ExamService:
    """Runs exams against the ledger; the clock (default: the ledger's, so deadlines are
    checked against the times the answers are logged with) and the randomness are passed in.

    Raises ExamError when its table cannot be prepared.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        clock: Callable[[], datetime] | None = None,
        random_bytes: Callable[[int], bytes] = os.urandom,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        attempt_window: timedelta = DEFAULT_ATTEMPT_WINDOW,
        seconds_per_item: int = DEFAULT_SECONDS_PER_ITEM,
    ) -> None:
        self.ledger = ledger
        self.clock = ledger.clock if clock is None else clock
        self.random_bytes = random_bytes
        self.max_attempts = max_attempts
        self.attempt_window = attempt_window
        self.seconds_per_item = seconds_per_item
        self.engine: Engine = ledger.store.engine
        try:
            create_tables(self.engine, [_ATTEMPTS])
        except SQLAlchemyError as exc:
            raise ExamError(f"cannot prepare the exam table: {db_reason(exc)}") from exc

    @property
    def operator_did(self) -> str:
        return self.ledger.operator.did

    def start(
        self, agent_did: str, capability_name: str, item_count: int | None = None
    ) -> ExamSession:
        """Commit to a fresh seed and hand out the items of a new exam.

        Raises ExamError for an unknown capability, a bad DID or item count; RateLimitedError
        when the agent started too many attempts at this capability within the window; and
        what `Ledger.append` raises (nothing is kept when the commit cannot be logged).
        """
        capability = get_capability(capability_name)
        if runs_code(capability):
            try:
                check_box()
            except SandboxUnavailable as exc:
                raise SandboxUnavailable(
                    f"the {capability.name} exam is unavailable here: {exc}"
                ) from exc
        now = self.clock()
        exam_id = "exam-" + self.random_bytes(16).hex()
        exam_seed = self.random_bytes(SEED_BYTES)
        plan, items = plan_exam(
            capability,
            exam_id=exam_id,
            agent_did=agent_did,
            exam_seed=exam_seed,
            server_nonce=self.random_bytes(NONCE_BYTES),
            started_at=now,
            item_count=capability.item_count if item_count is None else item_count,
            seconds_per_item=self.seconds_per_item,
        )
        self._record_attempt(plan, exam_seed, now)
        try:
            index, _ = self.ledger.append(
                self.ledger.operator, COMMITTED, subject=exam_id, body=plan.to_body()
            )
        except BaseException:
            self._forget_attempt(exam_id)
            raise
        return ExamSession(exam_id, plan, index, tuple(item.for_agent() for item in items))

    def answer(self, agent: Signer, exam_id: str, item_id: str, answer: JSON) -> int:
        """Log `answer` to `item_id`, signed by the agent; returns its log index.

        Raises ExamConflict when the exam is already graded; ExamError when it is unknown, the
        signer is not the examined agent, the item is not in this exam or already answered;
        DeadlineError after the item's deadline; and what `Ledger.append` raises.
        """
        row = self._attempt(exam_id)
        if row.graded:
            raise ExamConflict(f"exam {exam_id} is already graded")
        plan = read_plan(self.ledger.store, exam_id, self.operator_did)
        answered = (
            list(read_answers(self.ledger.store, plan)) if agent.did == plan.agent_did else []
        )
        check_answer(
            plan,
            answerer=agent.did,
            item_id=item_id,
            answered_at=self.clock(),
            already_answered=answered,
        )
        body: dict[str, JSONValue] = {"exam_id": exam_id, "item_id": item_id, "answer": answer}
        index, _ = self.ledger.append(agent, ANSWERED, subject=exam_id, body=body)
        return index

    def grade(
        self,
        exam_id: str,
        *,
        lock: contextlib.AbstractContextManager[Any] | None = None,
        then: Callable[[ExamResult], None] | None = None,
    ) -> ExamResult:
        """Grade the logged answers, reveal the seed and log `exam.graded`.

        `lock` (the service's write lock) is held only to log the grades and run `then` (the
        onboarding issues the credential there): the answers, which a `python` exam runs as
        strangers' code in the box, are graded before it is taken, and their grades are
        logged under it only when the exam is still ungraded and no answer was logged
        meanwhile (else they are graded again, at most `GRADE_RECHECKS` times).

        Raises ExamConflict when the exam is already graded or its answers kept changing while
        they were graded; ExamError when it is unknown or an item cannot be graded; and what
        `Ledger.append` and `then` raise.
        """
        held = contextlib.nullcontext() if lock is None else lock
        for _ in range(GRADE_RECHECKS):
            graded = self._graded(exam_id)  # strangers' code, for python answers: unlocked
            with held:
                if self._attempt(exam_id).graded:
                    raise ExamConflict(f"exam {exam_id} is already graded")
                answers = read_answers(self.ledger.store, graded.plan)
                if sorted(logged.index for logged in answers.values()) != graded.answer_indices:
                    continue  # an answer was logged while they were graded: grade them again
                result = self._log_graded(graded)
                if then is not None:
                    then(result)
                return result
        raise ExamConflict(
            f"exam {exam_id}'s answers kept changing while they were graded; ask again"
        )

    def _graded(self, exam_id: str) -> _Graded:
        """The grades of the answers logged now (no lock is needed: the log is only read).
        Raises ExamConflict when the exam is already graded, ExamError when it is unknown or
        an item cannot be graded."""
        row = self._attempt(exam_id)
        if row.graded:
            raise ExamConflict(f"exam {exam_id} is already graded")
        store = self.ledger.store
        plan = read_plan(store, exam_id, self.operator_did)
        capability = get_capability(plan.capability)
        seed = bytes.fromhex(row.seed_hex)
        items = exam_items(capability, plan, seed)
        answers = read_answers(store, plan)
        grades = grade_answers(capability, plan, items, answers)
        sandbox = check_box() if runs_code(capability) else None  # the mode they ran in
        return _Graded(
            plan=plan,
            seed=seed,
            item_count=len(items),
            grades=tuple(grades),
            answer_indices=sorted(logged.index for logged in answers.values()),
            passed=passes(capability, *score(grades)),
            sandbox=sandbox,
        )

    def _log_graded(self, graded: _Graded) -> ExamResult:
        """Log `exam.graded` for `graded` and mark the attempt graded (the caller holds the
        write lock). Raises what `Ledger.append` raises."""
        plan = graded.plan
        earned, possible = score(list(graded.grades))
        body: dict[str, JSONValue] = {
            "exam_id": plan.exam_id,
            "agent": plan.agent_did,
            "capability": plan.capability,
            "seed": graded.seed.hex(),
            "grades": [grade_json(grade) for grade in graded.grades],
            "answer_indices": list(graded.answer_indices),
            "earned": earned,
            "possible": possible,
            "passed": graded.passed,
        }
        if graded.sandbox is not None:
            body["sandbox"] = graded.sandbox
        index, _ = self.ledger.append(self.ledger.operator, GRADED, subject=plan.exam_id, body=body)
        self._mark_graded(plan.exam_id)
        return ExamResult(
            exam_id=plan.exam_id,
            agent_did=plan.agent_did,
            capability=plan.capability,
            earned=earned,
            possible=possible,
            passed=graded.passed,
            item_count=graded.item_count,
            seed_commitment=plan.commitment,
            graded_index=index,
            grades=graded.grades,
        )

    # -- entries the agent signed itself --

    def answer_signed(self, entry: Entry) -> int:
        """Log an `exam.answered` entry the examined agent signed itself; returns its index.

        The entry's subject is the exam id and its body `{exam_id, item_id, answer}`. Raises
        ExamError when the entry does not verify, is not an answer of this exam by its agent, the
        exam is unknown or graded, or the item is not in it or already answered; DeadlineError
        after the item's deadline (by the service's clock or the entry's time); and what
        `Ledger.append_entries` raises (SequenceError for a seq that is not the agent's next).
        """
        event = entry.event
        exam_id = event.subject
        body = event.body
        item_id = body.get("item_id")
        if not isinstance(item_id, str) or "answer" not in body:
            raise ExamError("an exam.answered body is {exam_id, item_id, answer}")
        row = self._attempt(exam_id)
        if row.graded:
            raise ExamConflict(f"exam {exam_id} is already graded")
        plan = read_plan(self.ledger.store, exam_id, self.operator_did)
        now = self.clock()
        check_agent_entry(
            entry,
            actor=plan.agent_did,
            kind=ANSWERED,
            subject=exam_id,
            body=answer_body(exam_id, item_id, body["answer"]),
            now=now,
        )
        check_answer(
            plan,
            answerer=event.actor,
            item_id=item_id,
            answered_at=max(now, parse_time(event.at)),
            already_answered=list(read_answers(self.ledger.store, plan)),
        )
        (index,) = self.ledger.append_entries([entry])
        return index

    def exam_agent(self, exam_id: str) -> str:
        """The DID of the agent `exam_id` examines. Raises ExamError for an unknown exam."""
        return str(self._attempt(exam_id).agent_did)

    # -- the attempts table --

    def _record_attempt(self, plan: ExamPlan, exam_seed: bytes, now: datetime) -> None:
        """Check the rate limit and record the attempt in one transaction (serialised writers)."""
        since = micros(now - self.attempt_window)
        try:
            with self.engine.begin() as connection:
                starts = connection.execute(
                    select(_ATTEMPTS.c.started_at).where(
                        _ATTEMPTS.c.agent_did == plan.agent_did,
                        _ATTEMPTS.c.capability == plan.capability,
                        _ATTEMPTS.c.started_at > since,
                    )
                ).scalars()
                check_rate_limit(
                    [from_micros(int(value)) for value in starts],
                    now,
                    max_attempts=self.max_attempts,
                    window=self.attempt_window,
                )
                connection.execute(
                    insert(_ATTEMPTS).values(
                        exam_id=plan.exam_id,
                        agent_did=plan.agent_did,
                        capability=plan.capability,
                        started_at=micros(now),
                        seed_hex=exam_seed.hex(),
                        graded=False,
                    )
                )
        except SQLAlchemyError as exc:
            raise ExamError(f"cannot record the exam attempt: {db_reason(exc)}") from exc

    def _forget_attempt(self, exam_id: str) -> None:
        with self.engine.begin() as connection:
            connection.execute(delete(_ATTEMPTS).where(_ATTEMPTS.c.exam_id == exam_id))

    def _attempt(self, exam_id: str) -> Any:
        try:
            with self.engine.begin() as connection:
                row = connection.execute(
                    select(_ATTEMPTS).where(_ATTEMPTS.c.exam_id == exam_id)
                ).first()
        except SQLAlchemyError as exc:
            raise ExamError(f"cannot read the exam attempts: {db_reason(exc)}") from exc
        if row is None:
            raise ExamError(f"no exam {exam_id!r}")
        return row

    def _mark_graded(self, exam_id: str) -> None:
        with self.engine.begin() as connection:
            connection.execute(
                update(_ATTEMPTS).where(_ATTEMPTS.c.exam_id == exam_id).values(graded=True)
            )


# --- entries the agent signed itself (a remote agent holds its own key) -------------------

#: How far the time of an entry an agent signed itself may be from the service's clock.
DEFAULT_ENTRY_SKEW = timedelta(seconds=120)


def check_agent_entry(
    entry: Entry,
    *,
    actor: str,
    kind: str,
    subject: str,
    body: Mapping[str, Any],
    now: datetime,
    skew: timedelta = DEFAULT_ENTRY_SKEW,
) -> None:
    """Check an entry an agent signed itself before the service appends it: its signature, that
    its actor is `actor` (the authenticated caller), its kind and subject are the expected ones,
    its body is exactly `body` (what the service would have logged) and its time is within
    `skew` of `now`.

    Raises ExamError naming what does not hold (SignatureError, a LedgerError, is wrapped).
    """
    try:
        entry.verify()
    except LedgerError as exc:
        raise ExamError(f"the entry's signature does not verify: {exc}") from exc
    event = entry.event
    if event.actor != actor:
        raise ExamError(f"the entry is signed by {event.actor}, not by the caller {actor}")
    if event.kind != kind:
        raise ExamError(f"the entry is a {event.kind!r} event; this route logs {kind!r}")
    if event.subject != subject:
        raise ExamError(f"the entry's subject is {event.subject!r}, not {subject!r}")
    if dict(event.body) != dict(body):
        raise ExamError(f"the entry's body is not the {kind} body the service expects")
    at = parse_time(event.at)
    if abs(at - now) > skew:
        raise ExamError(
            f"the entry is dated {event.at}, more than {int(skew.total_seconds())} s from the "
            f"service's clock ({format_time(now)}): sign it again with the current time"
        )


def answer_body(exam_id: str, item_id: str, answer: JSON) -> dict[str, JSONValue]:
    """The body of an `exam.answered` event."""
    return {"exam_id": exam_id, "item_id": item_id, "answer": answer}
