"""Capabilities as typed skills: schemas, instructions, examples, requester inputs, work items.

The invariant that ties exams to real work: every generated item's payload is a valid input, its
prompt is the capability's instruction for that payload, and the reference solver's answer is a
valid output with full marks. Python grades start a sandbox subprocess each, so python gets few
graded items and many schema-checked ones.
"""

from __future__ import annotations

import dataclasses
import random
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from accord.identity.challenges import (
    JSON,
    REGISTRY,
    ExamItem,
    JSONObject,
    arithmetic,
    extraction,
    python_tasks,
    retrieval,
    validate_input,
    validate_output,
    work_item,
)
from accord.identity.challenges.base import (
    JSON_SCHEMA_DIALECT,
    TEMPLATES_DIR,
    load_template,
    render_instruction,
    render_template,
)
from accord.identity.challenges.reference import exact_decimal_text, solve
from accord.identity.challenges.sandbox import run_function_cases
from accord.identity.challenges.skills import json_path
from accord.identity.errors import ExamError, SchemaViolation

CHEAP = ["arithmetic", "extraction", "retrieval"]
SNAPSHOTS = Path(__file__).with_name("snapshots")
TEXT: JSONObject = {"type": "text", "description": "a text field"}


def blind(item: ExamItem) -> ExamItem:
    return dataclasses.replace(item, private={})


def check_exam_item(item: ExamItem, *, grade: bool = True) -> None:
    """The invariant for one generated item."""
    capability = REGISTRY[item.capability]
    validate_input(item.capability, item.payload)
    assert item.prompt == capability.instruction(item.payload)
    if grade:
        answer = solve(blind(item))
        validate_output(item.capability, answer)
        result = capability.grade(item, answer)
        assert result.full_marks, (item.item_id, result.reason)


def exact(answer: JSON) -> Fraction:
    value = arithmetic.parse_exact_number(answer)
    assert isinstance(value, Fraction), value
    return value


# --- the declared interface ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_schemas_are_valid_draft_2020_12_and_copies(name: str) -> None:
    capability = REGISTRY[name]
    for schema in (capability.input_schema, capability.output_schema):
        assert schema["$schema"] == JSON_SCHEMA_DIALECT
        Draft202012Validator.check_schema(schema)
    tampered = capability.input_schema
    tampered["type"] = "string"
    assert capability.input_schema["type"] == "object"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_examples_are_valid_and_fresh_copies(name: str) -> None:
    capability = REGISTRY[name]
    example_input, example_output = capability.example()
    validate_input(name, example_input)
    validate_output(name, example_output)
    example_input.clear()
    assert capability.example()[0]


@pytest.mark.parametrize("name", CHEAP)
def test_the_reference_solver_answers_each_example(name: str) -> None:
    example_input, example_output = REGISTRY[name].example()
    assert solve(work_item(name, "part-1", example_input)) == example_output


def test_the_python_example_passes_its_own_examples() -> None:
    example_input, source = python_tasks.PYTHON.example()
    assert isinstance(source, str)
    examples = example_input["examples"]
    assert isinstance(examples, list) and examples
    inputs: list[list[JSON]] = []
    for example in examples:
        assert isinstance(example, dict) and isinstance(example["args"], list)
        inputs.append(example["args"])
    run = run_function_cases(source, str(example_input["function_name"]), inputs)
    assert run.failure is None
    assert [r.value for r in run.results] == [e["result"] for e in examples if isinstance(e, dict)]


# --- the invariant: exams exercise exactly the interface real work uses -------------------------


@pytest.mark.parametrize("name", CHEAP)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.binary(min_size=16, max_size=32))
def test_every_item_is_a_valid_input_solved_by_a_valid_full_marks_output(
    name: str, seed: bytes
) -> None:
    for item in REGISTRY[name].generate(seed, 20):
        check_exam_item(item)


@settings(max_examples=15, deadline=None)
@given(seed=st.binary(min_size=16, max_size=32))
def test_every_python_item_is_a_valid_input_with_a_valid_reference_output(seed: bytes) -> None:
    for item in python_tasks.PYTHON.generate(seed, 20):
        check_exam_item(item, grade=False)
        validate_output("python", solve(blind(item)))
        assert item.payload["description"] in item.prompt


def test_python_items_get_full_marks_from_the_reference_as_work_items_too() -> None:
    for item in python_tasks.PYTHON.generate(bytes(range(16)), 4):
        check_exam_item(item)
        work = work_item("python", "part-py", item.payload)
        assert work.prompt == item.prompt
        assert solve(work) == solve(blind(item))


