"""`accord audit TASK`: re-check a finished collaboration from the log and the chain alone.

    (1) every entry the task touched is signed by its actor, and each actor is the one the
        event kind requires (requester, operator, winner, bidder, agent); the step counts the
        agents' entries signed by a key the operator holds (custody `hosted`, declared in
        `agent.registered`), and `facts.custody` names each actor's (`hosted` or `self` as
        its `agent.registered` declares; `unregistered` for one the log holds no registration
        of, such as a requester that signed its own posting)
    (2) each of those entries is included in a checkpoint anchored on chain (RFC 9162
        inclusion proofs against the on-chain roots), and successive anchors are consistent;
        for a task still in progress, entries the chain does not anchor yet are PENDING, and
        so are steps (4) to (7) until the task reaches the stage they check
    (3) every bidder held valid, unrevoked credentials for every required capability when it
        bid, and each of those credentials' exams re-grades to its logged score
    (4) the auction replays to the same winner and price
    (5) every conversation of the task replays through the state machine (a no-show only
        `NO_SHOW_AFTER` after its assignment, by the entries' times, and never for an
        assignment its member logged it answered), each part is one
        producer's own signed report (a sub-team's work exactly its conclusion), and the
        delivery is the top conversation's conclusion with the logged plan and assembly
    (6) the settlement recomputes: every check re-runs to its logged result (judge answers,
        reviews and disputes held to their logged, signed records), then the same share paid,
        v(S) over the parts, the parts' Shapley values, each producer's sum of them and wei
        for each payee, paid to the address each payee bound to
        its DID, and the same dispute fees; the track record `task.settled` logs is the
        settlement's, and each credential revoked for it was due (`accord.market.reputation`);
        an inconclusive python check counted as passed must have been named by the operator's
        `checks.previewed` in the review window (else its requester was denied its contest:
        FAIL with no preview in time, INCOMPLETE when a preview named others only)
    (7) the chain's escrow events equal the deposit, the settlement and the refunds, and funds
        are conserved (a task in progress: one deposit of the budget, and nothing paid out
        that the log holds no settlement for)

Nothing here reads the operator's own tables (agents, credentials, journals): only ledger
entries, signed checkpoints, and the chain. Steps stop at the first failure, which names the
entry (log index) it failed on where there is one.

The log holds commitments to the parts' outputs, never the outputs (`accord.ledger.sealing`). An
auditor who holds the sealed outputs (the operator's own blob store, or a folder the requester
hands over: `accord task outputs`, then `accord audit TASK --outputs DIR`) re-runs every check
on them; one who does not re-runs the plan and assembly checks against the commitments and
holds the checks that read outputs to their operator-signed verdicts, and step (6) and the
report's `outputs` fact say which it did.

Python checks and python exam answers re-run in the box (`accord.identity.challenges.sandbox`).
Where the box cannot be made, they do not run unboxed: the step holds their logged verdicts as
given, checks the rest, and reports `unchecked` naming what it could not re-run and why. A report
with an unchecked step and no failure is INCOMPLETE, never PASS.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from accord.coordinator.conversation import (
    CONVERSATION_MESSAGE,
    CONVERSATION_OPENED,
    WORK_ANSWERED,
    ConversationRecord,
    check_task_reports,
    conversation_from_events,
)
from accord.coordinator.errors import CoordinatorError, IllegalMove
from accord.coordinator.service import assemble
from accord.identity.challenges.registry import get_capability
from accord.identity.credentials import REVOCATION_EVENT_KIND, VerifiedCredential, verify_credential
from accord.identity.errors import (
    BindingError,
    ExamError,
    IdentityError,
    SandboxUnavailable,
    SkillError,
)
from accord.identity.exams import ANSWERED, COMMITTED, GRADED, regrade_from_events
from accord.identity.manifests import parse_manifest
from accord.identity.onboarding import ISSUED_EVENT_KIND, PAYOUT_BOUND_KIND
from accord.identity.payout import verify_binding
from accord.identity.registration import HOSTED, REGISTERED_KIND, Custody, custody_of
from accord.identity.skill_attempts import (
    ATTEMPT_COMMITTED,
    ATTEMPT_GRADED,
    ATTEMPT_KINDS,
    ATTEMPT_PREFIX,
    replay_attempts,
)
from accord.identity.skill_capability import remember_skill
from accord.identity.skill_registry import (
    SKILL_DECLARED_KIND,
    replay_declarations,
    shipped_manifests,
)
from accord.ledger import merkle
from accord.ledger.chain import AnchorChain
from accord.ledger.checkpoint import SignedCheckpoint
from accord.ledger.errors import (
    AccordError,
    ChainError,
    LedgerError,
    MalformedError,
    ProofError,
    SignatureError,
)
from accord.ledger.events import Entry, Event, parse_time
from accord.ledger.store import LogStore
from accord.ledger.verify import StepResult, StepStatus
from accord.market import sealed
from accord.market.award import BidBook, replay_award
from accord.market.check_io import LogReviews, check_world, run_python_check
from accord.market.checks import CheckResult, RecheckEnvironment, Valuation
from accord.market.disputes import (
    answers_by_account,
    logged_in_window,
    replay_contest,
    replay_panel,
    withheld_previews,
)
from accord.market.errors import MarketError, ReputationError, SettlementError
from accord.market.escrow import EscrowChain, EscrowEvent
from accord.market.reputation import (
    SettledWork,
    check_revocation,
    reputations_from_events,
    scored_parts,
    settled_work,
    track_records_from_events,
)
from accord.market.settlement import (
    SETTLEMENT_COMPUTED,
    SETTLEMENT_RELEASED,
    Settlement,
    opener,
    paid_out,
    recompute_settlement,
)
from accord.market.states import FINAL_STATES
from accord.market.tasks import (
    BID_COMMITTED,
    BID_REVEALED,
    ESCROW_OPENED,
    ESCROW_REFUNDED,
    REVIEW_GIVEN,
    TASK_AWARDED,
    TASK_CLOSED,
    TASK_DELIVERED,
    TASK_EXPIRED,
    TASK_KINDS,
    TASK_POSTED,
    TASK_SETTLED,
    TASK_STARTED,
    Task,
    TaskEvent,
    replay,
)
from accord.market.work import PythonCheck, ReviewCheck

STEP_TITLES = {
    1: "every entry's signature and actor",
    2: "inclusion in anchored checkpoints, consistency of the anchors",
    3: "bidders held valid credentials; their exams re-grade",
    4: "the auction replays to the same winner and price",
    5: "the conversations replay through the state machine",
    6: "the settlement recomputes to the same wei",
    7: "the chain's escrow events match; funds are conserved",
}
MAX_EVENTS = 1_000_000
UNREGISTERED = "unregistered"
"""The custody `facts.custody` names for a signer the log holds no `agent.registered` of (a
requester that signed its own posting, say): it signed with its own key, and the log shows no
key of it handed to the operator. Never counted as hosted."""
_OPERATOR_KINDS = {
    ESCROW_OPENED,
    BID_COMMITTED,
    BID_REVEALED,
    TASK_AWARDED,
    TASK_EXPIRED,
    ESCROW_REFUNDED,
    TASK_SETTLED,
    TASK_CLOSED,
    SETTLEMENT_COMPUTED,
    COMMITTED,
    GRADED,
    ISSUED_EVENT_KIND,
    REVOCATION_EVENT_KIND,
}


class AuditFailure(AccordError):
    """One checklist step does not hold; `entry` is the log index it failed on, if any."""

    def __init__(self, reason: str, entry: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.entry = entry


class AuditPending(AccordError):
    """A step holds for everything that can be checked yet, and the rest is not due: entries
    of a task still in progress that the chain does not anchor yet (the service anchors its
    tail within ACCORD_ANCHOR_INTERVAL). `reason` says what waits."""

    def __init__(self, reason: str, entry: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.entry = entry


class AuditUnchecked(AccordError):
    """A step held as far as it could be checked here, but part of it could not be re-run
    (the box for strangers' code cannot be made); `reason` names that part and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class AuditReport:
    task_id: str
    steps: list[StepResult] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.status == "pass" for s in self.steps)

    @property
    def first_failure(self) -> StepResult | None:
        return next((s for s in self.steps if s.status == "fail"), None)

    @property
    def verdict(self) -> str:
        """PASS when every step passed; PENDING when none failed but a task still in progress
        has entries the chain does not anchor yet (see `AuditPending`); INCOMPLETE when none
        failed but one could not be re-run here (see `AuditUnchecked`); FAIL otherwise."""
        if self.ok:
            return "PASS"
        if self.first_failure is None:
            if any(s.status == "pending" for s in self.steps):
                return "PENDING"
            if any(s.status == "unchecked" for s in self.steps):
                return "INCOMPLETE"
        return "FAIL"

    def to_json(self) -> dict[str, Any]:
        failure = self.first_failure
        return {
            "task_id": self.task_id,
            "verdict": self.verdict,
            "failed_step": None if failure is None else failure.number,
            "failed_entry": None if failure is None else failure.entry,
            "steps": [step.to_json() for step in self.steps],
            "facts": self.facts,
        }


