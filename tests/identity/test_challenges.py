"""Capability exams: determinism, secrecy of the answer key, solvability, and resistance to
guessing and copying. The python capability's grades each start a subprocess, so it gets few
items here; the cheap capabilities carry the bulk."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.identity.challenges import (
    JSON,
    REGISTRY,
    Capability,
    ExamItem,
    Grade,
    arithmetic,
    extraction,
    get_capability,
    grade_before_deadline,
    item_seed,
    passes,
    python_tasks,
    retrieval,
    score,
    seed_commitment,
)
from accord.identity.challenges.reference import (
    evaluate_expression,
    random_answer,
    solve,
    solve_retrieval,
)
from accord.identity.errors import DeadlineError, ExamError
from accord.ledger.canonical import canonical_json

CHEAP = ["arithmetic", "extraction", "retrieval"]
EXAM_SEED = bytes(range(32))
NONCE = b"server-nonce-0001"
ALICE, BOB = "did:key:z6MkAlice", "did:key:z6MkBob"


def seed_for(index: int, did: str = ALICE, nonce: bytes = NONCE) -> bytes:
    return item_seed(hashlib.sha256(b"exam %d" % index).digest(), did, nonce)


def blind(item: ExamItem) -> ExamItem:
    """The item as an agent has it: no private part."""
    return dataclasses.replace(item, private={})


def leaves(value: JSON) -> Iterator[JSON]:
    if isinstance(value, dict):
        for child in value.values():
            yield from leaves(child)
    elif isinstance(value, list):
        for child in value:
            yield from leaves(child)
    else:
        yield value


def keys(value: JSON) -> Iterator[str]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield key
            yield from keys(child)
    elif isinstance(value, list):
        for child in value:
            yield from keys(child)


def first_item(name: str, predicate: object = None) -> ExamItem:
    capability = REGISTRY[name]
    for index in range(200):
        for item in capability.generate(seed_for(index), 20):
            if predicate is None or (callable(predicate) and predicate(item)):
                return item
    raise AssertionError("no such item")


# --- the registry and its exact thresholds -------------------------------------------------------


def test_registry_holds_four_capabilities_with_exact_thresholds() -> None:
    assert set(REGISTRY) == {"arithmetic", "python", "extraction", "retrieval"}
    for name, capability in REGISTRY.items():
        assert capability.name == name
        assert capability.description and capability.version
        assert isinstance(capability.threshold, Fraction)
        assert 0 < capability.threshold <= 1
        assert isinstance(capability.item_count, int) and capability.item_count > 0
    with pytest.raises(TypeError):
        REGISTRY["fake"] = REGISTRY["arithmetic"]  # type: ignore[index]


def test_get_capability_names_the_known_ones_when_asked_for_an_unknown_one() -> None:
    assert get_capability("retrieval") is REGISTRY["retrieval"]
    with pytest.raises(ExamError, match="arithmetic"):
        get_capability("juggling")


def test_passes_compares_exactly_where_a_float_would_not() -> None:
    capability = REGISTRY["arithmetic"]
    assert capability.threshold == Fraction(4, 5)
    assert passes(capability, 4, 5) and passes(capability, 80, 100)
    assert not passes(capability, 79, 100)
    earned, possible = 8 * 10**17, 10**18 + 1  # a hair under 4/5; as floats it is exactly 0.8
    assert earned / possible >= 0.8
    assert not passes(capability, earned, possible)
    assert not passes(capability, 0, 0)


@pytest.mark.parametrize(("earned", "possible"), [(-1, 5), (6, 5), (1, -1), (True, 1)])
def test_passes_refuses_impossible_counts(earned: int, possible: int) -> None:
    with pytest.raises(ExamError):
        passes(REGISTRY["arithmetic"], earned, possible)


@given(st.integers(0, 10**6), st.integers(1, 10**6))
def test_passes_is_the_exact_inequality(earned: int, possible: int) -> None:
    earned = min(earned, possible)
    for capability in REGISTRY.values():
        threshold = capability.threshold
        expected = earned * threshold.denominator >= threshold.numerator * possible
        assert passes(capability, earned, possible) == expected


def test_score_sums_points_and_grades_refuse_impossible_points() -> None:
    grades = [Grade("a", 1, 1, "ok"), Grade("b", 0, 1, "no"), Grade("c", 2, 3, "part")]
    assert score(grades) == (3, 5)
    assert score([]) == (0, 0)
    for earned, possible in [(2, 1), (-1, 1), (0, 0)]:
        with pytest.raises(ExamError):
            Grade("x", earned, possible, "impossible")


# --- seeds and determinism ----------------------------------------------------------------------


def test_item_seed_binds_the_exam_seed_the_did_and_the_nonce() -> None:
    base = item_seed(EXAM_SEED, ALICE, NONCE)
    assert base == item_seed(EXAM_SEED, ALICE, NONCE)
    assert len(base) == 32
    others = {
        item_seed(EXAM_SEED, BOB, NONCE),
        item_seed(EXAM_SEED, ALICE, b"server-nonce-0002"),
        item_seed(bytes(32), ALICE, NONCE),
    }
    assert base not in others and len(others) == 3


def test_item_seed_is_unambiguous_about_where_one_part_ends() -> None:
    assert item_seed(EXAM_SEED, "did:key:a", b"b" * 16) != item_seed(
        EXAM_SEED, "did:key:ab", b"b" * 15 + b"\x00"
    )


@pytest.mark.parametrize(
    ("exam_seed", "did", "nonce"),
    [(b"short", ALICE, NONCE), (EXAM_SEED, ALICE, b"short"), (EXAM_SEED, "alice", NONCE)],
)
def test_item_seed_refuses_weak_inputs(exam_seed: bytes, did: str, nonce: bytes) -> None:
    with pytest.raises(ExamError):
        item_seed(exam_seed, did, nonce)


def test_seed_commitment_is_the_sha256_of_the_seed() -> None:
    assert seed_commitment(EXAM_SEED) == hashlib.sha256(EXAM_SEED).hexdigest()


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_same_seed_same_items_other_did_or_nonce_other_items(name: str) -> None:
    capability = REGISTRY[name]
    items = capability.generate(seed_for(0), 8)
    assert items == capability.generate(seed_for(0), 8)
    assert len({item.item_id for item in items}) == 8
    for other_seed in (seed_for(0, did=BOB), seed_for(0, nonce=b"server-nonce-0002")):
        others = capability.generate(other_seed, 8)
        assert not {item.item_id for item in items} & {item.item_id for item in others}
        pairs = zip(items, others, strict=True)
        assert all((a.prompt, a.payload) != (b.prompt, b.payload) for a, b in pairs)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_a_shorter_exam_is_a_prefix_of_a_longer_one(name: str) -> None:
    capability = REGISTRY[name]
    assert capability.generate(seed_for(1), 3) == capability.generate(seed_for(1), 7)[:3]
    assert capability.generate(seed_for(1), 0) == []


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_generate_refuses_bad_counts_and_short_seeds(name: str) -> None:
    capability = REGISTRY[name]
    for n in (-1, 1001, True):
        with pytest.raises(ExamError):
            capability.generate(seed_for(0), n)
    with pytest.raises(ExamError):
        capability.generate(b"too short", 1)


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=16, max_size=64), st.sampled_from(CHEAP))
def test_any_seed_regenerates_identically_and_the_reference_solves_it(
    seed: bytes, name: str
) -> None:
    capability = REGISTRY[name]
    items = capability.generate(seed, 3)
    assert items == capability.generate(seed, 3)
    assert all(capability.grade(item, solve(blind(item))).full_marks for item in items)


# --- what the agent sees ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_the_answer_key_stays_out_of_what_the_agent_sees(name: str) -> None:
    capability = REGISTRY[name]
    for item in capability.generate(seed_for(2), 30):
        seen = item.for_agent()
        assert set(seen) == {"item_id", "capability", "prompt", "payload"}
        assert not {"answer", "expected", "cases", "private"} & set(keys(item.payload))
        assert item.private and "private" not in repr(item)
        shown = item.prompt + json.dumps(item.payload)
        assert json.dumps(item.private) not in shown
        for value in item.private.values():
            assert json.dumps(value) not in json.dumps(item.payload)


def test_arithmetic_fraction_answers_are_not_in_the_prompt() -> None:
    for item in REGISTRY["arithmetic"].generate(seed_for(3), 200):
        answer = item.private["answer"]
        assert isinstance(answer, str)
        if "/" in answer:
            assert answer not in item.prompt and answer not in json.dumps(item.payload)


def test_retrieval_answers_are_not_in_the_question_except_for_comparisons() -> None:
    for item in REGISTRY["retrieval"].generate(seed_for(3), 200):
        question = str(item.payload["question"])
        if not question.startswith("Which has more employees"):
            assert str(item.private["answer"]) not in question


def test_python_hidden_cases_are_not_the_visible_examples() -> None:
    for item in REGISTRY["python"].generate(seed_for(3), 60):
        examples = item.payload["examples"]
        cases = item.private["cases"]
        assert isinstance(examples, list) and isinstance(cases, list)
        assert len(cases) >= python_tasks.HIDDEN_RANDOM_CASES
        hidden_args = [case["args"] for case in cases if isinstance(case, dict)]
        shown_args = [ex["args"] for ex in examples if isinstance(ex, dict)]
        assert any(args not in shown_args for args in hidden_args)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_items_are_canonical_json_without_floats(name: str) -> None:
    for item in REGISTRY[name].generate(seed_for(4), 20):
        canonical_json(item.for_agent())
        canonical_json(item.private)
        for value in [*leaves(item.payload), *leaves(item.private)]:
            assert not isinstance(value, float)


def test_for_agent_is_a_copy() -> None:
    item = REGISTRY["retrieval"].generate(seed_for(0), 1)[0]
    seen = item.for_agent()
    payload = seen["payload"]
    assert isinstance(payload, dict)
    payload["question"] = "changed"
    assert item.payload["question"] != "changed"


# --- the reference agent passes, the guesser and the copier fail --------------------------------


@pytest.mark.parametrize("name", CHEAP)
def test_reference_solver_passes_over_many_seeds(name: str) -> None:
    capability = REGISTRY[name]
    for index in range(20):
        items = capability.generate(seed_for(index), 30)
        grades = [capability.grade(item, solve(blind(item))) for item in items]
        failures = [g.reason for g in grades if not g.full_marks]
        assert not failures
        assert passes(capability, *score(grades))


def test_reference_solver_passes_python_exams() -> None:
    capability = REGISTRY["python"]
    for index in range(3):
        items = capability.generate(seed_for(index), capability.item_count)
        grades = [capability.grade(item, solve(blind(item))) for item in items]
        assert [g.reason for g in grades if not g.full_marks] == []
        assert passes(capability, *score(grades))


def test_reference_solver_passes_one_task_of_every_python_family() -> None:
    capability = REGISTRY["python"]
    by_family: dict[str, ExamItem] = {}
    index = 0
    while len(by_family) < len(python_tasks.FAMILIES):
        for item in capability.generate(seed_for(index), 20):
            by_family.setdefault(str(item.payload["family"]), item)
        index += 1
    for family, item in sorted(by_family.items()):
        grade = capability.grade(item, solve(blind(item)))
        assert grade.full_marks, (family, grade.reason)


def test_python_oracles_agree_with_the_visible_examples_they_print() -> None:
    for item in REGISTRY["python"].generate(seed_for(5), 40):
        function_name = str(item.payload["function_name"])
        for example in item.payload["examples"]:  # type: ignore[union-attr]
            assert isinstance(example, dict)
            assert f"{function_name}(" in item.prompt
            assert repr(example["result"]) in item.prompt


@pytest.mark.parametrize("name", CHEAP)
def test_random_answers_fail(name: str) -> None:
    capability = REGISTRY[name]
    rng = random.Random(7)
    for index in range(10):
        items = capability.generate(seed_for(index), capability.item_count)
        grades = [capability.grade(item, random_answer(item, rng)) for item in items]
        assert not passes(capability, *score(grades))


def test_random_answers_fail_python() -> None:
    capability = REGISTRY["python"]
    items = capability.generate(seed_for(0), capability.item_count)
    rng = random.Random(7)
    grades = [capability.grade(item, random_answer(item, rng)) for item in items]
    assert score(grades) == (0, capability.item_count)


def copied_answer_trials(name: str, exams: int, per_exam: int) -> tuple[int, int]:
    """(accepted, trials): another agent's (or attempt's) correct answers on my items."""
    capability = REGISTRY[name]
    accepted = trials = 0
    for index in range(exams):
        mine = capability.generate(seed_for(index), per_exam)
        other_seed = seed_for(index, did=BOB) if index % 2 else seed_for(index, nonce=b"n" * 16)
        theirs = capability.generate(other_seed, per_exam)
        for my_item, their_item in zip(mine, theirs, strict=True):
            grade = capability.grade(my_item, solve(blind(their_item)))
            accepted += grade.earned
            trials += 1
    return accepted, trials


def test_answers_copied_from_another_agent_or_attempt_fail() -> None:
    results = {name: copied_answer_trials(name, 20, 20) for name in CHEAP}
    results["python"] = copied_answer_trials("python", 2, 3)
    assert sum(trials for _, trials in results.values()) >= 1000
    assert {name: accepted for name, (accepted, _) in results.items()} == dict.fromkeys(results, 0)


# --- graders: formats, normalisation, refusals --------------------------------------------------


def grade(name: str, item: ExamItem, answer: JSON) -> Grade:
    return REGISTRY[name].grade(item, answer)


def test_arithmetic_accepts_every_exact_form_and_refuses_floats() -> None:
    item = first_item("arithmetic", lambda i: "/" in str(i.private["answer"]))
    value = Fraction(str(item.private["answer"]))
    assert grade("arithmetic", item, f"{value.numerator}/{value.denominator}").full_marks
    assert grade("arithmetic", item, f"{2 * value.numerator} / {2 * value.denominator}").full_marks
    as_float = grade("arithmetic", item, value.numerator / value.denominator)
    assert not as_float.full_marks and "float" in as_float.reason
    whole = first_item("arithmetic", lambda i: "/" not in str(i.private["answer"]))
    number = int(str(whole.private["answer"]))
    for answer in (number, str(number), f"{number}.000", f" {number} "):
        assert grade("arithmetic", whole, answer).full_marks, answer
    wrong_answers: list[JSON] = [number + 1, True, None, "1e3", f"{number}/0", [number], "x" * 500]
    for wrong_answer in wrong_answers:
        assert not grade("arithmetic", whole, wrong_answer).full_marks, wrong_answer


def test_arithmetic_decimal_answers_compare_exactly() -> None:
    item = first_item(
        "arithmetic",
        lambda i: i.payload["kind"] == "conversion" and i.payload["to"] in ("km", "kg", "t"),
    )
    value = Fraction(str(item.private["answer"]))
    assert value.denominator in (1, 2, 4, 5, 8, 10) or 10**12 % value.denominator == 0
    decimal_text = f"{value.numerator / value.denominator:.12f}".rstrip("0")  # exact here
    assert Fraction(decimal_text) == value
    assert grade("arithmetic", item, decimal_text).full_marks


def test_reference_expression_evaluator_refuses_anything_but_arithmetic() -> None:
    assert evaluate_expression("(86 \N{MINUS SIGN} (5 + 12)) \N{MULTIPLICATION SIGN} 180") == 12420
    assert evaluate_expression("7 \N{DIVISION SIGN} 2") == Fraction(7, 2)
    for text in ("__import__('os')", "2 ** 10", "1.5 + 1", "1 / 0", "x + 1", "[1][0]", "1 +"):
        with pytest.raises(ExamError):
            evaluate_expression(text)


@given(st.binary(min_size=16, max_size=32))
def test_rendered_expressions_mean_what_they_evaluate_to(seed: bytes) -> None:
    expression, value = arithmetic.random_expression(random.Random(seed))
    assert evaluate_expression(arithmetic.render(expression)) == value


def test_extraction_normalises_as_the_prompt_says() -> None:
    item = first_item("extraction", lambda i: i.payload["kind"] == "invoice")
    answer = solve(blind(item))
    assert isinstance(answer, dict)
    shouted = dict(answer, vendor=f"  {str(answer['vendor']).upper()}  ")
    assert grade("extraction", item, shouted).full_marks
    padded_total = dict(answer, total=str(answer["total"]) + "000")
    assert grade("extraction", item, padded_total).full_marks
    lower_currency = dict(answer, currency=str(answer["currency"]).lower())
    assert grade("extraction", item, lower_currency).full_marks
    year, month, day = str(answer["issue_date"]).split("-")
    spelled = dict(answer, issue_date=f"{day}/{month}/{year}")
    result = grade("extraction", item, spelled)
    assert not result.full_marks and "not in the stated format: issue_date" in result.reason
    as_float = grade("extraction", item, dict(answer, total=float(str(answer["total"]))))
    assert "not in the stated format: total" in as_float.reason
    missing = {k: v for k, v in answer.items() if k != "due_date"}
    assert "missing: due_date" in grade("extraction", item, missing).reason
    wrong_total = dict(answer, total="1.00")
    assert "wrong: total" in grade("extraction", item, wrong_total).reason
    assert not grade("extraction", item, "vendor: someone").full_marks
    with_extra = dict(answer, note="extra keys are ignored")
    assert grade("extraction", item, with_extra).full_marks


def test_extraction_times_are_24_hour() -> None:
    item = first_item("extraction", lambda i: i.payload["kind"] == "event")
    answer = solve(blind(item))
    assert isinstance(answer, dict)
    hour, minute = str(answer["start_time"]).split(":")
    assert grade("extraction", item, dict(answer, start_time=f"{int(hour)}:{minute}")).full_marks
    twelve_hour = f"{int(hour) % 12 or 12}:{minute} {'pm' if int(hour) >= 12 else 'am'}"
    assert not grade("extraction", item, dict(answer, start_time=twelve_hour)).full_marks


def test_retrieval_normalises_case_space_full_stop_and_thousands() -> None:
    name_item = first_item("retrieval", lambda i: i.payload["answer_format"] == "name")
    answer = str(solve(blind(name_item)))
    assert grade("retrieval", name_item, f"  {answer.lower()}. ").full_marks
    assert not grade("retrieval", name_item, answer + " Ltd").full_marks
    assert not grade("retrieval", name_item, 12).full_marks
    count_item = first_item("retrieval", lambda i: i.payload["answer_format"] == "integer")
    count = solve(blind(count_item))
    assert isinstance(count, int)
    for form in (count, str(count), f"{count:,}"):
        assert grade("retrieval", count_item, form).full_marks, form
    assert not grade("retrieval", count_item, count + 1).full_marks
    assert not grade("retrieval", count_item, float(count)).full_marks


def test_python_grader_refuses_non_source_and_wrong_names() -> None:
    item = first_item("python")
    assert "source code" in grade("python", item, 42).reason
    source = str(solve(blind(item)))
    renamed = source.replace(str(item.payload["function_name"]), "solution")
    assert "no function named" in grade("python", item, renamed).reason
    assert "longer than" in grade("python", item, "#" * 30_000).reason


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_graders_refuse_items_of_other_capabilities(name: str) -> None:
    other = next(n for n in REGISTRY if n != name)
    item = REGISTRY[other].generate(seed_for(0), 1)[0]
    with pytest.raises(ExamError):
        REGISTRY[name].grade(item, "anything")


@pytest.mark.parametrize("name", CHEAP)
def test_graders_refuse_items_without_their_answer_key(name: str) -> None:
    item = REGISTRY[name].generate(seed_for(0), 1)[0]
    with pytest.raises(ExamError):
        REGISTRY[name].grade(blind(item), solve(blind(item)))


def test_reference_solver_raises_on_what_it_cannot_read() -> None:
    item = first_item("retrieval")
    garbled = dataclasses.replace(item, payload=dict(item.payload, question="Why?"))
    with pytest.raises(ExamError):
        solve(garbled)
    with pytest.raises(ExamError):
        solve(dataclasses.replace(item, capability="juggling"))


# --- deadlines ----------------------------------------------------------------------------------


def test_answers_after_the_deadline_raise_and_on_time_ones_are_graded() -> None:
    capability: Capability = REGISTRY["arithmetic"]
    item = capability.generate(seed_for(0), 1)[0]
    deadline = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    on_time = grade_before_deadline(
        capability, item, solve(blind(item)), answered_at=deadline, deadline=deadline
    )
    assert on_time.full_marks
    with pytest.raises(DeadlineError):
        grade_before_deadline(
            capability,
            item,
            solve(blind(item)),
            answered_at=deadline + timedelta(seconds=1),
            deadline=deadline,
        )
    with pytest.raises(ExamError):
        grade_before_deadline(
            capability, item, 1, answered_at=datetime(2030, 1, 1), deadline=deadline
        )


def test_module_constants_name_their_capabilities() -> None:
    assert arithmetic.ARITHMETIC.name == "arithmetic"
    assert extraction.EXTRACTION.name == "extraction"
    assert retrieval.RETRIEVAL.name == "retrieval"
    assert python_tasks.PYTHON.name == "python"


def test_reference_solver_refuses_a_comparison_whose_companies_it_cannot_read() -> None:
    """A comparison naming companies its patterns do not parse is an ExamError (a 422 from the
    agent service), never a crash of `max()` on nothing."""
    payload = {
        "corpus": ["Orla Systems has its head office in Galway and a workforce of 210."],
        "question": "Which has more employees, Orla Systems or Bracken Analytics?",
    }
    with pytest.raises(ExamError, match="both headcounts"):
        solve_retrieval(payload)
