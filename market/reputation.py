"""Reputation: an agent's track record in each capability, from settled work, recomputable by
anyone from the log.

What a settlement records (`task.settled`, `settled_parts`): each part of the task, its
capability, its producer, and its score, the share of the requester's check weight reading
that part which passed (None when none of the requester's checks reads it). From those records:

    unit             one settled task in which an agent made parts of one capability: k, the
                     number of settled tasks between this requester and this agent so far (this
                     one included), the parts' number and the sum of their scores
    circle(A)        the agents and requesters who, directly or through others, worked for one
                     another with A: the strongly connected component of A in the graph
                     "R -> B when B made a part of a settled task R posted"
    standing(R, i)   how established requester R was when the task settled at index i:
                     paid / (paid + STANDING_WEI), paid the wei R's tasks settled before i paid
                     to agents outside R's circle (`settlement.computed` payouts); 0 for an
                     identity that never paid an independent, below 1 always
    weight(unit)     0 when the requester is in the agent's circle (the money came back);
                     PAIR_DECAY ** (k - 1) * standing(requester, index) otherwise (1, 1/2,
                     1/4, ... of the standing: a requester's tasks for one agent weigh below 2
                     in all, and a fresh requester's first task nothing)
    quality(unit)    the mean score of its parts
    reputation(A, c) (PRIOR_MEAN * PRIOR_WEIGHT + sum of weight * quality)
                     / (PRIOR_WEIGHT + sum of weight + forfeits of A on tasks needing c)

An agent is *failing* in a capability (`failing`) when its last FAILING_STREAK scored parts
there, from requesters outside its circle, all scored 0: team formation passes it over there
while another credentialed agent is available (`accord.coordinator.team`).

A forfeit (a commitment never revealed) counts as a unit of quality 0 and weight 1 in every
capability of its task. An agent loses its credential in a capability (`revocation_due`) when
its independent parts there (those of units whose requester is outside its circle) number at
least REVOCATION_MIN_PARTS and their mean score is below the exam's threshold. Every rule
here is a pure function of the records; `track_records_from_events` folds them from the log's
verified events (`accord.market.service.track_records_from_log` reads those from a store) and the
reputation view (`accord.market.views`) keeps the same fold by agent.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any

from accord.ledger.events import Event
from accord.market.errors import MarketError, ReputationError
from accord.market.tasks import (
    SETTLEMENT_COMPUTED,
    TASK_AWARDED,
    TASK_EXPIRED,
    TASK_POSTED,
    TASK_SETTLED,
    TaskSpec,
)

DEFAULT_PRIOR_MEAN = Fraction(1, 2)
DEFAULT_PRIOR_WEIGHT = 2
PAIR_DECAY = Fraction(1, 2)
"""The k-th settled task between one requester and one agent weighs PAIR_DECAY ** (k - 1) of
its requester's standing."""
STANDING_WEI = 10**17
"""The wei (0.1 ether) a requester must have paid agents outside its circle for its tasks to
weigh half: standing = paid / (paid + STANDING_WEI) (1/2 at 0.1 ether, 10/11 at 1 ether)."""
FAILING_STREAK = 3
"""How many last independent parts of a capability, all scored 0, make an agent failing there."""
REVOCATION_MIN_PARTS = 10
"""How many independent parts of a capability a pass rate needs before it can revoke."""
TRACK_RECORD_RULE = "accord-track-record/1"
"""Names the rule a revocation's evidence was computed by (`revocation_evidence`)."""


def _check_unit(name: str, value: object) -> Fraction:
    if not isinstance(value, Fraction) or not 0 <= value <= 1:
        raise ReputationError(f"{name} must be a Fraction in [0, 1], not {value!r}")
    return value


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ReputationError(f"{name} must be a whole number ≥ {minimum}, not {value!r}")
    return value


