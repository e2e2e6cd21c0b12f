"""A skill's exam→field agreement, from credentials issued and tasks settled. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from accord.ledger.events import Event
from accord.ledger.signing import Ed25519Signer
from accord.market.agreement import ISSUED_EVENT_KIND, AgreementTally, SkillAgreement
from accord.market.tasks import TASK_SETTLED

AT = "2026-03-01T12:00:00.000Z"
OPERATOR = Ed25519Signer.generate().did


def skill_agreement(entries: Iterable[tuple[int, Event]], capability: str) -> SkillAgreement:
    """`capability`'s agreement over `entries` folded into a fresh tally."""
    tally = AgreementTally()
    for index, event in entries:
        tally.add(index, event)
    return tally.agreement(capability)


def issued(agent: str, capability: str, earned: int, possible: int) -> Event:
    score = {"earned": earned, "possible": possible}
    body = {"agent": agent, "capability": capability,
            "credential": {"credentialSubject": {"score": score}}}  # fmt: skip
    return Event(ISSUED_EVENT_KIND, OPERATOR, 1, AT, "cred", body)


def settled(task: str, parts: list[tuple[str, str, str | None]]) -> Event:
    record: dict[str, Any] = {
        "requester": "did:key:req",
        "parts": [
            {"part": f"p{n}", "capability": cap, "producer": who, "score": score}
            for n, (cap, who, score) in enumerate(parts)
        ],
    }
    return Event(TASK_SETTLED, OPERATOR, 2, AT, task, {"track_record": record})


def test_exam_scores_sit_beside_the_real_parts_scores() -> None:
    events = [
        issued("did:key:a", "sql", 8, 8),
        issued("did:key:a", "sql", 6, 8),  # the best counts
        issued("did:key:b", "sql", 7, 8),
        issued("did:key:c", "other", 8, 8),
        settled("t1", [("sql", "did:key:a", "1"), ("sql", "did:key:b", "0")]),
        settled("t3", [("sql", "did:key:a", None)]),  # no requester check read it
        settled("t2", [("sql", "did:key:a", "0"), ("other", "did:key:b", "1")]),
    ]  # fmt: skip
    agreement = skill_agreement(enumerate(events), "sql").to_json()
    assert agreement["holders"] == [
        {"agent": "did:key:a", "exam": "1", "parts": 2, "field": "1/2"},
        {"agent": "did:key:b", "exam": "7/8", "parts": 1, "field": "0"},
    ]
    assert agreement["holders_with_real_parts"] == 2
    assert (agreement["exam_mean"], agreement["field_mean"]) == ("15/16", "1/4")


def test_holders_without_real_parts_have_no_field_score() -> None:
    agreement = skill_agreement(enumerate([issued("did:key:a", "sql", 3, 4)]), "sql").to_json()
    assert agreement["holders"] == [
        {"agent": "did:key:a", "exam": "3/4", "parts": 0, "field": None}
    ]
    assert agreement["exam_mean"] is None and agreement["holders_with_real_parts"] == 0


def test_a_tally_read_between_entries_agrees_with_the_whole_fold() -> None:
    events = [
        issued("did:key:a", "sql", 5, 8),
        settled("t1", [("sql", "did:key:a", "1"), ("other", "did:key:b", "1/2")]),
        issued("did:key:b", "other", 8, 8),
        issued("did:key:a", "sql", 7, 8),
        settled("t2", [("sql", "did:key:a", "0"), ("other", "did:key:b", "1")]),
        settled("t3", [("sql", "did:key:b", "1")]),  # b holds no sql credential
    ]  # fmt: skip
    tally = AgreementTally()
    for index, event in enumerate(events):
        tally.add(index, event)
        for capability in ("sql", "other"):
            whole = skill_agreement(enumerate(events[: index + 1]), capability)
            assert tally.agreement(capability) == whole
    assert tally.seen == len(events) - 1
    assert tally.agreement("other").to_json()["holders"] == [
        {"agent": "did:key:b", "exam": "1", "parts": 2, "field": "3/4"}
    ]


def test_a_tally_refuses_an_entry_it_has_passed() -> None:
    tally = AgreementTally()
    tally.add(4, issued("did:key:a", "sql", 1, 2))
    with pytest.raises(ValueError, match="not after entry 4"):
        tally.add(4, issued("did:key:a", "sql", 2, 2))
    with pytest.raises(ValueError):
        skill_agreement([(3, issued("did:key:a", "sql", 1, 2)), (1, settled("t", []))], "sql")