@dataclass
class _Scope:
    """What the task touched, read from the log once."""

    task: Task
    task_events: list[tuple[int, Event]]
    conversations: list[ConversationRecord]
    touched: dict[int, Entry]
    operator: str
    bidders: list[tuple[int, sealed.Commitment]]
    log: Mapping[int, Entry] = field(default_factory=dict)
    """Every entry of the log, verified (`_signed_log`): what the replayers fold."""
    by_subject: Mapping[str, Sequence[int]] = field(default_factory=dict)
    """The indices of `log`'s entries by subject, in log order."""
    custody: dict[str, Custody] = field(default_factory=dict)
    """Who holds each registered agent's key, as its `agent.registered` declares."""
    held_to_log: list[str] | None = None
    """The checks step (6) held to their logged verdicts for want of the sealed outputs."""


def audit_task(
    store: LogStore,
    task_id: str,
    *,
    anchors: AnchorChain,
    escrow: EscrowChain,
    operator_did: str | None = None,
    outputs: Callable[[str], bytes | None] | None = None,
) -> AuditReport:
    """Run the checklist. Never raises for what it finds; the report names it.

    `operator_did` defaults to the signer of the log's checkpoints. `outputs(commitment)`
    gives the sealed bytes of an output the log commits to, or None where the auditor does not
    hold them (no `outputs`: it holds none).
    """
    report = AuditReport(task_id)
    checks: list[tuple[int, Callable[[_Scope], str]]] = [
        (1, lambda s: _signatures(s)),
        (2, lambda s: _anchored(store, s, anchors)),
        (3, lambda s: _credentials(s)),
        (4, lambda s: _auction(s)),
        (5, lambda s: _conversations(s)),
        (6, lambda s: _settlement(s, escrow, outputs)),
        (7, lambda s: _escrow_events(s, escrow)),
    ]
    in_progress: dict[int, Callable[[_Scope], str]] = {7: lambda s: _escrow_so_far(s, escrow)}
    try:
        scope = _scope(store, task_id, operator_did)
    except AuditFailure as exc:
        report.steps.append(StepResult(1, STEP_TITLES[1], "fail", exc.reason, exc.entry))
        for number, _ in checks[1:]:
            report.steps.append(StepResult(number, STEP_TITLES[number], "not-run", "-"))
        return report
    except AuditPending as exc:  # a task in progress on a log with no checkpoint yet
        status: StepStatus = "fail"
        try:
            anchored = anchors.latest_size(store.log_id)
        except ChainError as chain_exc:
            detail = f"cannot read the anchors on chain: {chain_exc}"
        else:
            status = "pending" if anchored == 0 else "fail"
            detail = (
                exc.reason
                if anchored == 0
                else f"the log has no signed checkpoint, but the chain anchors {anchored} entries"
            )
        report.steps.append(StepResult(1, STEP_TITLES[1], status, detail))
        for number, _ in checks[1:]:
            report.steps.append(StepResult(number, STEP_TITLES[number], "not-run", "-"))
        return report
    report.facts = _facts(scope)
    report.facts["on_chain"] = chain_facts(store.log_id, scope, anchors, escrow)
    failed = False
    for number, check in checks:
        title = STEP_TITLES[number]
        if failed:
            report.steps.append(StepResult(number, title, "not-run", "an earlier step failed"))
            continue
        try:
            _logged_once(scope, number)
            waits = _not_reached(scope.task, number)
            if waits is not None:
                so_far = in_progress.get(number)
                detail = waits if so_far is None else f"{waits}; {so_far(scope)}"
                report.steps.append(StepResult(number, title, "pending", detail))
                continue
            report.steps.append(StepResult(number, title, "pass", check(scope)))
        except AuditUnchecked as exc:
            report.steps.append(StepResult(number, title, "unchecked", exc.reason))
        except AuditPending as exc:
            report.steps.append(StepResult(number, title, "pending", exc.reason, exc.entry))
        except AuditFailure as exc:
            failed = True
            report.steps.append(StepResult(number, title, "fail", exc.reason, exc.entry))
        except (LedgerError, IdentityError, MarketError, CoordinatorError) as exc:
            failed = True
            report.steps.append(StepResult(number, title, "fail", str(exc)))
    if scope.held_to_log is not None:
        report.facts["outputs"] = {
            "opened": not scope.held_to_log,
            "checks_held_to_log": scope.held_to_log,
        }
    return report


# -- gathering -------------------------------------------------------------------------------


def _signed_log(store: LogStore) -> dict[int, Entry]:
    """Every stored entry, parsed from its signed bytes and verified, once, by log index.

    The indexed columns (actor, seq, kind, subject, time) are the operator's to edit, so each
    row's columns are checked against the entry they copy; the rest of the audit reads the
    parsed entries (and the stores' queries, whose columns this has just checked).
    Raises AuditFailure naming the first entry that is missing (a gap in the indices, or
    fewer entries than the log's head counts), does not parse, does not verify, or whose
    columns differ from what its actor signed. A log cut short with its head lowered to
    match is step 2's to find: it no longer holds the anchored tree.
    """
    log: dict[int, Entry] = {}
    size = store.size()
    for stored in store.entries():
        if stored.index != len(log):
            raise AuditFailure(
                f"entry {len(log)} is missing from the log (the next one stored is {stored.index})",
                len(log),
            )
        try:
            entry = Entry.from_bytes(stored.data)
            entry.verify()
        except (MalformedError, SignatureError) as exc:
            raise AuditFailure(f"entry {stored.index}: {exc}", stored.index) from exc
        if stored.columns is not None:
            event = entry.event
            signed = (event.actor, event.seq, event.kind, event.subject, event.at)
            for name, column, value in zip(_COLUMNS, stored.columns, signed, strict=True):
                if column != value:
                    raise AuditFailure(
                        f"the stored {name} of entry {stored.index} is {column!r}, but its "
                        f"actor signed {value!r}",
                        stored.index,
                    )
        log[stored.index] = entry
    if len(log) < size:
        raise AuditFailure(
            f"entry {len(log)} is missing from the log (its head counts {size})", len(log)
        )
    return log


_COLUMNS = ("actor", "seq", "kind", "subject", "time")
NO_SUCH_TASK = "the log holds no task"
"""How step 1 begins when the task is not in the signed log (the CLI makes that exit 2)."""


