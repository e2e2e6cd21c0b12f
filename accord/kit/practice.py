"""Practice on a capability's exam, on the agent's own machine: items generated here from a
fresh seed, answered by the agent's handler, graded by the capability's own graders. No
service is asked and no exam attempt is spent.

    result = practise("arithmetic", handler, items=10)      # `accord skill try`
    result.earned, result.possible, result.passed, result.wrong
    preflight("arithmetic", handler)                        # before the kit spends an attempt

`preflight` is what the kit asks before it starts an exam at the service: a handler that
cannot answer a practice item at all (its model's server unreachable, timing out, failing)
raises PreflightError saying why, and the exam is never started, so the attempt is not spent.
A handler that answers, even wrongly, passes the preflight: the exam is what grades it.

A declared skill (one `get_capability` finds by its id: fetched from a service,
`accord.kit.skills`, or shipped in the skill library) is practised the same way: its generator
makes the items in the box here and its graders grade them all at once
(`accord.identity.skill_exams`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from accord.identity.challenges import JSON, ExamItem, Grade, get_capability, passes, score
from accord.identity.challenges.base import Capability
from accord.identity.errors import ExamError, IdentityError, SkillError
from accord.identity.runtimes import AgentRuntime, AgentRuntimeError
from accord.identity.skill_capability import ManifestCapability
from accord.identity.skill_exams import grade_exam

PREFLIGHT_TRIES = 3
"""Practice items a handler is given, at most, to answer one before an exam is started."""
SEED_BYTES = 32


class PreflightError(IdentityError):
    """The handler answered none of the practice items: an exam now would spend an attempt
    on questions it cannot answer. `reason` is the handler's own."""

    def __init__(self, capability: str, reason: str) -> None:
        super().__init__(
            f"the handler cannot answer a {capability} item ({reason}): no exam was started, "
            "so no attempt was spent; start the agent again once its handler answers"
        )
        self.capability = capability
        self.reason = reason


@dataclass(frozen=True)
class Wrong:
    """An item the handler did not get full marks on, and the grader's reason."""

    item_id: str
    reason: str
    answer: JSON

    def to_json(self) -> dict[str, JSON]:
        return {"item_id": self.item_id, "reason": self.reason, "answer": self.answer}


@dataclass(frozen=True)
class PracticeResult:
    """The score of a practice exam, whether it would pass, and the items it got wrong."""

    capability: str
    earned: int
    possible: int
    items: int
    passed: bool
    wrong: tuple[Wrong, ...]

    def to_json(self) -> dict[str, JSON]:
        return {
            "capability": self.capability,
            "earned": self.earned,
            "possible": self.possible,
            "items": self.items,
            "passed": self.passed,
            "wrong": [w.to_json() for w in self.wrong],
        }


def practise(
    capability: str,
    runtime: AgentRuntime,
    *,
    items: int | None = None,
    seed: bytes | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> PracticeResult:
    """Generate `items` items (the capability's exam size by default) from `seed` (fresh
    random bytes by default), have `runtime` answer each, grade them as the exam does (an item
    the handler cannot answer is graded as no answer, its reason kept). `capability` is a
    name or skill id `get_capability` finds. Raises ExamError for an unknown capability or a
    bad item count, SandboxUnavailable (an ExamError) when the capability's generator or
    grader runs code and the box cannot start, SkillError when a declared skill's generator
    fails or a grader cannot run here (a model grader with no judge)."""
    skill = get_capability(capability)
    count = skill.item_count if items is None else items
    generated = skill.generate(os.urandom(SEED_BYTES) if seed is None else seed, count)
    answers: list[JSON] = []
    unanswered: dict[str, str] = {}
    for done, item in enumerate(generated, start=1):
        try:
            answers.append(runtime.answer(item.for_agent()))
        except AgentRuntimeError as exc:
            answers.append(None)
            unanswered[item.item_id] = f"no answer: {exc.reason}"
        if progress is not None:
            progress(done, count)
    grades = [
        grade
        if grade.item_id not in unanswered
        else Grade(grade.item_id, 0, grade.possible, unanswered[grade.item_id])
        for grade in _graded(skill, generated, answers)
    ]
    wrong = tuple(
        Wrong(grade.item_id, grade.reason, answer)
        for grade, answer in zip(grades, answers, strict=True)
        if not grade.full_marks
    )
    earned, possible = score(grades)
    return PracticeResult(
        capability, earned, possible, count, passes(skill, earned, possible), wrong
    )


def _graded(skill: Capability, items: list[ExamItem], answers: list[JSON]) -> list[Grade]:
    """Each answer graded: a declared skill's all at once (its graders' box made once)."""
    if isinstance(skill, ManifestCapability):
        return grade_exam(skill.manifest, items, answers)
    return [skill.grade(item, answer) for item, answer in zip(items, answers, strict=True)]


def preflight(
    capability: str,
    runtime: AgentRuntime,
    *,
    tries: int = PREFLIGHT_TRIES,
    seed: bytes | None = None,
) -> None:
    """Whether `runtime` answers a practice item of `capability` at all: up to `tries` items,
    stopping at the first it answers (any answer passes) or at the first failure that says
    the handler cannot be reached (a retriable one: a server down, timing out, failing).
    Raises PreflightError with the handler's reason when it answers none. A capability this
    installation has no generator for is not practised (the service's exam is the test), nor
    is a declared skill whose generator cannot run here (no box on this machine)."""
    try:
        skill = get_capability(capability)
        practice = skill.generate(os.urandom(SEED_BYTES) if seed is None else seed, tries)
    except (ExamError, SkillError):  # SandboxUnavailable among them
        return
    reason = "no item tried"
    for item in practice:
        try:
            runtime.answer(item.for_agent())
        except AgentRuntimeError as exc:
            reason = exc.reason
            if exc.retriable:
                break
            continue
        return
    raise PreflightError(capability, reason)
