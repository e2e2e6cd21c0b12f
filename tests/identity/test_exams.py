"""Exams as ledger transcripts: commit, signed answers, deadlines, rate limits, re-grading."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from accord.identity.errors import DeadlineError, ExamConflict, ExamError, RateLimitedError
from accord.identity.exams import (
    ANSWERED,
    GRADED,
    ExamService,
    check_rate_limit,
    plan_from_events,
    regrade_from_events,
    regrade_from_ledger,
)
from accord.identity.runtimes import ReferenceRuntime
from accord.ledger.database import make_engine
from accord.ledger.events import Entry
from accord.ledger.service import Ledger
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from tests.clocks import Clock

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

REFERENCE = ReferenceRuntime()


@pytest.fixture
def clock() -> Clock:
    return Clock(START)


@pytest.fixture
def ledger(tmp_path: Path, clock: Clock) -> Ledger:
    store = LogStore(make_engine(f"sqlite:///{tmp_path / 'log.db'}"), "test-log")
    return Ledger(store, Ed25519Signer(b"\x01" * 32), clock)


def service(ledger: Ledger, **options: object) -> ExamService:
    return ExamService(ledger, **options)  # type: ignore[arg-type]


def test_regrade_from_the_ledger_equals_the_logged_score(ledger: Ledger, clock: Clock) -> None:
    exams = service(ledger)
    agent = Ed25519Signer.generate()
    session = exams.start(agent.did, "arithmetic", 6)
    for position, item in enumerate(session.items):
        answer = REFERENCE.answer(item) if position % 3 else 12345  # some wrong, one missing
        if position != 5:
            exams.answer(agent, session.exam_id, str(item["item_id"]), answer)
    result = exams.grade(session.exam_id)
    assert (result.earned, result.possible) == (3, 6)
    assert regrade_from_ledger(ledger.store, session.exam_id, ledger.operator.did) == (3, 6)
    graded = Entry.from_bytes(ledger.store.find(kind=GRADED)[0].data).event
    assert graded.actor == ledger.operator.did and graded.body["earned"] == 3
    answers = [Entry.from_bytes(s.data).event for s in ledger.store.find(kind=ANSWERED)]
    assert {event.actor for event in answers} == {agent.did}  # signed by the agent


def test_regrade_is_a_pure_fold_of_the_verified_events(ledger: Ledger) -> None:
    """`regrade_from_events` re-grades from the events alone (another exam's are skipped); an
    answer dropped from them changes the score, and the fold says it does not match."""
    exams = service(ledger)
    agent = Ed25519Signer.generate()
    sessions = [exams.start(agent.did, "arithmetic", 3) for _ in range(2)]
    for session in sessions:
        for item in session.items:
            exams.answer(agent, session.exam_id, str(item["item_id"]), REFERENCE.answer(item))
        exams.grade(session.exam_id)
    events = [(s.index, Entry.from_bytes(s.data).event) for s in ledger.store.entries()]
    exam_id, operator = sessions[0].exam_id, ledger.operator.did
    assert regrade_from_events(exam_id, events, operator) == (3, 3)
    assert plan_from_events(exam_id, events) == sessions[0].plan
    first_answer = next(i for i, e in events if e.kind == ANSWERED and e.subject == exam_id)
    fewer = [(i, e) for i, e in events if i != first_answer]
    with pytest.raises(ExamError, match=r"re-graded 2/3, but the log says 3/3"):
        regrade_from_events(exam_id, fewer, operator)
    with pytest.raises(ExamError, match=r"no single exam\.committed"):
        regrade_from_events(exam_id, events, agent.did)  # the operator signs the plan


def test_regrade_detects_a_score_the_answers_do_not_support(ledger: Ledger) -> None:
    exams = service(ledger)
    agent = Ed25519Signer.generate()
    session = exams.start(agent.did, "arithmetic", 3)
    for item in session.items:
        exams.answer(agent, session.exam_id, str(item["item_id"]), REFERENCE.answer(item))
    result = exams.grade(session.exam_id)
    graded = Entry.from_bytes(ledger.store.entry(result.graded_index).data).event
    # The same plan and seed under another id, with no answers logged, but a claimed 3/3.
    forged = {**graded.body, "exam_id": "exam-forged"}
    committed = ledger.store.find(subject=session.exam_id, limit=1)[0]
    plan_body = Entry.from_bytes(committed.data).event.body
    ledger.append(
        ledger.operator,
        "exam.committed",
        subject="exam-forged",
        body={**plan_body, "exam_id": "exam-forged"},
    )
    ledger.append(ledger.operator, GRADED, subject="exam-forged", body=forged)
    with pytest.raises(ExamError, match=r"re-graded 0/3, but the log says 3/3"):
        regrade_from_ledger(ledger.store, "exam-forged")


def test_answers_replayed_from_another_agents_exam_are_never_accepted(
    ledger: Ledger, clock: Clock
) -> None:
    window = timedelta(hours=1)
    exams = service(ledger, max_attempts=10_000, attempt_window=window)
    alice, bob = Ed25519Signer.generate(), Ed25519Signer.generate()
    trials = accepted = 0
    for _ in range(500):
        # Each pair of exams starts a window after the last, so the rate limit (which never
        # binds here) reads no earlier starts: reading all of them made the loop quadratic.
        clock.advance(window.total_seconds())
        theirs = exams.start(alice.did, "arithmetic", 1)
        mine = exams.start(bob.did, "arithmetic", 1)
        item = theirs.items[0]
        answer = REFERENCE.answer(item)
        # Bob submits Alice's item and answer into his own exam, then into hers.
        for exam_id in (mine.exam_id, theirs.exam_id):
            trials += 1
            try:
                exams.answer(bob, exam_id, str(item["item_id"]), answer)
                accepted += 1
            except ExamError:
                pass
    assert trials >= 1000 and accepted == 0
    assert ledger.store.find(kind=ANSWERED) == []


def test_copied_answers_answer_different_questions(ledger: Ledger) -> None:
    exams = service(ledger)
    alice, bob = Ed25519Signer.generate(), Ed25519Signer.generate()
    theirs = exams.start(alice.did, "arithmetic", 10)
    mine = exams.start(bob.did, "arithmetic", 10)
    for copied, item in zip(theirs.items, mine.items, strict=True):
        exams.answer(bob, mine.exam_id, str(item["item_id"]), REFERENCE.answer(copied))
    assert not exams.grade(mine.exam_id).passed


def test_a_late_answer_is_refused(ledger: Ledger, clock: Clock) -> None:
    exams = service(ledger, seconds_per_item=10)
    agent = Ed25519Signer.generate()
    session = exams.start(agent.did, "arithmetic", 2)
    first, second = session.items
    clock.now = START + timedelta(seconds=10)  # exactly at the first deadline: still on time
    exams.answer(agent, session.exam_id, str(first["item_id"]), REFERENCE.answer(first))
    clock.now = START + timedelta(seconds=20, milliseconds=1)
    with pytest.raises(DeadlineError):
        exams.answer(agent, session.exam_id, str(second["item_id"]), REFERENCE.answer(second))
    assert len(ledger.store.find(kind=ANSWERED)) == 1
    result = exams.grade(session.exam_id)
    assert (result.earned, result.possible) == (1, 2)


def test_answers_are_refused_twice_after_grading_and_for_unknown_exams(ledger: Ledger) -> None:
    exams = service(ledger)
    agent = Ed25519Signer.generate()
    session = exams.start(agent.did, "arithmetic", 1)
    item_id = str(session.items[0]["item_id"])
    exams.answer(agent, session.exam_id, item_id, 1)
    with pytest.raises(ExamError, match="already answered"):
        exams.answer(agent, session.exam_id, item_id, 2)
    exams.grade(session.exam_id)
    with pytest.raises(ExamConflict, match="already graded"):
        exams.answer(agent, session.exam_id, item_id, 2)
    with pytest.raises(ExamError, match="no exam"):
        exams.answer(agent, "exam-nope", item_id, 2)
    with pytest.raises(ExamError, match="unknown capability"):
        exams.start(agent.did, "juggling")


def test_attempts_are_rate_limited_per_agent_and_capability(ledger: Ledger, clock: Clock) -> None:
    exams = service(ledger, max_attempts=3, attempt_window=timedelta(hours=1))
    agent, other = Ed25519Signer.generate(), Ed25519Signer.generate()
    for minute in range(3):
        clock.now = START + timedelta(minutes=minute)
        exams.start(agent.did, "arithmetic", 1)
    size = ledger.store.size()
    with pytest.raises(RateLimitedError) as raised:
        exams.start(agent.did, "arithmetic", 1)
    assert raised.value.retry_after == pytest.approx(58 * 60)
    assert ledger.store.size() == size  # nothing committed
    exams.start(agent.did, "retrieval", 1)  # another capability
    exams.start(other.did, "arithmetic", 1)  # another agent
    clock.now = START + timedelta(hours=1, seconds=1)
    exams.start(agent.did, "arithmetic", 1)


def test_check_rate_limit_is_pure() -> None:
    window = timedelta(hours=1)
    check_rate_limit([START, START], START + timedelta(minutes=1), max_attempts=3, window=window)
    with pytest.raises(RateLimitedError) as raised:
        check_rate_limit([START] * 3, START + timedelta(minutes=30), window=window)
    assert raised.value.retry_after == 1800


def test_exam_ids_seeds_and_nonces_come_from_the_injected_randomness(ledger: Ledger) -> None:
    counter = itertools.count()

    def fake_random(n: int) -> bytes:
        return next(counter).to_bytes(1, "big") * n

    exams = service(ledger, random_bytes=fake_random)
    session = exams.start(Ed25519Signer(b"\x02" * 32).did, "arithmetic", 2)
    assert session.exam_id == "exam-" + "00" * 16
    assert session.plan.server_nonce == b"\x02" * 16
