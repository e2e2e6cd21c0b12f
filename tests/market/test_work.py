"""Parsing the requester's work (`accord.market.work`, `accord.market.tasks.spec_from_request`):
every bad input is a WorkError naming the JSON path of the problem; the defaults; JSON paths; exact
numbers; and the shares of v(N) each check carries."""

from __future__ import annotations

import copy
from datetime import timedelta
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.identity.challenges import REGISTRY
from accord.market.errors import LimitError, MarketError, TaskError, WorkError
from accord.market.money import MAX_WEI
from accord.market.payouts import CONTRACTOR_SHARE, check_shares, dispute_fee
from accord.market.tasks import TaskSpec, parse_window, spec_from_request
from accord.market.work import (
    ASSEMBLY_CHECK,
    ASSEMBLY_PART,
    DEFAULT_REVIEW_CRITERION,
    MAX_SPEC_PYTHON_CPU_SECONDS,
    MISSING,
    PLAN_CHECK,
    PLAN_PART,
    AssemblyCheck,
    ExpectCheck,
    JudgeCheck,
    Part,
    PlanCheck,
    PythonCheck,
    ReviewCheck,
    SchemaCheck,
    check_to_json,
    default_checks,
    exact_number,
    parse_check,
    parse_checks,
    parse_parts,
    parse_path,
    require_machine_verdict,
    rubric,
    value_at,
)
from tests.specs import INVOICE_CHECKS, invoice_parts, invoice_request, invoice_spec

PARTS = {"lines-sum", "tax", "invoice-fields", "invoice-dates"}


def work_error(request: dict[str, Any]) -> WorkError:
    with pytest.raises(WorkError) as caught:
        spec_from_request(request, {})
    assert str(caught.value).startswith(caught.value.path) or caught.value.path == "$"
    return caught.value


def with_check(check: dict[str, Any], at: int = 0) -> dict[str, Any]:
    checks = copy.deepcopy(INVOICE_CHECKS)
    checks.insert(at, check)
    return invoice_request(checks=checks)


def check_error(raw: dict[str, Any]) -> WorkError:
    with pytest.raises(WorkError) as caught:
        parse_check(raw, "$.checks[3]", PARTS)
    return caught.value


# -- the invoice parses -----------------------------------------------------------------------


def test_the_invoice_spec_parses_into_typed_parts_and_checks() -> None:
    spec = spec_from_request(invoice_request(), {})
    assert [p.part_id for p in spec.parts] == [
        "lines-sum",
        "tax",
        "invoice-fields",
        "invoice-dates",
    ]
    assert [type(c) for c in spec.checks] == [
        ExpectCheck,
        ExpectCheck,
        ExpectCheck,
        ExpectCheck,
        SchemaCheck,
        PythonCheck,
    ]
    assert spec.capabilities == ("arithmetic", "extraction")
    assert spec.checks[0].reads == ("lines-sum",)
    assert spec.checks[5].reads == ("lines-sum", "tax", "invoice-fields")


def test_a_spec_survives_its_json_round_trip() -> None:
    spec = spec_from_request(invoice_request(), {})
    again = TaskSpec.from_json(spec.to_json())
    assert again.to_json() == spec.to_json()
    assert again.rubric == spec.rubric
    for check in spec.checks:
        assert parse_check(check_to_json(check), "$", PARTS) == check


# -- parts ------------------------------------------------------------------------------------


def parts_with(k: int, **changes: Any) -> dict[str, Any]:
    parts = invoice_parts()
    parts[k].update(changes)
    return invoice_request(parts=parts)


def test_an_unknown_capability_is_named() -> None:
    error = work_error(parts_with(1, capability="telepathy"))
    assert error.path == "$.parts[1].capability"
    assert "telepathy" in str(error)


@pytest.mark.parametrize(
    ("part", "change", "path"),
    [
        (0, {"figures": ["1.00", "abc"]}, "$.parts[0].input.figures[1]"),
        (1, {"expression": "import os"}, "$.parts[1].input.expression"),
        (0, {"kind": "astrology"}, "$.parts[0].input.kind"),
    ],
)
def test_an_input_not_matching_its_schema_names_the_path_inside_the_input(
    part: int, change: dict[str, Any], path: str
) -> None:
    parts = invoice_parts()
    parts[part]["input"].update(change)
    assert work_error(invoice_request(parts=parts)).path == path


