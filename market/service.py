"""The market as users drive it: post a task with its budget escrowed, take sealed bids from
credentialed agents, clear the auction.

Every action is a signed ledger event whose subject is the task id, and a task is always
`tasks.replay` of its events: the ledger is the only store, queried through its subject index.

    task.posted      requester   the spec, and the chain account that escrows the budget
                                 (`escrow_from`); signed here for a hosted requester
                                 (`post`), or by the requester itself (`post_signed`)
    escrow.opened    operator    the task's deposit is on chain (from `escrow_from`, the
                                 budget, the delivery deadline): bidding opens
    bid.committed    operator    an admitted sealed commitment (signed inside by its bidder)
                                 and the bidder's exam score when it committed
    bid.revealed     operator    an admitted reveal, signed inside by its bidder
    task.awarded     operator    the auction's winner, price and ranking, and forfeits
    task.expired     operator    no valid bid; followed by escrow.refunded
    escrow.refunded  operator    the deposit is credited back to the requester on chain
    task.started     winner      the contract holder starts the work
    task.delivered   winner      the team's signed reports and the assembled deliverable
                                 (plan and parts, stored content-addressed; its sha256)
    review.given     requester   accept or reject of one review check, in the review window
    task.cancelled   requester   a posted task whose escrow never opened ends (`cancel`,
                                 or `cancel_signed` with the requester's own entry)
    task.closed      operator    a posted task still not funded when its bidding window
                                 ended ends, with the reason (`close_unfunded`)

A task's input files and its deliverable are blobs named by their SHA-256 (`accord.market.blobs`).

Rejected commitments and reveals are not logged; they raise `BidRejected` with the reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from accord.identity.challenges.registry import get_capability
from accord.identity.credential_views import VIEW_NAME as CREDENTIAL_VIEW
from accord.identity.credential_views import credentials_held, holders
from accord.identity.errors import ExamError, IdentityError, RegistryError
from accord.identity.exams import check_agent_entry
from accord.identity.manifests import builtin_name
from accord.identity.onboarding import Onboarding
from accord.ledger.canonical import canonical_json
from accord.ledger.database import db_reason, statement_connection
from accord.ledger.errors import AlreadyLoggedError, ChainError, LedgerError, StoreError
from accord.ledger.events import Entry, Event, parse_time
from accord.ledger.log import StoredEntry
from accord.ledger.sealing import Sealed
from accord.ledger.service import Ledger
from accord.ledger.signing import Signer
from accord.ledger.store import LogStore
from accord.ledger.views import MAX_LIMIT, reading
from accord.market import sealed
from accord.market.auction import AuctionOutcome
from accord.market.award import AdmittedCommitment, AdmittedReveal, BidBook, replay_award
from accord.market.blobs import BlobError, BlobStore, FileQuota, Upload, sha256_hex
from accord.market.check_io import judge_from_env
from accord.market.disputes import (
    Panels,
    has_evaluator,
    part_capabilities,
    team_of,
)
from accord.market.errors import (
    AuctionError,
    BidRejected,
    DepositRefused,
    IdempotencyConflict,
    TaskError,
    TransitionError,
    WorkError,
)
from accord.market.escrow.port import EscrowDeposit, EscrowPort, EscrowReceipt
from accord.market.escrow.values import address_of
from accord.market.money import Wei, format_eth
from accord.market.panel import capabilities_read
from accord.market.payouts import bond_owed, dispute_fee
from accord.market.projections import read_views
from accord.market.reputation import (
    RequesterRecord,
    TrackRecords,
    check_revocation,
    reputations_from_events,
    revocation_due,
    revocation_evidence,
    revocation_reason,
    settled_work,
    track_records_from_events,
)
from accord.market.task_reads import LIFECYCLE_KINDS as LIFECYCLE_KINDS
from accord.market.task_reads import MAX_TASK_EVENTS as MAX_TASK_EVENTS
from accord.market.task_reads import as_task_event as as_task_event
from accord.market.task_reads import (
    read_requester_record,
    read_task,
    task_entries,
)
from accord.market.task_reads import task_event as task_event
from accord.market.tasks import (
    BID_COMMITTED,
    BID_REVEALED,
    CHECKS_PREVIEWED,
    ESCROW_OPENED,
    ESCROW_REFUNDED,
    REVIEW_GIVEN,
    SETTLEMENT_COMPUTED,
    TASK_AWARDED,
    TASK_CANCELLED,
    TASK_CLOSED,
    TASK_DELIVERED,
    TASK_EXPIRED,
    TASK_KINDS,
    TASK_POSTED,
    TASK_SETTLED,
    TASK_STARTED,
    Task,
    TaskEvent,
    TaskSpec,
    clock_state,
    replay,
    spec_from_request,
)
from accord.market.views import (
    BID_VIEW,
    REPUTATION_VIEW,
    TaskPage,
    TaskQuery,
    bids_of,
    list_tasks,
    track_records_of,
)
from accord.market.views import VIEW_NAME as TASK_VIEW
from accord.market.work import file_refs, require_machine_verdict

log = logging.getLogger("accord.market")

UNFUNDED_REASON = (
    "not funded when its bidding window ended: no deposit of its budget from its escrow "
    "account was on chain, so nobody could bid"
)
MAX_REJECTION_REASON = 2000
_BOOK_PAGE = 5000


@dataclass(frozen=True)
class BidView:
    """One bidder's bid as the market shows it: sealed until revealed."""

    bidder: str
    committed_index: int
    commitment: str
    revealed: bool
    price: Wei | None

    def to_json(self) -> dict[str, Any]:
        return {
            "bidder": self.bidder,
            "committed_index": self.committed_index,
            "commitment": self.commitment,
            "revealed": self.revealed,
            "price": None if self.price is None else str(self.price),
        }


@dataclass
class _TaskLog:
    """A task's logged events as one process has read them so far: its lifecycle (replayed
    into the task when it changes) and its bid book."""

    lifecycle: list[TaskEvent] = field(default_factory=list)
    book: BidBook = field(default_factory=BidBook)
    last_index: int = -1
    _task: Task | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, stored: StoredEntry) -> None:
        """Take the next entry of the task. Raises BidRejected for a malformed bid body."""
        event = Entry.from_bytes(stored.data).event
        if event.kind in (BID_COMMITTED, BID_REVEALED):
            self.book.add(stored.index, event)
        else:
            self.lifecycle.append(as_task_event(stored.index, event))
            self._task = None
        self.last_index = stored.index

    def task(self) -> Task | None:
        """The task its lifecycle replays to, or None before it is posted. Raises what
        `tasks.replay` raises."""
        if self._task is None and self.lifecycle:
            self._task = replay(iter(self.lifecycle))
        return self._task


def rejection_terms(
    task: Task, reason: str | None, given: Sequence[Mapping[str, Any]], bonded: int = 0
) -> dict[str, str]:
    """Pure: what a rejection of one of `task`'s review checks logs, its reason and its
    dispute fee, given the review bodies already logged and what the requester `bonded`
    beyond the budget (`TaskEscrow.bond`).

    Raises TaskError without a reason, or when the escrow does not hold the fee of every
    rejection beyond the price (`accord.market.payouts.dispute_fee` each), the bond counted.
    """
    reason = (reason or "").strip()
    if not reason or len(reason) > MAX_REJECTION_REASON:
        raise TaskError(
            f"a rejection needs a reason (at most {MAX_REJECTION_REASON} characters): it opens "
            "a dispute that an independent evaluator decides"
        )
    if task.price is None:
        raise TaskError(f"{task.task_id} was never awarded: there is no price to dispute")
    fee = dispute_fee(task.price)
    disputes = 1 + sum(1 for body in given if body.get("verdict") == "reject")
    spare = task.spec.budget - task.price + bonded
    if disputes * fee > spare:
        raise TaskError(
            f"a dispute costs {fee} wei, held from what the escrow holds beyond the price; "
            f"{task.task_id}'s escrow holds {spare} wei beyond it, not the {disputes * fee} wei "
            f"{disputes} dispute{'s' * (disputes != 1)} need: bond the rest from the "
            f"requester's own account (`TaskEscrow.bond`, {bond_shortfall(task, given, bonded)} "
            "wei) and reject again"
        )
    return {"reason": reason, "fee": str(fee)}