def _scope(store: LogStore, task_id: str, operator_did: str | None) -> _Scope:
    """What the task touched, from the signed entries alone (see `_signed_log`).

    Raises AuditFailure (reported at step 1) when an entry or its columns do not hold, the
    log has no such task, or the task's events or bids do not parse; AuditPending when the
    task is in progress and no checkpoint names the operator yet.
    """
    log = _signed_log(store)
    by_subject: dict[str, list[int]] = {}
    by_kind: dict[str, list[int]] = {}
    for index, entry in log.items():
        by_subject.setdefault(entry.event.subject, []).append(index)
        by_kind.setdefault(entry.event.kind, []).append(index)
    touched: dict[int, Entry] = {}
    _remember_skills(log, by_kind.get(SKILL_DECLARED_KIND, []))

    def take(indices: Sequence[int]) -> list[tuple[int, Event]]:
        for index in indices:
            touched[index] = log[index]
        return [(index, log[index].event) for index in indices]

    events = take(by_subject.get(task_id, [])[:MAX_EVENTS])
    lifecycle = [
        TaskEvent(i, e.kind, e.actor, parse_time(e.at), e.body)
        for i, e in events
        if e.kind in TASK_KINDS
    ]
    if not lifecycle:
        raise AuditFailure(f"{NO_SUCH_TASK} {task_id!r}")
    try:
        task = replay(lifecycle)
    except MarketError as exc:
        raise AuditFailure(f"the task's events do not replay: {exc}") from exc
    in_progress = task.state not in FINAL_STATES
    if operator_did is None and in_progress and store.latest_checkpoint() is None:
        raise AuditPending(
            f"the log has no signed checkpoint yet to name its operator (the task is "
            f"{task.state}; {_ANCHORED_SOON}, signing a checkpoint)"
        )
    operator = operator_did or _checkpoint_signer(store)
    book = BidBook()
    for index, event in events:
        if event.kind in (BID_COMMITTED, BID_REVEALED):
            try:
                book.add(index, event)
            except (MarketError, KeyError, TypeError) as exc:
                raise AuditFailure(f"a logged bid does not parse: {exc}", index) from exc
    bidders = [(c.index, c.commitment) for c in book.commitments.values()]
    conversations: list[ConversationRecord] = []
    conv_ids = [
        log[i].event.subject
        for i in by_kind.get(CONVERSATION_OPENED, [])
        if log[i].event.body.get("task") == task_id
    ]
    for conv_id in conv_ids:
        take(
            [
                i
                for i in by_subject.get(conv_id, [])
                if log[i].event.kind in (CONVERSATION_OPENED, CONVERSATION_MESSAGE, WORK_ANSWERED)
            ]
        )
        try:
            conv_events = [(i, log[i].event) for i in by_subject.get(conv_id, [])]
            conversations.append(conversation_from_events(conv_id, conv_events))
        except CoordinatorError:
            conversations.append(_unreplayed(conv_id))
    agents = {c.bidder for _, c in bidders} | {
        m for record in conversations for m in record.conversation.members
    }
    for _, event in events:  # the payees, whose payout bindings the settlement is held to
        if event.kind == SETTLEMENT_COMPUTED and isinstance(event.body.get("payouts"), Mapping):
            agents |= {str(p) for p in event.body["payouts"]}
            agents |= {str(p) for p in event.body.get("panel_payouts") or {}}  # the panelists
    for kind in (ANSWERED, PAYOUT_BOUND_KIND):
        take([i for i in by_kind.get(kind, []) if log[i].event.actor in agents])
    if agents:
        take(by_kind.get(ISSUED_EVENT_KIND, []))
    take(by_kind.get(REVOCATION_EVENT_KIND, []))
    custody = custody_of(log[i].event for i in by_kind.get(REGISTERED_KIND, []))
    return _Scope(task, events, conversations, touched, operator, bidders, log, by_subject, custody)


def _remember_skills(log: Mapping[int, Entry], declared: Sequence[int]) -> None:
    """Make the shipped skills and every skill this log declares findable by id, so a task
    whose parts name them replays (a declaration that does not parse is step 3's to name)."""
    for shipped in shipped_manifests():
        remember_skill(shipped)
    for index in declared:
        try:
            remember_skill(parse_manifest(log[index].event.body.get("manifest")))
        except SkillError:
            continue


def _events_of(scope: _Scope, subject: str | None = None) -> list[tuple[int, Event]]:
    """The verified events of the log (of one subject, when given), with their indices, in
    log order: what the pure replayers fold."""
    if subject is None:
        return [(index, entry.event) for index, entry in sorted(scope.log.items())]
    return [(index, scope.log[index].event) for index in scope.by_subject.get(subject, [])]


def _unreplayed(conv_id: str) -> ConversationRecord:
    """A placeholder that makes step 5 fail (the replay error is raised there again)."""
    from accord.coordinator.conversation import open_conversation

    conversation = open_conversation(conv_id, "?", "?", ("?",))
    return ConversationRecord(conversation, (), -1, "unreplayable")


def _checkpoint_signer(store: LogStore) -> str:
    checkpoints = store.checkpoints()
    if not checkpoints:
        raise AuditFailure("the log has no signed checkpoint: nothing names the operator")
    try:
        return SignedCheckpoint.from_bytes(checkpoints[-1].data).signer_did
    except MalformedError as exc:
        raise AuditFailure(f"the latest checkpoint does not parse: {exc}") from exc


def _facts(scope: _Scope) -> dict[str, Any]:
    task = scope.task
    delivered = next((e.body for _, e in scope.task_events if e.kind == TASK_DELIVERED), None)
    computed = next((e.body for _, e in scope.task_events if e.kind == SETTLEMENT_COMPUTED), None)
    document = delivered.get("document") if isinstance(delivered, Mapping) else None
    return {
        "deliverable": None
        if not isinstance(document, Mapping) or delivered is None
        else {
            "sha256": delivered.get("sha256"),
            "leader": document.get("leader"),
            "plan": document.get("plan"),
            "parts": document.get("parts", []),
        },
        "checks": [] if computed is None else list(computed.get("checks", [])),
        "title": task.spec.title,
        "requester": task.requester,
        "state": task.state,
        "winner": task.winner,
        "price": None if task.price is None else str(task.price),
        "budget": str(task.spec.budget),
        "operator": scope.operator,
        "conversations": [r.to_json() for r in scope.conversations],
        "timeline": [
            {
                "conv_id": r.conversation.conv_id,
                "depth": r.conversation.depth,
                "turn": m.turn,
                "index": m.index,
                "kind": type(m.message).__name__,
                "speaker": m.message.speaker,
            }
            for r in scope.conversations
            for m in r.messages
        ],
        "bids": [
            {"bidder": c.bidder, "index": i, "commitment": c.digest.hex()} for i, c in scope.bidders
        ],
        "custody": {
            actor: scope.custody.get(actor, UNREGISTERED)
            for actor in sorted({e.event.actor for e in scope.touched.values()})
            if actor != scope.operator
        },
    }


def chain_facts(
    log_id: str, scope: _Scope, anchors: AnchorChain, escrow: EscrowChain
) -> dict[str, Any]:
    """What an auditor can look up on chain by hand: every payout (agent, address, wei, and
    whether the escrow holds it for want of a payout account: its address is then the
    escrow's) the signed settlement names, the escrow and registry addresses, the escrow's
    transactions for the task (opened, settled, released, refunded) and the anchors whose
    trees hold its entries, each with its transaction hash. Never raises: a chain that cannot
    be read is named in `error`.
    """
    computed = next((e.body for _, e in scope.task_events if e.kind == SETTLEMENT_COMPUTED), None)
    payees = computed.get("payees", {}) if isinstance(computed, Mapping) else {}
    payouts = computed.get("payouts", {}) if isinstance(computed, Mapping) else {}
    held = (computed.get("held") or {}) if isinstance(computed, Mapping) else {}
    holder = computed.get("holder") if isinstance(computed, Mapping) else None
    facts: dict[str, Any] = {
        "payouts": [
            {
                "agent": agent,
                "address": holder if agent in held else payees.get(agent),
                "wei": str(wei),
                "held": agent in held,
            }
            for agent, wei in sorted(payouts.items())
        ],
        "escrow": None,
        "registry": None,
        "error": None,
    }
    try:
        facts["escrow"] = {
            "address": escrow.escrow_address(),
            "chain_id": escrow.chain_id(),
            "transactions": [
                {"event": e.name, "block_number": e.block_number, "tx_hash": "0x" + e.tx_hash.hex()}
                for e in escrow.events(scope.task.task_id)
                if e.name in ("Opened", "Settled", "Released", "Refunded")
            ],
        }
        on_chain = sorted(anchors.anchors(log_id), key=lambda a: a.size)
        covering = {
            next((a for a in on_chain if a.size > index), None) for index in scope.touched
        } - {None}
        facts["registry"] = {
            "address": anchors.registry_address(),
            "chain_id": anchors.chain_id(),
            "anchors": [
                {
                    "size": a.size,
                    "root": a.root.hex(),
                    "block_number": a.block_number,
                    "tx_hash": "0x" + a.tx_hash.hex(),
                }
                for a in sorted((a for a in covering if a is not None), key=lambda a: a.size)
            ],
        }
    except ChainError as exc:
        facts["error"] = f"cannot read the chain: {exc}"
    return facts