def test_an_input_missing_a_required_field_names_the_input() -> None:
    parts = invoice_parts()
    del parts[2]["input"]["fields"]
    error = work_error(invoice_request(parts=parts))
    assert error.path == "$.parts[2].input"
    assert "fields" in str(error)


def test_a_part_named_twice_is_refused() -> None:
    parts = invoice_parts()
    parts[3]["id"] = "tax"
    error = work_error(invoice_request(parts=parts, checks=[]))
    assert error.path == "$.parts[3].id"
    assert "twice" in str(error)


@pytest.mark.parametrize(
    ("parts", "path"),
    [
        (None, "$.parts"),
        ([], "$.parts"),
        ("lines", "$.parts"),
        (["not an object"], "$.parts[0]"),
        ([{"id": "Bad Id", "capability": "arithmetic", "input": {}}], "$.parts[0].id"),
        ([{"id": "a", "capability": "arithmetic", "input": []}], "$.parts[0].input"),
        ([{"id": "a", "capability": "arithmetic", "input": {}, "extra": 1}], "$.parts[0]"),
    ],
)
def test_malformed_parts_are_named(parts: Any, path: str) -> None:
    request = invoice_request(parts=parts, checks=[])
    assert work_error(request).path == path


def test_a_file_reference_that_was_not_stored_is_named() -> None:
    parts = invoice_parts(document={"$file": "ab" * 32})
    assert work_error(invoice_request(parts=parts)).path == "$.parts[2].input"


def test_a_stored_file_is_resolved_before_the_schema_check() -> None:
    sha = "cd" * 32
    parts = parse_parts(invoice_parts(document={"$file": sha}), {sha: "INVOICE No. 1"})
    assert parts[2].input["document"] == {"$file": sha}  # the reference is what is logged


def test_known_capabilities_can_be_narrowed() -> None:
    with pytest.raises(WorkError) as caught:
        parse_parts(invoice_parts(), {}, known_capabilities=["arithmetic"])
    assert caught.value.path == "$.parts[2].capability"


# -- checks -----------------------------------------------------------------------------------


def test_a_check_naming_a_missing_part_is_refused() -> None:
    error = work_error(with_check({"id": "x", "kind": "review", "part": "summary"}, at=2))
    assert error.path == "$.checks[2].part"
    assert "'summary'" in str(error)
    error = work_error(with_check({"id": "x", "kind": "review", "reads": ["tax", "summary"]}))
    assert error.path == "$.checks[0].reads[1]"


@pytest.mark.parametrize("reads", [["tax", "tax"], [], "tax", [["tax"]], [{"part": "tax"}], [3]])
def test_bad_reads_are_refused(reads: Any) -> None:
    error = check_error({"id": "x", "kind": "review", "reads": reads})
    assert error.path.startswith("$.checks[3].reads")


@pytest.mark.parametrize("part", [["tax"], {"id": "tax"}, None, 7])
def test_a_part_that_is_not_a_part_id_is_refused(part: Any) -> None:
    assert check_error({"id": "x", "kind": "review", "part": part}).path == "$.checks[3].part"


def test_part_and_reads_together_are_refused() -> None:
    error = check_error({"id": "x", "kind": "review", "part": "tax", "reads": ["tax"]})
    assert error.path == "$.checks[3]"


def test_single_part_kinds_read_exactly_one_part() -> None:
    raw = {"id": "x", "kind": "schema", "reads": ["tax", "lines-sum"], "schema": {}}
    assert check_error(raw).path == "$.checks[3].reads"


@pytest.mark.parametrize(
    "code",
    [
        "def check(outputs)\n    return True\n",
        "def check(outputs):\nreturn True\n",
        "return True",
        "x = 1 +",
    ],
)
def test_python_code_that_does_not_compile_is_refused(code: str) -> None:
    error = work_error(with_check({"id": "x", "kind": "python", "reads": ["tax"], "code": code}))
    assert error.path == "$.checks[0].code"
    assert "compile" in str(error) or "check" in str(error)


