"""What a member's kit signs at /sign (`accord.kit.server.check_report`): only reports of its
own for assignments it received at /run, a success with the answers it gave, a failure only
for an assignment it did not answer in full, and never a success after it signed that."""

from __future__ import annotations

from typing import Any

import pytest

from accord.kit.assignments import Assignment
from accord.kit.server import AnswersGiven, Refused, check_report
from accord.ledger.canonical import canonical_json
from accord.ledger.events import Event
from accord.ledger.sealing import seal
from accord.ledger.signing import Ed25519Signer

ME = Ed25519Signer(bytes([7]) * 32).did
AT = "2026-03-01T12:00:00.000Z"


def _report(result: dict[str, Any], conv: str = "conv-1", speaker: str = ME) -> bytes:
    message = {
        "kind": "report",
        "speaker": speaker,
        "next_state": "conclusion",
        "next_speaker": "did:L",
        "result": result,
    }
    body = {"conversation": conv, "turn": 3, "message": message}
    return canonical_json(Event("conversation.message", speaker, 5, AT, conv, body).to_json())


def _success(sub_id: str, part: str, value: Any) -> tuple[bytes, dict[str, str]]:
    sealed = seal(value)
    contribution = {
        "agent": ME,
        "sub_id": sub_id,
        "capability": "arithmetic",
        "part": part,
        "output_sha256": sealed.commitment,
    }
    result = {"sub_id": sub_id, "ok": True, "contributions": [contribution], "error": None}
    return _report(result), {sealed.commitment: sealed.data.decode()}


FAILED = {"ok": False, "contributions": [], "error": "no answer in time"}


def test_a_success_only_for_the_assignment_and_answer_given() -> None:
    given = AnswersGiven()
    work = Assignment("task-1", "conv-1", "batch:arithmetic", "tax", "arithmetic")
    given.received(work)
    given.add(work, "542.96")
    check_report(ME, *_success("batch:arithmetic", "tax", "542.96"), given)
    for sub_id, part, value in (
        ("batch:arithmetic", "tax", "1.00"),  # not the answer it gave
        ("batch:arithmetic", "lines-sum", "542.96"),  # not a part it answered
        ("tax", "tax", "542.96"),  # not the sub-task it was given
    ):
        with pytest.raises(Refused, match="did not do"):
            check_report(ME, *_success(sub_id, part, value), given)
    text, openings = _success("batch:arithmetic", "tax", "542.96")
    other_conv = text.replace(b"conv-1", b"conv-2")
    with pytest.raises(Refused, match="did not do"):
        check_report(ME, other_conv, openings, given)


def test_a_failure_only_for_an_assignment_not_answered_and_then_no_success() -> None:
    given = AnswersGiven()
    answered = Assignment("task-1", "conv-1", "s-done", "tax", "arithmetic")
    given.received(answered)
    given.add(answered, "542.96")
    with pytest.raises(Refused, match="did not fail s-done"):
        check_report(ME, _report({"sub_id": "s-done", **FAILED}), {}, given)
    with pytest.raises(Refused, match="did not fail s-never"):
        check_report(ME, _report({"sub_id": "s-never", **FAILED}), {}, given)
    pending = Assignment("task-1", "conv-1", "s-slow", "lines-sum", "arithmetic")
    given.received(pending)
    check_report(ME, _report({"sub_id": "s-slow", **FAILED}), {}, given)
    given.add(pending, "2585.50")  # the answer came too late: it renounced the assignment
    with pytest.raises(Refused, match="did not do"):
        check_report(ME, *_success("s-slow", "lines-sum", "2585.50"), given)


def test_only_its_own_reports() -> None:
    given = AnswersGiven()
    other = Ed25519Signer(bytes([8]) * 32).did
    with pytest.raises(Refused, match="its own"):
        check_report(ME, _report({"sub_id": "s", **FAILED}, speaker=other), {}, given)
