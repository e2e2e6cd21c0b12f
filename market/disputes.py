"""A dispute's panel in the service: who may sit (read from the log), the draw (logged once),
the panelists' signed commitments and votes, the replacement of the silent, and the decision
a settlement takes. The rules are `accord.market.panel`'s pure functions; this module reads
the log and the chain and appends entries.

    rejection (`review.given`, naming `after_block`, the chain's head when it was admitted)
      -> `draw`: `panel.drawn` by the operator, seeded by the hash of block after_block + 1,
         which did not exist when the requester signed (SettlementWaits until it does)
      -> each seat's panelist signs `panel.committed` ({"commitment"}) within the commit window
      -> `replace_absent`: once the window has closed, `panel.replaced` names a successor for
         each seat that did not commit (once per dispute), with a window of its own
      -> each panelist that committed signs `panel.revealed` ({"verdict", "salt"})
      -> `decision`: the tally, once every committed seat revealed or the reveal window closed

The team may answer a rejection with a bond of its own (`answer`): a member of the team
bonds from its own account (`TaskEscrow.answer`), then signs `dispute.answered`
({"task_id", "check", "account", "amount"}) before the panel's commit window closes (before
the draw, any time after the rejection); `team_answer` folds it from the log, and the
dispute's record carries it, so the settlement stakes it (`accord.market.panel`).

`has_evaluator` says whether a dispute over parts of some capabilities could be decided now:
what a service without a judge model answers before it takes a review-only posting or a
rejection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from accord.identity.errors import BindingError, ExamError
from accord.identity.exams import check_agent_entry
from accord.identity.payout import verify_binding
from accord.identity.payout_accounts import PAYOUT_BOUND_KIND
from accord.ledger.canonical import canonical_json
from accord.ledger.errors import AlreadyLoggedError, LedgerError, MalformedError
from accord.ledger.events import Entry, Event, parse_time
from accord.ledger.service import Ledger
from accord.market.check_io import check_world
from accord.market.checks import (
    SEALED,
    CheckResult,
    Judged,
    dispute_judge,
    dispute_prompt,
    judge_verdict,
)
from accord.market.errors import SettlementError, SettlementWaits, TaskError
from accord.market.panel import (
    ISSUED,
    JUDGE_SEAT,
    PANEL_COMMITTED,
    PANEL_DRAWN,
    PANEL_KINDS,
    PANEL_REPLACED,
    PANEL_REVEALED,
    PANEL_SIZE,
    REGISTERED,
    REVOKED,
    SETTLED,
    PanelError,
    PanelLog,
    can_draw_panel,
    capabilities_read,
    draw,
    panel_log,
    panel_seed,
    pool_at,
    vote_commitment,
)
from accord.market.tasks import CHECKS_PREVIEWED, REVIEW_GIVEN, TASK_DELIVERED, Task
from accord.market.work import PythonCheck, ReviewCheck

DISPUTE_ANSWERED = "dispute.answered"
"""A team member's signed answer to a rejection with a bond from its own account."""


class BlockSource(Protocol):
    """The chain's blocks, as the escrow's chain reads them."""

    def block_number(self) -> int: ...

    def block_hash(self, number: int) -> bytes | None: ...


def log_events(ledger: Ledger, before: int | None = None) -> list[tuple[int, Event]]:
    """Every event of the log before index `before` (all: None), with its index."""
    return [
        (stored.index, Entry.from_bytes(stored.data).event)
        for stored in ledger.store.entries(0, before)
    ]


def team_of(task: Task, delivered: Mapping[str, Any] | None) -> frozenset[str]:
    """The task's contract holder and every agent its delivery names as a part's producer."""
    team = {task.winner} if task.winner else set()
    try:
        for contribution in (delivered or {}).get("deliverable", {}).get("contributions", []):
            team.add(str(contribution["agent"]))
    except (KeyError, TypeError, AttributeError):
        pass
    return frozenset(team)