@pytest.mark.parametrize(
    "code",
    [
        "def test(outputs):\n    return True\n",
        "check = lambda outputs: True\n",
        "class check:\n    pass\n",
        "def outer():\n    def check(outputs):\n        return True\n",
    ],
)
def test_python_code_without_a_check_function_is_refused(code: str) -> None:
    error = work_error(with_check({"id": "x", "kind": "python", "reads": ["tax"], "code": code}))
    assert error.path == "$.checks[0].code"
    assert "def check(outputs)" in str(error)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("code", ""),
        ("code", "   "),
        ("code", 42),
        ("code", "#" * 20_001),
        ("cpu_seconds", 0),
        ("cpu_seconds", 11),
        ("cpu_seconds", 1.5),
        ("cpu_seconds", True),
        ("memory_mib", 63),
        ("memory_mib", 1025),
        ("memory_mib", "256"),
    ],
)
def test_python_limits_and_code_out_of_range(field: str, value: Any) -> None:
    raw = {"id": "x", "kind": "python", "reads": ["tax"], "code": "def check(o):\n  return 1\n"}
    raw[field] = value
    assert check_error(raw).path == f"$.checks[3].{field}"


@pytest.mark.parametrize("weight", [0, -1, 1.5, True, False, "2", None, 1_000_001])
def test_weights_that_are_not_positive_integers_are_refused(weight: Any) -> None:
    raw = {"id": "x", "kind": "review", "part": "tax", "weight": weight}
    error = work_error(with_check(raw, at=1))
    assert error.path == "$.checks[1].weight"


def test_a_missing_weight_is_one() -> None:
    assert parse_check({"id": "x", "kind": "review", "part": "tax"}, "$", PARTS).weight == 1


def test_a_weight_set_on_a_constructed_spec_must_be_positive() -> None:
    spec = spec_from_request(invoice_request(), {})
    with pytest.raises(WorkError) as caught:
        TaskSpec(
            title="t",
            description="",
            parts=spec.parts,
            checks=(ReviewCheck("r", 0, ("tax",)),),
            budget=spec.budget,
            bidding=spec.bidding,
            reveal=spec.reveal,
            delivery=spec.delivery,
        )
    assert caught.value.path == "$.checks[0].weight"


@pytest.mark.parametrize("kind", ["vibes", "plan", "assembly", None, 3, "Expect"])
def test_an_unknown_check_kind_is_refused(kind: Any) -> None:
    """The contract holder's kinds (plan, assembly) are not the requester's to post."""
    error = work_error(with_check({"id": "x", "kind": kind, "part": "tax"}))
    assert error.path == "$.checks[0].kind"


def test_a_check_named_twice_is_refused() -> None:
    error = work_error(with_check({"id": "sum-right", "kind": "review", "part": "tax"}, at=3))
    assert error.path == "$.checks[3].id"
    assert "twice" in str(error)


@pytest.mark.parametrize("check_id", [None, "", "Sum", "_plan-covers-every-part", "a b", 5])
def test_a_bad_check_id_is_refused(check_id: Any) -> None:
    """Ids starting with `_` are the contract holder's; a requester cannot post one."""
    assert check_error({"id": check_id, "kind": "review", "part": "tax"}).path == "$.checks[3].id"


@pytest.mark.parametrize(
    "ops",
    [
        {"equals": "1", "within": "1"},
        {"equals": "1", "matches": "1"},
        {"within": "1", "matches": "1"},
        {"equals": 1, "within": "1", "matches": "1"},
        {},
    ],
)
def test_an_expect_has_exactly_one_op(ops: dict[str, Any]) -> None:
    error = check_error({"id": "x", "kind": "expect", "part": "tax", **ops})
    assert error.path == "$.checks[3]"
    assert "exactly one" in str(error)


