"""Does a skill's exam predict real work? Its exam→field agreement, from the log. Pure.

For each agent credentialed in a skill: its best exam score in it (`credential.issued`: the
credential's `score`) beside the share of its real parts of that skill that passed the
requesters' checks (`task.settled`'s track record, `accord.market.reputation`: each part
scored by the weight of the requester's checks reading it that passed; parts no requester
check reads are left out). A skill whose holders pass its exam and fail its real parts has an
exam that measures its own templates, not the work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from accord.ledger.events import Event
from accord.market.reputation import settled_work
from accord.market.tasks import TASK_SETTLED

ISSUED_EVENT_KIND = "credential.issued"
"""`accord.identity.issuance.ISSUED_EVENT_KIND`, named here so this module loads no database."""
AGREEMENT_KINDS = (ISSUED_EVENT_KIND, TASK_SETTLED)
"""The kinds of entry `AgreementTally` reads."""


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


class AgreementTally:
    """The agreement of every capability at once, folded from the log: entries are added
    in log order, and any capability's agreement can be read between them (a reader of a growing
    log adds only what it has not seen; `seen` is the last index added, -1 before any). Pure.
    Each holder keeps its best exam score and its parts' count and score sum, so the tally
    grows with holders, not with the log."""

    def __init__(self) -> None:
        self.seen = -1
        self._exams: dict[str, dict[str, Fraction]] = {}
        self._scores: dict[str, dict[str, tuple[int, Fraction]]] = {}

    def add(self, index: int, event: Event) -> None:
        """Fold in the entry at `index`. Entries of other kinds, or that do not parse, are
        skipped. Raises ValueError when `index` is not after the last one added."""
        if index <= self.seen:
            raise ValueError(f"entry {index} is not after entry {self.seen}, added already")
        self.seen = index
        if event.kind == ISSUED_EVENT_KIND:
            capability, agent = event.body.get("capability"), event.body.get("agent")
            score = _exam_score(event.body)
            if isinstance(capability, str) and isinstance(agent, str) and score is not None:
                exams = self._exams.setdefault(capability, {})
                exams[agent] = max(score, exams.get(agent, score))
        elif event.kind == TASK_SETTLED:
            work = settled_work(index, event.subject, event.body)
            for part in () if work is None else work.parts:
                if part.score is not None:
                    scores = self._scores.setdefault(part.capability, {})
                    count, total = scores.get(part.producer, (0, Fraction(0)))
                    scores[part.producer] = (count + 1, total + part.score)

    def agreement(self, capability: str) -> SkillAgreement:
        """The agreement of `capability` over the entries added so far, holders by DID."""
        exams = self._exams.get(capability, {})
        scores = self._scores.get(capability, {})
        holders = []
        for agent in sorted(exams):
            count, total = scores.get(agent, (0, Fraction(0)))
            field = total / count if count else None
            holders.append(HolderAgreement(agent, exams[agent], count, field))
        return SkillAgreement(capability, tuple(holders))


def capability_key(manifest_builtin: str | None, skill_id: str) -> str:
    """How parts and credentials name a skill: a built-in's old name, else its id."""
    return skill_id if manifest_builtin is None else manifest_builtin
