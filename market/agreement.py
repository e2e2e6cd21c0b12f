"""Does a skill's exam predict real work? Its exam→field agreement, from the log. Pure.

For each agent credentialed in a skill: its best exam score in it (`credential.issued`: the
credential's `score`) beside the share of its real parts of that skill that passed the
requesters' checks (`task.settled`'s track record, `accord.market.reputation`: each part
scored by the weight of the requester's checks reading it that passed; parts no requester
check reads are left out). A skill whose holders pass its exam and fail its real parts has an
exam that measures its own templates, not the work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from accord.ledger.events import Event
from accord.market.reputation import settled_work
from accord.market.tasks import TASK_SETTLED

ISSUED_EVENT_KIND = "credential.issued"
"""`accord.identity.issuance.ISSUED_EVENT_KIND`, named here so this module loads no database."""
AGREEMENT_KINDS = (ISSUED_EVENT_KIND, TASK_SETTLED)
"""The kinds of entry `skill_agreement` reads."""


@dataclass(frozen=True)
class HolderAgreement:
    """One credentialed agent: its best exam score, and its real parts' mean score (None
    before it did any part a requester's check reads)."""

    agent: str
    exam: Fraction
    parts: int
    field: Fraction | None

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "exam": str(self.exam),
            "parts": self.parts,
            "field": None if self.field is None else str(self.field),
        }


@dataclass(frozen=True)
class SkillAgreement:
    capability: str
    holders: tuple[HolderAgreement, ...]

    def to_json(self) -> dict[str, Any]:
        worked = [h for h in self.holders if h.field is not None]
        return {
            "capability": self.capability,
            "holders": [h.to_json() for h in self.holders],
            "holders_with_real_parts": len(worked),
            "exam_mean": _mean([h.exam for h in worked]),
            "field_mean": _mean([h.field for h in worked if h.field is not None]),
        }


def _mean(values: list[Fraction]) -> str | None:
    return None if not values else str(sum(values, Fraction(0)) / len(values))


def _exam_score(body: Mapping[str, Any]) -> Fraction | None:
    try:
        score = body["credential"]["credentialSubject"]["score"]
        earned, possible = score["earned"], score["possible"]
    except (KeyError, TypeError):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (earned, possible)):
        return None
    if possible <= 0 or not 0 <= earned <= possible:
        return None
    return Fraction(earned, possible)


def skill_agreement(entries: Iterable[tuple[int, Event]], capability: str) -> SkillAgreement:
    """The agreement of `capability` (a built-in's name or a declared skill's id, as parts
    and credentials name it) over `entries` (log index and event, in log order), holders by
    DID. Entries of other kinds, other capabilities or that do not parse are skipped."""
    exams: dict[str, Fraction] = {}
    scores: dict[str, list[Fraction]] = {}
    for index, event in entries:
        if event.kind == ISSUED_EVENT_KIND and event.body.get("capability") == capability:
            agent, score = event.body.get("agent"), _exam_score(event.body)
            if isinstance(agent, str) and score is not None:
                exams[agent] = max(score, exams.get(agent, score))
        elif event.kind == TASK_SETTLED:
            work = settled_work(index, event.subject, event.body)
            for part in () if work is None else work.parts:
                if part.capability == capability and part.score is not None:
                    scores.setdefault(part.producer, []).append(part.score)
    holders = tuple(
        HolderAgreement(
            agent,
            exams[agent],
            len(scores.get(agent, [])),
            sum(scores[agent], Fraction(0)) / len(scores[agent]) if scores.get(agent) else None,
        )
        for agent in sorted(exams)
    )
    return SkillAgreement(capability, holders)


def capability_key(manifest_builtin: str | None, skill_id: str) -> str:
    """How parts and credentials name a skill: a built-in's old name, else its id."""
    return skill_id if manifest_builtin is None else manifest_builtin