@pytest.mark.parametrize("pattern", ["(unclosed", "*star", "[z-a]", 12, "a" * 501])
def test_a_bad_regular_expression_is_refused(pattern: Any) -> None:
    error = check_error({"id": "x", "kind": "expect", "part": "tax", "matches": pattern})
    assert error.path == "$.checks[3].matches"


@pytest.mark.parametrize(
    "schema",
    [{"type": "banana"}, {"required": "total"}, {"minLength": -1}, {"properties": []}],
)
def test_a_bad_json_schema_is_refused(schema: dict[str, Any]) -> None:
    error = check_error({"id": "x", "kind": "schema", "part": "tax", "schema": schema})
    assert error.path == "$.checks[3].schema"
    assert "JSON Schema" in str(error)


def test_a_schema_that_is_not_an_object_is_refused() -> None:
    raw = {"id": "x", "kind": "schema", "part": "tax", "schema": ["type", "object"]}
    assert check_error(raw).path == "$.checks[3].schema"


@pytest.mark.parametrize("op", [{"equals": "2"}, {"matches": "2"}])
def test_a_tolerance_goes_only_with_within(op: dict[str, Any]) -> None:
    raw = {"id": "x", "kind": "expect", "part": "tax", "tolerance": "0.1", **op}
    error = check_error(raw)
    assert error.path == "$.checks[3].tolerance"


@pytest.mark.parametrize("tolerance", ["-0.1", "lots", "Infinity", None, True])
def test_a_tolerance_is_a_number_of_at_least_zero(tolerance: Any) -> None:
    raw = {"id": "x", "kind": "expect", "part": "tax", "within": "2", "tolerance": tolerance}
    assert check_error(raw).path == "$.checks[3].tolerance"


@pytest.mark.parametrize("target", [2.5, "two", "Infinity", "NaN", "1e999999999", [1], None])
def test_within_needs_an_exact_number(target: Any) -> None:
    raw = {"id": "x", "kind": "expect", "part": "tax", "within": target}
    assert check_error(raw).path == "$.checks[3].within"


@pytest.mark.parametrize("path", ["total", "$.", "$..x", "$[x]", "$.a[-1]", 3, "$" + ".a" * 300])
def test_an_expect_path_that_is_not_a_json_path_is_refused(path: Any) -> None:
    raw = {"id": "x", "kind": "expect", "part": "tax", "path": path, "equals": 1}
    assert check_error(raw).path == "$.checks[3].path"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("criterion", ""),
        ("criterion", "x" * 2001),
        ("criterion", None),
        ("pass_score", 11),
        ("pass_score", -1),
        ("pass_score", 7.5),
        ("pass_score", True),
        ("model", ""),
        ("model", 4),
    ],
)
def test_judge_fields_out_of_range(field: str, value: Any) -> None:
    raw = {"id": "x", "kind": "judge", "reads": ["tax"], "criterion": "correct"}
    raw[field] = value
    assert check_error(raw).path == f"$.checks[3].{field}"


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("review", {"criterion": "x", "pass_score": 5}),
        ("expect", {"equals": 1, "schema": {}}),
        ("schema", {"schema": {}, "code": "x"}),
        ("judge", {"criterion": "x", "timeout": 3}),
    ],
)
def test_a_field_of_another_kind_is_refused(kind: str, extra: dict[str, Any]) -> None:
    error = check_error({"id": "x", "kind": kind, "part": "tax", **extra})
    assert error.path == "$.checks[3]"
    assert "unknown field" in str(error)


def test_checks_that_are_not_a_list_are_refused() -> None:
    assert work_error(invoice_request(checks={"id": "x"})).path == "$.checks"
    parts = parse_parts(invoice_parts(), {})
    with pytest.raises(WorkError) as caught:
        parse_checks([{"id": f"c{k}", "kind": "review", "part": "tax"} for k in range(129)], parts)
    assert caught.value.path == "$.checks"


def test_a_check_that_is_not_an_object_is_refused() -> None:
    assert work_error(with_check("review", at=4)).path == "$.checks[4]"  # type: ignore[arg-type]


# -- the terms of a request -------------------------------------------------------------------


