"""Teams: the work a task holds, discovery of agents for a need, and team formation.

The work of a task is reproducible from the task alone: for each required capability,
`WORK_ITEMS` fresh items of that capability's generator, seeded by the task id. The deliverable
answers those items, and the capability's deterministic grader scores each answer, which is
what settlement needs to value any coalition's contributions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from coordinator.errors import TeamError
from coordinator.policy import Member
from coordinator.work import SubTask
from identity.challenges import REGISTRY
from market.evaluator import WORK_ITEMS, work_items

_WORDS = re.compile(r"[a-z0-9]+")


def plan_work(task_id: str, capabilities: Sequence[str], count: int = WORK_ITEMS) -> list[SubTask]:
    """One sub-task per required capability, holding that capability's batch of items.

    Raises ExamError for an unknown capability.
    """
    plan = []
    for capability in capabilities:
        items = [item.for_agent() for item in work_items(task_id, capability, count)]
        plan.append(
            SubTask(
                sub_id=capability,
                capability=capability,
                instruction=f"answer the {len(items)} {capability} items",
                item={"batch": items},
            )
        )
    return plan


def split_batch(task: SubTask) -> list[SubTask]:
    """A batch sub-task as one sub-task per item (`arithmetic/0`, `arithmetic/1`, …)."""
    batch = task.item.get("batch")
    if not isinstance(batch, list):
        return [task]
    return [
        SubTask(f"{task.sub_id}/{k}", task.capability, "answer this item", item)
        for k, item in enumerate(batch)
    ]


def relevance(need: str, description: str) -> Fraction:
    """Word overlap (Jaccard) between a need and a self-description, exactly."""
    a, b = set(_WORDS.findall(need.lower())), set(_WORDS.findall(description.lower()))
    if not a or not b:
        return Fraction(0)
    return Fraction(len(a & b), len(a | b))


@dataclass(frozen=True)
class Candidate:
    member: Member
    relevance: Fraction
    reputation: Fraction


def rank_candidates(need: str, capability: str, members: Iterable[Member]) -> list[Candidate]:
    """Discovery's order: credentialed for the capability first (others are dropped), then by
    relevance of the self-description to the need, then reputation, then DID."""
    ranked = [
        Candidate(m, relevance(need, m.description), Fraction(m.reputation))
        for m in members
        if capability in m.capabilities
    ]
    ranked.sort(key=lambda c: (-c.relevance, -c.reputation, c.member.did))
    return ranked


def form_team(
    leader: Member,
    capabilities: Sequence[str],
    need: str,
    directory: Sequence[Member],
    *,
    extra_per_capability: int = 1,
) -> tuple[Member, ...]:
    """The leader plus, for each capability, the best `extra_per_capability` other agents
    holding it, one more when the leader lacks it (so work can be reassigned when a member
    fails).

    Raises TeamError when nobody (leader included) holds a needed capability.
    """
    team: dict[str, Member] = {leader.did: leader}
    for capability in capabilities:
        candidates = [
            c for c in rank_candidates(need, capability, directory) if c.member.did != leader.did
        ]
        if not candidates and capability not in leader.capabilities:
            raise TeamError(f"no credentialed agent holds {capability!r}")
        # When the leader cannot do this work itself, take one more so a failure has a backup.
        wanted = extra_per_capability + (capability not in leader.capabilities)
        for candidate in candidates[:wanted]:
            team.setdefault(candidate.member.did, candidate.member)
    return tuple(team.values())


def helpers_for(
    task: SubTask,
    leader: Member,
    directory: Sequence[Member],
    busy: Callable[[str], bool],
    limit: int = 1,
) -> tuple[Member, ...]:
    """Agents a member could team up with for `task`: credentialed, not already in the
    conversation tree (`busy`), best first."""
    found = [
        c.member
        for c in rank_candidates(task.instruction, task.capability, directory)
        if c.member.did != leader.did and not busy(c.member.did)
    ]
    return tuple(found[:limit])


def capability_names() -> tuple[str, ...]:
    return tuple(REGISTRY)
