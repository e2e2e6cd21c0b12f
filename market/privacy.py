"""Who reads a task's work, and when. The log is public; the work is the requester's only once
it is paid for, so the log holds commitments to the outputs (`accord.ledger.sealing`) and this rule
says who is shown the sealed outputs themselves:

    the operator, the contract holder and   the input files, and every part's output from the
    every member of the task's teams        moment it is reported
    the requester                           the input files; while the task is delivered but
                                            its settlement not yet computed, the outputs of
                                            the parts its review checks read (it must see
                                            what it judges); once the settlement is
                                            computed, the outputs of the parts it pays for
                                            (`paid_parts`), and no other
    anyone else                             nothing: the commitments and the operator-signed
                                            verdicts in the log

A part is **paid for** when the settlement pays the team something and either one of the
requester's checks that reads the part passed (an inconclusive one is logged as passed: it never
costs the team). In a settlement that values parts (`part_values`) that is all: every
delivered part holds a share of the assembly check, which is the leader's integration, not
payment for the part's work. In an older settlement that values only members, a part is also
paid for when its producer is paid and none of the requester's checks that read it failed.
A part nobody was paid for stays sealed for the requester for good: a check that fails correct
work takes its refund, not the work. The check weights are the requester's own, public price
of each part: a trivial check on a part buys it at that weight's share, which the team sees
before it bids.

Pure: the callers read the task, its team, its logged settlement and the deliverable's producers.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from accord.market.tasks import Task
from accord.market.work import ReviewCheck, upstream


def paid_parts(
    task: Task, settlement: Mapping[str, Any], producers: Mapping[str, str]
) -> frozenset[str]:
    """Pure: the parts of `task` its logged settlement (the body of `settlement.computed`) pays
    for, given each delivered part's producer (`producers`: part id → DID). Nothing when the
    settlement pays the team nothing. A settlement body that does not say what it paid (no
    amount, unreadable verdicts or values) pays for nothing."""
    try:
        amount = int(str(settlement.get("amount", "0")))
        payouts = {
            str(did): int(str(wei)) for did, wei in dict(settlement.get("payouts") or {}).items()
        }
        verdicts = {
            str(check["id"]): check.get("passed") is True
            for check in settlement.get("checks") or []
        }
        logged_values = settlement.get("part_values")
        part_values = (
            None
            if logged_values is None
            else {str(p): Fraction(str(v)) for p, v in dict(logged_values).items()}
        )
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError):
        return frozenset()
    if amount <= 0:
        return frozenset()
    passed: set[str] = set()
    failed: set[str] = set()
    made_from = upstream(task.spec.parts)  # a check on `vat` reads the `net` it is made of
    for check in task.spec.requester_checks:
        if check.check_id not in verdicts:
            continue
        read = {*check.reads, *(p for r in check.reads for p in made_from.get(r, ()))}
        (passed if verdicts[check.check_id] else failed).update(read)
    every = {p.part_id for p in task.spec.parts}
    if part_values is not None:
        # Paid per part: a part is paid for by the requester's checks that read it and
        # passed. Its share of the assembly check (which reads every part, but no output) is
        # the leader's integration, not the part's work, so it opens nothing.
        return frozenset(p for p in every if p in passed)
    paid_producer = {part for part, producer in producers.items() if payouts.get(producer, 0) > 0}
    return frozenset(p for p in every if p in passed or (p in paid_producer and p not in failed))


@dataclass(frozen=True)
class WorkReaders:
    """The parties to a task's work, as the log names them."""

    operator: str
    team: Collection[str]
    """Every member of every conversation of the task (the contract holder's included)."""

    def works_on(self, task: Task, caller: str) -> bool:
        """Whether `caller` is the operator, the contract holder or a team member."""
        return caller in (self.operator, task.winner) or caller in self.team

    def may_see_files(self, task: Task, caller: str) -> bool:
        """Whether `caller` reads the task's input files: the requester and those at work."""
        return caller == task.requester or self.works_on(task, caller)

    def readable_parts(
        self, task: Task, caller: str, *, paid: Collection[str] | None
    ) -> frozenset[str] | None:
        """The parts whose outputs `caller` reads now; `paid` is None while the settlement is
        not computed and `paid_parts` once it is. None when `caller` may not see the task's
        work at all (not even its commitments through the service: they are in the public
        log)."""
        every = frozenset(p.part_id for p in task.spec.parts)
        if self.works_on(task, caller):
            return every
        if caller != task.requester:
            return None
        if paid is not None:
            return every & frozenset(paid)
        reviewed = (c.reads for c in task.spec.rubric if isinstance(c, ReviewCheck))
        return frozenset(p for reads in reviewed for p in reads if p in every)