def reputation(
    deliveries: Iterable[Fraction],
    prior_mean: Fraction = DEFAULT_PRIOR_MEAN,
    prior_weight: int = DEFAULT_PRIOR_WEIGHT,
    forfeits: int = 0,
) -> Fraction:
    """The Bayesian average of `deliveries` (each of weight 1), with `forfeits` counted as
    deliveries of quality 0: `weighted_reputation` with every weight 1.

    The result is a `Fraction` in [0, 1]. Raises ReputationError for a delivery or prior mean
    that is not a Fraction in [0, 1], a prior weight below 1, or a negative forfeit count.
    """
    return weighted_reputation(
        ((Fraction(1), d) for d in deliveries), prior_mean, prior_weight, forfeits
    )


def weighted_reputation(
    deliveries: Iterable[tuple[Fraction, Fraction]],
    prior_mean: Fraction = DEFAULT_PRIOR_MEAN,
    prior_weight: int = DEFAULT_PRIOR_WEIGHT,
    forfeits: int = 0,
) -> Fraction:
    """The Bayesian average of `deliveries`, each a (weight, quality), forfeits counted as
    deliveries of quality 0 and weight 1:

        (prior_mean * prior_weight + sum of weight * quality)
        / (prior_weight + sum of weight + forfeits)

    Raises ReputationError for a quality, weight or prior mean that is not a Fraction in
    [0, 1], a prior weight below 1, or a negative forfeit count.
    """
    _check_unit("the prior mean", prior_mean)
    _check_count("the prior weight", prior_weight, 1)
    _check_count("the forfeit count", forfeits, 0)
    total = prior_mean * prior_weight
    count = Fraction(prior_weight + forfeits)
    for weight, delivered in deliveries:
        _check_unit("a delivery's weight", weight)
        total += weight * _check_unit("a delivered quality", delivered)
        count += weight
    return total / count


# -- what a settlement records ----------------------------------------------------------------


@dataclass(frozen=True)
class PartScore:
    """One part of a settled task: its capability, who made it, and the share of the
    requester's check weight reading it that passed (None: no check of the requester reads it)."""

    part_id: str
    capability: str
    producer: str
    score: Fraction | None

    def to_json(self) -> dict[str, Any]:
        return {
            "part": self.part_id,
            "capability": self.capability,
            "producer": self.producer,
            "score": None if self.score is None else _text(self.score),
        }


@dataclass(frozen=True)
class SettledWork:
    """What one `task.settled` entry (at `index`) records of the task's work."""

    index: int
    task_id: str
    requester: str
    parts: tuple[PartScore, ...]

    def to_json(self) -> dict[str, Any]:
        """The `track_record` of the `task.settled` body (index and task id are the entry's)."""
        return {"requester": self.requester, "parts": [p.to_json() for p in self.parts]}


def settled_parts(
    parts: Sequence[tuple[str, str]],
    checks: Sequence[tuple[str, int, Sequence[str]]],
    producers: Mapping[str, str],
    passed: Mapping[str, bool],
) -> tuple[PartScore, ...]:
    """Each part `(part id, capability)` that has a producer, scored by the requester's
    `checks` `(check id, weight, parts read)` that read it: the weight of those that `passed`
    over the weight of all of them. Parts in the order given; a part nobody made (it was not
    delivered) is left out. Pure."""
    scored = []
    for part_id, capability in parts:
        producer = producers.get(part_id)
        if producer is None:
            continue
        reading = [(check_id, weight) for check_id, weight, reads in checks if part_id in reads]
        total = sum(weight for _, weight in reading)
        score = None if total == 0 else Fraction(sum(w for c, w in reading if passed.get(c)), total)
        scored.append(PartScore(part_id, capability, producer, score))
    return tuple(scored)


