"""A task's work and its evaluator: a rubric of weighted checks over the deliverable.

The work is reproducible from the task id alone: for each required capability, items of that
capability's generator seeded by the task id (`work_items`). The default rubric has one check
per item (its answer is right, by the capability's deterministic grader) and, when the task
needs several capabilities, one joint check per item position that passes only when every
capability's item at that position is right: the report holds together only if the figures
and the facts both do. So the value of a coalition is not merely the sum of its members' parts.

`coalition_value(outcome, S)` is v(S): the weighted share of checks that pass using only the
contributions of the agents in S (v(∅) = 0). Everything here is pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from identity.challenges import ExamItem, get_capability
from identity.errors import ExamError
from market.errors import SettlementError
from market.tasks import RubricCheck

WORK_ITEMS = 2
ITEM_CHECK = "item"
JOINT_CHECK = "joint"


def work_seed(task_id: str, capability: str) -> bytes:
    """The seed of a task's work items of one capability (anyone can regenerate them)."""
    return hashlib.sha256(f"accord-work|{task_id}|{capability}".encode()).digest()


def work_items(task_id: str, capability: str, count: int = WORK_ITEMS) -> list[ExamItem]:
    """The task's items of `capability`, with their private grading data.

    Raises ExamError for an unknown capability.
    """
    return get_capability(capability).generate(work_seed(task_id, capability), count)


def default_rubric(capabilities: Sequence[str], count: int = WORK_ITEMS) -> tuple[RubricCheck, ...]:
    """One check per work item, and a joint check per position across capabilities."""
    checks = [
        RubricCheck(
            f"{capability}/{k}",
            1,
            f"the {capability} item {k} is answered right",
            {"kind": ITEM_CHECK, "capability": capability, "index": k},
        )
        for capability in capabilities
        for k in range(count)
    ]
    if len(capabilities) > 1:
        checks += [
            RubricCheck(
                f"joint/{k}",
                1,
                f"item {k} of every capability is right: the parts agree",
                {"kind": JOINT_CHECK, "items": [f"{c}/{k}" for c in capabilities]},
            )
            for k in range(count)
        ]
    return tuple(checks)


def work_counts(rubric: Iterable[RubricCheck]) -> dict[str, int]:
    """How many items of each capability the rubric's item checks name."""
    counts: dict[str, int] = {}
    for check in rubric:
        if check.params.get("kind") == ITEM_CHECK:
            capability = str(check.params["capability"])
            counts[capability] = max(counts.get(capability, 0), int(check.params["index"]) + 1)
    return counts


@dataclass(frozen=True)
class Outcome:
    """Which agents answered each item right, and the rubric to score coalitions with."""

    rubric: tuple[RubricCheck, ...]
    right_by: Mapping[str, frozenset[str]]  # item check id -> agents whose answer is right
    answered_by: Mapping[str, frozenset[str]]  # agent -> item check ids it answered

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(sorted(self.answered_by))


def grade_deliverable(
    task_id: str, rubric: Sequence[RubricCheck], contributions: Iterable[Mapping[str, Any]]
) -> Outcome:
    """Grade every contribution `{agent, capability, output: {item_id, answer}}` against the
    regenerated work. An answer to an item that is not the task's counts for nothing.

    Raises SettlementError for a rubric whose items cannot be regenerated.
    """
    items: dict[str, tuple[str, ExamItem]] = {}
    try:
        for capability, count in work_counts(rubric).items():
            for k, item in enumerate(work_items(task_id, capability, count)):
                items[item.item_id] = (f"{capability}/{k}", item)
    except ExamError as exc:
        raise SettlementError(f"cannot regenerate the work of {task_id}: {exc}") from exc
    right: dict[str, set[str]] = {}
    answered: dict[str, set[str]] = {}
    for contribution in contributions:
        agent = str(contribution["agent"])
        output = contribution.get("output")
        answered.setdefault(agent, set())
        if not isinstance(output, Mapping) or output.get("item_id") not in items:
            continue
        check_id, item = items[str(output["item_id"])]
        answered[agent].add(check_id)
        try:
            grade = get_capability(item.capability).grade(item, output.get("answer"))
        except ExamError:
            continue
        if grade.full_marks:
            right.setdefault(check_id, set()).add(agent)
    return Outcome(
        tuple(rubric),
        {k: frozenset(v) for k, v in right.items()},
        {k: frozenset(v) for k, v in answered.items()},
    )


def passes(outcome: Outcome, check: RubricCheck, coalition: frozenset[str]) -> bool:
    """Whether `check` passes using only the contributions of `coalition`."""
    kind = check.params.get("kind")
    if kind == ITEM_CHECK:
        return bool(outcome.right_by.get(check.check_id, frozenset()) & coalition)
    if kind == JOINT_CHECK:
        return all(
            outcome.right_by.get(str(item), frozenset()) & coalition
            for item in check.params["items"]
        )
    return False


def coalition_value(outcome: Outcome, coalition: frozenset[str]) -> Fraction:
    """v(S): the weighted share of the rubric that S's contributions pass; v(∅) = 0."""
    total = sum(check.weight for check in outcome.rubric)
    if total == 0 or not coalition:
        return Fraction(0)
    earned = sum(check.weight for check in outcome.rubric if passes(outcome, check, coalition))
    return Fraction(earned, total)


def delivered_quality(outcome: Outcome, agent: str) -> Fraction:
    """The share of an agent's answered items it got right (its reputation input)."""
    answered = outcome.answered_by.get(agent, frozenset())
    if not answered:
        return Fraction(0)
    right = sum(1 for check_id in answered if agent in outcome.right_by.get(check_id, ()))
    return Fraction(right, len(answered))