# -- every step: once-per-task events logged once ---------------------------------------------

#: The step that checks each once-per-task event kind, and so reports its repeats.
_ONCE_STEP = {
    TASK_AWARDED: 4,
    TASK_EXPIRED: 4,
    TASK_STARTED: 5,
    TASK_DELIVERED: 5,
    SETTLEMENT_COMPUTED: 6,
    TASK_SETTLED: 6,
    ESCROW_OPENED: 7,
    ESCROW_REFUNDED: 7,
}


def _logged_once(scope: _Scope, step: int) -> None:
    """Raises AuditFailure naming the first repeat of an event kind `step` checks that the
    task may log only once (a log written before the store refused repeats)."""
    first: dict[str, int] = {}
    for index, event in scope.task_events:
        if event.kind not in _ONCE_STEP:
            continue
        if event.kind in first and _ONCE_STEP[event.kind] == step:
            raise AuditFailure(
                f"{event.kind} is logged more than once for the task "
                f"(first at entry {first[event.kind]})",
                index,
            )
        first.setdefault(event.kind, index)


# -- (1) signatures and actors ---------------------------------------------------------------


def _signatures(scope: _Scope) -> str:
    task = scope.task
    for index in sorted(scope.touched):
        entry = scope.touched[index]
        try:
            entry.verify()
        except (SignatureError, MalformedError) as exc:
            raise AuditFailure(str(exc), index) from exc
        event = entry.event
        required = _required_actor(event, task, scope.operator)
        if required is not None and event.actor != required:
            raise AuditFailure(
                f"{event.kind} must be signed by {required}, not {event.actor}", index
            )
    actors = [e.event.actor for e in scope.touched.values() if e.event.actor != scope.operator]
    hosted = sum(1 for actor in actors if scope.custody.get(actor) == HOSTED)
    return (
        f"{len(scope.touched)} entries signed by the actors their kinds require; {hosted} of "
        f"the {len(actors)} by agents were signed by a key the operator holds (custody "
        "hosted): they prove only that the operator signed"
    )


def _required_actor(event: Event, task: Task, operator: str) -> str | None:
    if event.kind in (TASK_POSTED, REVIEW_GIVEN):
        return task.requester
    if event.kind in (TASK_STARTED, TASK_DELIVERED):
        return task.winner
    if event.kind in _OPERATOR_KINDS:
        return operator
    return None  # answers, bindings, registrations, messages: checked where they are used


# -- (2) anchored inclusion ------------------------------------------------------------------


# A task in one of the FINAL_STATES (accord.market.states) is over: every entry it touched must
# be anchored (step 2 fails otherwise) and every step checks it; before, entries not anchored
# yet are pending, and so are the steps about a stage it has not reached (`_not_reached`).
_STAGES = {
    4: ("awarded", frozenset({"awarded", "running", "delivered"})),
    5: ("running", frozenset({"running", "delivered"})),
    6: ("settled", frozenset[str]()),
    7: ("settled", frozenset[str]()),
}
"""The steps about a later stage of a task: (the stage, the states in progress that reached
it)."""


def _not_reached(task: Task, step: int) -> str | None:
    """Why step `step` has nothing to check yet, for a task still in progress that has not
    reached the stage it checks (None: it has, or the task is over)."""
    if task.state in FINAL_STATES or step not in _STAGES:
        return None
    stage, reached = _STAGES[step]
    if task.state in reached:
        return None
    return f"the task is {task.state}: this step checks it once it is {stage}"


_ANCHORED_SOON = "the service anchors its tail within ACCORD_ANCHOR_INTERVAL"


def _escrow_so_far(scope: _Scope, escrow: EscrowChain) -> str:
    """Step 7 for a task in progress: the escrow may hold its deposit (one, of the budget),
    but nothing may be paid out of it that the log does not account for. Raises AuditFailure
    when the chain paid out a settlement the log holds no `settlement.computed` for, or holds
    another deposit."""
    task = scope.task
    try:
        events = escrow.events(task.task_id)
    except ChainError as exc:
        raise AuditFailure(f"cannot read the escrow events: {exc}") from exc
    opened = [e for e in events if e.name == "Opened"]
    if len(opened) > 1 or any(e.amount != task.spec.budget for e in opened):
        raise AuditFailure(f"the chain holds {len(opened)} deposits, not one of the budget")
    computed = any(e.kind == SETTLEMENT_COMPUTED for _, e in scope.task_events)
    if any(e.name == "Settled" for e in events) and not computed:
        raise AuditFailure(
            f"the chain paid out the escrow, but the log holds no settlement of the task "
            f"(it is {task.state})"
        )
    names = sorted({e.name for e in events if e.name in ("Settled", "Refunded")})
    paid = f"; the chain shows {' and '.join(names)}" if names else "; nothing paid out yet"
    return f"{len(opened)} deposit{'s' * (len(opened) != 1)} of the budget{paid}"


def _anchored(store: LogStore, scope: _Scope, chain: AnchorChain) -> str:
    """Raises AuditFailure for what does not hold, AuditPending when it all holds but a task
    still in progress has entries the chain does not anchor yet."""
    in_progress = scope.task.state not in FINAL_STATES
    try:
        anchors = sorted(chain.anchors(store.log_id), key=lambda a: a.size)
    except ChainError as exc:
        raise AuditFailure(f"cannot read the anchors on chain: {exc}") from exc
    last = max(scope.touched)
    if not anchors:
        if in_progress:
            raise AuditPending(
                f"nothing of this log is anchored on chain yet (the task is {scope.task.state}; "
                f"{_ANCHORED_SOON})",
                0,
            )
        raise AuditFailure("nothing of this log is anchored on chain")
    unanchored_from = anchors[-1].size if anchors[-1].size <= last else None
    if unanchored_from is not None and not in_progress:
        raise AuditFailure(
            f"entries from {unanchored_from} on are not anchored (the tail up to {last}); "
            "`accord ledger anchor` anchors them",
            unanchored_from,
        )
    stored = list(store.entries(0, anchors[-1].size))
    if len(stored) != anchors[-1].size:
        missing = next((i for i, e in enumerate(stored) if e.index != i), len(stored))
        raise AuditFailure(
            f"the log holds {len(stored)} entries, the chain anchors more: "
            f"entry {missing} is missing",
            missing,
        )
    leaves = [merkle.leaf_hash(e.data) for e in stored]
    roots: dict[int, bytes] = {}
    for anchor in anchors:
        roots[anchor.size] = merkle.root(leaves[: anchor.size])
        if roots[anchor.size] != anchor.root:
            raise AuditFailure(
                f"the log's root at size {anchor.size} is not the one anchored in block "
                f"{anchor.block_number}",
                anchor.size - 1,
            )
    for older, newer in itertools.pairwise(anchors):
        proof = merkle.consistency_proof(leaves[: newer.size], older.size)
        merkle.verify_consistency(older.size, newer.size, older.root, newer.root, proof)
    proven = [index for index in sorted(scope.touched) if index < anchors[-1].size]
    for index in proven:
        covering = next(a for a in anchors if a.size > index)
        proof = merkle.inclusion_proof(leaves[: covering.size], index)
        try:
            merkle.verify_inclusion(leaves[index], index, covering.size, proof, covering.root)
        except ProofError as exc:
            raise AuditFailure(f"not included in the anchored tree: {exc}", index) from exc
    summary = (
        f"{len(proven)} entries proven in anchored trees; "
        f"{len(anchors)} anchors consistent (latest size {anchors[-1].size})"
    )
    if unanchored_from is not None:
        waiting = len(scope.touched) - len(proven)
        raise AuditPending(
            f"{summary}; {waiting} entries from {unanchored_from} on (up to {last}) are not "
            f"anchored yet (the task is {scope.task.state}; {_ANCHORED_SOON})",
            unanchored_from,
        )
    return summary