def scored_parts(
    spec: TaskSpec, producers: Mapping[str, str], passed: Mapping[str, bool]
) -> tuple[PartScore, ...]:
    """`settled_parts` of a task spec: its parts, scored by its requester's checks. Pure."""
    return settled_parts(
        [(part.part_id, part.capability) for part in spec.parts],
        [(check.check_id, check.weight, check.reads) for check in spec.requester_checks],
        producers,
        passed,
    )


def settled_work(index: int, task_id: str, body: Mapping[str, Any]) -> SettledWork | None:
    """The track record a `task.settled` body carries (`track_record`), or None when it has
    none (a log from before track records) or it does not parse. Pure."""
    record = body.get("track_record")
    if not isinstance(record, Mapping) or not isinstance(record.get("requester"), str):
        return None
    parts = []
    try:
        for item in record["parts"]:
            score = item["score"]
            value = None if score is None else Fraction(str(score))
            if value is not None and not 0 <= value <= 1:
                return None
            producer, capability = item["producer"], item["capability"]
            if not isinstance(producer, str) or not isinstance(capability, str):
                return None
            parts.append(PartScore(str(item["part"]), capability, producer, value))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return SettledWork(index, task_id, record["requester"], tuple(parts))


@dataclass(frozen=True)
class Payment:
    """Wei the task settled at `index` (its `task.settled`) paid `payee` for `requester`."""

    index: int
    requester: str
    payee: str
    wei: int


def settlement_payouts(body: Mapping[str, Any]) -> dict[str, int]:
    """The wei a `settlement.computed` body pays each player for the work (`payouts`; a
    panelist's pay comes from bonds, not the requester's deposit), those above 0; nothing when
    it does not parse. Pure."""
    payouts = body.get("payouts")
    if not isinstance(payouts, Mapping):
        return {}
    found: dict[str, int] = {}
    for payee, wei in payouts.items():
        try:
            amount = int(str(wei))
        except ValueError:
            return {}
        if not isinstance(payee, str) or amount < 0:
            return {}
        if amount > 0:
            found[payee] = amount
    return found


def work_payments(work: SettledWork, payouts: Mapping[str, int]) -> list[Payment]:
    """What the settled `work` paid, from its settlement's `payouts`, by payee, the requester
    left out. Pure."""
    return [
        Payment(work.index, work.requester, payee, wei)
        for payee, wei in sorted(payouts.items())
        if payee != work.requester
    ]


# -- circles: who worked for whom -------------------------------------------------------------


def circles(pairs: Iterable[tuple[str, str]]) -> dict[str, frozenset[str]]:
    """The strongly connected components of the directed graph of `pairs` (requester, agent),
    by node: two identities share a circle when each, directly or through others, worked for
    the other. Tarjan's algorithm, iteratively, nodes and edges in sorted order. Pure."""
    graph: dict[str, list[str]] = {}
    for source, target in sorted(set(pairs)):
        graph.setdefault(source, []).append(target)
        graph.setdefault(target, [])
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: dict[str, frozenset[str]] = {}
    for root in sorted(graph):
        if root in order:
            continue
        work = [(root, 0)]
        while work:
            node, start = work.pop()
            if start == 0:
                order[node] = low[node] = len(order)
                stack.append(node)
                on_stack.add(node)
            descended = False
            for position in range(start, len(graph[node])):
                following = graph[node][position]
                if following not in order:
                    work.append((node, position + 1))
                    work.append((following, 0))
                    descended = True
                    break
                if following in on_stack:
                    low[node] = min(low[node], order[following])
            if descended:
                continue
            if low[node] == order[node]:
                members: list[str] = []
                while not members or members[-1] != node:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                component = frozenset(members)
                for member in members:
                    found[member] = component
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