@pytest.mark.parametrize("field", ["reward", "Title", "capabilities", "deadline"])
def test_an_unknown_top_level_field_is_named(field: str) -> None:
    error = work_error(invoice_request(**{field: "x"}))
    assert error.path == f"$.{field}"
    assert "unknown field" in str(error)


def test_a_request_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(WorkError) as caught:
        spec_from_request([invoice_request()], {})
    assert caught.value.path == "$"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1s", timedelta(seconds=1)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        (" 2h ", timedelta(hours=2)),
        ("30d", timedelta(days=30)),
        ("2592000s", timedelta(days=30)),
    ],
)
def test_windows_within_range(value: Any, expected: timedelta) -> None:
    assert parse_window(value, "review") == expected


@pytest.mark.parametrize("value", [30, "30", " 45 "])
def test_a_window_without_a_unit_is_refused_with_how_to_write_it(value: Any) -> None:
    """`"bidding": "30"` once posted and escrowed a real task: seconds or minutes? A number
    alone is refused, and the message says what to write."""
    with pytest.raises(TaskError, match=r"needs a unit: write (30|45)s"):
        parse_window(value, "bidding")
    with pytest.raises(TaskError, match="write 30s"):
        spec_from_request(invoice_request(bidding="30"), {})


@pytest.mark.parametrize(
    "value",
    ["0s", 0, "31d", "721h", 2_592_001, "-1s", "1.5h", "1w", "", None, True, 3.0, "9999999999s"],
)
def test_windows_out_of_range_are_refused(value: Any) -> None:
    with pytest.raises((TaskError, LimitError), match="review window"):
        parse_window(value, "review")


@pytest.mark.parametrize("window", ["bidding", "reveal", "delivery", "review"])
def test_a_request_window_out_of_range_is_refused(window: str) -> None:
    with pytest.raises(LimitError, match=window):
        spec_from_request(invoice_request(**{window: "31d"}), {})


@pytest.mark.parametrize("budget", ["0", "0eth", 0])
def test_a_budget_of_zero_is_refused(budget: Any) -> None:
    with pytest.raises(TaskError, match="budget"):
        spec_from_request(invoice_request(budget=budget), {})


@pytest.mark.parametrize("budget", [str(MAX_WEI + 1), str(2**256), f"{2**256}wei", "10e80"])
def test_a_budget_over_what_an_account_holds_is_a_limit_error(budget: Any) -> None:
    with pytest.raises((LimitError, MarketError)):
        spec_from_request(invoice_request(budget=budget), {})


def test_the_largest_budget_an_account_holds_is_accepted() -> None:
    assert spec_from_request(invoice_request(budget=str(MAX_WEI)), {}).budget == MAX_WEI


@pytest.mark.parametrize("budget", [None, True, 0.5, ["1eth"]])
def test_a_budget_that_is_not_an_amount_names_the_budget(budget: Any) -> None:
    assert work_error(invoice_request(budget=budget)).path == "$.budget"


def test_pay_by_quality_is_gone_and_says_why() -> None:
    for value in (True, False):
        error = work_error(invoice_request(pay_by_quality=value))
        assert error.path == "$.pay_by_quality" and "share of its checks" in str(error)


# -- defaults ---------------------------------------------------------------------------------


@pytest.mark.parametrize("checks", [None, []])
def test_no_checks_give_each_part_its_schema_and_a_review(checks: Any) -> None:
    request = invoice_request(checks=checks)
    if checks is None:
        del request["checks"]
    spec = spec_from_request(request, {})
    assert spec.checks == ()
    defaults = spec.requester_checks
    assert defaults == default_checks(spec.parts)
    assert [(c.check_id, c.kind, c.reads) for c in defaults] == [
        (f"{part.part_id}-{kind}", kind, (part.part_id,))
        for part in spec.parts
        for kind in ("schema", "review")
    ]
    for check in defaults:
        assert check.weight == 1
        if isinstance(check, SchemaCheck):
            part = next(p for p in spec.parts if p.part_id == check.reads[0])
            assert dict(check.schema) == dict(REGISTRY[part.capability].output_schema)


