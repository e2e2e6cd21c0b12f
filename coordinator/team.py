"""Teams: the work a task holds, discovery of agents for a need, and team formation.

The work of a task is the requester's parts (`accord.market.work`): each a capability and an input.
The leader plans them by capability; the member who does a part gets the capability's
instruction for the input and answers with an output its output schema accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from accord.coordinator.errors import TeamError
from accord.coordinator.policy import Member
from accord.coordinator.work import SubTask
from accord.market.discovery import relevance

BATCH_PREFIX = "batch:"


def part_task(part_id: str, capability: str, payload: Mapping[str, Any]) -> SubTask:
    """The sub-task of one part of the requester's work. Its item holds the part's input as
    posted (file references unresolved: the member is given the files' text when it works)."""
    return SubTask(
        sub_id=part_id,
        capability=capability,
        instruction=f"do part {part_id} ({capability})",
        item={"item_id": part_id, "capability": capability, "payload": dict(payload)},
    )


def plan_work(parts: Sequence[tuple[str, str, Mapping[str, Any]]]) -> list[SubTask]:
    """The leader's plan of the requester's parts `(part id, capability, input)`: one sub-task
    per capability, holding its parts as a batch when there are several (a member given a
    batch may team up for it), else the part itself."""
    by_capability: dict[str, list[SubTask]] = {}
    for part_id, capability, payload in parts:
        by_capability.setdefault(capability, []).append(part_task(part_id, capability, payload))
    plan = []
    for capability, tasks in by_capability.items():
        if len(tasks) == 1:
            plan.append(tasks[0])
            continue
        plan.append(
            SubTask(
                sub_id=f"{BATCH_PREFIX}{capability}",
                capability=capability,
                instruction=f"do the {len(tasks)} {capability} parts",
                item={"batch": [t.to_json() for t in tasks]},
            )
        )
    return plan


@dataclass(frozen=True)
class Candidate:
    member: Member
    relevance: Fraction
    reputation: Fraction


def rank_candidates(need: str, capability: str, members: Iterable[Member]) -> list[Candidate]:
    """Discovery's order: credentialed for the capability first (others are dropped), then by
    relevance of the self-description to the need, then reputation in the capability, then
    DID; less the agents failing in it while another is not (`passed_over`)."""
    ranked = [
        Candidate(m, relevance(need, m.description), m.reputation_in(capability))
        for m in members
        if capability in m.capabilities
    ]
    ranked.sort(key=lambda c: (-c.relevance, -c.reputation, c.member.did))
    return passed_over(capability, ranked)


def passed_over(capability: str, ranked: list[Candidate]) -> list[Candidate]:
    """`ranked` less the agents failing in `capability` (their last scored parts there all
    failed: `Member.failing`) when at least one candidate is not; all of them when every one
    is (someone must do the work). Pure."""
    able = [c for c in ranked if capability not in c.member.failing]
    return able or ranked


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