# --- requester inputs: arithmetic ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("figures", "operation", "expected"),
    [
        (["120.50", "43.19"], "sum", "163.69"),
        (["100.50", "0.50"], "sum", "101.00"),
        (["0.1", "0.2"], "sum", "0.3"),
        (["-12.5", "2.5"], "sum", "-10.0"),
        (["1.5", "2.5"], "product", "3.75"),
        (["12", "3"], "product", "36"),
        (["10.00", "20.50"], "mean", "15.25"),
        (["1", "2", "2"], "mean", "5/3"),
        (["-3.5", "2", "7"], "min", "-3.5"),
        (["1.999", "2"], "max", "2.000"),
    ],
)
def test_figures_are_answered_exactly_as_decimals_where_finite(
    figures: list[str], operation: str, expected: str
) -> None:
    figure_list: list[JSON] = list(figures)
    item = work_item(
        "arithmetic", "p", {"kind": "figures", "figures": figure_list, "operation": operation}
    )
    answer = solve(item)
    assert answer == expected
    validate_output("arithmetic", answer)
    assert ", ".join(figures) in item.prompt


def test_the_other_arithmetic_forms_are_work_too() -> None:
    expression = work_item(
        "arithmetic", "p1", {"kind": "expression", "expression": "(120 + 43) \u00d7 2 \u2212 1"}
    )
    assert expression.prompt.startswith("Compute the exact value of (120 + 43)")
    assert solve(expression) == 325
    conversion: JSONObject = {"kind": "conversion", "value": "1.25", "from": "h", "to": "min"}
    assert exact(solve(work_item("arithmetic", "p2", conversion))) == 75


def test_exact_decimal_text() -> None:
    assert exact_decimal_text(Fraction(1, 3), 2) is None
    assert exact_decimal_text(Fraction(-1, 8), 0) == "-0.125"
    assert exact_decimal_text(Fraction(0), 2) == "0.00"
    assert exact_decimal_text(Fraction(-5, 100), 1) == "-0.05"
    assert exact_decimal_text(Fraction(7), 0) == "7"


# --- requester inputs: extraction ----------------------------------------------------------------


def extraction_items() -> list[ExamItem]:
    return extraction.EXTRACTION.generate(bytes(range(32)), 30)


def test_extraction_without_kind_detects_the_document() -> None:
    kinds = set()
    for item in extraction_items():
        kinds.add(item.payload["kind"])
        payload = {k: v for k, v in item.payload.items() if k != "kind"}
        work = work_item("extraction", "p", payload)
        assert "from the document in the payload" in work.prompt
        answer = solve(work)
        validate_output("extraction", answer)
        graded = dataclasses.replace(item, payload=payload)
        assert extraction.EXTRACTION.grade(graded, answer).full_marks
    assert kinds == set(extraction.DOCUMENT_FIELDS)


def test_extraction_answers_exactly_the_fields_asked_for() -> None:
    rng = random.Random(7)
    for item in extraction_items():
        fields = item.payload["fields"]
        assert isinstance(fields, dict)
        asked = dict(rng.sample(sorted(fields.items()), rng.randint(1, len(fields))))
        payload: JSONObject = {"document": item.payload["document"], "fields": asked}
        if rng.random() < 0.5:
            payload["kind"] = item.payload["kind"]
        answer = solve(work_item("extraction", "p", payload))
        assert isinstance(answer, dict) and list(answer) == list(asked)
        validate_output("extraction", answer)
        graded = dataclasses.replace(item, payload=payload)
        assert extraction.EXTRACTION.grade(graded, answer).full_marks


def test_extraction_the_reference_cannot_do_is_an_exam_error() -> None:
    item = extraction_items()[0]
    unknown_field: JSONObject = {
        "document": item.payload["document"],
        "fields": {"colour": {"type": "text", "description": "the paper's colour"}},
    }
    with pytest.raises(ExamError, match="cannot find colour"):
        solve(work_item("extraction", "p", unknown_field))
    unknown_document: JSONObject = {
        "document": "A poem about the sea.",
        "fields": {"total": {"type": "amount", "description": "the total"}},
    }
    with pytest.raises(ExamError, match="cannot tell the kind of document"):
        solve(work_item("extraction", "p", unknown_document))


# --- requester inputs: python and retrieval ------------------------------------------------------


def test_python_specs_outside_the_known_families_are_refused_clearly() -> None:
    spec, _ = python_tasks.PYTHON.example()
    with pytest.raises(ExamError, match=r"known task families.*names no family"):
        solve(work_item("python", "p", spec))
    unknown = {**spec, "family": "sorting_hat", "params": {}}
    with pytest.raises(ExamError, match="no template for task family 'sorting_hat'"):
        solve(work_item("python", "p", unknown))


def test_python_instruction_without_examples_has_no_examples_sentence() -> None:
    spec, _ = python_tasks.PYTHON.example()
    spec["examples"] = []
    text = work_item("python", "p", spec).prompt
    assert "Examples" not in text and f"`{spec['signature']}`. {spec['description']} Answer" in text