def test_defaults_of_parse_checks() -> None:
    parts = parse_parts(invoice_parts(), {})
    assert parse_checks(None, parts) == parse_checks([], parts) == default_checks(parts)


def test_the_rubric_adds_the_plan_and_assembly_checks() -> None:
    spec = spec_from_request(invoice_request(), {})
    checks = spec.rubric
    assert checks[: len(spec.checks)] == spec.checks
    plan, assembly = checks[-2:]
    assert isinstance(plan, PlanCheck) and isinstance(assembly, AssemblyCheck)
    assert plan.check_id == PLAN_CHECK and plan.reads == (PLAN_PART,)
    assert assembly.check_id == ASSEMBLY_CHECK
    assert assembly.reads == (PLAN_PART, ASSEMBLY_PART, *[p.part_id for p in spec.parts])


# -- JSON paths and exact numbers -------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "steps"),
    [
        ("$", ()),
        ("$.total", ("total",)),
        ("$.lines[2].amount", ("lines", 2, "amount")),
        ('$["due date"]', ("due date",)),
        ('$["say \\"hi\\""]', ('say "hi"',)),
        ("$[0][10]", (0, 10)),
        ("$.a_b-c.D9", ("a_b-c", "D9")),
    ],
)
def test_parse_path(path: str, steps: tuple[str | int, ...]) -> None:
    assert parse_path(path) == steps


@pytest.mark.parametrize(
    "path", ["", "total", "$.", "$..a", "$.9a", "$[-1]", "$[a]", "$['a']", "$.a b", None, 7]
)
def test_parse_path_refuses_anything_else(path: Any) -> None:
    with pytest.raises(WorkError):
        parse_path(path)


DOCUMENT = {"lines": [{"amount": "12.50"}, {"amount": 3}], "due date": "2026-11-13", "n": None}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("$", DOCUMENT),
        ("$.lines[1].amount", 3),
        ('$["due date"]', "2026-11-13"),
        ("$.n", None),
        ("$.lines[2]", MISSING),
        ("$.lines.amount", MISSING),
        ("$[0]", MISSING),
        ("$.missing", MISSING),
        ("$.lines[0].amount.x", MISSING),
    ],
)
def test_value_at(path: str, value: Any) -> None:
    found = value_at(DOCUMENT, parse_path(path))
    assert found is MISSING if value is MISSING else found == value


def test_a_present_null_is_not_missing() -> None:
    assert value_at({"n": None}, ("n",)) is None


def json_path_text(steps: list[str | int]) -> str:
    """The JSON path of `steps` as a spec writes it: `$.parts[2].input`."""
    text = "$"
    for step in steps:
        text += f"[{step}]" if isinstance(step, int) else f".{step}"
    return text


def test_json_path_text() -> None:
    assert json_path_text(["parts", 2, "input"]) == "$.parts[2].input"
    assert json_path_text([]) == "$"


names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,8}", fullmatch=True)


@given(st.lists(st.one_of(st.integers(0, 10**6), names), max_size=8))
@settings(max_examples=60, deadline=None)
def test_paths_written_by_json_path_text_parse_back(steps: list[str | int]) -> None:
    assert parse_path(json_path_text(steps)) == tuple(steps)


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (3, Fraction(3)),
        ("2585.50", Fraction(258550, 100)),
        ("108591/200", Fraction(108591, 200)),
        (" -0.5 ", Fraction(-1, 2)),
        ("1,200.00", Fraction(1200)),
        ("1e3", Fraction(1000)),
        ("2.5E-3", Fraction(1, 400)),
        ("-7/-2", Fraction(7, 2)),
    ],
)
def test_exact_number(value: Any, number: Fraction) -> None:
    assert exact_number(value) == number


@pytest.mark.parametrize(
    "value",
    [
        2.5,
        True,
        None,
        [1],
        "",
        "abc",
        "1/0",
        "1/x",
        "NaN",
        "Infinity",
        "-inf",
        "1e999999999",
        "1e-999999999",
        "9" * 101,
    ],
)
def test_exact_number_refuses_what_is_not_an_exact_finite_number(value: Any) -> None:
    """Infinity used to raise OverflowError, and `1e999999999` to spend minutes building a
    billion-digit integer: a hostile output must not crash or stall a settlement."""
    assert exact_number(value) is None


