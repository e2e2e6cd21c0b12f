"""skills: does passing a built-in skill's exam predict passing real parts of it?

The reference agent (`accord.coordinator.agent_service`, served on 127.0.0.1 and asked over
HTTP by `HttpRuntime`, as the market asks a hosted agent) answers, per built-in skill:

- (a) freshly generated exam items: each repetition draws a random seed, generates the skill's
  default number of items (`generate(seed, item_count)`) and grades each answer as the exam does
  (`Capability.grade`). The measure is the share of items passed; the notes say how many of
  the exams reached the skill's threshold.
- (b) the held-out set `tests/data/heldout/<skill>.json`: real-shaped parts written by hand
  (invoices, purchase orders and receipts of varied layouts, requester-phrased questions and
  function specs, amounts as people paste them), which the generator never produced. Each
  item is a part input as a requester posts it with the requester's own checks; the agent
  gets `work_item(...)`, as a team member does, and the part passes when every one of its
  checks passes under `evaluate_all` (python checks run in the box, as settlement runs them).
  An item the agent cannot answer fails. The held-out run is deterministic: one sample.

The gap is (a) minus (b), in points: how much the exam overstates the real pass rate.

Run alone: `.venv/bin/python scripts/bench/bench_skills.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import REPO_ROOT, Measure, Section, progress, run_alone

from accord.coordinator.agent_service import serve_in_thread, stop
from accord.identity.challenges.base import JSON, passes
from accord.identity.challenges.registry import REGISTRY
from accord.identity.challenges.skills import validate_output, work_item
from accord.identity.errors import ExamError, SchemaViolation
from accord.identity.runtimes import AgentRuntimeError, HttpRuntime
from accord.market.check_io import check_world, run_python_check
from accord.market.checks import CheckResult, Delivered, Judged, evaluate_all
from accord.market.work import Check, JudgeCheck, Part, PythonCheck, ReviewCheck, parse_checks

HELD_OUT = REPO_ROOT / "tests" / "data" / "heldout"
AGENT_DID = "did:example:reference-agent"
#: The clock the held-out parts' python checks see (a fixed posting time, as a task has).
POSTED_AT = datetime(2026, 12, 1, tzinfo=UTC)


class BoxedChecks:
    """Settlement's environment for a held-out part's checks: python checks in the box; no
    judge or review (the held-out checks use neither)."""

    def __init__(self, item_id: str) -> None:
        self.item_id = item_id

    def run_python(self, check: PythonCheck, outputs: Mapping[str, Any]) -> CheckResult:
        world = check_world(f"heldout/{self.item_id}", POSTED_AT, check.check_id)
        return run_python_check(check, outputs, world)

    def ask_judge(self, check: JudgeCheck, prompt: str) -> Judged:
        raise ExamError(f"held-out item {self.item_id}: judge checks are not used here")

    def unopened(self, check: Check) -> CheckResult:
        raise ExamError(f"held-out item {self.item_id}: every output is open here")

    def review(self, check: ReviewCheck, outputs: Mapping[str, Any]) -> CheckResult:
        raise ExamError(f"held-out item {self.item_id}: review checks are not used here")


@dataclass(frozen=True)
class Outcome:
    item_id: str
    passed: bool
    why: str


def load_held_out(skill: str, directory: Path = HELD_OUT) -> list[dict[str, Any]]:
    """The held-out items of `skill`. Raises ExamError for a file of another skill."""
    data = json.loads((directory / f"{skill}.json").read_text())
    if data.get("skill") != skill:
        raise ExamError(f"{skill}.json holds items of {data.get('skill')!r}")
    return list(data["items"])


def _said(reason: str) -> str:
    """The agent service's own words in an AgentRuntimeError's reason (its JSON `error`)."""
    _, brace, body = reason.partition("{")
    try:
        error = json.loads(brace + body).get("error", reason)
    except (ValueError, AttributeError):
        return reason
    return str(error).removeprefix("cannot solve the item: ")


def _ask(runtime: HttpRuntime, item: Mapping[str, Any]) -> tuple[JSON, str | None]:
    try:
        return runtime.answer(dict(item)), None
    except AgentRuntimeError as exc:
        return None, f"no answer: {_said(exc.reason)}"


def held_out_outcome(runtime: HttpRuntime, skill: str, raw: Mapping[str, Any]) -> Outcome:
    """One held-out part: the agent's answer graded by the item's checks, as settlement does."""
    item_id = str(raw["id"])
    part = Part("work", skill, dict(raw["input"]))
    checks = parse_checks(raw["checks"], [part])
    answer, failure = _ask(runtime, work_item(skill, part.part_id, part.input).for_agent())
    if failure is not None:
        return Outcome(item_id, False, failure)
    try:
        validate_output(skill, answer)
    except SchemaViolation as exc:
        return Outcome(item_id, False, f"output breaks the schema: {exc}")
    delivered = Delivered((part,), {part.part_id: answer}, {part.part_id: AGENT_DID})
    results = evaluate_all(checks, delivered, BoxedChecks(item_id))
    failed = [r for r in results.values() if not r.passed]
    if failed:
        return Outcome(item_id, False, "; ".join(f"{r.check_id}: {r.detail}" for r in failed))
    return Outcome(item_id, True, "every check passed")


def exam_share(runtime: HttpRuntime, skill: str) -> tuple[float, bool]:
    """(share of a fresh exam's items passed, whether the exam passed its threshold)."""
    capability = REGISTRY[skill]
    items = capability.generate(secrets.token_bytes(32), capability.item_count)
    earned = possible = 0
    for item in items:
        answer, failure = _ask(runtime, item.for_agent())
        grade = capability.grade(item, answer) if failure is None else None
        earned += grade.earned if grade is not None else 0
        possible += grade.possible if grade is not None else 1
    return earned / possible, passes(capability, earned, possible)


def _short(text: str, limit: int = 110) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _failures(skill: str, outcomes: list[Outcome]) -> list[str]:
    """One note per distinct reason a held-out part failed (cut short), with its items."""
    by_reason: dict[str, list[str]] = {}
    for outcome in outcomes:
        if not outcome.passed:
            by_reason.setdefault(_short(outcome.why), []).append(outcome.item_id)
    return [
        f"{skill} held-out, {len(ids)} failed ({', '.join(f'`{i}`' for i in ids)}): {why}"
        for why, ids in sorted(by_reason.items(), key=lambda pair: -len(pair[1]))
    ]


def run(quick: bool, reps: int) -> Section:
    section = Section(
        "skills",
        "skills: exam pass rate vs held-out real-part pass rate of the reference agent",
        __doc__ or "",
    )
    started = time.perf_counter()
    server, thread = serve_in_thread(did=AGENT_DID)
    try:
        runtime = HttpRuntime(server.url, timeout=60, allow_private=True)
        for skill in REGISTRY:
            exam = Measure(f"{skill}: exam items passed", "%")
            held = Measure(f"{skill}: held-out parts passed", "%")
            exams_passed = 0
            for rep in range(reps):
                share, passed = exam_share(runtime, skill)
                exam.samples.append(100 * share)
                exams_passed += passed
                progress(f"skills: {skill} exam rep {rep + 1}/{reps} done")
            outcomes = [held_out_outcome(runtime, skill, raw) for raw in load_held_out(skill)]
            passed_parts = sum(o.passed for o in outcomes)
            held.samples.append(100 * passed_parts / len(outcomes))
            progress(f"skills: {skill} held-out {passed_parts}/{len(outcomes)} passed")
            section.measures += [exam, held]
            section.notes.append(
                f"{skill}: exam {exam.median:.0f}% of items (exams passed {exams_passed}/{reps}) "
                f"vs held-out {passed_parts}/{len(outcomes)} parts = {held.median:.0f}%; "
                f"gap {exam.median - held.median:+.0f} points."
            )
            section.notes += _failures(skill, outcomes)
    finally:
        stop(server, thread)
    section.seconds = time.perf_counter() - started
    return section


def main() -> None:
    run_alone(run, "Exam vs held-out real-part pass rates of the reference agent, per skill.")


if __name__ == "__main__":
    main()
