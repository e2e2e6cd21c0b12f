"""Bank exams through the real service: a skill's items written and committed as a Merkle
root, sent with the declaration and kept off the log; each attempt draws from its seed among
the items not retired; the grades reveal the drawn items with inclusion proofs; the audit
re-checks the proofs, the draw and the grades; an item retires after `retire_after` draws."""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accord.client import AccordClient
from accord.identity.errors import SkillError
from accord.identity.item_banks import available, bank_root, check_reveal, draw, reveal
from accord.identity.manifests import skill_id
from accord.identity.registration import REGISTERED_KIND
from accord.identity.skill_attempts import (
    ATTEMPT_ANSWERED,
    ATTEMPT_GRADED,
    ATTEMPT_NONCE,
    replay_attempts,
)
from accord.identity.skill_registry import SKILL_DECLARED_KIND, replay_declarations
from accord.ledger.events import Entry, Event
from tests.api.test_skills_http import client_of, problem, register
from tests.identity.test_skill_manifests import manifest
from tests.served_world import open_world

BANK: list[dict[str, Any]] = [
    {"input": {"a": a, "b": b}, "answer": {"sum": a + b}}
    for a, b in ((1, 1), (2, 3), (10, 4), (20, 22), (100, 1), (50, 50))
]


def bank_manifest(bank: list[dict[str, Any]] = BANK) -> dict[str, Any]:
    exam = {"kind": "bank", "root": bank_root(bank), "size": len(bank), "items": 3,
            "threshold": "2/3", "retire_after": 1}  # fmt: skip
    return manifest(name="add-banked", exam=exam)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("ACCORD_ALLOW_PRIVATE_AGENTS", "1")
    with open_world(tmp_path, allow_private=True) as opened:
        opened["clients"] = []
        yield opened
        for client in opened["clients"]:
            client.close()


def declare(client: AccordClient, document: dict[str, Any], bank: Any) -> dict[str, Any]:
    named = skill_id(document)
    entry = client.entry(SKILL_DECLARED_KIND, named, {"skill_id": named, "manifest": document})
    answer: dict[str, Any] = client.post("/skills", {"entry": entry, "bank": bank})
    return answer