# -- (3) credentials and exams ---------------------------------------------------------------


def _credentials(scope: _Scope) -> str:
    issued: list[tuple[int, Mapping[str, Any]]] = []
    revoked: dict[str, int] = {}
    for index in sorted(scope.touched):
        event = scope.touched[index].event
        if event.kind == ISSUED_EVENT_KIND:
            issued.append((index, event.body))
        elif event.kind == REVOCATION_EVENT_KIND:
            revoked.setdefault(str(event.body.get("credentialId")), index)
    regraded: set[str] = set()
    unboxed: dict[str, str] = {}
    attempts: set[str] = set()
    for bid_index, commitment in scope.bidders:
        bid_time = parse_time(scope.touched[bid_index].event.at)
        for capability in scope.task.spec.capabilities:
            credential = _held_at(
                issued, revoked, commitment.bidder, capability, bid_index, bid_time, scope.operator
            )
            if credential is None:
                raise AuditFailure(
                    f"{commitment.bidder} held no valid, unrevoked {capability} credential "
                    "when it bid",
                    bid_index,
                )
            exam_id = str(credential.get("examId"))
            if exam_id.startswith(ATTEMPT_PREFIX):  # a declared skill's: re-graded below
                _attempt_passed(scope, exam_id, commitment.bidder, bid_index)
                attempts.add(exam_id)
                continue
            if exam_id not in regraded and exam_id not in unboxed:
                try:
                    # raises unless it matches
                    regrade_from_events(exam_id, _events_of(scope, exam_id), scope.operator)
                except SandboxUnavailable as exc:
                    unboxed[exam_id] = str(exc)
                    continue
                except (ExamError, LedgerError) as exc:
                    raise AuditFailure(
                        f"exam {exam_id} does not re-grade: {exc}", bid_index
                    ) from exc
                regraded.add(exam_id)
    bidders, exams = len(scope.bidders), len(regraded)
    declared, attempts_regraded = _skill_declarations(scope, attempts)
    summary = (
        f"{bidders} bidder{'s' * (bidders != 1)} credentialed when they bid; "
        f"{exams} exam{'s' * (exams != 1)} re-grade{'s' * (exams == 1)}; "
        f"{declared} skill declaration{'s' * (declared != 1)} replay{'s' * (declared == 1)}"
    )
    if attempts_regraded is None:
        raise AuditUnchecked(
            f"{summary}; the declared skills' attempts not re-graded here: the box cannot be made"
        )
    count = attempts_regraded
    summary += f"; {count} skill attempt{'s' * (count != 1)} re-grade{'s' * (count == 1)}"
    if unboxed:
        raise AuditUnchecked(
            f"{summary}; not re-graded here, their answers being code the box cannot run: "
            f"{', '.join(sorted(unboxed))} ({next(iter(unboxed.values()))})"
        )
    return summary


def _attempt_passed(scope: _Scope, attempt_id: str, bidder: str, bid_index: int) -> None:
    """Raises AuditFailure unless the operator logged `attempt_id` as a passed attempt of
    `bidder` (its re-grade is `_skill_declarations`')."""
    for index in scope.by_subject.get(attempt_id, []):
        event = scope.log[index].event
        if event.kind == ATTEMPT_GRADED and event.actor == scope.operator:
            committed = [
                scope.log[i].event
                for i in scope.by_subject.get(attempt_id, [])
                if scope.log[i].event.kind == ATTEMPT_COMMITTED
            ]
            if (
                event.body.get("passed") is True
                and committed
                and committed[0].body.get("candidate") == bidder
            ):
                return
    raise AuditFailure(
        f"{bidder}'s credential names attempt {attempt_id}, which the log holds no pass of",
        bid_index,
    )


def _skill_declarations(scope: _Scope, attempts: Collection[str]) -> tuple[int, int | None]:
    """Replay every `skill.declared` entry of the log (`replay_declarations`): each names the
    hash of the manifest it carries, its declarer had registered first, and no one supersedes
    another's skill; then re-grade the `attempts` (the bidders' credentials name them) in the
    box from their revealed seeds (`replay_attempts`). Returns (declarations, attempts
    re-graded; None when the box cannot be made here); raises AuditFailure at the first entry
    that fails."""
    registered_at: dict[str, int] = {}
    declarations: list[tuple[int, Event]] = []
    logged_attempts: list[tuple[int, Event]] = []
    for index in sorted(scope.log):
        event = scope.log[index].event
        if event.kind == REGISTERED_KIND and event.actor == event.subject:
            registered_at.setdefault(event.actor, index)
        elif event.kind == SKILL_DECLARED_KIND:
            declarations.append((index, event))
        elif event.kind in ATTEMPT_KINDS:
            logged_attempts.append((index, event))
    try:
        known = replay_declarations(
            declarations, operator=scope.operator, registered_at=registered_at
        )
        regraded: int | None = replay_attempts(
            logged_attempts, known, operator=scope.operator, only=attempts
        )
    except SandboxUnavailable:
        regraded = None
    except SkillError as exc:
        raise AuditFailure(str(exc), _entry_named(str(exc))) from exc
    return len(declarations), regraded


def _held_at(
    issued: Sequence[tuple[int, Mapping[str, Any]]],
    revoked: Mapping[str, int],
    did: str,
    capability: str,
    before: int,
    when: datetime,
    operator: str,
) -> Mapping[str, Any] | None:
    for index, body in issued:
        if index >= before or body.get("agent") != did or body.get("capability") != capability:
            continue
        credential_id = str(body.get("credentialId"))
        if revoked.get(credential_id, before) < before:
            continue
        document = body.get("credential")
        if not isinstance(document, Mapping):
            continue
        try:
            verified: VerifiedCredential = verify_credential(
                dict(document),
                trusted_issuers={operator},
                holder_did=did,
                now=when,
                status_lookup=None,  # revocation is read from the log above
                capability=capability,
            )
        except IdentityError:
            continue
        del verified
        return body
    return None


# -- (4) the auction -------------------------------------------------------------------------


def _auction(scope: _Scope) -> str:
    task = scope.task
    book = BidBook()
    awarded: tuple[int, Mapping[str, Any]] | None = None
    for index, event in scope.task_events:
        if event.kind in (BID_COMMITTED, BID_REVEALED):
            at = parse_time(event.at)
            closes = task.bidding_ends if event.kind == BID_COMMITTED else task.reveal_ends
            if at >= closes:
                raise AuditFailure(f"{event.kind} logged after its window closed", index)
            book.add(index, event)
        elif event.kind == TASK_AWARDED:
            awarded = (index, event.body)
    if awarded is None:
        raise AuditFailure("the task was never awarded")
    reputations = reputations_from_events(
        _events_of(scope), book.reveals.keys(), task.spec.capabilities, before=awarded[0]
    )
    try:
        outcome, forfeited = replay_award(
            task, list(book.commitments.values()), list(book.reveals.values()), reputations
        )
    except MarketError as exc:
        raise AuditFailure(f"the logged bids do not replay: {exc}", awarded[0]) from exc
    index, body = awarded
    winner = None if outcome.winner is None else outcome.winner.bidder
    if winner != body.get("winner") or str(outcome.price) != body.get("price"):
        raise AuditFailure(
            f"the auction replays to {winner} at {outcome.price} wei, "
            f"not {body.get('winner')} at {body.get('price')}",
            index,
        )
    if forfeited != list(body.get("forfeited", [])):
        raise AuditFailure(
            f"the forfeits replay to {forfeited}, not {body.get('forfeited')}", index
        )
    return f"{len(book.reveals)} revealed bids replay to {winner} at {outcome.price} wei"