@given(st.fractions(max_denominator=10**6))
@settings(max_examples=80, deadline=None)
def test_exact_number_reads_fractions_and_finite_decimals_exactly(value: Fraction) -> None:
    assert exact_number(f"{value.numerator}/{value.denominator}") == value
    decimal = Fraction(round(value * 1000), 1000)
    whole, rest = divmod(abs(decimal.numerator) * 1000 // decimal.denominator, 1000)
    sign = "-" if decimal < 0 else ""
    assert exact_number(f"{sign}{whole}.{rest:03d}") == decimal


# -- shares of v(N) ---------------------------------------------------------------------------


def test_the_invoice_check_shares() -> None:
    spec = spec_from_request(invoice_request(), {})
    shares = check_shares(spec.rubric)
    assert sum(shares.values()) == 1
    assert shares[PLAN_CHECK] == shares[ASSEMBLY_CHECK] == Fraction(1, 10)
    # the requester's weights are 3, 2, 2, 1, 1, 2 (11 in all) over the other 4/5
    assert shares["sum-right"] == Fraction(4, 5) * Fraction(3, 11)
    assert shares["due-date"] == Fraction(4, 5) * Fraction(1, 11)
    assert Fraction(1, 5) == CONTRACTOR_SHARE


def test_without_contractor_checks_the_requester_checks_share_everything() -> None:
    checks = [ReviewCheck("a", 1, ("x",)), ReviewCheck("b", 3, ("x",))]
    assert check_shares(checks) == {"a": Fraction(1, 4), "b": Fraction(3, 4)}


check_weights = st.lists(st.integers(1, 1_000_000), min_size=1, max_size=40)


@given(check_weights)
@settings(max_examples=80, deadline=None)
def test_check_shares_sum_to_exactly_one(weights: list[int]) -> None:
    parts = (Part("p", "arithmetic", {}),)
    checks = [ReviewCheck(f"c{k}", w, ("p",)) for k, w in enumerate(weights)]
    shares = check_shares(rubric(parts, checks))
    assert sum(shares.values()) == 1
    assert shares[PLAN_CHECK] == shares[ASSEMBLY_CHECK] == Fraction(1, 10)
    requester = [shares[f"c{k}"] for k in range(len(weights))]
    assert sum(requester) == Fraction(4, 5)
    for k, w in enumerate(weights):
        assert requester[k] * sum(weights) == Fraction(4, 5) * w


def test_check_to_json_round_trips_every_kind() -> None:
    checks = [
        ExpectCheck("e1", 2, ("tax",), "$", "within", "542.955", "0.01"),
        ExpectCheck("e2", 1, ("invoice-fields",), "$.total", "equals", "3128.46"),
        ExpectCheck("e3", 1, ("invoice-dates",), "$.due_date", "matches", r"\d{4}-\d\d-\d\d"),
        SchemaCheck("s", 1, ("tax",), {"type": "string"}),
        PythonCheck("p", 4, ("tax", "lines-sum"), "def check(o):\n    return True\n", 3, 128),
        JudgeCheck("j", 5, ("invoice-fields",), "plausible", 8, "local-judge"),
        JudgeCheck("j2", 5, ("invoice-fields",), "plausible"),
        ReviewCheck("r", 1, ("tax", "invoice-dates")),
    ]
    for check in checks:
        assert parse_check(check_to_json(check), "$", PARTS) == check


def test_a_review_check_may_state_its_criterion_for_a_dispute() -> None:
    stated = parse_check(
        {"id": "r", "kind": "review", "reads": ["tax"], "criterion": "Tax at 10%."}, "$", PARTS
    )
    assert isinstance(stated, ReviewCheck) and stated.criterion == "Tax at 10%."
    assert parse_check(check_to_json(stated), "$", PARTS) == stated
    plain = parse_check({"id": "r", "kind": "review", "reads": ["tax"]}, "$", PARTS)
    assert isinstance(plain, ReviewCheck) and plain.criterion == DEFAULT_REVIEW_CRITERION
    assert "criterion" not in check_to_json(plain)  # logged as before
    for bad in ("", "   ", "x" * 2001, 7):
        raw = {"id": "x", "kind": "review", "reads": ["tax"], "criterion": bad}
        assert check_error(raw).path == "$.checks[3].criterion"


def test_a_dispute_costs_a_twentieth_of_the_price_and_at_least_a_wei() -> None:
    assert dispute_fee(10**18) == 5 * 10**16
    assert dispute_fee(19) == 1 and dispute_fee(0) == 1


def test_a_spec_whose_python_checks_overspend_the_cpu_budget_is_refused() -> None:
    """No one task's checks may take minutes of the service's time: their CPU limits add up
    to at most MAX_SPEC_PYTHON_CPU_SECONDS, however many checks there are."""
    code = "def check(outputs):\n    return True\n"

    def python(k: int, cpu: int) -> dict[str, Any]:
        return {"id": f"p{k}", "kind": "python", "reads": ["tax"], "code": code, "cpu_seconds": cpu}

    within = [python(k, 10) for k in range(3)]
    assert spec_from_request(invoice_request(checks=within), {})
    error = work_error(invoice_request(checks=[*within, python(3, 1)]))
    assert error.path == "$.checks"
    assert "add up to 31" in str(error) and f"{MAX_SPEC_PYTHON_CPU_SECONDS}" in str(error)
    many = [python(k, 1) for k in range(MAX_SPEC_PYTHON_CPU_SECONDS + 1)]
    assert work_error(invoice_request(checks=many)).path == "$.checks"


# -- a machine verdict: what can reject a wrong answer without an evaluator ------------------


def _checks(*raw: dict[str, Any]) -> tuple[Any, ...]:
    return parse_checks(list(raw), invoice_spec().parts)


def test_checks_that_can_reject_a_schema_valid_wrong_answer() -> None:
    expect = {
        "id": "e",
        "weight": 1,
        "kind": "expect",
        "part": "tax",
        "path": "$",
        "equals": "542.96",
    }
    python = {
        "id": "p",
        "weight": 1,
        "kind": "python",
        "reads": ["tax"],
        "code": "def check(outputs):\n    return outputs['tax'] == '542.96'\n",
    }
    valued = {
        "id": "s",
        "weight": 1,
        "kind": "schema",
        "part": "invoice-fields",
        "schema": {"type": "object", "properties": {"currency": {"enum": ["EUR"]}}},
    }
    for good in (expect, python, valued):
        require_machine_verdict(
            _checks(good, {"id": "r", "weight": 1, "kind": "review", "part": "tax"})
        )


@pytest.mark.parametrize(
    "checks",
    [
        [],  # none: a schema check and a review per part
        [{"id": "r", "weight": 1, "kind": "review", "part": "tax"}],
        [{"id": "j", "weight": 1, "kind": "judge", "reads": ["tax"], "criterion": "right"}],
        # a schema of types and formats only: a wrong total fits it
        [
            {
                "id": "s",
                "weight": 1,
                "kind": "schema",
                "part": "invoice-fields",
                "schema": {
                    "type": "object",
                    "properties": {"total": {"type": "string", "pattern": "^[0-9.]+$"}},
                    "propertyNames": {"enum": ["total", "currency", "invoice_number"]},
                },
            }
        ],
        # a property merely named `const` names no value
        [
            {
                "id": "s",
                "weight": 1,
                "kind": "schema",
                "part": "invoice-fields",
                "schema": {"type": "object", "properties": {"const": {"type": "string"}}},
            }
        ],
    ],
)
def test_checks_that_cannot_are_refused_naming_what_to_add(checks: list[dict[str, Any]]) -> None:
    parts = invoice_spec().parts
    with pytest.raises(WorkError) as refused:
        require_machine_verdict(parse_checks(checks, parts))
    assert refused.value.path == "$.checks"
    message = str(refused.value)
    assert "ACCORD_JUDGE_URL" in message
    for remedy in ("`expect`", "`schema`", "`const` or `enum`", "`python`"):
        assert remedy in message