# -- track records ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """One settled task (its `task.settled` at `index`) in which an agent made `parts` parts of
    one capability, scored in all `passed`: the k-th settled task between `requester` and it."""

    index: int
    requester: str
    k: int
    parts: int
    passed: Fraction

    @property
    def quality(self) -> Fraction:
        return self.passed / self.parts


@dataclass(frozen=True)
class CapabilityRecord:
    """An agent's track record in one capability, as the rules read it."""

    capability: str
    units: int
    """Settled tasks with scored parts of this capability (independent or not)."""
    weight: Fraction
    """The sum of their weights (0 for the circle's own work)."""
    weighted_quality: Fraction
    forfeits: int
    parts: int
    """Independent parts: those of tasks whose requester is outside the agent's circle."""
    passed: Fraction
    """The sum of the independent parts' scores."""

    @property
    def reputation(self) -> Fraction:
        """(PRIOR_MEAN * PRIOR_WEIGHT + weighted quality) / (PRIOR_WEIGHT + weight + forfeits)."""
        prior = DEFAULT_PRIOR_MEAN * DEFAULT_PRIOR_WEIGHT
        return (prior + self.weighted_quality) / (
            DEFAULT_PRIOR_WEIGHT + self.weight + self.forfeits
        )

    @property
    def pass_rate(self) -> Fraction | None:
        """The mean score of the independent parts (None: there are none)."""
        return None if self.parts == 0 else self.passed / self.parts

    def to_json(self) -> dict[str, Any]:
        rate = self.pass_rate
        return {
            "capability": self.capability,
            "reputation": _text(self.reputation),
            "tasks": self.units,
            "weight": _text(self.weight),
            "forfeits": self.forfeits,
            "independent_parts": self.parts,
            "pass_rate": None if rate is None else _text(rate),
        }


@dataclass(frozen=True)
class TrackRecords:
    """The records the rules read: units by (agent, capability), forfeits by (agent,
    capability), and every (requester, agent) pair that settled work (the circles' graph).
    Built by `fold_track_records` from the log, or read back from the reputation view."""

    units: Mapping[tuple[str, str], tuple[Unit, ...]] = field(default_factory=dict)
    forfeits: Mapping[tuple[str, str], int] = field(default_factory=dict)
    pairs: frozenset[tuple[str, str]] = frozenset()
    paid: Mapping[str, tuple[Payment, ...]] = field(default_factory=dict)
    """By requester, what its settled tasks paid, in log order (its standing)."""

    @cached_property
    def _circles(self) -> dict[str, frozenset[str]]:
        return circles(self.pairs)

    @cached_property
    def _paid_outside(self) -> dict[str, tuple[list[int], list[int]]]:
        """By requester: the indices of its payments to agents outside its circle and the wei
        paid up to and including each (running sums)."""
        found: dict[str, tuple[list[int], list[int]]] = {}
        for requester, payments in self.paid.items():
            circle = self.circle(requester)
            indices: list[int] = []
            sums: list[int] = []
            for payment in sorted(payments, key=lambda p: p.index):
                if payment.payee in circle:
                    continue
                indices.append(payment.index)
                sums.append((sums[-1] if sums else 0) + payment.wei)
            found[requester] = (indices, sums)
        return found

    def circle(self, did: str) -> frozenset[str]:
        """`did` and those who share its circle (see `circles`)."""
        return self._circles.get(did, frozenset({did}))

    def paid_before(self, requester: str, index: int) -> int:
        """The wei `requester`'s tasks settled before log index `index` paid to agents
        outside its circle."""
        indices, sums = self._paid_outside.get(requester, ([], []))
        before = bisect_left(indices, index)
        return sums[before - 1] if before else 0

    def standing(self, requester: str, index: int) -> Fraction:
        """How established `requester` was at log index `index`: paid / (paid + STANDING_WEI),
        paid the wei it had paid agents outside its circle before then. In [0, 1)."""
        paid = self.paid_before(requester, index)
        return Fraction(paid, paid + STANDING_WEI)

    def weight(self, agent: str, unit: Unit) -> Fraction:
        """0 when the unit's requester is in the agent's circle, else PAIR_DECAY ** (k - 1)
        times the requester's standing when the unit's task settled."""
        if unit.requester in self.circle(agent):
            return Fraction(0)
        return PAIR_DECAY ** (unit.k - 1) * self.standing(unit.requester, unit.index)

    def failing(self, agent: str, capability: str) -> bool:
        """Whether the agent's last FAILING_STREAK scored parts of `capability` from requesters
        outside its circle all scored 0 (a task mixing passed and failed parts ends the
        streak: their order inside it is not recorded)."""
        failed = 0
        for unit in reversed(self.units.get((agent, capability), ())):
            if unit.requester in self.circle(agent):
                continue
            if unit.passed != 0:
                return False
            failed += unit.parts
            if failed >= FAILING_STREAK:
                return True
        return False

    def record(self, agent: str, capability: str) -> CapabilityRecord:
        units = self.units.get((agent, capability), ())
        weights = [(self.weight(agent, unit), unit) for unit in units]
        independent = [unit for unit in units if unit.requester not in self.circle(agent)]
        return CapabilityRecord(
            capability=capability,
            units=len(units),
            weight=sum((w for w, _ in weights), Fraction(0)),
            weighted_quality=sum((w * unit.quality for w, unit in weights), Fraction(0)),
            forfeits=self.forfeits.get((agent, capability), 0),
            parts=sum(unit.parts for unit in independent),
            passed=sum((unit.passed for unit in independent), Fraction(0)),
        )

    def reputation(self, agent: str, capability: str) -> Fraction:
        """The agent's reputation in `capability` (the prior with no record)."""
        return self.record(agent, capability).reputation

    def reputation_for(self, agent: str, capabilities: Sequence[str]) -> Fraction:
        """The mean of its reputations in `capabilities` (the auction's reputation for a task
        needing them; the prior for none)."""
        if not capabilities:
            return DEFAULT_PRIOR_MEAN
        total = sum((self.reputation(agent, c) for c in capabilities), Fraction(0))
        return total / len(capabilities)

    def capabilities_of(self, agent: str) -> list[str]:
        """The capabilities the agent has units or forfeits in, sorted."""
        keys = [*self.units, *self.forfeits]
        return sorted({capability for did, capability in keys if did == agent})