# -- (5) conversations -----------------------------------------------------------------------


def _conversations(scope: _Scope) -> str:
    for record in scope.conversations:
        if record.opened_index < 0:
            conv_id = record.conversation.conv_id
            try:
                conversation_from_events(conv_id, _events_of(scope, conv_id))
            except CoordinatorError as exc:
                reason = str(exc)
                raise AuditFailure(
                    f"conversation {conv_id} does not replay: {reason}", _entry_named(reason)
                ) from exc
            raise AuditFailure(f"conversation {conv_id} does not replay")
        if record.conversation.state != "closed" and scope.task.state != "running":
            raise AuditFailure(
                f"conversation {record.conversation.conv_id} never concluded", record.opened_index
            )
    try:
        check_task_reports(scope.conversations)
    except IllegalMove as exc:
        raise AuditFailure(
            f"a report claims work that is not its producer's own: {exc.reason}",
            _entry_named(exc.reason),
        ) from exc
    if scope.task.state == "running":  # every move so far is legal; the delivery is to come
        turns = sum(r.conversation.turn for r in scope.conversations)
        raise AuditPending(
            f"{len(scope.conversations)} conversations, {turns} moves so far, all legal and "
            "signed; the task is running: its delivery is checked once it is delivered"
        )
    top = [r for r in scope.conversations if r.conversation.parent is None]
    delivered = next(((i, e.body) for i, e in scope.task_events if e.kind == TASK_DELIVERED), None)
    if delivered is None:
        raise AuditFailure("the task was never delivered")
    index, body = delivered
    matching = [r for r in top if r.conversation.conv_id == body.get("conversation")]
    if not matching:
        raise AuditFailure("the delivery names no conversation of this task", index)
    deliverable = matching[0].conversation.deliverable
    if deliverable is None or deliverable.to_json() != body.get("deliverable"):
        raise AuditFailure("the delivered deliverable is not the team's conclusion", index)
    if body.get("document") != assemble(scope.task, matching[0].conversation):
        raise AuditFailure(
            "the delivered plan and assembly are not the logged assignments and reports", index
        )
    if any(c.agent == scope.task.requester for c in deliverable.contributions):
        raise AuditFailure("the requester worked on its own task's team", index)
    turns = sum(r.conversation.turn for r in scope.conversations)
    return f"{len(scope.conversations)} conversations, {turns} moves, all legal and signed"


def _entry_named(reason: str) -> int | None:
    """The log index a replay error names (`entry N: ...`), if it names one."""
    found = re.match(r"entry (\d+): ", reason)
    return int(found.group(1)) if found else None


# -- (6) settlement --------------------------------------------------------------------------


def _settlement(
    scope: _Scope,
    escrow: EscrowChain,
    outputs: Callable[[str], bytes | None] | None,
) -> str:
    found = [(i, e) for i, e in scope.task_events if e.kind == SETTLEMENT_COMPUTED]
    if not found:
        raise AuditFailure("the task was never settled")
    index, computed = found[0]
    body = computed.body
    delivered = next(e.body for _, e in scope.task_events if e.kind == TASK_DELIVERED)
    # (6a) every check re-runs to its logged result: expect, schema, python, plan and assembly
    # from the delivered outputs; judge answers held to their logged prompts; reviews to the
    # requester's signed verdicts and the window as it stood when the settlement was computed.
    try:
        logged = {r["id"]: CheckResult.from_json(r) for r in body.get("checks", [])}
        reviews = LogReviews(
            scope.task,
            [
                (i, TaskEvent(i, e.kind, e.actor, parse_time(e.at), e.body))
                for i, e in scope.task_events
                if e.kind == REVIEW_GIVEN and i < index
            ],
            parse_time(computed.at),
        )
        unrun: dict[str, str] = {}
        unreproduced: dict[str, str] = {}
        open_value = opener(outputs or _holds_none, required=False)
        log_events = [(i, entry.event) for i, entry in sorted(scope.log.items())]

        def rerun_python(check: PythonCheck, outputs: Mapping[str, Any]) -> CheckResult:
            """The check re-run in the world it ran in at settlement (`check_world`). A re-run
            that disagrees with the logged verdict is the check's own non-determinism, as
            far as this auditor can tell: the step is left unchecked (INCOMPLETE) and names
            it, never a FAIL of the operator's settlement."""
            was = logged.get(check.check_id)
            if was is None:
                raise AuditFailure(f"python check {check.check_id} has no logged result")
            world = check_world(scope.task.task_id, scope.task.posted_at, check.check_id)
            contest = reviews.contest(check)
            try:
                result = run_python_check(check, outputs, world)
            except SandboxUnavailable as exc:  # nothing runs unboxed: hold it to its log
                unrun[check.check_id] = str(exc)
                result = None
            if was.inconclusive and contest is not None:
                # contested: the panel decided it, replayed from the log and the chain
                if result is not None and not result.inconclusive:
                    unreproduced[check.check_id] = (
                        f"{_verdict_word(result)} here ({result.detail}), inconclusive and "
                        "contested at settlement"
                    )
                return replay_contest(
                    log_events,
                    operator=scope.operator,
                    task=scope.task,
                    check=check,
                    ran=was,
                    rejected=contest,
                    delivered=delivered,
                    block_hash=escrow.block_hash,
                    before=index,
                    outputs=outputs,
                    open_value=open_value,
                )
            if result is None:
                return was
            if (result.passed, result.inconclusive) != (was.passed, was.inconclusive):
                unreproduced[check.check_id] = (
                    f"{_verdict_word(result)} here ({result.detail}), {_verdict_word(was)} "
                    "at settlement"
                )
                return was
            return result

        def panel(
            check: ReviewCheck, outputs: Mapping[str, Any], rejected: CheckResult
        ) -> CheckResult:
            """The dispute's panel replayed from the log and the chain's block hashes."""
            return replay_panel(
                log_events,
                operator=scope.operator,
                task=scope.task,
                check=check,
                rejected=rejected,
                delivered=delivered,
                block_hash=escrow.block_hash,
                before=index,
                outputs=outputs,
                open_value=open_value,
            )

        env = RecheckEnvironment(logged, rerun_python, reviews.review, open_value, panel)
        settlement, valuation, _ = recompute_settlement(
            scope.task, delivered, env, open_value, seed=int(body["seed"])
        )
        scope.held_to_log = list(env.unopened_checks)
    except (MarketError, ExamError, KeyError, TypeError, ValueError) as exc:
        raise AuditFailure(f"the settlement does not recompute: {exc}", index) from exc
    for check_id, result in settlement.checks.items():
        was = logged.get(check_id)
        if was is None or was.passed != result.passed:
            said = "nothing" if was is None else ("pass" if was.passed else "fail")
            raise AuditFailure(
                f"check {check_id} recomputes to {'pass' if result.passed else 'fail'} "
                f"({result.detail}), the settlement logged {said}",
                index,
            )
        replayed, logged_answer = (
            ((r.record or {}).get("dispute") or {}).get("answer") for r in (result, was)
        )
        if replayed != logged_answer:
            raise AuditFailure(
                f"the team's answer to {check_id} replays from the log as {replayed}, the "
                f"settlement logged {logged_answer}",
                index,
            )
    # (6a) an inconclusive python check counts as passed only where its requester could
    # contest it: the operator's preview in the review window named it.
    withheld = withheld_previews(
        scope.task_events,
        operator=scope.operator,
        task=scope.task,
        checks=logged,
        settled=index,
    )
    unpreviewed_while_down: tuple[str, ...] = ()
    if withheld.unpreviewed:
        task = scope.task
        ends = task.review_ends
        up = (
            task.delivered_at is not None
            and ends is not None
            and logged_in_window(
                ((i, e.event) for i, e in scope.log.items()),
                after=task.delivered_index if task.delivered_index is not None else -1,
                start=task.delivered_at,
                end=ends,
            )
        )
        if up:
            raise AuditFailure(
                f"python checks {', '.join(withheld.unpreviewed)} were inconclusive and counted "
                "as passed, but the operator logged no `checks.previewed` in the review window "
                f"(it ended {ends.isoformat() if ends else 'never'}) before the settlement, "
                "though the service was logging then: the requester was denied its contest",
                index,
            )
        unpreviewed_while_down = withheld.unpreviewed
    # (6b) v(S), the Shapley values and the wei recompute exactly.
    logged_v = {frozenset(item["coalition"]): Fraction(item["value"]) for item in body["evaluated"]}
    for coalition, value in settlement.evaluated.items():
        if logged_v.get(coalition) != value:
            raise AuditFailure(
                f"v({sorted(coalition)}) recomputes to {value}, not {logged_v.get(coalition)}",
                index,
            )
    # The game's players are the parts; each producer's value is the sum of its parts' values.
    recomputed = settlement.to_json(body["payees"])
    for name in ("players", "producers", "part_values", "values"):
        if recomputed[name] != body.get(name):
            raise AuditFailure(
                f"the settlement's {name} recompute to {recomputed[name]}, not {body.get(name)}",
                index,
            )
    payouts = {p: str(w) for p, w in settlement.payouts.items()}
    if payouts != body["payouts"]:
        raise AuditFailure(f"the payouts recompute to {payouts}, not {body['payouts']}", index)
    panelists = {p: str(w) for p, w in settlement.panel_payouts.items()}
    if panelists != dict(body.get("panel_payouts") or {}):
        raise AuditFailure(
            f"the panelists' pay recomputes to {panelists}, not {body.get('panel_payouts')}",
            index,
        )
    taken = {a: str(w) for a, w in settlement.answers_taken.items()}
    if taken != dict(body.get("answers_taken") or {}):
        raise AuditFailure(
            f"the team's answers pay the panel {taken}, not {body.get('answers_taken')}", index
        )
    fee = str(settlement.evaluator_fee)
    if fee != str(body.get("evaluator_fee", "0")):
        raise AuditFailure(
            f"the disputes' fees recompute to {fee} wei, not {body.get('evaluator_fee')}", index
        )
    chain_id = escrow.chain_id()
    for player, address in body["payees"].items():
        bound = _bound_address(scope, player, chain_id)
        if bound != address:
            raise AuditFailure(f"{player} bound {bound} for payouts, not {address}", index)
    _held(scope, body, settlement, escrow, index)
    _track_record(scope, settlement, valuation)
    passed = sum(1 for r in settlement.checks.values() if r.passed)
    held = env.unopened_checks
    how = (
        "every check re-run on the sealed outputs"
        if not held
        else f"checks {', '.join(held)} held to the operator's signed verdicts (their outputs "
        "are sealed and were not given: `accord audit TASK --outputs DIR`), plan and assembly "
        "re-run on the commitments"
    )
    summary = (
        f"{how}; {passed} of {len(settlement.checks)} checks pass as logged; "
        f"{len(settlement.evaluated)} values of v(S), {settlement.method} Shapley values and "
        f"{len(payouts)} payouts recompute exactly ({settlement.amount} wei)"
    )
    if unpreviewed_while_down:
        raise AuditUnchecked(
            f"python checks {', '.join(unpreviewed_while_down)} were inconclusive and counted "
            "as passed with no `checks.previewed` in the review window, so their requester "
            "could not contest them; but the log took no entry at all in that window (the "
            "service may have been down, unable to preview): withheld or away, the log "
            f"cannot tell; otherwise {summary}"
        )
    if withheld.unnamed:
        raise AuditUnchecked(
            f"python checks {', '.join(withheld.unnamed)} were inconclusive at settlement and "
            "counted as passed, but the operator's `checks.previewed` in the review window did "
            "not name them, so their requester could not contest them: either the check is not "
            "a function of its outputs in its fixed world (it decided at the preview) or the "
            f"operator withheld them; otherwise {summary}"
        )
    if unreproduced:
        said = "; ".join(f"{check_id}: {how}" for check_id, how in sorted(unreproduced.items()))
        raise AuditUnchecked(
            f"python checks {', '.join(sorted(unreproduced))} do not reproduce in their fixed "
            f"world ({said}): the requester's test code is not a function of the outputs it "
            "reads (it escapes the fixed clock and seed), or this machine's limits differ; "
            f"their logged verdicts taken as given; otherwise {summary}"
        )
    if unrun:
        raise AuditUnchecked(
            f"python checks {', '.join(sorted(unrun))} were not re-run here, their logged "
            f"verdicts taken as given ({next(iter(unrun.values()))}); otherwise {summary}"
        )
    return summary