def dispute_request(check: ReviewCheck, outputs: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """What a panelist is given to evaluate: the parts the review reads, the review's
    criterion and the requester's reason, all as data (the parts and the reason are the
    parties' words, untrusted)."""
    return {"criterion": check.criterion, "reason": reason, "parts": dict(outputs)}


def part_capabilities(task: Task) -> dict[str, str]:
    return {part.part_id: part.capability for part in task.spec.parts}


def has_evaluator(
    ledger: Ledger,
    *,
    requester: str,
    capabilities: Sequence[str],
    team: Collection[str] = (),
    judge: bool = False,
    at: datetime | None = None,
) -> bool:
    """Whether a dispute over parts of `capabilities` between `requester` and `team` could
    be decided now: enough self-custody, credentialed, live agents outside both parties'
    circles to fill a panel (a configured judge model filling one seat). A service where this
    holds has an evaluator even without a judge model."""
    events = panel_relevant_events(ledger)
    pool = pool_at(
        events,
        operator=ledger.operator.did,
        requester=requester,
        team=team,
        capabilities=capabilities,
        before=ledger.store.size(),
        at=at or ledger.clock(),
    )
    return can_draw_panel(pool, judge=judge)


PANEL_POOL_KINDS = (REGISTERED, ISSUED, REVOKED, SETTLED)
"""The kinds the pool is read from (registrations, credentials, settled work); each
self-custody agent's latest entry is read beside them, for its liveness."""


def panel_relevant_events(ledger: Ledger) -> list[tuple[int, Event]]:
    """What `pool_at` needs of the whole log, without reading it all: registrations,
    credentials and their revocations, settled tasks, and the latest entry of each agent that
    registered self-custody (what its liveness is). The pool they give is the one the whole
    log gives."""
    store = ledger.store
    found = {
        stored.index: Entry.from_bytes(stored.data).event
        for stored in store.find(kinds=PANEL_POOL_KINDS, limit=10**9)
    }
    selves = {
        e.actor for e in found.values() if e.kind == REGISTERED and e.body.get("custody") == "self"
    }
    for did in sorted(selves):
        for stored in store.find(actor=did, newest_first=True, limit=1):
            found[stored.index] = Entry.from_bytes(stored.data).event
    return sorted(found.items())


@dataclass(frozen=True)
class Rejection:
    """The rejection a dispute is over: its log index, time and the block it names."""

    index: int
    at: datetime
    after_block: int


def rejection_of(ledger: Ledger, task: Task, check_id: str) -> Rejection | None:
    """The requester's rejection of `check_id`, if the log holds one."""
    for stored in ledger.store.find(kind=REVIEW_GIVEN, subject=task.task_id, limit=1000):
        event = Entry.from_bytes(stored.data).event
        body = event.body
        if event.actor != task.requester or body.get("check") != check_id:
            continue
        if body.get("verdict") != "reject":
            return None
        return Rejection(stored.index, event_time(event), int(str(body.get("after_block", 0))))
    return None


def event_time(event: Event) -> datetime:
    return parse_time(event.at)


def task_panel_events(ledger: Ledger, task_id: str) -> list[tuple[int, Event]]:
    return [
        (stored.index, Entry.from_bytes(stored.data).event)
        for stored in ledger.store.find(kinds=PANEL_KINDS, subject=task_id, limit=10_000)
    ]


def current_panel(ledger: Ledger, task_id: str, check_id: str) -> PanelLog | None:
    return panel_log(
        task_panel_events(ledger, task_id), operator=ledger.operator.did, check_id=check_id
    )


def _rejection_fee(ledger: Ledger, index: int) -> int:
    """The dispute fee the rejection at `index` names (its `fee`, 0 when it names none)."""
    stored = list(ledger.store.entries(index, index + 1))
    try:
        return int(str(Entry.from_bytes(stored[0].data).event.body.get("fee", "0")))
    except (IndexError, ValueError):
        return 0


def _delivered_body(ledger: Ledger, task_id: str) -> dict[str, Any] | None:
    found = ledger.store.find(kind=TASK_DELIVERED, subject=task_id, limit=1)
    return None if not found else dict(Entry.from_bytes(found[0].data).event.body)


def draw_body(
    events: Sequence[tuple[int, Event]],
    *,
    operator: str,
    task: Task,
    check: ReviewCheck,
    rejection: Rejection,
    block_hash: str,
    delivered: Mapping[str, Any] | None,
    judge: bool = False,
    size: int = PANEL_SIZE,
) -> dict[str, Any]:
    """Pure: the body of `panel.drawn` for the dispute over `check`: the pool as the log stood
    at the rejection, drawn with the seed of block `after_block + 1`. The audit rebuilds it.
    Raises PanelError when the pool cannot fill the panel."""
    capabilities = capabilities_read(part_capabilities(task), check.reads)
    pool = pool_at(
        events,
        operator=operator,
        requester=task.requester,
        team=team_of(task, delivered),
        capabilities=capabilities,
        before=rejection.index,
        at=rejection.at,
    )
    panel = draw(pool, panel_seed(block_hash, task.task_id, check.check_id), size=size, judge=judge)
    return {
        "task_id": task.task_id,
        "check": check.check_id,
        "judge": judge,
        "rejection": rejection.index,
        "block": {"number": rejection.after_block + 1, "hash": block_hash},
        "capabilities": list(capabilities),
        **panel.to_json(),
    }


@dataclass(frozen=True)
class JudgeSeat:
    """The operator's judge model as one panelist: `ask(prompt)` asks it (its exchange sealed
    and kept), `answer_of(exchange)` reads back the answer sealed under an exchange's
    commitment (None when it is not held)."""

    ask: Callable[[str], Judged]
    answer_of: Callable[[str], str | None]


def judge_side(check: ReviewCheck, answer: str) -> str:
    """The side a judge's answer to a dispute's prompt votes for (6 or more: the team)."""
    passed, _ = judge_verdict(dispute_judge(check), answer)
    return "team" if passed else "requester"


class Panels:
    """The panels of one service's disputes, over its `ledger` and the chain's `blocks`."""

    def __init__(self, ledger: Ledger, blocks: BlockSource) -> None:
        self.ledger = ledger
        self.blocks = blocks

    def draw(
        self,
        task: Task,
        check: ReviewCheck,
        judge: JudgeSeat | None = None,
        prompt: str | None = None,
    ) -> PanelLog:
        """The dispute's panel, drawn and logged (`panel.drawn`) if it was not yet; with a
        `judge`, one seat is the judge model's, which is asked `prompt` at once and commits
        to its sealed exchange (`panel.committed` by the operator, `"seat": "judge"`).

        Raises SettlementWaits while the seed's block is not mined or the pool cannot fill
        the panel, TaskError when there is no rejection to draw for."""
        logged = current_panel(self.ledger, task.task_id, check.check_id)
        if logged is not None:
            self._judge_commits(task, check, logged, judge, prompt)
            return current_panel(self.ledger, task.task_id, check.check_id) or logged
        rejection = rejection_of(self.ledger, task, check.check_id)
        if rejection is None:
            raise TaskError(f"{check.check_id} of {task.task_id} is not rejected: no dispute")
        number = rejection.after_block + 1
        found = self.blocks.block_hash(number) if self.blocks.block_number() >= number else None
        if found is None:
            raise SettlementWaits(
                f"the panel of {task.task_id}'s dispute over {check.check_id} is drawn with the "
                f"hash of block {number}, not mined yet"
            )
        try:
            body = draw_body(
                log_events(self.ledger, rejection.index),
                operator=self.ledger.operator.did,
                task=task,
                check=check,
                rejection=rejection,
                block_hash="0x" + found.hex(),
                delivered=_delivered_body(self.ledger, task.task_id),
                judge=judge is not None,
            )
        except PanelError as exc:
            raise SettlementWaits(
                f"the dispute over {check.check_id} of {task.task_id} cannot be decided: {exc}"
                + ("" if judge is not None else " (a judge model, ACCORD_JUDGE_URL, takes a seat)")
            ) from exc
        # Settlers draw before they take the write lock (their checks run first): the log
        # takes one panel per dispute whoever draws it, and a settler that lost the race reads
        # the winner's.
        with contextlib.suppress(AlreadyLoggedError):
            self.ledger.append(
                self.ledger.operator,
                PANEL_DRAWN,
                subject=task.task_id,
                body=body,
                once_key=f"{task.task_id}|{check.check_id}",
            )
        drawn = current_panel(self.ledger, task.task_id, check.check_id)
        assert drawn is not None
        self._judge_commits(task, check, drawn, judge, prompt)
        return current_panel(self.ledger, task.task_id, check.check_id) or drawn

    def _judge_commits(
        self,
        task: Task,
        check: ReviewCheck,
        panel: PanelLog,
        judge: JudgeSeat | None,
        prompt: str | None,
    ) -> None:
        """The judge's seat asks the model and commits to the sealed exchange, while the
        commit window is open (a model that could not be reached is asked again)."""
        if judge is None or prompt is None or JUDGE_SEAT not in panel.panel.seats:
            return
        if JUDGE_SEAT in panel.commitments or self.ledger.clock() >= panel.commit_ends:
            return
        try:
            judged = judge.ask(prompt)
        except SettlementWaits:
            return  # the seat stays uncommitted until the model answers or the window closes
        body = {
            "task_id": task.task_id,
            "check": check.check_id,
            "seat": JUDGE_SEAT,
            "commitment": judged.exchange,
            "model": judged.model,
        }
        self.ledger.append(self.ledger.operator, PANEL_COMMITTED, subject=task.task_id, body=body)

    def _judge_reveals(
        self, task: Task, check: ReviewCheck, panel: PanelLog, judge: JudgeSeat | None
    ) -> None:
        """The judge's seat reveals the side its sealed answer votes for, once reveals are
        taken."""
        commitment = panel.commitments.get(JUDGE_SEAT)
        if judge is None or commitment is None or JUDGE_SEAT in panel.reveals:
            return
        now = self.ledger.clock()
        if not panel.revealing(now) or now >= panel.reveal_ends:
            return
        answer = judge.answer_of(commitment)
        if answer is None:
            return
        body = {
            "task_id": task.task_id,
            "check": check.check_id,
            "seat": JUDGE_SEAT,
            "verdict": judge_side(check, answer),
            "salt": "",
        }
        self.ledger.append(self.ledger.operator, PANEL_REVEALED, subject=task.task_id, body=body)

    def _admit(self, entry: Entry, kind: str, body: Mapping[str, Any]) -> int:
        self._verify(entry, kind, body)
        (index,) = self.ledger.append_entries([entry])
        return index

    def _verify(self, entry: Entry, kind: str, body: Mapping[str, Any]) -> None:
        """Raises TaskError for an entry that is not the signer's `kind` with `body`."""
        try:
            check_agent_entry(
                entry,
                actor=entry.event.actor,
                kind=kind,
                subject=entry.event.subject,
                body=body,
                now=self.ledger.clock(),
            )
        except ExamError as exc:
            raise TaskError(str(exc)) from exc

    def commit(self, entry: Entry) -> int:
        """Log a panelist's own signed `panel.committed` (`{"task_id", "check",
        "commitment"}`). Raises TaskError for a signer that holds no seat, a second
        commitment, a closed window or an entry that does not verify."""
        event = entry.event
        body = event.body
        check_id = str(body.get("check", ""))
        panel = current_panel(self.ledger, event.subject, check_id)
        now = self.ledger.clock()
        if panel is None:
            raise TaskError(f"no panel sits on {check_id} of {event.subject}")
        if event.actor not in panel.panel.seats:
            raise TaskError(f"{event.actor} holds no seat on this panel")
        if event.actor in panel.commitments:
            raise TaskError(f"{event.actor} has committed already")
        if now >= panel.commit_ends or panel.all_committed():
            raise TaskError(f"the commit window closed at {panel.commit_ends.isoformat()}")
        commitment = body.get("commitment")
        if not isinstance(commitment, str) or len(commitment) != 64:
            raise TaskError("a commitment is the sha256 hex of the vote and its salt")
        expected = {"task_id": event.subject, "check": check_id, "commitment": commitment}
        return self._admit(entry, PANEL_COMMITTED, expected)

    def replace_absent(self, task: Task, check_id: str) -> PanelLog | None:
        """Once the commit window has closed, log `panel.replaced` naming a successor for
        each seat that did not commit (once per dispute; the log refuses nothing twice, the
        fold takes the first). Returns the panel as it stands."""
        panel = current_panel(self.ledger, task.task_id, check_id)
        if panel is None or panel.replaced_at is not None or not panel.absent():
            return panel
        if self.ledger.clock() < panel.commit_ends:
            return panel
        successors = dict(zip(panel.absent(), panel.panel.reserves, strict=False))
        body = {"task_id": task.task_id, "check": check_id, "replaced": successors}
        self.ledger.append(self.ledger.operator, PANEL_REPLACED, subject=task.task_id, body=body)
        return current_panel(self.ledger, task.task_id, check_id)

    def reveal(self, entry: Entry) -> int:
        """Log a panelist's own signed `panel.revealed` (`{"task_id", "check", "verdict",
        "salt"}`), which must open its commitment. Raises TaskError before reveals are taken,
        after the window, for a panelist that did not commit, a second reveal, or a vote
        that does not open the commitment."""
        event = entry.event
        body = event.body
        check_id = str(body.get("check", ""))
        panel = current_panel(self.ledger, event.subject, check_id)
        now = self.ledger.clock()
        if panel is None or event.actor not in panel.commitments:
            raise TaskError(f"{event.actor} did not commit on this panel")
        if event.actor in panel.reveals:
            raise TaskError(f"{event.actor} has revealed already")
        if not panel.revealing(now):
            raise TaskError(
                f"votes are revealed once every seat has committed or the commit window "
                f"closes ({panel.commit_ends.isoformat()})"
            )
        if now >= panel.reveal_ends:
            raise TaskError(f"the reveal window closed at {panel.reveal_ends.isoformat()}")
        verdict, salt = str(body.get("verdict", "")), str(body.get("salt", ""))
        if vote_commitment(verdict, salt) != panel.commitments[event.actor]:
            raise TaskError("the vote and salt do not open the panelist's commitment")
        expected = {"task_id": event.subject, "check": check_id, "verdict": verdict, "salt": salt}
        return self._admit(entry, PANEL_REVEALED, expected)

    def answer_of(self, task: Task, check_id: str, panel: PanelLog | None) -> dict[str, Any] | None:
        """The team's answer to the dispute over `check_id` as the log holds it
        (`team_answer`), or None."""
        rejection = rejection_of(self.ledger, task, check_id)
        if rejection is None:
            return None
        events = [
            (stored.index, Entry.from_bytes(stored.data).event)
            for stored in self.ledger.store.find(
                kind=DISPUTE_ANSWERED, subject=task.task_id, limit=10_000
            )
        ]
        team = team_of(task, _delivered_body(self.ledger, task.task_id))
        return team_answer(
            events,
            task=task,
            team=team,
            check_id=check_id,
            rejection=rejection.index,
            fee=_rejection_fee(self.ledger, rejection.index),
            panel=panel,
            bound=self._bound(team),
        )

    def _bound(self, dids: Iterable[str]) -> dict[str, dict[str, int]]:
        """`bound_accounts` of the payout bindings `dids` logged."""
        return bound_accounts(
            (stored.index, Entry.from_bytes(stored.data).event)
            for did in dids
            for stored in self.ledger.store.find(kind=PAYOUT_BOUND_KIND, actor=did, limit=1000)
        )

    def answer(
        self,
        task: Task,
        entry: Entry,
        answered: Callable[[str], int],
        bond: Callable[[str, int, int], None] | None = None,
    ) -> int:
        """Log a team member's own signed `dispute.answered` (`{"task_id", "check",
        "account", "amount"}`): the team answers the requester's rejection with a bond of
        `amount` wei that `account` sent (`TaskEscrow.answer`), `answered(account)` being what
        the escrow holds from it for the task. Raises TaskError for a signer not on the team,
        no rejection of that check, a panel whose commit window closed, an amount under the
        dispute's fee, a second answer, an account whose answers on chain do not cover this
        one beside its earlier ones, or an entry that does not verify. With `bond`, once all
        else holds, `bond(account, staked, held)` is called to bring the account's answers on
        chain from `held` to `staked` where they fall short, before the entry is logged."""
        event = entry.event
        body = event.body
        check_id = str(body.get("check", ""))
        if event.kind != DISPUTE_ANSWERED or event.subject != task.task_id:
            raise TaskError(f"an answer is a {DISPUTE_ANSWERED} entry about {task.task_id}")
        if event.actor not in team_of(task, _delivered_body(self.ledger, task.task_id)):
            raise TaskError(f"{event.actor} is not on the team of {task.task_id}")
        rejection = rejection_of(self.ledger, task, check_id)
        if rejection is None:
            raise TaskError(f"{check_id} of {task.task_id} is not rejected: nothing to answer")
        panel = current_panel(self.ledger, task.task_id, check_id)
        if panel is not None and self.ledger.clock() >= panel.commit_ends:
            raise TaskError(
                f"the dispute over {check_id} was open to an answer until its panel's commit "
                f"window closed ({panel.commit_ends.isoformat()})"
            )
        if self.answer_of(task, check_id, panel) is not None:
            raise TaskError(f"the team has answered the dispute over {check_id} already")
        fee = _rejection_fee(self.ledger, rejection.index)
        try:
            amount = int(str(body.get("amount")))
        except ValueError:
            raise TaskError("an answer's amount is a whole number of wei") from None
        account = str(body.get("account", ""))
        if not _is_address(account):
            raise TaskError("an answer names the 0x account its bond came from")
        if amount < max(fee, 1):
            raise TaskError(f"an answer stakes at least the dispute's fee, {fee} wei")
        if account.lower() not in self._bound([event.actor]).get(event.actor, {}):
            raise TaskError(
                f"an answer's bond comes from an account its signer bound for payouts "
                f"(payout.bound, signed by both keys): {event.actor} bound no {account}"
            )
        earlier = [
            a
            for c in self.rejected_checks(task)
            if (a := self.answer_of(task, c, current_panel(self.ledger, task.task_id, c)))
        ]
        staked = answers_by_account(earlier).get(account.lower(), 0) + amount
        expected = {"task_id": task.task_id, "check": check_id, "account": account}
        expected["amount"] = str(amount)
        self._verify(entry, DISPUTE_ANSWERED, expected)
        held = answered(account)
        if held < staked and bond is not None:
            bond(account, staked, held)
            held = answered(account)
        if held < staked:
            raise TaskError(
                f"the escrow holds {held} wei answered from {account} for {task.task_id}, not "
                f"the {staked} its answers stake: send TaskEscrow.answer first"
            )
        return self._admit(entry, DISPUTE_ANSWERED, expected)

    def rejected_checks(self, task: Task) -> list[str]:
        return sorted(
            str(Entry.from_bytes(s.data).event.body.get("check", ""))
            for s in self.ledger.store.find(kind=REVIEW_GIVEN, subject=task.task_id, limit=1000)
        )

    def decision(
        self,
        task: Task,
        check: ReviewCheck,
        judge: JudgeSeat | None = None,
        prompt: str | None = None,
    ) -> PanelLog:
        """The dispute's panel once its votes are in, drawing it and replacing the absent as
        the windows close (the judge's seat, with `judge`, commits and reveals as the
        others). Raises SettlementWaits until then."""
        panel = self.draw(task, check, judge, prompt)
        with_successors = self.replace_absent(task, check.check_id)
        panel = with_successors or panel
        self._judge_reveals(task, check, panel, judge)
        panel = current_panel(self.ledger, task.task_id, check.check_id) or panel
        now = self.ledger.clock()
        if not panel.decided(now):
            raise SettlementWaits(
                f"the panel on {check.check_id} of {task.task_id} is voting: commitments until "
                f"{panel.commit_ends.isoformat()}, votes until {panel.reveal_ends.isoformat()}"
            )
        return panel


def ask_panel(
    panels: Panels,
    task: Task,
    check: ReviewCheck,
    dispute: Mapping[str, Any],
    call: Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None],
) -> None:
    """Ask each seat's panelist of the drawn panel, through `call(did, request)` (its own
    process answers with its signed entry, or None when it cannot be reached), to commit,
    then, once reveals are taken, to reveal; a panelist that answers nothing, or what the
    service refuses, is left to the window (and its replacement). A commit request carries
    `dispute` (`dispute_request`: the parts, their inputs, the criterion and the requester's
    reason, as data). The judge's seat is the service's own (`Panels.decision`)."""
    ledger = panels.ledger
    for phase, admit in (("commit", panels.commit), ("reveal", panels.reveal)):
        panel = current_panel(ledger, task.task_id, check.check_id)
        if panel is None:
            return
        if phase == "commit":
            wanted = [s for s in panel.panel.seats if s not in panel.commitments]
        elif panel.revealing(ledger.clock()):
            wanted = [s for s in panel.commitments if s not in panel.reveals]
        else:
            return
        for did in wanted:
            if did == JUDGE_SEAT:
                continue
            request = {"phase": phase, "task_id": task.task_id, "check": check.check_id}
            if phase == "commit":
                request |= dict(dispute)
            answer = call(did, request)
            if answer is None:
                continue
            try:
                admit(Entry.from_bytes(canonical_json(dict(answer))))
            except (TaskError, AlreadyLoggedError, LedgerError):
                continue


