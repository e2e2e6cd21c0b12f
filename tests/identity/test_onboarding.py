"""Onboarding: agents with keys, exams answered by their runtimes, credentials, revocation."""

from __future__ import annotations

import json
import stat
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from accord.identity import issuance
from accord.identity.agents import AgentRegistry
from accord.identity.credentials import REVOCATION_EVENT_KIND
from accord.identity.errors import CredentialError, ExamError, RegistryError
from accord.identity.exams import regrade_from_ledger
from accord.identity.onboarding import ISSUED_EVENT_KIND, Onboarding, open_onboarding
from accord.identity.runtimes import CommandRuntime, RandomRuntime
from accord.ledger.events import Entry
from accord.ledger.settings import Settings

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def onboarding(tmp_path: Path) -> Onboarding:
    return open_onboarding(Settings.from_env({"ACCORD_HOME": str(tmp_path / "home")}))


def test_a_new_agent_has_a_private_key_and_a_unique_name(
    onboarding: Onboarding, tmp_path: Path
) -> None:
    record = onboarding.registry.new_agent("alice", now=NOW)
    path = onboarding.registry.key_path("alice")
    assert path == tmp_path / "home" / "keys" / "agents" / "alice.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert onboarding.registry.signer(record).did == record.did
    assert onboarding.registry.get(record.did) == record
    with pytest.raises(RegistryError, match="already exists"):
        onboarding.registry.new_agent("alice", now=NOW)
    for name, runtime, command in [
        ("Bad Name", "reference", None),
        ("bob", "telepathy", None),
        ("bob", "command", None),
        ("bob", "command", "no-such-program-here --x"),
        ("bob", "reference", "echo 1"),
    ]:
        with pytest.raises(RegistryError):
            onboarding.registry.new_agent(name, now=NOW, runtime=runtime, command=command)
    assert [agent.name for agent in onboarding.registry.list()] == ["alice"]
    assert not onboarding.registry.key_path("bob").exists()


def test_the_reference_agent_passes_and_its_credential_verifies(onboarding: Onboarding) -> None:
    agent = onboarding.registry.new_agent("ref", now=NOW)
    seen: list[tuple[str, int, int]] = []
    outcomes = onboarding.onboard(
        agent,
        ["arithmetic", "extraction", "retrieval"],
        lambda capability, done, total: seen.append((capability, done, total)),
        item_count=5,
    )
    assert [outcome.exam.passed for outcome in outcomes] == [True, True, True]
    assert seen[0] == ("arithmetic", 0, 5) and seen[-1] == ("retrieval", 5, 5)
    store = onboarding.ledger.store
    for outcome in outcomes:
        assert outcome.credential_id is not None and outcome.credential_path is not None
        document = json.loads(outcome.credential_path.read_text())
        verified = onboarding.verify(document, holder_did=agent.did)
        assert verified.capability == outcome.exam.capability
        assert verified.issuer == onboarding.operator_did
        exam = regrade_from_ledger(store, outcome.exam.exam_id, onboarding.operator_did)
        assert exam == (verified.earned, verified.possible)
    indices = [onboarding.credential(o.credential_id or "")["status_index"] for o in outcomes]
    assert indices == [0, 1, 2]
    assert len(store.find(kind=ISSUED_EVENT_KIND)) == 3


def test_python_exam_with_a_small_item_count(onboarding: Onboarding) -> None:
    agent = onboarding.registry.new_agent("coder", now=NOW)
    (outcome,) = onboarding.onboard(agent, ["python"], item_count=2)
    assert outcome.exam.passed and outcome.credential_id is not None


def test_a_random_agent_fails_and_gets_no_credential(onboarding: Onboarding) -> None:
    agent = onboarding.registry.new_agent("guesser", now=NOW, runtime="random")
    import random

    outcomes = onboarding.onboard(
        agent, ["arithmetic", "retrieval"], runtime=RandomRuntime(random.Random(7))
    )
    assert [outcome.exam.passed for outcome in outcomes] == [False, False]
    assert all(outcome.credential_id is None for outcome in outcomes)
    assert onboarding.credentials_of(agent.did) == []
    assert onboarding.ledger.store.find(kind=ISSUED_EVENT_KIND) == []