def _verdict_word(result: CheckResult) -> str:
    if result.inconclusive:
        return "inconclusive"
    return "pass" if result.passed else "fail"


def _held(
    scope: _Scope, body: Mapping[str, Any], settlement: Settlement, escrow: EscrowChain, index: int
) -> None:
    """(6b) Every payout above 0 goes to its payee's bound address or is held in the escrow
    (paid to the escrow's own address) for a payee that had bound none when the settlement
    was logged; never held for one that had. Raises AuditFailure."""
    held = dict(body.get("held") or {})
    chain_id = escrow.chain_id()
    owed = {p: w for p, w in {**settlement.payouts, **settlement.panel_payouts}.items() if w > 0}
    for player in sorted(set(held) - set(owed)):
        raise AuditFailure(f"the settlement holds a payout for {player}, who is owed none", index)
    for player, wei in owed.items():
        if player in held:
            if str(held[player]) != str(wei):
                raise AuditFailure(
                    f"the settlement holds {held[player]} wei for {player}, not its payout {wei}",
                    index,
                )
            bound = _bound_address(scope, player, chain_id, before=index)
            if bound is not None:
                raise AuditFailure(
                    f"the settlement holds {player}'s payout, yet it had bound {bound}", index
                )
        elif player not in body["payees"]:
            raise AuditFailure(f"{player}'s payout of {wei} wei is paid to nobody", index)
    if held and str(body.get("holder", "")).lower() != escrow.escrow_address().lower():
        raise AuditFailure(
            f"the held payouts go to {body.get('holder')}, not the escrow itself", index
        )


def _holds_none(commitment: str) -> None:
    """The auditor's sealed outputs when it was given none."""
    return None


def _track_record(scope: _Scope, settlement: Settlement, valuation: Valuation) -> None:
    """(6c) `task.settled` records the track record the settlement gives (each part's producer
    and score, `accord.market.reputation`), and every revocation it made due recomputes from the log
    up to it. Raises AuditFailure."""
    found = [(i, e) for i, e in scope.task_events if e.kind == TASK_SETTLED]
    if not found:
        return  # computed, not paid yet: nothing is recorded
    index, event = found[0]
    task = scope.task
    passed = {check_id: result.passed for check_id, result in settlement.checks.items()}
    parts = scored_parts(task.spec, valuation.producers, passed)
    expected = SettledWork(index, task.task_id, task.requester, parts)
    if settled_work(index, task.task_id, event.body) != expected:
        raise AuditFailure(
            f"task.settled records another track record than the settlement gives: "
            f"{expected.to_json()}",
            index,
        )
    for at in sorted(scope.touched):
        revocation = scope.touched[at].event
        evidence = revocation.body.get("evidence")
        if revocation.kind != REVOCATION_EVENT_KIND or not isinstance(evidence, Mapping):
            continue
        if evidence.get("settled_index") != index:
            continue
        try:
            threshold = get_capability(str(evidence.get("capability"))).threshold
            _revoked_credential(scope, revocation, evidence)
            records = track_records_from_events(_events_of(scope), before=index + 1)
            check_revocation(evidence, records, threshold)
        except (MarketError, ExamError) as exc:
            raise AuditFailure(f"the revocation was not due: {exc}", at) from exc


