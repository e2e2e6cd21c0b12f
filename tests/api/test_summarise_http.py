"""`summarise`, the model-graded skill, through the real service: offered (listed, examined,
credentialed) only where a judge is configured (ACCORD_JUDGE_URL, here a local OpenAI-compatible
stand-in server), each judge's choice logged with the grades and replayed by the audit; without
a judge it is neither listed nor examined, and the refusal says why."""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accord.identity.errors import SkillError
from accord.identity.registration import REGISTERED_KIND
from accord.identity.skill_attempts import (
    ATTEMPT_ANSWERED,
    ATTEMPT_GRADED,
    ATTEMPT_NONCE,
    replay_attempts,
)
from accord.identity.skill_folders import library_manifests
from accord.identity.skill_library.summarise.generate import FILLER
from accord.identity.skill_registry import replay_declarations
from accord.ledger.events import Entry, Event
from tests.api.test_skills_http import client_of, problem, register
from tests.served_world import open_world
from tests.stand_in import StandIn, free_port, summary_judge

SUMMARISE = next(m for m in library_manifests() if m.name == "summarise")


def open_served(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with open_world(tmp_path, allow_private=True) as opened:
        opened["clients"] = []
        yield opened
        for client in opened["clients"]:
            client.close()


@pytest.fixture
def judge() -> Iterator[StandIn]:
    server = StandIn(summary_judge())
    yield server
    server.close()


@pytest.fixture
def judged_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge: StandIn
) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("ACCORD_ALLOW_PRIVATE_AGENTS", "1")
    monkeypatch.setenv("ACCORD_JUDGE_URL", f"{judge.url}/v1")
    monkeypatch.setenv("ACCORD_JUDGE_MODEL", "judge-1")
    yield from open_served(tmp_path)


@pytest.fixture
def unjudged_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("ACCORD_ALLOW_PRIVATE_AGENTS", "1")
    monkeypatch.delenv("ACCORD_JUDGE_URL", raising=False)
    yield from open_served(tmp_path)


def summary(document: str) -> str:
    for sentence in FILLER:
        document = document.replace(sentence, "")
    return " ".join(document.split())


def test_with_a_judge_summarise_is_listed_examined_and_its_judge_logged(
    judged_world: dict[str, Any], judge: StandIn
) -> None:
    candidate = client_of(judged_world)
    register(candidate, "candidate")
    listed = [s["name"] for s in candidate.get("/skills")]
    assert "summarise" in listed
    assert candidate.get("/skills/summarise")["id"] == SUMMARISE.skill_id

    attempt_id = candidate.post(f"/skills/{SUMMARISE.skill_id}/attempts")["attempt_id"]
    body = {"attempt_id": attempt_id, "nonce": secrets.token_hex(16)}
    items = candidate.post(
        f"/skills/attempts/{attempt_id}/nonce",
        {"entry": candidate.entry(ATTEMPT_NONCE, attempt_id, body)},
    )["items"]
    answers = [summary(item["payload"]["document"]) for item in items]
    answers[-2] += " The CEO resigned."  # every fact, and one the document never states
    answers[-1] = "Something happened."
    before = len(judge.requests)
    graded = candidate.post(
        f"/skills/attempts/{attempt_id}/answers",
        {
            "entry": candidate.entry(
                ATTEMPT_ANSWERED, attempt_id, {"attempt_id": attempt_id, "answers": answers}
            )
        },
    )
    assert (graded["earned"], graded["possible"], graded["passed"]) == (4, 6, True)
    identity = f"judge-1 at {judge.url}/v1"
    assert graded["grades"][-2]["reason"] == f"judge {identity} chose C"
    assert len(judge.requests) - before == 6  # one question per item, over HTTP
    assert SUMMARISE.skill_id in str(graded["credential"]["credentialSubject"])

    ledger = judged_world["context"].market.ledger
    entries = [(s.index, Entry.from_bytes(s.data).event) for s in ledger.store.entries()]
    (logged,) = [e for _, e in entries if e.kind == ATTEMPT_GRADED]
    assert logged.body["judge"] == {"identity": identity, "choices": ["A"] * 4 + ["C", "B"]}

    operator = ledger.operator.did
    registered_at = {e.actor: i for i, e in reversed(entries) if e.kind == REGISTERED_KIND}
    known = replay_declarations(entries, operator=operator, registered_at=registered_at)
    assert replay_attempts(entries, known, operator=operator) == 1

    def tampered(change: Any) -> list[tuple[int, Event]]:
        out = []
        for index, event in entries:
            if event.kind == ATTEMPT_GRADED:
                changed = copy.deepcopy(dict(event.body))
                change(changed)
                event = Event(event.kind, event.actor, event.seq, event.at, event.subject, changed)
            out.append((index, event))
        return out

    def kinder_judge(changed: dict[str, Any]) -> None:
        changed["judge"]["choices"][-2] = "A"

    def no_record(changed: dict[str, Any]) -> None:
        del changed["judge"]

    with pytest.raises(SkillError, match="grades are not the re-grade's"):
        replay_attempts(tampered(kinder_judge), known, operator=operator)
    with pytest.raises(SkillError, match="no judge record"):
        replay_attempts(tampered(no_record), known, operator=operator)


def test_without_a_judge_summarise_is_not_offered_and_says_why(
    unjudged_world: dict[str, Any],
) -> None:
    candidate = client_of(unjudged_world)
    register(candidate, "candidate")
    assert "summarise" not in [s["name"] for s in candidate.get("/skills")]
    shown = problem(lambda: candidate.get("/skills/summarise"))
    assert shown.status == 404 and "ACCORD_JUDGE_URL" in str(shown)
    started = problem(lambda: candidate.post(f"/skills/{SUMMARISE.skill_id}/attempts"))
    assert started.status == 404 and "model-graded" in str(started)


@pytest.fixture
def downed_judge_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("ACCORD_ALLOW_PRIVATE_AGENTS", "1")
    monkeypatch.setenv("ACCORD_JUDGE_URL", f"http://127.0.0.1:{free_port()}/v1")
    yield from open_served(tmp_path)


def test_a_judge_that_cannot_be_asked_grades_nothing_and_logs_nothing(
    downed_judge_world: dict[str, Any],
) -> None:
    candidate = client_of(downed_judge_world)
    register(candidate, "candidate")
    attempt_id = candidate.post(f"/skills/{SUMMARISE.skill_id}/attempts")["attempt_id"]
    body = {"attempt_id": attempt_id, "nonce": secrets.token_hex(16)}
    items = candidate.post(
        f"/skills/attempts/{attempt_id}/nonce",
        {"entry": candidate.entry(ATTEMPT_NONCE, attempt_id, body)},
    )["items"]
    answers = [summary(item["payload"]["document"]) for item in items]
    refused = problem(
        lambda: candidate.post(
            f"/skills/attempts/{attempt_id}/answers",
            {
                "entry": candidate.entry(
                    ATTEMPT_ANSWERED, attempt_id, {"attempt_id": attempt_id, "answers": answers}
                )
            },
        )
    )
    assert refused.status == 503 and "could not be asked" in str(refused)
    store = downed_judge_world["context"].market.ledger.store
    kinds = {Entry.from_bytes(s.data).event.kind for s in store.entries()}
    assert ATTEMPT_ANSWERED not in kinds and ATTEMPT_GRADED not in kinds