def decide_by_panel(
    panels: Panels,
    task: Task,
    check: ReviewCheck,
    rejected: CheckResult,
    outputs: Mapping[str, Any],
    judge: JudgeSeat | None = None,
    call: Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None] | None = None,
    inputs: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> CheckResult:
    """The rejected review `check` as its panel decides it: passed when the panel finds for
    the team. The record keeps the rejection and the panel (the seed block, the seats, the
    replacements, the votes, who was coherent, the winner), which the audit replays. A
    `judge` takes one seat, asked the dispute's prompt over `outputs`; with `call`, the
    panelists are asked in their own processes (`ask_panel`, given the parts' `inputs`, and
    `extra` beside them: a contested python check's code and world, `contest_request`).
    Raises SettlementWaits while the panel is being drawn or is voting."""
    reason = str((rejected.record or {}).get("reason", ""))
    prompt = dispute_prompt(check, outputs, reason) if judge is not None else None
    panels.draw(task, check, judge, prompt)
    if call is not None:
        request = dispute_request(check, outputs, reason) | {"inputs": dict(inputs or {})}
        ask_panel(panels, task, check, request | dict(extra or {}), call)
    panel = panels.decision(task, check, judge, prompt)
    decided = panel.tally()
    record = dict(rejected.record or {})
    record["dispute"] = {"panel": panel.to_json(), "winner": decided.winner}
    answer = panels.answer_of(task, check.check_id, panel)
    if answer is not None:
        record["dispute"]["answer"] = answer
    return CheckResult(check.check_id, decided.winner == "team", panel_detail(panel), record)


