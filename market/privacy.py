"""Who reads a task's work, and when. The log is public; the work is the requester's only once
it is paid for, so the log holds commitments to the outputs (`accord.ledger.sealing`) and this rule
says who is shown the sealed outputs themselves:

    the operator, the contract holder and   the input files, and every part's output from the
    every member of the task's teams        moment it is reported
    the requester                           the input files; while the task is delivered but
                                            its settlement not yet computed, the outputs of
                                            the parts its review checks read (it must see
                                            what it judges); once the settlement is
                                            computed (what it pays is fixed), every output
    anyone else                             nothing: the commitments and the operator-signed
                                            verdicts in the log

Pure: the callers read the task, its team and whether its settlement is computed.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from accord.market.tasks import Task
from accord.market.work import ReviewCheck


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

    def readable_parts(self, task: Task, caller: str, *, computed: bool) -> frozenset[str] | None:
        """The parts whose outputs `caller` reads now (`computed`: the settlement is logged);
        None when it may not see the task's work at all (not even its commitments through
        the service: they are in the public log)."""
        every = frozenset(p.part_id for p in task.spec.parts)
        if self.works_on(task, caller):
            return every
        if caller != task.requester:
            return None
        if computed:
            return every
        reviewed = (c.reads for c in task.spec.rubric if isinstance(c, ReviewCheck))
        return frozenset(p for reads in reviewed for p in reads if p in every)