def test_retrieval_needs_no_answer_format() -> None:
    for item in retrieval.RETRIEVAL.generate(bytes(range(32)), 20):
        payload: JSONObject = {
            "corpus": item.payload["corpus"],
            "question": item.payload["question"],
        }
        answer = solve(work_item("retrieval", "p", payload))
        validate_output("retrieval", answer)
        assert retrieval.RETRIEVAL.grade(item, answer).full_marks


# --- bad inputs and outputs name where they are wrong ---------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "path", "reason"),
    [
        (
            "arithmetic",
            {"kind": "figures", "figures": ["1", "2.5", "abc"], "operation": "sum"},
            "$.figures[2]",
            "'abc' does not match '^-?\\\\d+(\\\\.\\\\d+)?$'",
        ),
        ("arithmetic", {"kind": "figures", "figures": [1.5], "operation": "sum"}, "$.figures[0]",
         "1.5 is not of type 'string'"),
        ("arithmetic", {"kind": "figures", "figures": [], "operation": "sum"}, "$.figures",
         "should be non-empty"),
        ("arithmetic", {"kind": "figures", "figures": ["1"], "operation": "median"},
         "$.operation", "'median' is not one of"),
        ("arithmetic", {"kind": "figures", "figures": ["1"]}, "$",
         "'operation' is a required property"),
        ("arithmetic", {"kind": "conversion", "value": "1", "from": "km", "to": "kg"}, "$.to",
         "'kg' is not one of ['km', 'm', 'cm', 'mm']"),
        ("arithmetic", {"kind": "expression", "expression": "__import__('os')"}, "$.expression",
         "does not match"),
        ("arithmetic", {"kind": "expression", "expression": "1 + 1", "note": "x"}, "$",
         "('note' was unexpected)"),
        ("arithmetic", {"kind": "poem"}, "$.kind", "'poem' is not one of"),
        ("arithmetic", ["kind", "expression"], "$", "is not of type 'object'"),
        ("extraction", {"document": "x"}, "$", "'fields' is a required property"),
        ("extraction", {"document": "x", "fields": {"total": {**TEXT, "type": "money"}}},
         "$.fields.total.type", "'money' is not one of"),
        ("extraction", {"document": "x", "fields": {"due date": TEXT}},
         "$.fields", "'due date' does not match"),
        ("extraction", {"document": "x", "fields": {"a": {"type": "text"}}},
         "$.fields.a", "'description' is a required property"),
        ("extraction", {"document": "x", "kind": "poem", "fields": {"a": TEXT}},
         "$.kind", "'poem' is not one of"),
        ("python", {**python_tasks.EXAMPLE_INPUT, "signature": "sum_even(xs)"}, "$.signature",
         "does not match"),
        ("python", {**python_tasks.EXAMPLE_INPUT, "examples": [{"args": []}, {"result": 1}]},
         "$.examples[0]", "'result' is a required property"),
        ("python", {**python_tasks.EXAMPLE_INPUT, "family": "caesar"}, "$",
         "'params' is a dependency of 'family'"),
        ("retrieval", {"corpus": ["a passage", 7], "question": "q?"}, "$.corpus[1]",
         "7 is not of type 'string'"),
        ("retrieval", {"corpus": ["a passage"], "question": ""}, "$.question",
         "should be non-empty"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_schema_violations_with_their_path(
    name: str, value: JSON, path: str, reason: str
) -> None:
    with pytest.raises(SchemaViolation) as raised:
        validate_input(name, value)
    assert raised.value.path == path
    assert reason in raised.value.reason
    assert str(raised.value) == f"{path}: {raised.value.reason}"
    assert isinstance(raised.value, ExamError)


@pytest.mark.parametrize(
    ("name", "value", "path", "reason"),
    [
        ("arithmetic", 2.0, "$", "2.0 is not a JSON integer or string (a float is never exact)"),
        ("arithmetic", True, "$", "True is not a JSON integer or string"),
        ("arithmetic", "1/0", "$", "does not match"),
        ("arithmetic", "twelve", "$", "does not match"),
        ("extraction", {"total": 12.5}, "$.total", "12.5 is not a JSON string or integer"),
        ("extraction", ["2031-03-14"], "$", "is not of type 'object'"),
        ("python", 42, "$", "42 is not of type 'string'"),
        ("python", "", "$", "should be non-empty"),
        ("retrieval", -1, "$", "-1 is less than the minimum of 0"),
    ],
)
def test_bad_outputs_raise_schema_violations(
    name: str, value: JSON, path: str, reason: str
) -> None:
    with pytest.raises(SchemaViolation) as raised:
        validate_output(name, value)
    assert raised.value.path == path
    assert reason in raised.value.reason


def test_good_arithmetic_outputs_in_every_exact_form() -> None:
    for value in (12, -3, "12", " -12.5 ", "\u221225/2", "25 / 2", "+7"):
        validate_output("arithmetic", value)
        exact(value)


def test_long_reasons_are_cut_short() -> None:
    with pytest.raises(SchemaViolation) as raised:
        validate_input("retrieval", {"corpus": ["x" * 30_000], "question": "q?"})
    assert raised.value.path == "$.corpus[0]"
    assert len(raised.value.reason) <= 300 and raised.value.reason.endswith("…")


def test_unknown_capabilities_are_exam_errors_not_violations() -> None:
    for check in (validate_input, validate_output):
        with pytest.raises(ExamError, match="unknown capability 'juggling'") as raised:
            check("juggling", {})
        assert not isinstance(raised.value, SchemaViolation)
    with pytest.raises(ExamError, match="unknown capability"):
        work_item("juggling", "p", {})


def test_json_paths() -> None:
    assert json_path([]) == "$"
    assert json_path(["figures", 2]) == "$.figures[2]"
    assert json_path(["fields", "due date", 0]) == "$.fields['due date'][0]"
    assert json_path(["it's"]) == "$['it\\'s']"


# --- work items ----------------------------------------------------------------------------------


def test_a_work_item_is_an_exam_shaped_item_of_the_requesters_input() -> None:
    example_input, _ = arithmetic.ARITHMETIC.example()
    item = work_item("arithmetic", "task-7/part-2", example_input)
    assert item.item_id == "task-7/part-2" and item.capability == "arithmetic"
    assert item.prompt == arithmetic.ARITHMETIC.instruction(example_input)
    assert item.payload == example_input and item.private == {}
    exam_item = arithmetic.ARITHMETIC.generate(bytes(16), 1)[0]
    assert item.for_agent().keys() == exam_item.for_agent().keys()
    example_input["figures"] = ["1"]
    assert item.payload["figures"] == ["120.50", "43.19"]


def test_work_items_refuse_bad_inputs_and_part_ids() -> None:
    with pytest.raises(SchemaViolation, match=r"^\$\.operation: "):
        work_item("arithmetic", "p", {"kind": "figures", "figures": ["1"], "operation": "avg"})
    example_input, _ = retrieval.RETRIEVAL.example()
    for part_id in ("", "x" * 201):
        with pytest.raises(ExamError, match="part id"):
            work_item("retrieval", part_id, example_input)


# --- instruction templates -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_instruction_matches_its_snapshot(name: str) -> None:
    example_input, _ = REGISTRY[name].example()
    text = REGISTRY[name].instruction(example_input)
    expected = (SNAPSHOTS / f"{name}.txt").read_text(encoding="utf-8")
    assert text + "\n" == expected, f"differs from tests/identity/snapshots/{name}.txt"


def test_every_capability_has_one_template_file() -> None:
    assert sorted(p.stem for p in TEMPLATES_DIR.glob("*.txt")) == sorted(REGISTRY)
    for name in REGISTRY:
        assert (TEMPLATES_DIR / f"{name}.txt").read_text(encoding="utf-8").endswith("\n")
        assert not load_template(name).endswith("\n")


@pytest.mark.parametrize(
    ("template", "values", "error"),
    [
        ("hello $name", {}, "needs a value for name"),
        ("hello ${name} and $other", {"name": "a"}, "needs a value for other"),
        ("hello", {"name": "a"}, "no placeholder for name"),
        ("costs 5$", {}, "invalid placeholder"),
    ],
)
def test_templates_render_strictly(template: str, values: dict[str, str], error: str) -> None:
    with pytest.raises(ExamError, match=error):
        render_template(template, values)


def test_rendering_is_literal_and_named_templates_are_strict() -> None:
    assert render_template("pay $$5 to $who", {"who": "$name"}) == "pay $5 to $name"
    with pytest.raises(ExamError, match="instruction template arithmetic needs a value for task"):
        render_instruction("arithmetic", {})
    with pytest.raises(ExamError, match="no instruction template 'juggling'"):
        render_instruction("juggling", {})
    with pytest.raises(ExamError, match="not a template name"):
        load_template("../secrets")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("arithmetic", {"kind": "poem"}),
        ("arithmetic", {"kind": "figures", "figures": ["1"], "operation": "median"}),
        ("extraction", {"document": "x"}),
        ("python", {"function_name": "f"}),
        ("retrieval", {"corpus": []}),
    ],
)
def test_instructions_refuse_inputs_they_cannot_render(name: str, value: JSONObject) -> None:
    with pytest.raises(ExamError):
        REGISTRY[name].instruction(value)