def team_answer(
    events: Iterable[tuple[int, Event]],
    *,
    task: Task,
    team: Collection[str],
    check_id: str,
    rejection: int,
    fee: int,
    panel: PanelLog | None,
    bound: Mapping[str, Mapping[str, int]],
) -> dict[str, Any] | None:
    """Pure: the team's answer to the dispute over `check_id` from the task's verified
    `events`: the first `dispute.answered` for it signed by a member of `team`, logged after
    the rejection (index `rejection`) and before the panel's commit window closed, naming an
    account its signer had bound for payouts before it (`bound`: `bound_accounts`, so no
    member stakes another's money) and an amount of at least the dispute's `fee` (the
    requester's stake). None when the team did not answer. What the dispute's record keeps:
    the entry's index, its signer, the account and the amount."""
    for index, event in sorted(events, key=lambda pair: pair[0]):
        body = event.body
        if event.kind != DISPUTE_ANSWERED or body.get("check") != check_id:
            continue
        if event.subject != task.task_id or event.actor not in team or index <= rejection:
            continue
        if panel is not None and parse_time(event.at) >= panel.commit_ends:
            continue
        try:
            amount = int(str(body.get("amount")))
            account = str(body.get("account", ""))
        except ValueError:
            continue
        if amount < max(fee, 1) or not _is_address(account):
            continue
        if bound.get(event.actor, {}).get(account.lower(), index) >= index:
            continue
        return {"entry": index, "by": event.actor, "account": account, "amount": str(amount)}
    return None