def bond_shortfall(task: Task, given: Sequence[Mapping[str, Any]], bonded: int) -> int:
    """Pure: the wei the requester must bond before one more rejection of `task` is
    taken (0 when the escrow holds every dispute's fee beyond the price already)."""
    if task.price is None:
        return 0
    rejected = sum(1 for body in given if body.get("verdict") == "reject")
    return bond_owed(task.spec.budget, task.price, rejected, bonded)


#: A rejection names the chain's head block; the panel's seed is the hash of the next one,
#: which nobody knew when the rejection was signed. A requester's node may run this many
#: blocks ahead of the service's.
AFTER_BLOCK_AHEAD = 2


class Market:
    """Tasks, sealed bids and auctions over one ledger.

    `onboarding` answers which agents hold valid credentials; `escrow` moves the budgets.
    """

    def __init__(
        self,
        ledger: Ledger,
        onboarding: Onboarding,
        escrow: EscrowPort,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.ledger = ledger
        self.onboarding = onboarding
        self.escrow = escrow
        self.clock = clock or ledger.clock
        self.blobs = BlobStore(ledger.store.engine)
        self._bidding: dict[str, _TaskLog] = {}
        self._bidding_lock = threading.Lock()
        self.unmatched_deposits: dict[str, str] = {}
        """Posted tasks whose key on chain holds an escrow that is not their deposit (another
        account's, another amount or deadline), with the reason, as `recover` last saw them."""
        for projection in read_views(ledger.operator.did):
            ledger.store.attach(projection)
        self.panels = Panels(ledger, escrow)
        """The dispute panels (`accord.market.disputes`)."""

    # -- reading -------------------------------------------------------------------------

    def task(self, task_id: str) -> Task:
        """The task replayed from its events (`accord.market.task_reads.read_task`). Raises
        TaskError when there is none."""
        return read_task(self.ledger.store, task_id)

    def state(self, task: Task) -> str:
        """The task's state now (the clock ends bidding and revealing)."""
        return clock_state(task, self.clock())

    def list_tasks(
        self,
        *,
        state: str | None = None,
        capability: str | None = None,
        requester: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TaskPage:
        """One page of tasks, oldest posting first, from the task view (`accord.market.views`):
        those in `state` now (the clock decides bidding and revealing, as `state` does), needing
        `capability` (a built-in's name or its skill id), posted by `requester`; `limit`
        1..200 (default 50); `cursor` the `next_cursor` of the page before. One indexed query,
        however long the log.

        The view is brought level first (`LogStore.refresh_view`); the page is then one
        statement, so it runs on a connection without a transaction of its own
        (`statement_connection`: on PostgreSQL no BEGIN and ROLLBACK round trips around it).

        Raises QueryError (ledger.errors) naming a bad parameter, StoreError.
        """
        if capability is not None:
            capability = builtin_name(capability)  # a built-in skill's id names it too
        query = TaskQuery(state, capability, requester, limit, cursor)
        store = self.ledger.store
        store.refresh_view(TASK_VIEW)
        try:
            with statement_connection(store.engine) as connection:
                return list_tasks(connection, query, self.clock())
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read the {TASK_VIEW} view: {db_reason(exc)}") from exc

    def credentialed(self, capability: str) -> list[str]:
        """The DIDs holding an unrevoked credential for `capability` valid now, by DID, from
        the credential view (`accord.identity.credential_views`; bids still verify the document)."""
        with reading(self.ledger.store, CREDENTIAL_VIEW) as connection:
            return holders(
                connection, builtin_name(capability), self.clock(), after=None, limit=None
            )

    def indexed_track_records(self, dids: Iterable[str]) -> TrackRecords:
        """`track_records` from the reputation view: the same fold, read by agent (with every
        pair that settled work, for the circles)."""
        with reading(self.ledger.store, REPUTATION_VIEW, TASK_VIEW) as connection:
            return track_records_of(connection, dids)

    def requester_record(self, did: str) -> RequesterRecord:
        """What bidders see of a requester (`accord.market.reputation.RequesterRecord`), from the
        task and reputation views."""
        return read_requester_record(self.ledger.store, did)

    def iter_tasks(self, **filters: str | None) -> Iterator[Task]:
        """Every task matching the `list_tasks` filters, page after page."""
        cursor: str | None = None
        while True:
            page = self.list_tasks(**filters, limit=MAX_LIMIT, cursor=cursor)
            yield from page.tasks
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def tasks(self) -> list[Task]:
        """Every task (whose events replay), oldest first."""
        return list(self.iter_tasks())

    def commitments(self, task_id: str) -> list[AdmittedCommitment]:
        """Admitted commitments, in log order."""
        return list(self._book(task_id).commitments.values())

    def reveals(self, task_id: str) -> list[AdmittedReveal]:
        """Admitted reveals, in log order."""
        return list(self._book(task_id).reveals.values())

    def bids(self, task_id: str) -> list[BidView]:
        """Commitments while sealed; prices appear once revealed (from the bid view, one
        indexed query). Raises TaskError when there is no such task."""
        self.task(task_id)
        with reading(self.ledger.store, BID_VIEW) as connection:
            rows = bids_of(connection, task_id)
        return [
            BidView(
                row.bidder,
                row.committed_index,
                row.commitment,
                row.revealed,
                None if row.price is None else Wei(int(row.price)),
            )
            for row in rows
        ]

    # -- eligibility and quality ---------------------------------------------------------

    def eligible(self, did: str, capabilities: Iterable[str]) -> bool:
        """Whether `did` holds a valid, unrevoked credential for every capability, now (a
        built-in's skill id names it as its old name does)."""
        return all(score is not None for score in self._exam_scores(did, capabilities))

    def _exam_scores(self, did: str, capabilities: Iterable[str]) -> list[Fraction | None]:
        """The best verified exam score of `did` for each capability (None where it holds no
        valid, unrevoked credential), from one read of its credentials."""
        records = self.onboarding.credentials_of(did)
        return [self._best_score(did, builtin_name(c), records) for c in capabilities]

    def _best_score(
        self, did: str, capability: str, records: Sequence[dict[str, Any]]
    ) -> Fraction | None:
        best: Fraction | None = None
        for record in records:
            if record["capability"] != capability or record["revoked_at"] is not None:
                continue
            try:
                verified = self.onboarding.verify(
                    record["document"], holder_did=did, capability=capability
                )
            except IdentityError:
                continue
            score = Fraction(verified.earned, verified.possible)
            best = score if best is None else max(best, score)
        return best

    def exam_score(self, did: str, capabilities: Sequence[str]) -> Fraction:
        """The mean of the bidder's best exam scores over the required capabilities (0 if any
        is missing)."""
        return _mean_score(self._exam_scores(did, capabilities))

    def track_records(self, *, before: int | None = None) -> TrackRecords:
        """Every track record, folded from the log before index `before` (all of it: None)."""
        return track_records_from_log(self.ledger.store, before=before)

    def reputations(self, dids: Iterable[str], capabilities: Sequence[str]) -> dict[str, Fraction]:
        """Each bidder's reputation for a task needing `capabilities`: the mean of its
        reputations in them, from one fold of the log."""
        names = [builtin_name(c) for c in capabilities]  # a built-in skill's id names it too
        return reputations_from_log(self.ledger.store, dids, names)

    def revoke_failing(self, task_id: str) -> list[str]:
        """The track-record rule, once a task is settled: each agent with parts in it loses
        its credentials in a capability of those parts whose record, as of the task's
        `task.settled`, is due for revocation (`accord.market.reputation.revocation_due`). Each
        revocation is logged by the operator with its reason and evidence, once per
        credential whichever process gets there first; credentials issued after the
        settlement are left alone. Idempotent. Returns the ids of the credentials it revoked.

        Raises StoreError, and what `Onboarding.revoke` raises but RegistryError (another
        process revoked the credential first).
        """
        found = self.ledger.store.find(kind=TASK_SETTLED, subject=task_id, limit=1)
        if not found:
            return []
        event = Entry.from_bytes(found[0].data).event
        work = settled_work(found[0].index, task_id, event.body)
        if work is None:
            return []
        records = self.track_records(before=work.index + 1)
        revoked = []
        for agent, capability in sorted({(p.producer, p.capability) for p in work.parts}):
            record = records.record(agent, capability)
            try:
                threshold = get_capability(capability).threshold
            except ExamError:
                continue
            if not revocation_due(record, threshold):
                continue
            evidence = revocation_evidence(agent, record, threshold, task_id, work.index)
            check_revocation(evidence, records, threshold)  # what the audit recomputes
            with reading(self.ledger.store, CREDENTIAL_VIEW) as connection:
                held = credentials_held(connection, agent, capability, before=work.index)
            for credential_id in held:
                try:
                    self.onboarding.revoke(
                        credential_id, revocation_reason(record, threshold), evidence=evidence
                    )
                except RegistryError:
                    continue  # revoked meanwhile, by hand or by another process
                revoked.append(credential_id)
        return revoked

    # -- acting --------------------------------------------------------------------------

    def post(
        self,
        requester: Signer,
        spec: TaskSpec,
        *,
        requester_key: str,
        idempotency_key: str | None = None,
    ) -> Task:
        """Post a task and escrow its budget from the requester's chain account.

        A deposit the chain would refuse (too little money in the account) is refused before
        anything is logged (DepositRefused, saying what to fund). The posting is then logged,
        the deposit made and `escrow.opened` logged: a task whose deposit failed all the same
        stays `posted` (no bids), can be re-escrowed with `escrow_task`, and is closed when
        its bidding window ends unfunded (`close_unfunded`). With an `idempotency_key` the
        task's id is derived from the requester and the key (`posted_task_id`), so posting
        again with that key, from any process, gives back the same task, its escrow finished
        if it was interrupted, never a second task or deposit. A spec names only files its
        requester uploaded (`upload_file`), which the posting keeps for good
        (`BlobStore.claim`): every way of posting comes through here.
        Raises IdempotencyConflict when the key already posted another spec, WorkError naming
        a file the requester does not hold or as `require_checkable`, DepositRefused, and
        TaskError, EscrowError, ChainError.
        """
        self.require_checkable(spec, requester.did)
        task_id = posted_task_id(requester.did, idempotency_key)
        if idempotency_key is not None:
            posted = self._posted_again(task_id, requester.did, spec, idempotency_key)
            if posted is not None:
                return self._escrowed(posted, requester_key)
        address = self.escrow.requester_address(requester_key)
        self._refuse_unfundable(task_id, requester.did, spec, requester_key, address)
        self._claim_files(requester.did, spec, task_id)
        for sha in spec.files:
            try:
                self.blobs.get(sha)
            except BlobError as exc:
                raise WorkError(f"file {sha} of the spec is not stored: {exc}") from exc
        try:
            self.ledger.append(
                requester,
                TASK_POSTED,
                subject=task_id,
                body={"task_id": task_id, "spec": spec.to_json(), "escrow_from": address},
                once_key=task_id,
            )
        except AlreadyLoggedError:
            # Another process posted it with the same key between our look and our append.
            posted = self._posted_again(task_id, requester.did, spec, str(idempotency_key))
            assert posted is not None
            return self._escrowed(posted, requester_key)
        return self.escrow_task(task_id, requester_key=requester_key)

    def require_checkable(self, spec: TaskSpec, requester: str) -> None:
        """Every way of posting asks this first. With no evaluator of rejections here, a spec
        none of whose checks can reject a wrong answer that fits the output schema is refused
        before anything is logged or escrowed (`accord.market.work.require_machine_verdict`):
        its reviews would be accepted whatever was delivered. An evaluator is a judge model
        (ACCORD_JUDGE_URL), or a dispute panel that could be drawn now for the skills of the
        parts the spec's review checks read, outside `requester`'s circle
        (`accord.market.disputes.has_evaluator`). Raises WorkError at `$.checks`."""
        try:
            judge = judge_from_env()
        except RegistryError:
            judge = None  # misconfigured: no rejection could be judged (`review` says so)
        if judge is not None:
            return
        try:
            require_machine_verdict(spec.requester_checks)
        except WorkError:
            parts = {p.part_id: p.capability for p in spec.parts}
            read = [p for c in spec.requester_checks if c.kind == "review" for p in c.reads]
            reviewed = capabilities_read(parts, read)
            if not reviewed or not has_evaluator(
                self.ledger, requester=requester, capabilities=reviewed
            ):
                raise

    def _refuse_unfundable(
        self, task_id: str, requester: str, spec: TaskSpec, requester_key: str, address: str
    ) -> None:
        """Raises DepositRefused, before anything is logged, when the chain would refuse the
        deposit of `spec`'s budget from `address` (so no posting is left that nobody funds),
        saying how much to put where; what `EscrowPort.deposit_problem` raises."""
        deadline = Task(task_id, requester, spec, self.clock(), "posted").escrow_deadline
        problem = self.escrow.deposit_problem(task_id, deadline, spec.budget, requester_key)
        if problem is None or self.escrow.deposit_record(task_id) is not None:
            # An escrow already under the key: another process posted this idempotency key
            # meanwhile (its posting is answered), or a stranger opened it (the task waits).
            return
        chain = self.escrow.chain_id()
        raise DepositRefused(
            f"the deposit of the budget, {spec.budget} wei ({format_eth(spec.budget)}), "
            f"from {address} would fail ({problem}), so nothing is posted: send {address} at "
            f"least {spec.budget} wei plus gas on chain {chain} (the escrow contract is "
            f"{self.escrow.escrow_address()}), or pay from another funded account, then post "
            "again",
            address=address,
            amount=spec.budget,
        )

    def post_signed(self, entry: Entry, spec: TaskSpec, *, idempotency_key: str) -> Task:
        """Post a task whose requester holds its own key: `entry` is its `task.posted`,
        signed by itself, whose body is exactly `posted_body(task_id, spec, escrow_from)`
        with the id `posted_task_id(requester, idempotency_key)` (`prepare_post` gives both).
        Nothing is deposited here: the requester opens the escrow from `escrow_from` itself
        (`escrow_call` says how), and the task takes bids once that deposit is on chain
        (`recover`, which the service's lifecycle runs). The same key again answers the task
        it posted (its escrow opened if the deposit has come meanwhile), whatever entry
        carries it, as long as the spec and account are the same. A spec names only files
        its requester uploaded, as in `post`.

        Raises TaskError for an entry that does not verify, is not a `task.posted` of this
        id, whose body is not the one the service would log, whose account is not an
        Ethereum address or whose time is more than 2 minutes off the service's clock;
        IdempotencyConflict when the key already posted another spec or account; WorkError
        naming a file the requester does not hold, or as `require_checkable`; SequenceError
        for a seq already taken.
        """
        self.require_checkable(spec, entry.event.actor)
        try:
            entry.verify()
        except LedgerError as exc:
            raise TaskError(f"the task.posted entry does not verify: {exc}") from exc
        event = entry.event
        requester = event.actor
        task_id = posted_task_id(requester, idempotency_key)
        body = event.body
        escrow_from = escrow_account(body.get("escrow_from") if isinstance(body, Mapping) else None)
        posted = self._posted_again(task_id, requester, spec, idempotency_key, escrow_from)
        if posted is not None:
            return self._opened_if_deposited(posted)
        if event.subject != task_id or body.get("task_id") != task_id:
            raise TaskError(
                f"the entry posts {event.subject!r}, but idempotency key {idempotency_key!r} of "
                f"{requester} names task {task_id} (POST /tasks/prepare gives both)"
            )
        try:
            check_agent_entry(
                entry,
                actor=requester,
                kind=TASK_POSTED,
                subject=task_id,
                body=posted_body(task_id, spec, escrow_from),
                now=self.clock(),
            )
        except ExamError as exc:
            raise TaskError(f"{exc} (sign the body POST /tasks/prepare gives)") from exc
        self._claim_files(requester, spec, task_id)
        for sha in spec.files:
            try:
                self.blobs.get(sha)
            except BlobError as exc:
                raise WorkError(f"file {sha} of the spec is not stored: {exc}") from exc
        # another process may log it with the same key between our look and ours
        with contextlib.suppress(AlreadyLoggedError):
            self.ledger.append_entries([entry], once_keys=[task_id])
        posted = self._posted_again(task_id, requester, spec, idempotency_key, escrow_from)
        assert posted is not None
        try:
            return self._opened_if_deposited(posted)
        except ChainError:  # posted all the same: the lifecycle looks at the chain again
            return posted

    def prepare_post(
        self, requester: str, spec: TaskSpec, escrow_from: str, idempotency_key: str
    ) -> tuple[str, dict[str, Any]]:
        """The task id and the `task.posted` body a requester holding its own key signs to
        post `spec`, its escrow paid from `escrow_from` (see `post_signed`). Logs nothing.

        Raises TaskError for an account that is not an Ethereum address or a bad key, WorkError
        as `require_checkable`.
        """
        self.require_checkable(spec, requester)
        task_id = posted_task_id(requester, idempotency_key)
        return task_id, posted_body(task_id, spec, escrow_account(escrow_from))

    def _posted_again(
        self,
        task_id: str,
        requester: str,
        spec: TaskSpec,
        key: str,
        escrow_from: str | None = None,
    ) -> Task | None:
        """The task an idempotency key already posted, or None. Raises IdempotencyConflict
        when it was posted with another spec (or, when given, from another account)."""
        try:
            task = self.task(task_id)
        except TaskError:
            return None
        if task.requester != requester or task.spec.to_json() != spec.to_json():
            raise IdempotencyConflict(key, task_id)
        if escrow_from is not None and self.escrow_from(task_id) != escrow_from:
            raise IdempotencyConflict(key, task_id)
        return task

    def escrow_from(self, task_id: str) -> str | None:
        """The account `task.posted` names to escrow the budget from (None: no such task)."""
        found = self.ledger.store.find(kind=TASK_POSTED, subject=task_id, limit=1)
        if not found:
            return None
        value = Entry.from_bytes(found[0].data).event.body.get("escrow_from")
        return value if isinstance(value, str) else None

    def escrow_call(self, task: Task) -> dict[str, Any]:
        """The transaction that opens `task`'s escrow, for the requester's own wallet to sign
        and send: `TaskEscrow.open(task_id_hash, deadline)` from `escrow_from` with the
        budget as its value, the deadline the task's delivery deadline (unix seconds)."""
        from accord.market.escrow.values import OPEN_SIGNATURE, open_calldata, task_id_hash

        deadline = escrow_deadline(task)
        return {
            "chain_id": self.escrow.chain_id(),
            "to": self.escrow.escrow_address(),
            "data": "0x" + open_calldata(task.task_id, deadline).hex(),
            "value": str(task.spec.budget),
            "from": self.escrow_from(task.task_id),
            "function": OPEN_SIGNATURE,
            "task_id_hash": "0x" + task_id_hash(task.task_id).hex(),
            "deadline": deadline,
        }

    def _deposit_seen(self, task: Task) -> bool:
        """Whether `task`'s own deposit is on chain: an open escrow under its key from the
        account its requester signed, of its budget, with its deadline (`deposit_mismatch`).
        An escrow that is not (a stranger's, a wrong amount or deadline) is kept in
        `unmatched_deposits` with the reason, and logged once."""
        deposit = self.escrow.deposit_record(task.task_id)
        if deposit is None:
            return False
        problem = deposit_mismatch(task, self.escrow_from(task.task_id), deposit)
        if problem is None:
            self.unmatched_deposits.pop(task.task_id, None)
            return True
        if self.unmatched_deposits.get(task.task_id) != problem:
            log.warning("%s", problem)
        self.unmatched_deposits[task.task_id] = problem
        return False

    def _opened_if_deposited(self, task: Task) -> Task:
        """`task`, with its `escrow.opened` logged if it is posted and its deposit is on
        chain (once: a second one is refused by the log)."""
        if task.state != "posted" or task.escrowed or not self._deposit_seen(task):
            return task
        with contextlib.suppress(AlreadyLoggedError):  # another process logged it first
            self._log_escrow_opened(task, EscrowReceipt("recovered", 0))
        return self.task(task.task_id)

    def _escrowed(self, task: Task, requester_key: str) -> Task:
        """`task`, its escrow opened if a crash or a failed deposit left it `posted`."""
        if task.state == "posted" and not task.escrowed:
            return self.escrow_task(task.task_id, requester_key=requester_key)
        return task

    def warnings(self, spec: TaskSpec) -> list[str]:
        """What a requester should know before its task takes bids: capabilities nobody holds
        a credential for yet (nobody could bid unless an agent is credentialed in time)."""
        return [
            f"no agent holds a credential for {capability} yet: nobody can bid until one is "
            f"credentialed (`accord agent onboard NAME -c {capability}`)"
            for capability in spec.capabilities
            if self.onboarding.holder_count(capability) == 0
        ]

    def spec_from_request(
        self, data: Any, *, budget: Wei | None = None, requester: str | None = None
    ) -> TaskSpec:
        """A spec from a requester's request, its `{"$file": sha256}` references read from the
        blob store (uploaded first with `upload_file`). With the `requester`'s DID, a file it
        does not hold is refused before its bytes are read (`post` refuses it in any case).
        Raises WorkError naming the JSON path, TaskError or AmountError."""
        files: dict[str, tuple[str, str]] = {}
        parts = data.get("parts") if isinstance(data, Mapping) else None
        for k, part in enumerate(parts if isinstance(parts, list) else []):
            refs = file_refs(part.get("input") if isinstance(part, Mapping) else None)
            if requester is not None:
                for sha in self.blobs.held(requester, refs, self.clock())[:1]:
                    raise not_held(sha, f"$.parts[{k}]")
            for sha in refs:
                try:
                    files[sha] = (sha[:12], self.blobs.text(sha))
                except BlobError as exc:
                    raise WorkError(
                        f"$.parts[{k}].input: {exc} (store the file first)", path=f"$.parts[{k}]"
                    ) from exc
        return spec_from_request(data, files, budget=budget)

    def upload_file(self, holder: str, data: bytes, quota: FileQuota | None = None) -> Upload:
        """Store a file `holder` (a requester) may name in its task specs, held until
        `quota.ttl` seconds from now unless a posted task names it. Raises QuotaExceeded
        (nothing stored) over the quota, BlobError."""
        return self.blobs.upload(data, holder=holder, now=self.clock(), quota=quota)

    def _claim_files(self, requester: str, spec: TaskSpec, task_id: str) -> None:
        """Keep the spec's files for the task; WorkError naming the first one the requester
        does not hold (nothing is kept then)."""
        missing = self.blobs.claim(requester, list(spec.files), task_id, self.clock())
        if missing:
            where = next(
                (
                    f"$.parts[{k}]"
                    for k, part in enumerate(spec.parts)
                    if missing[0] in file_refs(part.input)
                ),
                "$.parts",
            )
            raise not_held(missing[0], where)

    def keep_sealed(self, sealed: Sealed) -> None:
        """Keep a sealed output or evaluator exchange (`accord.ledger.sealing`) in the blob store,
        where its commitment is its name; nobody reads it there but through
        `accord.market.privacy`'s rules. Raises WorkError over the size limit, BlobError."""
        self.blobs.put(sealed.data, name="a sealed output")

    def sealed_bytes(self, commitment: str) -> bytes | None:
        """The sealed bytes the log names as `commitment`, or None where this service does
        not hold them. Raises BlobError when they were altered or cannot be read."""
        return self.blobs.sealed(commitment)

    def file_text(self, task: Task, digest: str) -> str:
        """The text of one of the task's input files. Raises TaskError when the task names no
        such file, BlobError when it is missing or altered."""
        if digest not in task.spec.files:
            raise TaskError(f"{task.task_id} has no file {digest}")
        return self.blobs.text(digest)

    def escrow_task(self, task_id: str, *, requester_key: str) -> Task:
        """Deposit a posted task's budget (idempotent: an escrowed task is returned as is)."""
        task = self.task(task_id)
        if task.escrowed:
            return task
        receipt = self.escrow.open(task_id, task.escrow_deadline, task.spec.budget, requester_key)
        self._log_escrow_opened(task, receipt)
        return self.task(task_id)

    def _log_escrow_opened(self, task: Task, receipt: EscrowReceipt) -> None:
        self.ledger.append(
            self.ledger.operator,
            ESCROW_OPENED,
            subject=task.task_id,
            body={
                "task_id": task.task_id,
                "deposit": str(task.spec.budget),
                "tx_hash": receipt.tx_hash,
                "block_number": receipt.block_number,
            },
        )

    def _refund(self, task: Task) -> None:
        deposit = self.escrow.deposit_of(task.task_id)
        if deposit is not None and deposit[1]:
            receipt = self.escrow.refund_to_requester(task.task_id)
        else:
            receipt = EscrowReceipt("recovered", 0)
        self.ledger.append(
            self.ledger.operator,
            ESCROW_REFUNDED,
            subject=task.task_id,
            body={
                "task_id": task.task_id,
                "amount": str(task.spec.budget),
                "tx_hash": receipt.tx_hash,
                "block_number": receipt.block_number,
            },
        )

    def recover(self) -> list[str]:
        """Bring task records level with the chain after a crash between the two, or after a
        requester's own deposit: a posted task whose deposit is on chain (`_deposit_seen`:
        from its `escrow_from`, its budget, its deadline) gets its `escrow.opened`, and one
        whose key holds any other escrow stays posted (`unmatched_deposits`); an expired task
        gets its
        refund made (at most once: the escrow refuses a second payout) and logged. Returns
        the ids of the tasks it moved on."""
        moved = []
        stuck = [*self.iter_tasks(state="posted"), *self.iter_tasks(state="expired")]
        for task in stuck:
            if task.state == "posted":
                if self._deposit_seen(task):
                    self._log_escrow_opened(task, EscrowReceipt("recovered", 0))
                    moved.append(task.task_id)
            elif task.state == "expired":
                self._refund(task)
                moved.append(task.task_id)
        posted = {task.task_id for task in stuck if task.state == "posted"}
        for task_id in set(self.unmatched_deposits) - posted:  # cancelled meanwhile
            self.unmatched_deposits.pop(task_id, None)
        return moved

    def cancel(self, requester: Signer, task_id: str) -> Task:
        """End a posted task whose escrow never opened (its deposit failed or never mined),
        signed by its requester; a task whose deposit is on chain after all gets its
        `escrow.opened` instead, and the cancellation is refused.

        Raises TaskError for an unknown task or another signer than the requester,
        TransitionError unless the task is `posted`, ChainError when the chain cannot say.
        """
        self._cancellable(requester.did, task_id)
        self.ledger.append(requester, TASK_CANCELLED, subject=task_id, body={"task_id": task_id})
        return self.task(task_id)

    def cancel_signed(self, entry: Entry) -> Task:
        """`cancel`, with the `task.cancelled` entry the requester signed itself (body
        `{"task_id"}`, subject the task id). A task whose key on chain holds an escrow that is
        not its deposit (a stranger front-ran the opening) can be cancelled: its requester then
        posts again under a new idempotency key, so a new task id.

        Raises TaskError for an entry that does not verify or is not that cancellation, and
        what `cancel` raises.
        """
        event = entry.event
        task_id = event.subject
        self._cancellable(event.actor, task_id)
        try:
            check_agent_entry(
                entry,
                actor=event.actor,
                kind=TASK_CANCELLED,
                subject=task_id,
                body={"task_id": task_id},
                now=self.clock(),
            )
        except ExamError as exc:
            raise TaskError(str(exc)) from exc
        self.ledger.append_entries([entry])
        return self.task(task_id)

    def close_unfunded(self, task_id: str) -> Task:
        """End a posted task whose deposit is still not on chain when its bidding window has
        ended: `task.closed`, signed by the operator, with the reason. The chain is read first:
        a deposit that came after all gets its `escrow.opened` instead (the auction then finds
        no bid, and the deposit is refunded). A deposit made after the close is not the
        service's to watch: the escrow contract refunds it to its depositor after its deadline.
        Returns the task as it is then (`closed`, or escrowed).

        Raises TransitionError unless the task is posted, TaskError before its bidding window
        ends, ChainError when the chain cannot say.
        """
        task = self.task(task_id)
        if task.state != "posted":
            raise TransitionError(task_id, task.state, "closed")
        if self.clock() < task.bidding_ends:
            raise TaskError(
                f"{task_id} may be funded until its bidding window ends at "
                f"{task.bidding_ends.isoformat()}"
            )
        task = self._opened_if_deposited(task)
        if task.state != "posted":
            return task
        self.ledger.append(
            self.ledger.operator,
            TASK_CLOSED,
            subject=task_id,
            body={
                "task_id": task_id,
                "reason": UNFUNDED_REASON,
                "bidding_ends": task.bidding_ends.isoformat(),
            },
        )
        self.unmatched_deposits.pop(task_id, None)
        return self.task(task_id)

    def _cancellable(self, requester: str, task_id: str) -> Task:
        """The posted task `requester` may cancel; its `escrow.opened` is logged instead when
        its deposit is on chain after all. Raises what `cancel` raises."""
        task = self.task(task_id)
        if requester != task.requester:
            raise TaskError(f"only its requester {task.requester} may cancel {task_id}")
        task = self._opened_if_deposited(task)
        if task.state != "posted":
            raise TransitionError(task_id, task.state, "cancelled")
        return task

    def commit(self, commitment: sealed.Commitment) -> int:
        """Admit and log a signed commitment, with the bidder's exam score at commit time.

        Raises BidRejected with its reason (an unknown task is `wrong-task`).
        """
        task, book = self._task_for_bid(commitment.task_id)
        now = self.clock()
        scores = self._exam_scores(commitment.bidder, task.spec.capabilities)
        sealed.check_commitment(
            commitment,
            terms=self._terms(task),
            committed=book.commitments.keys(),
            eligible=all(score is not None for score in scores),
            now=now,
        )
        exam_score = _mean_score(scores)
        body = {"commitment": commitment.to_json(), "exam_score": str(exam_score)}
        return self._log_bid(BID_COMMITTED, task.task_id, commitment.bidder, body)

    def reveal(self, reveal: sealed.Reveal) -> int:
        """Admit and log a signed reveal. Raises BidRejected with its reason."""
        task, book = self._task_for_bid(reveal.task_id)
        sealed.check_reveal(
            reveal,
            terms=self._terms(task),
            commitments={bidder: c.commitment for bidder, c in book.commitments.items()},
            revealed=book.reveals.keys(),
            now=self.clock(),
        )
        return self._log_bid(
            BID_REVEALED, task.task_id, reveal.bidder, {"reveal": reveal.to_json()}
        )

    def award(self, task_id: str) -> AuctionOutcome:
        """Clear the auction once both windows are over; log the award, or the expiry and the
        refund when no valid bid was revealed.

        Raises AuctionError while the windows are open, TransitionError when already cleared.
        """
        task = self.task(task_id)
        now = self.clock()
        if task.state != "bidding":
            raise TransitionError(task_id, task.state, "awarded")
        if now < task.reveal_ends:
            raise AuctionError(
                f"task {task_id} reveals bids until {task.reveal_ends.isoformat()}; "
                "award it after that"
            )
        outcome, forfeits = self.replay_auction(task)
        if outcome.winner is None:
            self.ledger.append(
                self.ledger.operator,
                TASK_EXPIRED,
                subject=task_id,
                body={"task_id": task_id, "forfeited": forfeits},
            )
            self._refund(self.task(task_id))
            return outcome
        self.ledger.append(
            self.ledger.operator,
            TASK_AWARDED,
            subject=task_id,
            body=award_body(task_id, outcome, forfeits),
        )
        return outcome

    def expire_undelivered(self, task_id: str) -> Task:
        """End a task its winner did not deliver by the delivery deadline: `task.expired`
        (naming the winner as forfeited, which its track record counts) and the whole deposit
        refunded to the requester. Nothing is paid: no work was handed in.

        Raises TransitionError unless the task is awarded or running, TaskError before the
        deadline, and what the refund raises (EscrowError, ChainError: `recover` finishes a
        refund a crash or the chain left undone).
        """
        task = self.task(task_id)
        if task.state not in ("awarded", "running"):
            raise TransitionError(task_id, task.state, "expired")
        if self.clock() < task.delivery_deadline:
            raise TaskError(
                f"{task_id} may be delivered until {task.delivery_deadline.isoformat()}"
            )
        self.ledger.append(
            self.ledger.operator,
            TASK_EXPIRED,
            subject=task_id,
            body={
                "task_id": task_id,
                "reason": "not delivered by the deadline",
                "forfeited": [] if task.winner is None else [task.winner],
            },
        )
        self._refund(self.task(task_id))
        return self.task(task_id)

    def last_activity(self, task: Task) -> datetime:
        """When the task last moved or its winner last signed anything: the time of the
        newest entry about the task (its award, its start, its delivery) or signed by its
        winner (the leader's moves, which every team move is followed by). Raises StoreError
        when the log cannot be read, MalformedError for an entry that does not parse."""
        newest = self.ledger.store.find(subject=task.task_id, newest_first=True, limit=1)
        if task.winner is not None:
            newest += self.ledger.store.find(actor=task.winner, newest_first=True, limit=1)
        times = [parse_time(Entry.from_bytes(stored.data).event.at) for stored in newest]
        return max(times, default=task.posted_at)

    def expire_silent(self, task_id: str, silence: timedelta) -> Task:
        """End a task whose leader went away before its delivery deadline: awarded or running,
        and nothing about it logged nor signed by its winner for `silence` (`last_activity`).
        It ends as one not delivered by the deadline does (`task.expired` naming the winner
        as forfeited, the whole deposit refunded), with the reason.

        Raises TransitionError unless the task is awarded or running, TaskError when its
        leader was heard from within `silence`, and what the refund raises."""
        task = self.task(task_id)
        if task.state not in ("awarded", "running"):
            raise TransitionError(task_id, task.state, "expired")
        last = self.last_activity(task)
        if self.clock() - last < silence:
            raise TaskError(f"{task_id}'s leader was heard from at {last.isoformat()}")
        self.ledger.append(
            self.ledger.operator,
            TASK_EXPIRED,
            subject=task_id,
            body={
                "task_id": task_id,
                "reason": (
                    f"its leader went away: nothing of it logged since {last.isoformat()} "
                    f"({int(silence.total_seconds())} s of silence)"
                ),
                "forfeited": [] if task.winner is None else [task.winner],
            },
        )
        self._refund(self.task(task_id))
        return self.task(task_id)

    def start(self, task_id: str, winner: Signer) -> Task:
        """The winner starts the awarded work (`task.started`, signed by the winner).

        Raises TransitionError unless the task is awarded, TaskError when `winner` did not win.
        """
        task = self.task(task_id)
        if task.state != "awarded":
            raise TransitionError(task_id, task.state, "started")
        if winner.did != task.winner:
            raise TaskError(f"{winner.did} did not win {task_id}; {task.winner} did")
        self.ledger.append(winner, TASK_STARTED, subject=task_id, body={"task_id": task_id})
        return self.task(task_id)

    def deliver(
        self,
        task_id: str,
        winner: Signer,
        conversation_id: str,
        deliverable: Mapping[str, Any],
        document: Mapping[str, Any],
    ) -> Task:
        """The winner hands in what its team concluded (`deliverable`: the members' signed
        reports) and the deliverable it assembled from them (`document`: its plan and every
        part's output and producer), stored content-addressed; `task.delivered` names its hash.

        Raises TransitionError unless the task is running, TaskError when `winner` did not win
        or the delivery deadline has passed, WorkError when the document is over the size
        limit.
        """
        task = self.task(task_id)
        if task.state != "running":
            raise TransitionError(task_id, task.state, "delivered")
        if winner.did != task.winner:
            raise TaskError(f"{winner.did} did not win {task_id}; {task.winner} did")
        check_in_time(task, self.clock())
        data = canonical_json(dict(document))
        digest = self.blobs.put(data, name="the deliverable")
        self.ledger.append(
            winner,
            TASK_DELIVERED,
            subject=task_id,
            body={
                "task_id": task_id,
                "conversation": conversation_id,
                "deliverable": deliverable,
                "document": dict(document),
                "sha256": digest,
            },
        )
        return self.task(task_id)

    def delivered_document(self, task_id: str) -> dict[str, Any]:
        """The deliverable the contract holder signed: its plan and each part's output and
        producer, read from the content-addressed store and checked against the hash in
        `task.delivered`. Raises TaskError before delivery, BlobError when it was altered."""
        found = self.ledger.store.find(kind=TASK_DELIVERED, subject=task_id, limit=1)
        if not found:
            raise TaskError(f"{task_id} has not been delivered yet")
        body = Entry.from_bytes(found[0].data).event.body
        digest = str(body.get("sha256", ""))
        data = self.blobs.get(digest)
        if sha256_hex(canonical_json(dict(body.get("document", {})))) != digest:
            raise BlobError(f"the delivery of {task_id} does not match its hash {digest}")
        document: dict[str, Any] = dict(json.loads(data))
        return document

    def review(
        self,
        requester: Signer,
        task_id: str,
        check_id: str,
        verdict: str,
        reason: str | None = None,
        *,
        bond_key: str | None = None,
    ) -> int:
        """The requester accepts or rejects one review check of a delivered task, within the
        review window, once (`review.given`). Returns the entry's index.

        A rejection opens a dispute (see `accord.market.work`): it needs a `reason`, the escrow
        must hold the dispute fee of every rejection beyond the price (with `bond_key`, the
        requester's own account key, what is missing is bonded from it first:
        `TaskEscrow.bond`), and the service must have an evaluator (a panel it can draw, or
        the judge model at `ACCORD_JUDGE_URL` with the rest of a panel) to decide it. The
        rejection names the chain's head block (`after_block`): the panel is drawn with the
        hash of the next one.

        Raises TaskError for someone else than the requester, a check that is not a review
        check, a second review, a window that has ended, a rejection without a reason, beyond
        what the escrow holds or with no evaluator; TransitionError before delivery;
        EscrowError when the bond is refused.
        """
        if verdict == "reject" and bond_key is not None:
            task = self.task(task_id)
            short = bond_shortfall(task, self._reviews_given(task_id), self.escrow.bonded(task_id))
            if short > 0 and (reason or "").strip():
                total = Wei(self.escrow.bonded(task_id) + short)
                self.escrow.bond(task_id, Wei(short), total, bond_key)
        body = self._review_body(requester.did, task_id, check_id, verdict, reason, None)
        index, _ = self.ledger.append(requester, REVIEW_GIVEN, subject=task_id, body=body)
        return index

    def answer_dispute(self, entry: Entry, *, answer_key: str | None = None) -> int:
        """A team member answers the requester's rejection of a review check with a bond of
        its own (`accord.market.disputes`): `entry` is its signed `dispute.answered`
        (`{"task_id", "check", "account", "amount"}`). With `answer_key` (the member's own
        account key, a hosted agent's payout key), what the escrow does not hold yet from that
        account is sent first (`TaskEscrow.answer`); otherwise the member sent it itself.
        Returns the entry's index.

        Raises TaskError for a task that is not delivered, a signer not on the team, no
        rejection to answer, a closed window, an amount under the dispute's fee, a second
        answer, a bond the escrow does not hold, an entry that does not verify, or a key
        that is not the account's; EscrowError when the escrow refuses the bond.
        """
        task_id = entry.event.subject
        task = self.task(task_id)
        if task.state != "delivered":
            raise TaskError(f"{task_id} is {task.state}: only a delivered task's disputes")
        bond = None
        if answer_key is not None:
            key = answer_key
            account = str(entry.event.body.get("account", ""))
            try:
                mine = address_of(key)
            except ValueError as exc:
                raise TaskError(f"the answer key is not a hex private key: {exc}") from exc
            if mine.lower() != account.lower():
                raise TaskError(f"the answer key is not the account {account}'s")

            def bond(account: str, staked: int, held: int) -> None:
                self.escrow.answer(task_id, Wei(staked - held), Wei(staked), key)

        return self.panels.answer(task, entry, lambda a: self.escrow.answered(task_id, a), bond)

    def review_signed(self, entry: Entry) -> int:
        """`review`, with the `review.given` entry the requester signed itself: its body is
        exactly what `review` would log (`{"task_id", "check", "verdict"}`, and for a
        rejection its `reason`, stripped, the dispute `fee` and `after_block`: a block at
        most `AFTER_BLOCK_AHEAD` past the chain's head, not before it). Returns the entry's
        index. A requester whose price leaves no room for the fee bonds it first from its
        own account (`TaskEscrow.bond`).

        Raises TaskError for an entry that does not verify or is not that body, and what
        `review` raises.
        """
        event = entry.event
        body = event.body
        reason = body.get("reason")
        after = body.get("after_block")
        expected = self._review_body(
            event.actor,
            event.subject,
            str(body.get("check", "")),
            str(body.get("verdict", "")),
            reason if isinstance(reason, str) else None,
            after if isinstance(after, int) and not isinstance(after, bool) else None,
        )
        try:
            check_agent_entry(
                entry,
                actor=event.actor,
                kind=REVIEW_GIVEN,
                subject=event.subject,
                body=expected,
                now=self.clock(),
            )
        except ExamError as exc:
            raise TaskError(str(exc)) from exc
        (index,) = self.ledger.append_entries([entry])
        return index

    def _reviews_given(self, task_id: str) -> list[Mapping[str, Any]]:
        return [
            Entry.from_bytes(stored.data).event.body
            for stored in self.ledger.store.find(kind=REVIEW_GIVEN, subject=task_id, limit=1000)
        ]

    def _review_body(
        self,
        requester: str,
        task_id: str,
        check_id: str,
        verdict: str,
        reason: str | None,
        after_block: int | None,
    ) -> dict[str, Any]:
        """What `review.given` logs for this review; raises what `review` raises."""
        task = self.task(task_id)
        if task.state != "delivered":
            raise TransitionError(task_id, task.state, "reviewed")
        if requester != task.requester:
            raise TaskError(f"only the requester of {task_id} reviews its work")
        if verdict not in ("accept", "reject"):
            raise TaskError(f"a review is accept or reject, not {verdict!r}")
        checks = {c.check_id: c for c in task.spec.requester_checks}
        contestable = self.previewed(task_id) or {}
        if checks.get(check_id) is not None and checks[check_id].kind == "python":
            if check_id not in contestable:
                raise TaskError(
                    f"python check {check_id} of {task_id} decides from the outputs: only one "
                    "this service found inconclusive (`checks.previewed` names it) is contested"
                )
            if verdict != "reject":
                raise TaskError(
                    f"python check {check_id} is inconclusive and counts as passed unless it "
                    "is contested: a review of it is a rejection, with a reason"
                )
        elif checks.get(check_id) is None or checks[check_id].kind != "review":
            reviews = sorted(c for c, check in checks.items() if check.kind == "review")
            raise TaskError(
                f"{check_id!r} is not a review check of {task_id} (review checks: "
                f"{', '.join(reviews) or 'none'}"
                + (
                    f"; inconclusive python checks: {', '.join(sorted(contestable))}"
                    if contestable
                    else ""
                )
                + ")"
            )
        ends = task.review_ends
        if ends is not None and self.clock() > ends:
            raise TaskError(f"the review window of {task_id} ended at {ends.isoformat()}")
        given = self._reviews_given(task_id)
        if any(body.get("check") == check_id for body in given):
            raise TaskError(f"{check_id} of {task_id} is already reviewed")
        body: dict[str, Any] = {"task_id": task_id, "check": check_id, "verdict": verdict}
        if verdict == "reject":
            body |= rejection_terms(task, reason, given, self.escrow.bonded(task_id))
            body["after_block"] = self._after_block(after_block)
            self._has_evaluator(task, checks[check_id].reads)
        return body

    def previewed(self, task_id: str) -> dict[str, str] | None:
        """The python checks of `task_id` the operator's `checks.previewed` names
        inconclusive (check id -> detail), or None when it logged none."""
        found = self.ledger.store.find(kind=CHECKS_PREVIEWED, subject=task_id, limit=1)
        if not found:
            return None
        event = Entry.from_bytes(found[0].data).event
        if event.actor != self.ledger.operator.did:
            return None
        named = event.body.get("inconclusive")
        return {str(c): str(d) for c, d in named.items()} if isinstance(named, Mapping) else {}

    def _after_block(self, named: int | None) -> int:
        """The block a rejection names: the chain's head, or what the requester named when it
        is not behind the head nor more than `AFTER_BLOCK_AHEAD` past it."""
        head = self.escrow.block_number()
        if named is None:
            return head
        if not head <= named <= head + AFTER_BLOCK_AHEAD:
            raise TaskError(
                f"a rejection names the chain's head block as after_block ({head}), not "
                f"{named}: the panel is drawn with the hash of the block after it"
            )
        return named

    def _has_evaluator(self, task: Task, reads: Sequence[str]) -> None:
        """Raises TaskError when no panel could decide a dispute over `reads` now."""
        try:
            judge = judge_from_env()
        except RegistryError as exc:  # the operator's setting, not the requester's fault
            raise TaskError(
                f"this service's evaluator is misconfigured ({exc}), so a rejection cannot "
                "be judged now: accept the work, or reject later once the operator fixes it"
            ) from exc
        found = self.ledger.store.find(kind=TASK_DELIVERED, subject=task.task_id, limit=1)
        delivered = Entry.from_bytes(found[0].data).event.body if found else None
        if not has_evaluator(
            self.ledger,
            requester=task.requester,
            capabilities=capabilities_read(part_capabilities(task), reads),
            team=team_of(task, delivered),
            judge=judge is not None,
            at=self.clock(),
        ):
            # A dispute nobody can decide would hold the team's pay until the escrow's
            # deadline hands the whole deposit back to the requester: refused instead.
            raise TaskError(
                "this service has no evaluator to decide a dispute: too few independent "
                "agents (self-custody, credentialed in the parts' capabilities, live, outside "
                "both parties' circles) to draw a panel"
                + ("" if judge is not None else ", and no judge model (ACCORD_JUDGE_URL)")
                + ", so a rejection is refused: accept the work, or let the review window end"
            )

    def replay_auction(self, task: Task) -> tuple[AuctionOutcome, list[str]]:
        """The auction as the log determines it (see `replay_award`)."""
        book = self._book(task.task_id)
        reputations = self.reputations(book.reveals.keys(), task.spec.capabilities)
        return replay_award(
            task, list(book.commitments.values()), list(book.reveals.values()), reputations
        )

    # -- internals -----------------------------------------------------------------------

    def _task_entries(self, task_id: str) -> list[StoredEntry]:
        return task_entries(self.ledger.store, task_id)

    def _book(self, task_id: str) -> BidBook:
        """The task's admitted bids, read incrementally from the log (append-only)."""
        return self._task_log(task_id)[1]

    def _task_log(self, task_id: str) -> tuple[Task | None, BidBook]:
        """The task (None before it is posted) and its admitted bids, from what this process
        knows of the task brought level with the log: the entries after the last one it
        read, lifecycle and bids alike, in one query (a page of `_BOOK_PAGE` at a time).
        Entries are appended in index order under the head lock, so none can appear later
        below the last index read. The threads of a process share what it knows: one at a
        time per task brings it level (bids on other tasks do not wait for its query), and
        each gets its own copy of the book. An id with nothing posted under it is not kept."""
        with self._bidding_lock:
            known = self._bidding.setdefault(task_id, _TaskLog())
        with known.lock:
            while True:
                found = self.ledger.store.find(
                    kinds=TASK_KINDS, subject=task_id, after=known.last_index, limit=_BOOK_PAGE
                )
                for stored in found:
                    known.add(stored)
                if len(found) < _BOOK_PAGE:  # a short page is the end of the log
                    task = known.task()
                    if task is None:
                        # nothing is posted under this id: keep nothing for it, or a caller
                        # naming ids at random would grow this process's memory without end
                        with self._bidding_lock:
                            self._bidding.pop(task_id, None)
                    return task, known.book.copy()

    def _log_bid(self, kind: str, task_id: str, bidder: str, body: dict[str, Any]) -> int:
        """Log an admitted commitment or reveal, once per task and bidder whichever process
        admits it: the store refuses a second one under the same key, even when two services
        admitted the same bid at the same moment. Raises BidRejected (second-bid) then."""
        try:
            index, _ = self.ledger.append(
                self.ledger.operator,
                kind,
                subject=task_id,
                body=body,
                once_key=f"{task_id} {bidder}",
            )
        except AlreadyLoggedError as exc:
            what = "committed to" if kind == BID_COMMITTED else "revealed on"
            raise BidRejected("second-bid", f"{bidder} has already {what} task {task_id}") from exc
        return index

    def _task_for_bid(self, task_id: str) -> tuple[Task, BidBook]:
        """The task a bid names and its admitted bids. Raises BidRejected (wrong-task) when
        there is no such task."""
        task, book = self._task_log(task_id)
        if task is None:
            raise BidRejected("wrong-task", f"no task {task_id!r} (see `accord task list`)")
        return task, book

    def _terms(self, task: Task) -> sealed.SealedTerms:
        return sealed.SealedTerms(
            task_id=task.task_id,
            budget=task.spec.budget,
            state=task.state,
            bidding_opens=task.posted_at,
            bidding_closes=task.bidding_ends,
            reveal_closes=task.reveal_ends,
            requester=task.requester,
        )


def _mean_score(scores: Sequence[Fraction | None]) -> Fraction:
    """The mean of exam scores, 0 when there are none or one is missing."""
    if not scores or any(score is None for score in scores):
        return Fraction(0)
    return sum((s for s in scores if s is not None), Fraction(0)) / len(scores)


def _reputation_events(store: LogStore, *, before: int | None) -> list[tuple[int, Event]]:
    """The events the track records fold (`accord.market.reputation.track_records_from_events`):
    every `task.settled`, `settlement.computed` (what the task paid: its requester's
    standing), `task.awarded` and `task.expired` before index `before` (all: None), and the
    first posting of each task one of those names a forfeit on. Read from the operator's own
    store, whose entries were checked when appended."""
    events: list[tuple[int, Event]] = []
    for kind in (TASK_SETTLED, SETTLEMENT_COMPUTED, TASK_AWARDED, TASK_EXPIRED):
        for stored in store.find(kind=kind, limit=MAX_TASK_EVENTS):
            if before is not None and stored.index >= before:
                break
            events.append((stored.index, Entry.from_bytes(stored.data).event))
    forfeiting = {
        event.subject
        for _, event in events
        if event.kind in (TASK_AWARDED, TASK_EXPIRED) and event.body.get("forfeited")
    }
    for task_id in sorted(forfeiting):
        for stored in store.find(kind=TASK_POSTED, subject=task_id, limit=1):
            events.append((stored.index, Entry.from_bytes(stored.data).event))
    return events


def track_records_from_log(store: LogStore, *, before: int | None = None) -> TrackRecords:
    """Every agent's track record from the settled tasks and forfeits logged before index
    `before` (all of the log when None): the entries read from `store`, then the pure fold
    anyone can redo (`accord.market.reputation.track_records_from_events`)."""
    return track_records_from_events(_reputation_events(store, before=before), before=before)


def reputations_from_log(
    store: LogStore,
    dids: Iterable[str],
    capabilities: Sequence[str],
    *,
    before: int | None = None,
) -> dict[str, Fraction]:
    """Each DID's reputation for a task needing `capabilities` from the log before index
    `before`: what the auction scored it by (`accord.market.reputation.reputations_from_events`)."""
    events = _reputation_events(store, before=before)
    return reputations_from_events(events, dids, capabilities, before=before)


MAX_IDEMPOTENCY_KEY = 200


def posted_body(task_id: str, spec: TaskSpec, escrow_from: str) -> dict[str, Any]:
    """What `task.posted` records: the task id, the spec, the account escrowing its budget."""
    return {"task_id": task_id, "spec": spec.to_json(), "escrow_from": escrow_from}


def escrow_account(value: Any) -> str:
    """`value` as a checksummed Ethereum address (EIP-55). Raises TaskError for anything
    else: not 0x and 40 hex digits, a mixed-case address whose checksum is wrong, zero."""
    from eth_utils.address import (
        is_address,
        is_checksum_address,
        is_checksum_formatted_address,
        to_checksum_address,
    )

    wrong_checksum = (
        isinstance(value, str)
        and is_checksum_formatted_address(value)
        and not is_checksum_address(value)
    )
    if not isinstance(value, str) or not is_address(value) or wrong_checksum or int(value, 16) == 0:
        shown = repr(value)[:60]
        raise TaskError(
            f"escrow_from {shown} is not an Ethereum address: 0x and 40 hex digits (mixed "
            "case only as a valid EIP-55 checksum), the account your wallet deposits from"
        )
    return str(to_checksum_address(value))


def check_in_time(task: Task, now: datetime) -> None:
    """Raises TaskError when `task`'s delivery deadline has passed at `now` (the task
    expires instead: `Market.expire_undelivered`)."""
    if now > task.delivery_deadline:
        raise TaskError(
            f"{task.task_id} was to be delivered by {task.delivery_deadline.isoformat()}: too "
            "late (it expires, and its deposit goes back to the requester)"
        )


def escrow_deadline(task: Task) -> int:
    """The deadline a task's escrow is opened with (`Task.escrow_deadline`), unix seconds."""
    return int(task.escrow_deadline.timestamp())


def deposit_mismatch(task: Task, escrow_from: str | None, deposit: EscrowDeposit) -> str | None:
    """Pure: why the escrow `deposit` under `task`'s key is not the task's deposit, or None
    when it is: open, from `escrow_from` (the account its requester signed in `task.posted`;
    None: any), of the budget, refundable after the task's delivery deadline. Anybody can call
    `open` under a task's key first (the id is public): such an escrow never opens bidding."""
    what = f"the escrow under {task.task_id}'s key is not its deposit"
    if not deposit.open:
        return f"{what}: it is no longer open"
    if escrow_from is not None and deposit.requester.lower() != escrow_from.lower():
        return (
            f"{what}: {deposit.requester} opened it, not {escrow_from}, the account its "
            "requester signed (cancel the task and post it again under a new key)"
        )
    if deposit.amount != task.spec.budget:
        return f"{what}: it holds {deposit.amount} wei, not the budget {task.spec.budget} wei"
    if deposit.deadline != escrow_deadline(task):
        return (
            f"{what}: its deadline is {deposit.deadline}, not the task's delivery deadline "
            f"{escrow_deadline(task)}"
        )
    return None


def posted_task_id(requester: str, idempotency_key: str | None) -> str:
    """A new task's id: random, or, with an idempotency key, derived from the requester's DID
    and the key (so a retried posting names the same task). Raises TaskError for a key that is
    empty, longer than 200 characters or not printable ASCII."""
    if idempotency_key is None:
        return f"task-{uuid.uuid4().hex[:16]}"
    key = idempotency_key
    if not 0 < len(key) <= MAX_IDEMPOTENCY_KEY or not key.isascii() or not key.isprintable():
        raise TaskError(
            f"an idempotency key is 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters, "
            f"not {key[:40]!r}"
        )
    digest = hashlib.sha256(f"accord/task-id/v1\n{requester}\n{key}".encode()).hexdigest()
    return f"task-{digest[:16]}"


def award_body(task_id: str, outcome: AuctionOutcome, forfeits: list[str]) -> dict[str, Any]:
    """What `task.awarded` records: enough for an auditor to replay the auction."""
    assert outcome.winner is not None
    return {
        "task_id": task_id,
        "winner": outcome.winner.bidder,
        "price": str(outcome.price),
        "rule": outcome.rule,
        "runner_up": None if outcome.runner_up is None else outcome.runner_up.bidder,
        "ranking": [
            {
                "bidder": scored.bid.bidder,
                "price": str(scored.bid.price),
                "reputation": str(scored.bid.reputation),
                "exam_score": str(scored.bid.exam_score),
                "score": str(scored.score),
            }
            for scored in outcome.ranking
        ],
        "forfeited": forfeits,
    }


def not_held(sha: str, path: str) -> WorkError:
    """The refusal of a spec naming a file its requester does not hold. The same whether
    somebody else uploaded it or nobody did, so it tells nothing of other requesters' files."""
    return WorkError(
        f"{path}.input: no file {sha} is held for you. A spec may name only files its own "
        "requester uploaded (the same bytes uploaded by somebody else do not count), and an "
        "upload no task names expires (ACCORD_FILE_TTL): upload it yourself (POST /files, or "
        "`accord task post --spec` with the file beside the spec), then post again",
        path=path,
    )