@dataclass(frozen=True)
class Forfeit:
    """A bid not honoured, on a task needing `capabilities`: a commitment never revealed
    (`task.awarded`/`task.expired` at `index` names it), or a task won and not delivered by
    its deadline (the `task.expired` that ends it names the winner)."""

    index: int
    agent: str
    capabilities: tuple[str, ...]


def fold_track_records(
    works: Iterable[SettledWork],
    forfeits: Iterable[Forfeit],
    payments: Iterable[Payment] = (),
) -> TrackRecords:
    """The track records of settled `works`, `forfeits` and the `payments` the works made, in
    log order. Pure.

    For each settled task and each agent with parts in it, k counts the settled tasks between
    the requester and that agent so far; each capability the agent scored parts in is one unit.
    """
    counts: dict[tuple[str, str], int] = {}
    units: dict[tuple[str, str], list[Unit]] = {}
    for work in sorted(works, key=lambda w: w.index):
        for agent, by_capability in sorted(work_by_agent(work).items()):
            k = counts[work.requester, agent] = counts.get((work.requester, agent), 0) + 1
            for capability, (parts, passed) in sorted(by_capability.items()):
                if parts:
                    unit = Unit(work.index, work.requester, k, parts, passed)
                    units.setdefault((agent, capability), []).append(unit)
    forfeited: dict[tuple[str, str], int] = {}
    for forfeit in forfeits:
        for capability in forfeit.capabilities:
            key = (forfeit.agent, capability)
            forfeited[key] = forfeited.get(key, 0) + 1
    paid: dict[str, list[Payment]] = {}
    for payment in sorted(payments, key=lambda p: (p.index, p.payee)):
        paid.setdefault(payment.requester, []).append(payment)
    return TrackRecords(
        {key: tuple(found) for key, found in units.items()},
        forfeited,
        frozenset(counts),
        {requester: tuple(found) for requester, found in paid.items()},
    )


