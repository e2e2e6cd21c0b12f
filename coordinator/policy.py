"""Policies: what the leader says next. The rule policy is the offline default.

A policy sees a `TeamView` (the conversation, the task, the team, the work not yet assigned)
and returns one typed message for the leader's turn. Members speak only to report their
results, which the runner produces from their adapters; so a policy never speaks for them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

from accord.coordinator.conversation import (
    Abandon,
    AssignAsync,
    Conclude,
    Conversation,
    ConversationState,
    Deliverable,
    Discuss,
    Message,
    assign_sync,
)
from accord.coordinator.work import SubTask


@dataclass(frozen=True)
class Member:
    """A team member as the leader knows it."""

    did: str
    name: str
    capabilities: tuple[str, ...]
    reputation: str = "1/2"
    """Its reputation over what it holds (the mean of `reputations`, `n/d`)."""
    description: str = ""
    reputations: tuple[tuple[str, str], ...] = ()
    """Its reputation in each capability it has a track record in, `n/d`
    (`accord.market.reputation`); `reputation_in` falls back to `reputation` for the others."""

    failing: tuple[str, ...] = ()
    """The capabilities whose last scored parts it made all failed their checks
    (`accord.market.reputation.TrackRecords.failing`): team formation passes it over there."""

    def reputation_in(self, capability: str) -> Fraction:
        """Its reputation in `capability`: what discovery ranks it by for that work."""
        return Fraction(dict(self.reputations).get(capability, self.reputation))


@dataclass(frozen=True)
class TeamView:
    """Everything a policy may look at."""

    conversation: Conversation
    title: str
    description: str
    team: tuple[Member, ...]
    unassigned: tuple[SubTask, ...]
    failed_by: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    """The members that already failed each piece of work (by the sub-task's base id)."""
    abandon: tuple[str, ...] = ()
    """Outstanding sub-tasks whose member failed or timed out: the leader must abandon them."""


class Policy(Protocol):
    def decide(self, view: TeamView) -> Message:
        """The leader's next message. Raises PolicyError when it cannot decide."""
        ...


MAX_ATTEMPTS = 2
_RETRY_SUFFIX = re.compile(r"#\d+$")


def base_id(sub_id: str) -> str:
    """A reassigned sub-task is `s1#2`, `s1#3`…: the same work as `s1`. Only a trailing
    `#<n>` is a retry: `batch:arithmetic#2/tax` is the part `tax` of a reassigned batch."""
    return _RETRY_SUFFIX.sub("", sub_id)


class RulePolicy:
    """Decompose by capability, assign the best-credentialed members, gather, conclude.

    The first sub-task is assigned synchronously (the team waits for it), the rest at once
    asynchronously with triggers, then the leader pauses until they fire. A sub-task whose
    member failed is reassigned once to another member holding the capability, then given up.
    Messages name sub-tasks by id instead of restating them: the repetition the IoA paper found
    in free-form chat does not arise.
    """

    def decide(self, view: TeamView) -> Message:
        c = view.conversation
        leader = c.leader
        if view.abandon:
            sub_id = view.abandon[0]
            after = self._after_result(view, exclude=sub_id)
            return Abandon(leader, sub_id, "the member failed or timed out", *after)
        match c.state:
            case "discussion":
                if c.turn == 0:
                    plan = (
                        ", ".join(f"{t.sub_id} ({t.capability})" for t in view.unassigned)
                        or "nothing"
                    )
                    return Discuss(leader, f"plan: {plan}", *self._after_result(view))
                return Discuss(leader, "next step", *self._after_result(view))
            case "sync_task_assign":
                task = view.unassigned[0]
                return assign_sync(leader, self._assignee(view, task), task)
            case "async_task_assign":
                assignments = tuple((self._assignee(view, t), t) for t in view.unassigned)
                first = assignments[0][0]
                return AssignAsync(leader, assignments, "pause_trigger", first)
            case "conclusion":
                contributions = tuple(
                    x for result in c.results if result.ok for x in result.contributions
                )
                done = sum(1 for result in c.results if result.ok)
                summary = f"{done} of {len(c.assigned)} sub-tasks done"
                return Conclude(leader, Deliverable(summary, contributions))
        raise AssertionError(f"the leader does not speak in {c.state}")

    def _after_result(
        self, view: TeamView, exclude: str | None = None
    ) -> tuple[ConversationState, str]:
        c = view.conversation
        triggers = {k: v for k, v in c.triggers.items() if k != exclude}
        if triggers:
            return "pause_trigger", next(iter(triggers.values()))
        if not view.unassigned:
            return "conclusion", c.leader
        if not c.assigned:
            return "sync_task_assign", c.leader
        return "async_task_assign", c.leader

    def _assignee(self, view: TeamView, task: SubTask) -> str:
        """The best member for `task`: holds the capability, has done or holds the fewest
        assignments so far, then highest reputation in its capability; one that failed this
        work comes last."""
        c = view.conversation
        failed_by = set(view.failed_by.get(base_id(task.sub_id), ()))
        load: dict[str, int] = {}
        busy = list(c.triggers.values())
        if c.blocked_on is not None:
            busy.append(c.blocked_on[1])
        done = [x.agent for r in c.results for x in r.contributions]
        for agent in busy + done:
            load[agent] = load.get(agent, 0) + 1
        able = [m for m in view.team if task.capability in m.capabilities]
        if not able:
            return c.leader

        def rank(member: Member) -> tuple[int, int, Fraction, str]:
            reputation = member.reputation_in(task.capability)
            return (member.did in failed_by, load.get(member.did, 0), -reputation, member.did)

        return min(able, key=rank).did