def test_a_command_agent_answers_through_stdin_and_stdout(
    onboarding: Onboarding, tmp_path: Path
) -> None:
    script = tmp_path / "agent.py"
    script.write_text(
        "import json, sys\n"
        "from accord.identity.runtimes import ReferenceRuntime\n"
        "print(json.dumps(ReferenceRuntime().answer(json.load(sys.stdin))))\n"
    )
    agent = onboarding.registry.new_agent(
        "cmd", now=NOW, runtime="command", command=f"{sys.executable} {script}"
    )
    (outcome,) = onboarding.onboard(agent, ["arithmetic"], item_count=3)
    assert outcome.exam.passed and outcome.answer_failures == 0


def test_a_command_that_hangs_or_prints_garbage_answers_nothing(tmp_path: Path) -> None:
    slow = CommandRuntime([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.3)
    with pytest.raises(ExamError, match="longer than"):
        slow.answer({"item_id": "x"})
    garbage = CommandRuntime([sys.executable, "-c", "print('not json')"])
    with pytest.raises(ExamError, match="did not print JSON"):
        garbage.answer({"item_id": "x"})


def test_a_revoked_credential_fails_verification_at_revocation(onboarding: Onboarding) -> None:
    agent = onboarding.registry.new_agent("ref", now=NOW)
    (outcome,) = onboarding.onboard(agent, ["arithmetic"], item_count=4)
    assert outcome.credential_id is not None and outcome.credential_path is not None
    document = json.loads(outcome.credential_path.read_text())
    onboarding.verify(document)
    onboarding.revoke(outcome.credential_id, "key compromised")
    with pytest.raises(CredentialError) as raised:
        onboarding.verify(document)
    assert raised.value.step == "revocation"
    (revoked,) = onboarding.ledger.store.find(kind=REVOCATION_EVENT_KIND)
    body = Entry.from_bytes(revoked.data).event.body
    assert body["credentialId"] == outcome.credential_id and body["reason"] == "key compromised"
    with pytest.raises(RegistryError, match="already revoked"):
        onboarding.revoke(outcome.credential_id, "again")
    with pytest.raises(RegistryError, match="no credential"):
        onboarding.revoke("urn:uuid:nope", "x")


def test_unknown_capabilities_are_refused_before_any_exam(onboarding: Onboarding) -> None:
    agent = onboarding.registry.new_agent("ref", now=NOW)
    size = onboarding.ledger.store.size()
    with pytest.raises(ExamError, match="unknown capability"):
        onboarding.onboard(agent, ["arithmetic", "juggling"])
    assert onboarding.ledger.store.size() == size


def test_registry_survives_reopening(onboarding: Onboarding, tmp_path: Path) -> None:
    record = onboarding.registry.new_agent("ref", now=NOW)
    again = AgentRegistry(onboarding.engine, tmp_path / "home" / "keys")
    assert again.get("ref") == record


@pytest.mark.postgres
def test_two_processes_issuing_at_once_take_different_status_indexes(
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """Two service processes on one PostgreSQL: the second issues a credential between the
    first's read of the next status-list index and its insert. The first signs again for the
    next index instead of failing, and each credential has its own status entry."""
    settings = Settings.from_env(
        {"ACCORD_HOME": str(tmp_path / "home"), "ACCORD_DB_URL": postgres_url}
    )
    first, second = open_onboarding(settings), open_onboarding(settings)
    for process in (first, second):  # closed before the fixture drops the schema
        request.addfinalizer(process.engine.dispose)
    ada = first.registry.new_agent("ada", now=NOW)
    bob = second.registry.new_agent("bob", now=NOW)
    signed = issuance.issue_capability_credential
    raced: list[str] = []

    def racing(*args: Any, **kwargs: Any) -> dict[str, Any]:
        if not raced:  # the other process issues now, inside our read-then-insert
            raced.append("bob")
            [outcome] = second.onboard(bob, ["arithmetic"], item_count=5)
            assert outcome.credential_id is not None
        return signed(*args, **kwargs)

    monkeypatch.setattr(issuance, "issue_capability_credential", racing)
    [outcome] = first.onboard(ada, ["arithmetic"], item_count=5)
    assert raced and outcome.credential_id is not None
    rows = [
        *first.credentials_of(ada.did),
        *first.credentials_of(bob.did),
    ]
    indexes = sorted(first.issuer.credential(row["id"])["status_index"] for row in rows)
    assert indexes == [0, 1]
    assert outcome.credential_path is not None
    document = json.loads(outcome.credential_path.read_text())
    assert document["credentialStatus"]["statusListIndex"] == "1"
    first.verify(document, holder_did=ada.did)


def _python_exam_answered(onboarding: Onboarding, name: str, items: int) -> tuple[Any, str]:
    """A hosted agent registered, its python exam started and every item answered (by the
    reference runtime); returns the agent and the exam's id."""
    agent = onboarding.registry.new_agent(name, now=NOW)
    onboarding.register(agent)
    signer = onboarding.registry.signer(agent)
    session = onboarding.exams.start(agent.did, "python", items)
    runtime = onboarding.registry.runtime(agent)
    for item in session.items:
        answer = runtime.answer(item)
        onboarding.exams.answer(signer, session.exam_id, str(item["item_id"]), answer)
    return agent, session.exam_id


def test_python_answers_are_graded_without_the_write_lock(
    onboarding: Onboarding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grading a python exam runs the agent's code in the box: the service's write lock is
    free meanwhile, so another write (another agent's registration) and a read go on while an
    answer is in the box; the lock is taken only to log the grades and issue the credential.
    The box run waits until the test has done both, so nothing races the wall clock: were
    the lock held while grading, taking it here would fail after 60 s."""
    import threading

    from accord.identity.challenges import python_tasks

    _agent, exam_id = _python_exam_answered(onboarding, "slowcoder", 1)
    other = onboarding.registry.new_agent("other", now=NOW)
    lock = threading.RLock()
    in_the_box, go_on = threading.Event(), threading.Event()
    real_run = python_tasks.run_function_cases

    def run_when_told(*args: Any, **kwargs: Any) -> Any:
        in_the_box.set()
        assert go_on.wait(60), "the test never let the box run"
        return real_run(*args, **kwargs)

    monkeypatch.setattr(python_tasks, "run_function_cases", run_when_told)
    outcomes: list[Any] = []
    grading = threading.Thread(
        target=lambda: outcomes.append(onboarding.grade_and_issue(exam_id, lock=lock))
    )
    grading.start()
    try:
        assert in_the_box.wait(60), "the answer never reached the box"
        taken = lock.acquire(timeout=60)
        try:
            assert taken, "the write lock was held while an answer ran in the box"
            registered = onboarding.register(other)  # another write, under the lock
            assert onboarding.ledger.store.entry(registered).index == registered  # a read
        finally:
            if taken:
                lock.release()
    finally:
        go_on.set()
        grading.join(60)
    (outcome,) = outcomes
    assert outcome.exam.passed and outcome.credential_id is not None


def test_an_answer_logged_while_the_others_are_graded_is_graded_too(
    onboarding: Onboarding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grades are logged only for the answers logged when the lock is taken: one logged
    while the others ran in the box makes them all graded again, with it."""
    from accord.identity.challenges import python_tasks

    agent = onboarding.registry.new_agent("latecoder", now=NOW)
    onboarding.register(agent)
    signer = onboarding.registry.signer(agent)
    session = onboarding.exams.start(agent.did, "python", 2)
    runtime = onboarding.registry.runtime(agent)
    first, second = session.items
    onboarding.exams.answer(signer, session.exam_id, str(first["item_id"]), runtime.answer(first))
    real_run = python_tasks.run_function_cases
    late: list[int] = []

    def run_and_answer_late(*args: Any, **kwargs: Any) -> Any:
        if not late:  # the second answer arrives while the first is in the box
            late.append(
                onboarding.exams.answer(
                    signer, session.exam_id, str(second["item_id"]), runtime.answer(second)
                )
            )
        return real_run(*args, **kwargs)

    monkeypatch.setattr(python_tasks, "run_function_cases", run_and_answer_late)
    outcome = onboarding.grade_and_issue(session.exam_id)
    assert outcome.exam.passed and outcome.exam.earned == outcome.exam.possible
    graded = onboarding.ledger.store.find(kind="exam.graded", subject=session.exam_id)
    (entry,) = graded
    assert late[0] in Entry.from_bytes(entry.data).event.body["answer_indices"]