def settled_works(
    events: Iterable[tuple[int, Event]], *, before: int | None = None
) -> list[SettledWork]:
    """The track record of every `task.settled` among the log's verified `events` (log index,
    event) before index `before` (all: None), in log order; a settlement that carries none (a
    log from before track records) is skipped. Pure."""
    works = []
    for index, event in sorted(events, key=lambda pair: pair[0]):
        if event.kind != TASK_SETTLED or (before is not None and index >= before):
            continue
        work = settled_work(index, event.subject, event.body)
        if work is not None:
            works.append(work)
    return works


def payments(events: Iterable[tuple[int, Event]], *, before: int | None = None) -> list[Payment]:
    """What each task settled among the log's verified `events` before index `before` paid
    (`work_payments`): the payouts of its first `settlement.computed`, dated by its first
    `task.settled`. Pure."""
    logged = sorted(events, key=lambda pair: pair[0])
    payouts: dict[str, dict[str, int]] = {}
    for _, event in logged:
        if event.kind == SETTLEMENT_COMPUTED and event.subject not in payouts:
            payouts[event.subject] = settlement_payouts(event.body)
    found: list[Payment] = []
    dated: set[str] = set()
    for work in settled_works(logged, before=before):
        if work.task_id not in dated:  # a task settled twice: only a hand-written log
            dated.add(work.task_id)
            found += work_payments(work, payouts.get(work.task_id, {}))
    return found


def forfeits(events: Iterable[tuple[int, Event]], *, before: int | None = None) -> list[Forfeit]:
    """Every forfeit `task.awarded` and `task.expired` name among the log's verified `events`
    before index `before`, each with the capabilities of its task (from its first posting among
    `events`; none when there is none or its spec does not parse). Pure."""
    logged = sorted(events, key=lambda pair: pair[0])
    postings: dict[str, Mapping[str, Any]] = {}
    for _, event in logged:
        if event.kind == TASK_POSTED:
            postings.setdefault(event.subject, event.body)
    found: list[Forfeit] = []
    for kind in (TASK_AWARDED, TASK_EXPIRED):
        for index, event in logged:
            if event.kind != kind or (before is not None and index >= before):
                continue
            forfeited = event.body.get("forfeited", [])
            if not isinstance(forfeited, list) or not all(isinstance(d, str) for d in forfeited):
                continue
            needs = _capabilities(postings.get(event.subject))
            found += [Forfeit(index, did, needs) for did in forfeited]
    return found