def bound_accounts(events: Iterable[tuple[int, Event]]) -> dict[str, dict[str, int]]:
    """Pure: for each DID, the accounts (lowercase) its verified `payout.bound` entries name,
    each with the index of its first binding. A binding on any chain counts: signed by the
    DID's key and the account's, it shows the DID holds that account."""
    found: dict[str, dict[str, int]] = {}
    for index, event in sorted(events, key=lambda pair: pair[0]):
        if event.kind != PAYOUT_BOUND_KIND:
            continue
        try:
            did, address = verify_binding(event.body.get("binding") or {})
        except BindingError:
            continue
        if did == event.actor:
            found.setdefault(did, {}).setdefault(address.lower(), index)
    return found


def _is_address(text: str) -> bool:
    return (
        len(text) == 42
        and text.startswith("0x")
        and all(c in "0123456789abcdefABCDEF" for c in text[2:])
    )


def answers_by_account(answers: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Pure: the wei logged answers (`team_answer`'s) stake from each account (lowercase)."""
    found: dict[str, int] = {}
    for answer in answers:
        account = str(answer["account"]).lower()
        found[account] = found.get(account, 0) + int(str(answer["amount"]))
    return found


def panel_detail(panel: PanelLog) -> str:
    """The logged detail of a check a panel decided."""
    decided = panel.tally()
    side = "the team" if decided.winner == "team" else "the requester"
    return (
        f"rejected, disputed: the panel found for {side} ({len(decided.coherent)} of "
        f"{len(decided.votes)} votes, {len(panel.panel.seats)} seats)"
    )


def replay_panel(
    log: Sequence[tuple[int, Event]],
    *,
    operator: str,
    task: Task,
    check: ReviewCheck,
    rejected: CheckResult,
    delivered: Mapping[str, Any] | None,
    block_hash: Callable[[int], bytes | None],
    before: int,
    outputs: Mapping[str, Any] | None = None,
    open_value: Callable[[str], Any] | None = None,
) -> CheckResult:
    """The audit's replay of a dispute's panel from the log's verified events (`log`: index,
    event) up to the settlement (index `before`) and the chain's `block_hash`: the seed block
    is the one after the block the rejection names, its hash the chain's; the pool and the
    draw recompute to the logged `panel.drawn`; the commitments, replacements and reveals
    fold as the service took them; the judge's vote, where the auditor holds the outputs and
    the sealed exchange (`open_value`), is the one its answer to the dispute's prompt gives;
    the tally decides. Raises SettlementError naming the first thing that does not hold."""
    task_events = [
        (i, e) for i, e in log if e.subject == task.task_id and e.kind in PANEL_KINDS and i < before
    ]
    panel = panel_log(task_events, operator=operator, check_id=check.check_id)
    if panel is None:
        raise SettlementError(f"the dispute over {check.check_id} has no panel drawn")
    entry = (rejected.record or {}).get("entry")
    found = [e for i, e in log if i == entry]
    if not isinstance(entry, int) or not found:
        raise SettlementError(f"the rejection of {check.check_id} is not in the log")
    event = found[0]
    after = int(str(event.body.get("after_block", -1)))
    rejection = Rejection(entry, event_time(event), after)
    mined = block_hash(after + 1)
    logged_hash = str((panel.drawn.get("block") or {}).get("hash", ""))
    if mined is None or "0x" + mined.hex() != logged_hash.lower():
        raise SettlementError(
            f"the panel over {check.check_id} was seeded with {logged_hash}, not the hash of "
            f"block {after + 1} ({'not mined' if mined is None else '0x' + mined.hex()})"
        )
    try:
        expected = draw_body(
            [(i, e) for i, e in log if i < entry],
            operator=operator,
            task=task,
            check=check,
            rejection=rejection,
            block_hash=logged_hash,
            delivered=delivered,
            judge=panel.drawn.get("judge") is True,
        )
    except TaskError as exc:
        raise SettlementError(f"the panel over {check.check_id} cannot be drawn: {exc}") from exc
    if expected != dict(panel.drawn):
        raise SettlementError(
            f"the panel over {check.check_id} is not the one the rule draws: "
            f"{expected.get('seats')} (reserves {expected.get('reserves')}), not "
            f"{panel.drawn.get('seats')}"
        )
    _replay_judge(panel, check, rejected, outputs, open_value)
    decided = panel.tally()
    record = dict(rejected.record or {})
    record["dispute"] = {"panel": panel.to_json(), "winner": decided.winner}
    answer = team_answer(
        [(i, e) for i, e in log if e.subject == task.task_id and i < before],
        task=task,
        team=team_of(task, delivered),
        check_id=check.check_id,
        rejection=entry,
        fee=int(str(record.get("fee", "0"))),
        panel=panel,
        bound=bound_accounts((i, e) for i, e in log if e.kind == PAYOUT_BOUND_KIND and i < before),
    )
    if answer is not None:
        record["dispute"]["answer"] = answer
    return CheckResult(check.check_id, decided.winner == "team", panel_detail(panel), record)


def _replay_judge(
    panel: PanelLog,
    check: ReviewCheck,
    rejected: CheckResult,
    outputs: Mapping[str, Any] | None,
    open_value: Callable[[str], Any] | None,
) -> None:
    """The judge's revealed vote held to its sealed exchange, where the auditor holds it and
    the outputs (else to the log). Raises SettlementError."""
    commitment = panel.commitments.get(JUDGE_SEAT)
    revealed = panel.reveals.get(JUDGE_SEAT)
    if commitment is None or revealed is None or open_value is None or outputs is None:
        return
    if any(value is SEALED for value in outputs.values()):
        return
    exchange = open_value(commitment)
    if exchange is SEALED:
        return
    reason = str((rejected.record or {}).get("reason", ""))
    if not isinstance(exchange, Mapping) or exchange.get("prompt") != dispute_prompt(
        check, outputs, reason
    ):
        raise SettlementError(
            f"check {check.check_id}: the judge's logged prompt is not the one the dispute builds"
        )
    voted = judge_side(check, str(exchange.get("answer", "")))
    if revealed[0] != voted:
        raise SettlementError(
            f"check {check.check_id}: the judge's answer votes for the {voted}, its seat "
            f"revealed {revealed[0]}"
        )


# -- a contested inconclusive python check -----------------------------------------------------

CONTEST_CRITERION = (
    "The requester's python check {check_id} decides whether the parts it reads are right: "
    "`check(outputs)`, where `outputs` maps each part id to its output, returns True for work "
    "that meets the task. Run on the delivered parts it could not decide ({limits}: it drew "
    "entropy, gave two verdicts, or ran out of time), and the requester contests it. Decide "
    "what a correct run of this check would say of these parts. Its code:\n{code}"
)


def contest_check(check: PythonCheck) -> ReviewCheck:
    """Pure: the criterion a contested inconclusive python check is decided against, as a
    review check the panel path takes unchanged: the check's id, weight and reads, and its
    code (the requester's own words, as a review's criterion is) in the criterion."""
    limits = f"{check.cpu_seconds} s of CPU, {check.memory_mib} MiB"
    criterion = CONTEST_CRITERION.format(check_id=check.check_id, limits=limits, code=check.code)
    return ReviewCheck(check.check_id, check.weight, check.reads, criterion)


def contest_request(check: PythonCheck, task: Task) -> dict[str, Any]:
    """Pure: what a panelist is given beside the dispute to re-run the check in its own box:
    its code and limits, and the world it ran in (`check_world`: the task's posting time and
    the seed of the task and check)."""
    world = check_world(task.task_id, task.posted_at, check.check_id)
    return {
        "python": {
            "code": check.code,
            "cpu_seconds": check.cpu_seconds,
            "memory_mib": check.memory_mib,
            "at": world.at,
            "seed": world.seed,
        }
    }


def contested(check: PythonCheck, ran: CheckResult, decided: CheckResult) -> CheckResult:
    """Pure: the contested inconclusive python check's result from the panel's decision on
    `contest_check(check)`: passed when the panel found for the team, still marked
    inconclusive, its record the box's beside the rejection and the dispute."""
    record = {**dict(ran.record or {}), **dict(decided.record or {})}
    detail = "inconclusive, contested: " + decided.detail.removeprefix("rejected, disputed: ")
    return CheckResult(check.check_id, decided.passed, detail, record, inconclusive=True)


def decide_contest(
    panels: Panels,
    task: Task,
    check: PythonCheck,
    ran: CheckResult,
    rejected: CheckResult,
    outputs: Mapping[str, Any],
    judge: JudgeSeat | None = None,
    call: Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None] | None = None,
    inputs: Mapping[str, Any] | None = None,
) -> CheckResult:
    """The inconclusive python check `check` (`ran`, the box's verdict) the requester
    contested (`rejected`, its rejection), decided by a panel as a rejected review of
    `contest_check(check)` is (`decide_by_panel`); the panelists called are given the code and
    its world to re-run it in their own boxes. Raises SettlementWaits while the panel is
    being drawn or is voting."""
    decided = decide_by_panel(
        panels,
        task,
        contest_check(check),
        rejected,
        outputs,
        judge,
        call=call,
        inputs=inputs,
        extra=contest_request(check, task),
    )
    return contested(check, ran, decided)


def contestable(events: Iterable[tuple[int, Event]], *, operator: str, before: int) -> set[str]:
    """Pure: the python checks a task's requester could contest by index `before`: those the
    operator's first `checks.previewed` among the task's `events` named inconclusive."""
    for index, event in sorted(events, key=lambda pair: pair[0]):
        if index >= before:
            break
        if event.kind == CHECKS_PREVIEWED and event.actor == operator:
            named = event.body.get("inconclusive")
            return {str(c) for c in named} if isinstance(named, Mapping) else set()
    return set()


@dataclass(frozen=True)
class WithheldPreviews:
    """The python checks a settlement counted as passed while inconclusive that its
    requester was never told it could contest (`withheld_previews`)."""

    unpreviewed: tuple[str, ...]
    """Settled with no operator `checks.previewed` logged in the review window before the
    settlement: the operator never said, so the requester could contest nothing."""
    unnamed: tuple[str, ...]
    """The operator's preview was logged in time but did not name them: found decided then,
    inconclusive at settlement (in one fixed world; the check's own flakiness or a preview
    that withheld them, which the log cannot tell apart)."""


def withheld_previews(
    events: Iterable[tuple[int, Event]],
    *,
    operator: str,
    task: Task,
    checks: Mapping[str, CheckResult],
    settled: int,
) -> WithheldPreviews:
    """Pure: the python checks of `task` whose settlement (logged at index `settled`, its
    logged results `checks`) counts them as passed while inconclusive, though the operator's
    first `checks.previewed` among the task's `events`, logged before the settlement and by
    the review window's end, did not name them: their requester was denied its contest (the
    service takes a contest only of a check that preview names). A settlement the operator
    computed while the window was open always previews first, and a task looked at in its
    window is previewed, so an honest operator leaves none `unpreviewed`. Raises nothing."""
    python = {c.check_id for c in task.spec.requester_checks if isinstance(c, PythonCheck)}
    counted = sorted(
        check_id
        for check_id, result in checks.items()
        if check_id in python and result.inconclusive and result.passed
    )
    if not counted:
        return WithheldPreviews((), ())
    ends = task.review_ends
    for index, event in sorted(events, key=lambda pair: pair[0]):
        if index >= settled:
            break
        if event.kind != CHECKS_PREVIEWED or event.actor != operator:
            continue
        if ends is None or parse_time(event.at) > ends:
            break  # the first preview came after the window: too late to contest anything
        named = event.body.get("inconclusive")
        told = {str(c) for c in named} if isinstance(named, Mapping) else set()
        return WithheldPreviews((), tuple(c for c in counted if c not in told))
    return WithheldPreviews(tuple(counted), ())


def logged_in_window(
    events: Iterable[tuple[int, Event]], *, after: int, start: datetime, end: datetime
) -> bool:
    """Pure: whether the log took an entry after index `after` stamped from `start` to `end`
    (whoever signed it): the service was up and writing then. A service down for a task's
    whole review window could not preview it, which the audit tells apart from one that was
    up and did not (`withheld_previews`). Raises nothing; an entry whose time does not parse
    does not count."""
    for index, event in events:
        if index <= after:
            continue
        try:
            moment = parse_time(event.at)
        except (MalformedError, ValueError):
            continue
        if start <= moment <= end:
            return True
    return False


def replay_contest(
    log: Sequence[tuple[int, Event]],
    *,
    operator: str,
    task: Task,
    check: PythonCheck,
    ran: CheckResult,
    rejected: CheckResult,
    delivered: Mapping[str, Any] | None,
    block_hash: Callable[[int], bytes | None],
    before: int,
    outputs: Mapping[str, Any] | None = None,
    open_value: Callable[[str], Any] | None = None,
) -> CheckResult:
    """The audit's replay of a contested inconclusive python check's panel (`ran`: its
    inconclusive verdict, `rejected`: the requester's contest): `replay_panel` over
    `contest_check(check)`. Raises SettlementError naming the first thing that does not
    hold, a contest of a check the operator's preview had not named inconclusive first."""
    entry = (rejected.record or {}).get("entry")
    task_events = [(i, e) for i, e in log if e.subject == task.task_id]
    if not isinstance(entry, int) or check.check_id not in contestable(
        task_events, operator=operator, before=entry
    ):
        raise SettlementError(
            f"python check {check.check_id} was contested, but no `checks.previewed` before "
            "the contest named it inconclusive: the service takes no such contest"
        )
    decided = replay_panel(
        log,
        operator=operator,
        task=task,
        check=contest_check(check),
        rejected=rejected,
        delivered=delivered,
        block_hash=block_hash,
        before=before,
        outputs=outputs,
        open_value=open_value,
    )
    return contested(check, ran, decided)
