"""Graders from a known vocabulary: how a skill's answers are judged.

A manifest lists its graders (`accord.identity.manifests`); an answer to an item earns the item
only if every grader passes it. The kinds:

    exact        the answer equals the oracle's (JSON equality that tells 1 from 1.0 and true)
    includes     the answer is text that contains the oracle's text (or each of its texts);
                 `ignore_case` optional
    regex        the answer is text that fully matches `pattern` (cut off after half a second)
    json_schema  the answer is valid against `schema` (default: the skill's output schema)
    json_match   at every JSON path of `paths` the answer holds what the oracle holds;
                 numbers (or decimal strings) within `tolerance` (a decimal string)
    python       `grade(input, expected, answer) -> bool`, run in the box, pinned by `sha256`
    python_tests hidden tests of a function: `tests(input, expected) -> [[args, want], ...]`
                 runs in one box (it may run the oracle's source there), then the answer's
                 `source` runs in a box of its own, `input["function_name"]` called on each
                 `args`; every result must equal its `want`. The answer never shares a box
                 with the grader, so it cannot speak for it.
    model        a judge picks one of `choice_scores`' choices; only where a judge is given,
                 and its identity is in each grade's reason. The prompt's `{input}`,
                 `{expected}` (the oracle's answer: in real work, none) and `{answer}` are
                 replaced by those values as JSON, in one pass (`model_prompt`)

Everything but `python` and `model` is a pure function of (grader, input, expected, answer);
`python` runs all of an exam's answers in one box (`accord.identity.challenges.sandbox`), whose
fixed clock and seeded entropy make its verdicts reproducible by anyone re-running them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, cast

from accord.identity.challenges.base import JSON, JSONObject, json_equal
from accord.identity.challenges.sandbox import SandboxLimits, SandboxMode, run_function_cases
from accord.identity.challenges.skills import ExactValidator
from accord.identity.errors import ExamError, SkillError
from accord.identity.manifests import json_path_steps, value_at

MAX_REGEX_SUBJECT_CHARS = 10_000
REGEX_TIMEOUT_SECONDS = 0.5
PYTHON_GRADER_FUNCTION = "grade"
PYTHON_TESTS_FUNCTION = "tests"
MAX_SOURCE_CHARS = 20_000
GRADER_LIMITS = SandboxLimits(cpu_seconds=4, wall_seconds=20.0)

Judge = Callable[[str], str]
"""judge(prompt) -> the choice it picks (a key of the grader's `choice_scores`)."""


@dataclass(frozen=True)
class Case:
    """One answer to grade: the item's input, the oracle's answer (None in real work, which
    has no oracle) and the answer given."""

    input: JSON
    expected: JSON
    answer: JSON


@dataclass(frozen=True)
class Verdict:
    """Whether an answer passed, and why not (or "correct")."""

    passed: bool
    reason: str


@dataclass(frozen=True)
class JudgeSeat:
    """A configured model judge: who it is (a DID or model name, named in every grade it
    gives) and how to ask it."""

    identity: str
    ask: Judge


CORRECT = Verdict(True, "correct")


def _number(value: JSON) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    if isinstance(value, str) and 0 < len(value) <= 40:
        try:
            number = Decimal(value.strip())
        except InvalidOperation:
            return None
        return number if number.is_finite() else None
    return None


def _exact(case: Case) -> Verdict:
    if json_equal(case.answer, case.expected):
        return CORRECT
    return Verdict(False, "not the expected answer")


def _includes(grader: Mapping[str, Any], case: Case) -> Verdict:
    if not isinstance(case.answer, str):
        return Verdict(False, "the answer is not text")
    wanted = case.expected if isinstance(case.expected, list) else [case.expected]
    if not wanted or not all(isinstance(w, str) for w in wanted):
        raise ExamError("an includes grader needs expected text (or a list of texts)")
    answer = case.answer
    if grader.get("ignore_case", False):
        answer = answer.casefold()
    for text in wanted:
        assert isinstance(text, str)
        needle = text.casefold() if grader.get("ignore_case", False) else text
        if needle not in answer:
            return Verdict(False, f"the answer does not include {text[:60]!r}")
    return CORRECT


def _regex(grader: Mapping[str, Any], case: Case) -> Verdict:
    import regex

    if not isinstance(case.answer, str):
        return Verdict(False, "the answer is not text")
    if len(case.answer) > MAX_REGEX_SUBJECT_CHARS:
        return Verdict(False, f"the answer is longer than {MAX_REGEX_SUBJECT_CHARS} characters")
    try:
        matched = regex.fullmatch(grader["pattern"], case.answer, timeout=REGEX_TIMEOUT_SECONDS)
    except TimeoutError:
        return Verdict(False, "the pattern took too long on this answer")
    return CORRECT if matched else Verdict(False, "the answer does not match the pattern")


def _json_schema(grader: Mapping[str, Any], case: Case, output_schema: JSONObject) -> Verdict:
    schema = grader.get("schema", output_schema)
    error = next(iter(ExactValidator(schema).iter_errors(case.answer)), None)
    if error is None:
        return CORRECT
    where = "$" + "".join(f"[{p!r}]" for p in error.absolute_path)
    return Verdict(False, f"{where}: {str(error.message)[:200]}")


def _json_match(grader: Mapping[str, Any], case: Case) -> Verdict:
    tolerance = Decimal(str(grader.get("tolerance", "0")))
    for path in grader["paths"]:
        steps = json_path_steps(path)
        found, want = value_at(case.expected, steps)
        if not found:
            raise ExamError(f"the oracle's answer has nothing at {path}")
        there, got = value_at(case.answer, steps)
        if not there:
            return Verdict(False, f"the answer has nothing at {path}")
        want_number = _number(want)
        numeric = want_number is not None and (
            isinstance(want, int | float) if not isinstance(want, bool | str) else tolerance > 0
        )
        if numeric:
            got_number = _number(got)
            assert want_number is not None
            if got_number is None or abs(got_number - want_number) > tolerance:
                return Verdict(False, f"{path} is not within {tolerance} of the expected number")
        elif not json_equal(got, want):
            return Verdict(False, f"{path} is not the expected value")
    return CORRECT


def grade_pure(grader: Mapping[str, Any], case: Case, output_schema: JSONObject) -> Verdict:
    """The verdict of one grader of a pure kind (exact, includes, regex, json_schema,
    json_match) on one case.

    Raises SkillError for a kind that is not pure, ExamError when the oracle's answer does not
    fit the grader (the manifest's fault, which the `oracle` gate catches at declaration).
    """
    kind = grader.get("kind")
    if kind == "exact":
        return _exact(case)
    if kind == "includes":
        return _includes(grader, case)
    if kind == "regex":
        return _regex(grader, case)
    if kind == "json_schema":
        return _json_schema(grader, case, output_schema)
    if kind == "json_match":
        return _json_match(grader, case)
    raise SkillError(f"a {kind} grader is not a pure one")


def _python(
    grader: Mapping[str, Any], cases: Sequence[Case], mode: SandboxMode | None
) -> list[Verdict]:
    run = run_function_cases(
        str(grader["code"]),
        PYTHON_GRADER_FUNCTION,
        [[c.input, c.expected, c.answer] for c in cases],
        GRADER_LIMITS,
        mode=mode,
    )
    if run.failure is not None:
        return [Verdict(False, f"the python grader failed: {run.failure}")] * len(cases)
    verdicts = []
    for result in run.results:
        if result.error is not None:
            verdicts.append(Verdict(False, f"the python grader {result.error}"))
        elif result.value is True:
            verdicts.append(CORRECT)
        elif result.value is False:
            verdicts.append(Verdict(False, "the python grader said no"))
        else:
            verdicts.append(Verdict(False, "the python grader returned no true or false"))
    return verdicts


def _python_tests(
    grader: Mapping[str, Any], cases: Sequence[Case], mode: SandboxMode | None
) -> list[Verdict]:
    run = run_function_cases(
        str(grader["code"]),
        PYTHON_TESTS_FUNCTION,
        [[c.input, c.expected] for c in cases],
        GRADER_LIMITS,
        mode=mode,
    )
    if run.failure is not None:
        raise ExamError(f"the hidden tests could not be made: {run.failure}")
    verdicts = []
    for case, made in zip(cases, run.results, strict=True):
        tests = made.value
        if made.error is not None or not isinstance(tests, list) or not tests:
            raise ExamError(f"the hidden tests could not be made: {made.error or 'no tests'}")
        verdicts.append(_run_tests(case, tests, mode))
    return verdicts


def _run_tests(case: Case, tests: list[JSON], mode: SandboxMode | None) -> Verdict:
    name = case.input.get("function_name") if isinstance(case.input, dict) else None
    if not isinstance(name, str):
        raise ExamError("a python_tests skill's input names its function_name")
    source = case.answer.get("source") if isinstance(case.answer, dict) else None
    if not isinstance(source, str) or not source.strip():
        return Verdict(False, "the answer has no source")
    if len(source) > MAX_SOURCE_CHARS:
        return Verdict(False, f"the source is longer than {MAX_SOURCE_CHARS} characters")
    pairs = [t for t in tests if isinstance(t, list) and len(t) == 2 and isinstance(t[0], list)]
    if len(pairs) != len(tests):
        raise ExamError("each hidden test is [args, want]")
    arguments = [cast(list[JSON], p[0]) for p in pairs]
    run = run_function_cases(source, name, arguments, GRADER_LIMITS, mode=mode)
    if run.failure is not None:
        return Verdict(False, run.failure)
    for number, (pair, result) in enumerate(zip(pairs, run.results, strict=True), start=1):
        if result.error is not None:
            return Verdict(False, f"hidden test {number} of {len(pairs)} {result.error}")
        if not json_equal(result.value, pair[1]):
            return Verdict(False, f"hidden test {number} of {len(pairs)} gave a wrong result")
    return CORRECT


PROMPT_FIELDS = re.compile(r"\{(input|expected|answer)\}")


def model_prompt(template: str, case: Case) -> str:
    """`template` with each `{input}`, `{expected}` and `{answer}` replaced, in one pass, by
    that value as JSON (a text as a quoted JSON string), so a value cannot end its quotes, start
    a line of its own or put another placeholder in the prompt."""
    values = {"input": case.input, "expected": case.expected, "answer": case.answer}
    return PROMPT_FIELDS.sub(
        lambda match: json.dumps(values[match.group(1)], sort_keys=True, ensure_ascii=False),
        template,
    )


def _model(grader: Mapping[str, Any], case: Case, judge: JudgeSeat | None) -> Verdict:
    if judge is None:
        raise SkillError("a model-graded skill is graded only where a judge is configured")
    prompt = model_prompt(str(grader["prompt"]), case)
    choice = judge.ask(prompt)
    scores: Mapping[str, int] = grader["choice_scores"]
    if choice not in scores:
        return Verdict(False, f"judge {judge.identity} gave no listed choice")
    return Verdict(scores[choice] == 1, f"judge {judge.identity} chose {choice}")


def grade_cases(
    graders: Sequence[Mapping[str, Any]],
    cases: Sequence[Case],
    output_schema: JSONObject,
    *,
    judge: JudgeSeat | None = None,
    mode: SandboxMode | None = None,
) -> list[Verdict]:
    """Each case's verdict: passed when every grader passes it, else the first grader's reason
    that did not. Python graders run every case in one box run each.

    Raises SkillError for a model grader without a judge or a builtin grader (graded by its
    capability's code instead), ExamError when the oracle's answer does not fit a grader or
    hidden tests cannot be made, and
    SandboxUnavailable when a python grader's box cannot be made.
    """
    verdicts = [CORRECT] * len(cases)
    for grader in graders:
        kind = grader.get("kind")
        if kind == "builtin":
            raise SkillError("a builtin grader is its capability's own code")
        if kind == "python":
            found = _python(grader, cases, mode)
        elif kind == "python_tests":
            found = _python_tests(grader, cases, mode)
        elif kind == "model":
            found = [_model(grader, case, judge) for case in cases]
        else:
            found = [grade_pure(grader, case, output_schema) for case in cases]
        verdicts = [
            old if not old.passed else new for old, new in zip(verdicts, found, strict=True)
        ]
    return verdicts