def _capabilities(posted: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The capabilities of a `task.posted` body's spec; none without one that parses."""
    if posted is None:
        return ()
    try:
        return TaskSpec.from_json(dict(posted["spec"])).capabilities
    except (MarketError, KeyError, TypeError, ValueError):
        return ()


def track_records_from_events(
    events: Sequence[tuple[int, Event]], *, before: int | None = None
) -> TrackRecords:
    """Every agent's track record from the settled tasks, their payments and the forfeits
    among the log's verified `events` (log index, event) before index `before` (all when
    None): the fold the award scored bids by at its time (`fold_track_records`). Pure."""
    return fold_track_records(
        settled_works(events, before=before),
        forfeits(events, before=before),
        payments(events, before=before),
    )


def reputations_from_events(
    events: Sequence[tuple[int, Event]],
    dids: Iterable[str],
    capabilities: Sequence[str],
    *,
    before: int | None = None,
) -> dict[str, Fraction]:
    """Each DID's reputation for a task needing `capabilities` (the mean of its reputations
    in them) from the log's verified `events` before index `before`: what the auction scored
    it by. Pure."""
    records = track_records_from_events(events, before=before)
    return {did: records.reputation_for(did, capabilities) for did in sorted(set(dids))}


def work_by_agent(work: SettledWork) -> dict[str, dict[str, tuple[int, Fraction]]]:
    """Per producer, per capability: (scored parts, sum of scores); every producer is listed,
    one whose parts no check scored with an empty mapping."""
    found: dict[str, dict[str, tuple[int, Fraction]]] = {}
    for part in work.parts:
        mine = found.setdefault(part.producer, {})
        if part.score is None:
            continue
        parts, passed = mine.get(part.capability, (0, Fraction(0)))
        mine[part.capability] = (parts + 1, passed + part.score)
    return found


# -- revocation -------------------------------------------------------------------------------


def revocation_due(record: CapabilityRecord, threshold: Fraction) -> bool:
    """Whether the record costs the agent its credential: at least REVOCATION_MIN_PARTS
    independent parts whose mean score is below the exam's `threshold`. Pure."""
    rate = record.pass_rate
    return record.parts >= REVOCATION_MIN_PARTS and rate is not None and rate < threshold


def revocation_evidence(
    agent: str, record: CapabilityRecord, threshold: Fraction, task_id: str, settled_index: int
) -> dict[str, Any]:
    """What a revocation by the track-record rule logs beside its reason: enough to recompute
    it from the log up to the `task.settled` at `settled_index` (`check_revocation`)."""
    return {
        "rule": TRACK_RECORD_RULE,
        "agent": agent,
        "capability": record.capability,
        "task": task_id,
        "settled_index": settled_index,
        "parts": record.parts,
        "passed": _text(record.passed),
        "threshold": _text(threshold),
        "min_parts": REVOCATION_MIN_PARTS,
    }


def revocation_reason(record: CapabilityRecord, threshold: Fraction) -> str:
    rate = record.pass_rate
    return (
        f"track record: {record.parts} independent {record.capability} parts passed "
        f"{'-' if rate is None else _text(rate)} of their checks, below the exam's threshold "
        f"{_text(threshold)}"
    )


def check_revocation(
    evidence: Mapping[str, Any], records: TrackRecords, threshold: Fraction
) -> None:
    """Recompute a track-record revocation: `records` folded from the log up to its
    `settled_index`, `threshold` the exam's. Returns None when it was due and its evidence is
    what the records give; raises ReputationError saying what differs otherwise."""
    if evidence.get("rule") != TRACK_RECORD_RULE:
        raise ReputationError(f"the revocation names no rule accord knows: {evidence.get('rule')}")
    try:
        record = records.record(str(evidence["agent"]), str(evidence["capability"]))
        logged = (int(evidence["parts"]), Fraction(str(evidence["passed"])))
        logged_threshold = Fraction(str(evidence["threshold"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise ReputationError(f"the revocation's evidence does not parse: {exc!r}") from exc
    if logged != (record.parts, record.passed) or logged_threshold != threshold:
        raise ReputationError(
            f"the revocation logs {logged[0]} parts passing {_text(logged[1])} against "
            f"{_text(logged_threshold)}; the log gives {record.parts} parts passing "
            f"{_text(record.passed)} against the exam's {_text(threshold)}"
        )
    if not revocation_due(record, threshold):
        raise ReputationError(
            f"the track record was not below the threshold: {record.parts} parts, pass rate "
            f"{record.pass_rate} against {_text(threshold)} (at least {REVOCATION_MIN_PARTS} "
            "parts below it revoke)"
        )


# -- requesters -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequesterRecord:
    """What bidders see of a requester: tasks posted and settled, review checks it rejected,
    and those rejections a dispute overturned (the evaluator found for the team)."""

    requester: str
    posted: int
    settled: int
    rejected: int
    overturned: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "requester": self.requester,
            "tasks_posted": self.posted,
            "tasks_settled": self.settled,
            "reviews_rejected": self.rejected,
            "rejections_overturned": self.overturned,
        }


def _text(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"