def sit(client: AccordClient, skill: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One attempt answered right; (its items, its grades)."""
    attempt_id = client.post(f"/skills/{skill}/attempts")["attempt_id"]
    body = {"attempt_id": attempt_id, "nonce": secrets.token_hex(16)}
    items: list[dict[str, Any]] = client.post(
        f"/skills/attempts/{attempt_id}/nonce",
        {"entry": client.entry(ATTEMPT_NONCE, attempt_id, body)},
    )["items"]
    answers = [{"sum": i["payload"]["a"] + i["payload"]["b"]} for i in items]
    graded: dict[str, Any] = client.post(
        f"/skills/attempts/{attempt_id}/answers",
        {
            "entry": client.entry(
                ATTEMPT_ANSWERED, attempt_id, {"attempt_id": attempt_id, "answers": answers}
            )
        },
    )
    return items, graded


def test_the_draw_is_seeded_and_reveals_prove_membership() -> None:
    seed = b"s" * 32
    assert draw(seed, range(6), 3) == draw(seed, list(range(6)), 3)
    assert available(6, {0: 1, 4: 2}, 2) == [0, 1, 2, 3, 5]
    shown = reveal(BANK, [1, 4])
    exam = {"root": bank_root(BANK), "size": len(BANK)}
    assert [index for index, _ in check_reveal(exam, shown)] == [1, 4]
    forged = copy.deepcopy(shown)
    forged[0]["answer"] = {"sum": 6}
    with pytest.raises(SkillError, match="not in the committed bank"):
        check_reveal(exam, forged)
    moved = copy.deepcopy(shown)
    moved[1]["index"] = 5
    with pytest.raises(SkillError, match="not in the committed bank"):
        check_reveal(exam, moved)


def test_a_bank_exam_is_drawn_revealed_retired_and_replayed(world: dict[str, Any]) -> None:
    author, candidate = client_of(world), client_of(world)
    register(author, "author")
    register(candidate, "candidate")
    document = bank_manifest()
    missing = problem(lambda: declare(author, document, None))
    assert missing.status == 422 and "bank" in str(missing)
    wrong = copy.deepcopy(BANK)
    wrong[2]["answer"] = {"sum": 15}
    forged = problem(lambda: declare(author, document, wrong))
    assert forged.status == 422 and "Merkle root" in str(forged)

    declared = declare(author, document, BANK)
    assert declared["gates"]["gates"][0] == "bank"
    skill = declared["id"]
    store = world["context"].market.ledger.store

    first, graded = sit(candidate, skill)
    assert graded["passed"] and len(first) == 3
    second, _ = sit(candidate, skill)
    seen = {(i["payload"]["a"], i["payload"]["b"]) for i in first + second}
    assert len(seen) == 6  # retire_after 1: the second attempt drew the other three
    spent = problem(lambda: sit(candidate, skill))
    assert spent.status == 400 and "the bank is spent" in str(spent)

    entries = [(s.index, Entry.from_bytes(s.data).event) for s in store.entries()]
    declaration = next(e for _, e in entries if e.kind == SKILL_DECLARED_KIND)
    assert "bank" not in declaration.body  # the answers stay off the log until drawn
    reveals = [e.body["bank"] for _, e in entries if e.kind == ATTEMPT_GRADED]
    assert [len(r) for r in reveals] == [3, 3]
    assert all(r["proof"] for shown in reveals for r in shown)

    operator = world["context"].market.ledger.operator.did
    registered_at = {e.actor: i for i, e in reversed(entries) if e.kind == REGISTERED_KIND}
    known = replay_declarations(entries, operator=operator, registered_at=registered_at)
    assert replay_attempts(entries, known, operator=operator) == 2

    def tampered(nth: int, change: Any) -> list[tuple[int, Event]]:
        out, seen_graded = [], 0
        for index, event in entries:
            if event.kind == ATTEMPT_GRADED:
                if seen_graded == nth:
                    body = copy.deepcopy(dict(event.body))
                    change(body)
                    event = Event(event.kind, event.actor, event.seq, event.at, event.subject, body)
                seen_graded += 1
            out.append((index, event))
        return out

    def other_answer(body: dict[str, Any]) -> None:
        body["bank"][0]["answer"] = {"sum": -1}

    def replayed_items(body: dict[str, Any]) -> None:
        body["bank"] = reveals[0]  # the second attempt claims the first one's (retired) items

    with pytest.raises(SkillError, match="not in the committed bank"):
        replay_attempts(tampered(0, other_answer), known, operator=operator)
    with pytest.raises(SkillError, match="not the ones the seed draws"):
        replay_attempts(tampered(1, replayed_items), known, operator=operator)


def test_a_bank_exam_spec_is_refused_where_it_breaks_a_rule() -> None:
    from accord.identity.errors import ManifestError
    from accord.identity.manifests import parse_manifest

    def path_of(**exam: Any) -> str:
        document = bank_manifest()
        document["exam"].update(exam)
        with pytest.raises(ManifestError) as caught:
            parse_manifest(document)
        return caught.value.path

    assert path_of(items=7) == "$.exam.items"
    assert path_of(root="not-hex") == "$.exam.root"
    assert path_of(retire_after=0) == "$.exam.retire_after"
    assert path_of(size=10_001) == "$.exam.size"
    assert path_of(code="x") == "$.exam.code"


def test_items_seen_and_never_answered_count_as_exposed(world: dict[str, Any]) -> None:
    """A candidate who takes the items and lets the deadline pass has still read them: the
    next attempt's start logs `skill.attempt.expired` revealing them, and they retire."""
    from accord.identity.skill_attempts import ATTEMPT_EXPIRED

    author, looker, candidate = client_of(world), client_of(world), client_of(world)
    for client, name in ((author, "author"), (looker, "looker"), (candidate, "candidate")):
        register(client, name)
    skill = declare(author, bank_manifest(), BANK)["id"]
    attempt_id = looker.post(f"/skills/{skill}/attempts")["attempt_id"]
    body = {"attempt_id": attempt_id, "nonce": secrets.token_hex(16)}
    looked = looker.post(
        f"/skills/attempts/{attempt_id}/nonce",
        {"entry": looker.entry(ATTEMPT_NONCE, attempt_id, body)},
    )["items"]
    world["clock"].advance(3 * 60 + 1)  # past the deadline, unanswered

    items, _ = sit(candidate, skill)
    assert {(i["payload"]["a"], i["payload"]["b"]) for i in looked + items} == {
        (i["input"]["a"], i["input"]["b"]) for i in BANK
    }
    spent = problem(lambda: sit(candidate, skill))
    assert spent.status == 400 and "the bank is spent" in str(spent)

    store = world["context"].market.ledger.store
    entries = [(s.index, Entry.from_bytes(s.data).event) for s in store.entries()]
    (expired,) = [e for _, e in entries if e.kind == ATTEMPT_EXPIRED]
    assert expired.subject == attempt_id and len(expired.body["bank"]) == 3
    operator = world["context"].market.ledger.operator.did
    registered_at = {e.actor: i for i, e in reversed(entries) if e.kind == REGISTERED_KIND}
    known = replay_declarations(entries, operator=operator, registered_at=registered_at)
    assert replay_attempts(entries, known, operator=operator) == 1

    forged = []
    for index, event in entries:
        if event.kind == ATTEMPT_EXPIRED:
            changed = copy.deepcopy(dict(event.body))
            changed["bank"] = changed["bank"][:2]
            event = Event(event.kind, event.actor, event.seq, event.at, event.subject, changed)
        forged.append((index, event))
    with pytest.raises(SkillError, match="did not draw"):
        replay_attempts(forged, known, operator=operator)