def _revoked_credential(scope: _Scope, revocation: Event, evidence: Mapping[str, Any]) -> None:
    """Raises ReputationError unless the revoked credential is the evidence's agent's, in its
    capability, issued before the settlement."""
    for at in sorted(scope.touched):
        event = scope.touched[at].event
        if event.kind == ISSUED_EVENT_KIND and event.body.get("credentialId") == revocation.subject:
            held = (event.body.get("agent"), event.body.get("capability"))
            if held == (evidence.get("agent"), evidence.get("capability")) and at < int(
                evidence.get("settled_index", -1)
            ):
                return
    raise ReputationError(
        f"{revocation.subject} is no credential of {evidence.get('agent')} in "
        f"{evidence.get('capability')} issued before the settlement"
    )


def _bound_address(
    scope: _Scope, did: str, chain_id: int, *, before: int | None = None
) -> str | None:
    """The payout address `did` bound last (before entry `before`, when given)."""
    address = None
    for index in sorted(scope.touched):
        if before is not None and index >= before:
            break
        event = scope.touched[index].event
        if event.kind == PAYOUT_BOUND_KIND and event.actor == did:
            try:
                bound_did, bound = verify_binding(event.body.get("binding", {}), chain_id=chain_id)
            except BindingError:
                continue
            if bound_did == did:
                address = bound
    return address


# -- (7) the escrow on chain -----------------------------------------------------------------


def _escrow_events(scope: _Scope, escrow: EscrowChain) -> str:
    task = scope.task
    try:
        events = escrow.events(task.task_id)
    except ChainError as exc:
        raise AuditFailure(f"cannot read the escrow events: {exc}") from exc
    opened = [e for e in events if e.name == "Opened"]
    settled = [e for e in events if e.name == "Settled"]
    refunded = [e for e in events if e.name == "Refunded"]
    if len(opened) != 1 or opened[0].amount != task.spec.budget:
        raise AuditFailure(f"the chain holds {len(opened)} deposits, not one of the budget")
    posted = next(e.body for _, e in scope.task_events if e.kind == TASK_POSTED)
    if (opened[0].account or "").lower() != str(posted.get("escrow_from", "")).lower():
        raise AuditFailure("the deposit came from another account than the posting names")
    deadline = int(task.escrow_deadline.timestamp())
    if opened[0].deadline is not None and opened[0].deadline != deadline:
        raise AuditFailure(
            f"the deposit's deadline {opened[0].deadline} is not the task's escrow deadline "
            f"{deadline} (its delivery deadline, review window and settlement grace)"
        )
    body = next(e.body for _, e in scope.task_events if e.kind == SETTLEMENT_COMPUTED)
    if len(settled) != 1 or refunded:
        raise AuditFailure(
            f"the chain holds {len(settled)} settlements and {len(refunded)} refunds"
        )
    answered = _answered(events, body, settled[0].block_number)
    try:  # each payee, the escrow for a held payout, the disputes' evaluator, the answers
        expected = sorted((address.lower(), int(wei)) for address, wei in paid_out(body, answered))
    except SettlementError as exc:
        raise AuditFailure(str(exc)) from exc
    paid = sorted(
        (a.lower(), int(w)) for a, w in zip(settled[0].payees, settled[0].amounts, strict=True)
    )
    if paid != expected:
        raise AuditFailure(f"the chain paid {paid}, the settlement says {expected}")
    bonds = [e for e in events if e.name == "Bonded" and e.block_number <= settled[0].block_number]
    if any((e.account or "").lower() != (opened[0].account or "").lower() for e in bonds):
        raise AuditFailure("a dispute bond came from another account than the deposit")
    bonded = sum(int(e.amount) for e in bonds)
    if str(bonded) != str(body.get("bonded", "0")):
        raise AuditFailure(
            f"the chain holds {bonded} wei of bonds, the settlement says {body.get('bonded', '0')}"
        )
    remainder = settled[0].amount
    answers = sum(answered.values())
    if sum(w for _, w in paid) + remainder != opened[0].amount + bonded + answers:
        raise AuditFailure(
            "paid plus remainder does not equal the deposit, the bonds and the answers: funds "
            "not conserved"
        )
    if remainder > opened[0].amount + bonded:
        raise AuditFailure("the requester's remainder took part of the team's answers")
    released = _releases(scope, body, events, escrow.chain_id())
    return (
        f"deposit {opened[0].amount} wei"
        + (f" and bonds {bonded} wei" if bonded else "")
        + (f" and answers {answers} wei" if answers else "")
        + f" = {sum(w for _, w in paid)} paid to "
        f"{len(paid)} payees + {remainder} back to the requester"
        + (f"; {released}" if released else "")
    )


def _answered(
    events: Sequence[EscrowEvent], body: Mapping[str, Any], settled_block: int
) -> dict[str, int]:
    """What each account answered for the task's disputes before it was settled, from the
    escrow's `Answered` events (each names the account's total). Raises AuditFailure where the
    settlement counts more from an account than the chain held when it was computed, or a
    dispute's answer names an account that sent nothing."""
    answered: dict[str, int] = {}
    for event in events:
        if event.name == "Answered" and event.account and event.block_number <= settled_block:
            answered[event.account] = int(event.amounts[0])
    on_chain = {a.lower(): w for a, w in answered.items()}
    for account, wei in (body.get("answered") or {}).items():
        if on_chain.get(str(account).lower(), 0) < int(str(wei)):
            raise AuditFailure(
                f"the settlement counts {wei} wei answered from {account}; the chain holds "
                f"{on_chain.get(str(account).lower(), 0)}"
            )
    answers = [
        answer
        for check in body.get("checks") or []
        if (answer := ((check.get("record") or {}).get("dispute") or {}).get("answer"))
    ]
    try:
        staked = answers_by_account(answers)
    except (KeyError, TypeError, ValueError) as exc:
        raise AuditFailure(f"a dispute's answer does not parse: {exc!r}") from exc
    for account, wei in staked.items():
        if on_chain.get(account, 0) < wei:
            raise AuditFailure(
                f"the team's answers stake {wei} wei from {account}; the escrow received "
                f"{on_chain.get(account, 0)}"
            )
    return answered


def _releases(
    scope: _Scope, body: Mapping[str, Any], events: Sequence[EscrowEvent], chain_id: int
) -> str:
    """(7) Each held payout released at most once, in full, to the address its owner had
    bound when the release was logged, and the chain's Released events are exactly the
    logged releases. Raises AuditFailure; returns a summary ("" when nothing was held)."""
    held = dict(body.get("held") or {})
    logged: list[tuple[str, int]] = []
    seen: set[str] = set()
    for index, event in scope.task_events:
        if event.kind != SETTLEMENT_RELEASED:
            continue
        agent, address = str(event.body.get("agent")), str(event.body.get("address"))
        if event.actor != scope.operator:
            raise AuditFailure("a release is not the operator's", index)
        if agent not in held or agent in seen:
            raise AuditFailure(f"{agent} has no held payout left to release", index)
        if str(event.body.get("amount")) != str(held[agent]):
            raise AuditFailure(
                f"{agent}'s release of {event.body.get('amount')} wei is not the "
                f"{held[agent]} wei held",
                index,
            )
        bound = _bound_address(scope, agent, chain_id, before=index)
        if bound is None or bound.lower() != address.lower():
            raise AuditFailure(f"{agent}'s held payout went to {address}, not {bound}", index)
        seen.add(agent)
        logged.append((address.lower(), int(held[agent])))
    on_chain = sorted(
        ((e.account or "").lower(), int(e.amount)) for e in events if e.name == "Released"
    )
    if on_chain != sorted(logged):
        raise AuditFailure(f"the chain released {on_chain}, the log says {sorted(logged)}")
    if not held:
        return ""
    waiting = sorted(set(held) - seen)
    return (
        f"{len(held)} payouts held in the escrow for payees with no payout account, "
        f"{len(seen)} released to the address each bound"
        + (f", {len(waiting)} still held" if waiting else "")
    )
