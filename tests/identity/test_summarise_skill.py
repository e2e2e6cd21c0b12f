"""The model-graded `summarise` skill: its gates pass with a judge (a local OpenAI-compatible
stand-in server, asked through the `openai` client) and refuse it without one; the judge seat
reads ACCORD_JUDGE_URL, names itself in each grade, and an unreachable judge grades nothing."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from accord.identity.chat import OpenAIChat
from accord.identity.errors import GateFailed, JudgeUnavailable, SkillError
from accord.identity.graders import Case, grade_cases
from accord.identity.skill_exams import check_gates, gate_seed, generate_exam
from accord.identity.skill_folders import library_manifests
from accord.identity.skill_judge import (
    ChatJudge,
    RecordingJudge,
    ReplayedJudge,
    judge_seat_from_env,
)
from accord.identity.skill_library.summarise.generate import FILLER
from accord.identity.skill_registry import needs_judge
from tests.stand_in import StandIn, free_port, json_reply, starter, summary_judge

SUMMARISE = next(m for m in library_manifests() if m.name == "summarise")


@pytest.fixture
def start(request: pytest.FixtureRequest) -> Callable[..., StandIn]:
    return starter(request)


def judge_env(server: StandIn) -> dict[str, str]:
    return {"ACCORD_JUDGE_URL": f"{server.url}/v1", "ACCORD_JUDGE_MODEL": "judge-1"}


def key_sentences(document: str) -> str:
    """A candidate's summary: the document without its filler sentences."""
    for sentence in FILLER:
        document = document.replace(sentence, "")
    return " ".join(document.split())


def test_summarise_is_model_graded_with_an_explicit_score_table() -> None:
    assert needs_judge(SUMMARISE)
    (model,) = [g for g in SUMMARISE.graders if g["kind"] == "model"]
    assert model["choice_scores"] == {"A": 1, "B": 0, "C": 0}
    assert "{expected}" in model["prompt"] and "{answer}" in model["prompt"]


def test_without_a_judge_the_gates_refuse_summarise() -> None:
    with pytest.raises(GateFailed) as caught:
        check_gates(SUMMARISE)
    assert caught.value.gate == "judge"
    assert judge_seat_from_env({}) is None


def test_summarise_passes_its_gates_with_a_judge_it_asks_over_http(
    start: Callable[..., StandIn],
) -> None:
    server = start(summary_judge())
    seat = judge_seat_from_env(judge_env(server))
    assert seat is not None and seat.identity == f"judge-1 at {server.url}/v1"
    report = check_gates(SUMMARISE, judge=seat)
    assert report.gates[-1] == "constant-answer" and report.oracle_earned == report.items
    asked = [json.loads(body) for _, _, body in server.requests]
    assert asked and all(r["model"] == "judge-1" and r["temperature"] == 0 for r in asked)
    assert all(r["response_format"] == {"type": "json_object"} for r in asked)


def test_the_judges_choice_decides_and_names_the_judge(start: Callable[..., StandIn]) -> None:
    server = start(summary_judge())
    seat = judge_seat_from_env(judge_env(server))
    assert seat is not None
    item = generate_exam(SUMMARISE, gate_seed(SUMMARISE), 1)[0]
    good = key_sentences(str(item.payload["document"]))
    invented = good + " The CEO resigned."
    cases = [Case(item.payload, item.private["answer"], a) for a in (good, invented)]
    recorder = RecordingJudge(seat)
    verdicts = grade_cases(SUMMARISE.graders, cases, SUMMARISE.output_schema, judge=recorder.seat)
    assert [v.passed for v in verdicts] == [True, False]
    assert verdicts[1].reason == f"judge {seat.identity} chose C"
    assert recorder.record() == {"identity": seat.identity, "choices": ["A", "C"]}

    replayed = ReplayedJudge(recorder.record())
    again = grade_cases(SUMMARISE.graders, cases, SUMMARISE.output_schema, judge=replayed.seat)
    assert again == verdicts
    replayed.check_spent()
    short = ReplayedJudge({"identity": seat.identity, "choices": ["A"]})
    with pytest.raises(SkillError, match="more often"):
        grade_cases(SUMMARISE.graders, cases, SUMMARISE.output_schema, judge=short.seat)
    extra = ReplayedJudge({"identity": seat.identity, "choices": ["A", "C", "A"]})
    grade_cases(SUMMARISE.graders, cases, SUMMARISE.output_schema, judge=extra.seat)
    with pytest.raises(SkillError, match="holds 3 judge choices"):
        extra.check_spent()
    with pytest.raises(SkillError, match="no judge record"):
        ReplayedJudge(None)


def test_a_reply_naming_no_choice_earns_nothing(start: Callable[..., StandIn]) -> None:
    from tests.stand_in import completion

    server = start(lambda path, headers, body: json_reply(200, completion("j", "not json")))
    judge = ChatJudge(OpenAIChat("j", base_url=f"{server.url}/v1", retries=0))
    assert judge.choose("grade this") == ""


def test_an_unreachable_judge_grades_nothing() -> None:
    judge = ChatJudge(OpenAIChat("j", base_url=f"http://127.0.0.1:{free_port()}/v1", retries=0))
    with pytest.raises(JudgeUnavailable, match="could not be asked"):
        judge.choose("grade this")
