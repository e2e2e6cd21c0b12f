"""Open, pay out, release, refund and withdraw, never moving money twice (paying out calls
the contract's `settle`; releasing, `release`: a share a settlement held for a payee with no
payout account).

Each action is one transaction of the journal engine (`accord.ledger.txjournal`): signed (nonce and
fees fixed), recorded in an `EscrowJournal` as *pending* with its raw bytes, only then
broadcast, and resolved by the engine (confirmation depth, the same bytes sent again, a stuck
transaction replaced at its nonce, a reorganised one sent again once). What is specific to the
escrow lives here: which call an intent makes, what the contract's state means for it
(`_effect_on_chain`: its effect is there, through one of our transactions at that nonce or
through another's), and the chain *forgetting* a confirmed transaction (anvil restarted from an
older state dump, a deep reorg): `reconcile` first looks for confirmed records the chain no
longer holds (no receipt and no event of theirs, or a superseded one whose effect is gone) and
marks them *forgotten*; a forgotten record is owed: where a pending one would be dropped it is
signed anew (when the actions hold the sender's key), the new record replacing the old in one
journal write, so it is sent again exactly once across crashes.

A payout cannot be paid twice: a signed transaction can be mined once; a new signing happens
only when the journal proves the old one can never be mined and the contract shows the task
still open; and the contract itself refuses a second `settle` (NotOpen).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from accord.ledger.fees import Fees
from accord.ledger.txjournal import (
    DEFAULT_REPLACE_AFTER_S,
    DONE,
    UNRESOLVED,
    JournalStatus,
    OnChain,
    Resolution,
    TxEngine,
    TxRules,
    TxView,
)
from accord.market.escrow.chain import EscrowChain
from accord.market.escrow.journal import EscrowJournal, EscrowTxRecord
from accord.market.escrow.values import (
    EscrowEventName,
    EscrowIntent,
    EscrowPendingError,
    EscrowRefusedError,
    EscrowState,
    EscrowTxKind,
    address_of,
    answer_intent,
    bond_intent,
    open_intent,
    pay_out_intent,
    reclaim_intent,
    refund_intent,
    release_intent,
    withdraw_intent,
)

OutcomeStatus = Literal[
    "confirmed",
    "superseded",
    "already-done",
    "pending",
    "reverted",
    "dropped",
    "forgotten",
    "replaced",
]


@dataclass(frozen=True)
class EscrowOutcome:
    """What one action (or the reconciliation of one record) did."""

    status: OutcomeStatus
    intent: EscrowIntent
    sender: str
    tx_hash: bytes | None = None
    block_number: int | None = None


_DONE: tuple[JournalStatus, ...] = DONE
_EVENT_OF: dict[EscrowTxKind, EscrowEventName] = {
    "open": "Opened",
    "bond": "Bonded",
    "answer": "Answered",
    "reclaim": "Reclaimed",
    "settle": "Settled",
    "release": "Released",
    "refund": "Refunded",
    "withdraw": "Withdrawn",
}


class EscrowActions:
    """Open, pay out, refund and withdraw through an EscrowChain, journalled so that a crash
    between the chain and the record is reconciled on the next start (module docstring).

    Raises ChainUnavailableError when the chain does not answer (a record may stay pending and
    is resolved next time), EscrowRefusedError when the contract refuses, EscrowPendingError
    when the acting account still has an unresolved transaction, FeesAboveCeilingError when
    the fee market is above the ceiling (nothing new is signed or sent).
    """

    def __init__(
        self,
        chain: EscrowChain,
        journal: EscrowJournal,
        *,
        receipt_timeout: float = 30.0,
        confirmations: int = 0,
        keys: Sequence[str] = (),
        replace_after_s: float = DEFAULT_REPLACE_AFTER_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`keys`: private keys the actions may sign anew with, for a transaction the chain
        forgot that cannot be sent again as it was (the operator's key, typically).

        Raises ValueError for a negative `confirmations` or `replace_after_s`."""
        self.chain = chain
        self.journal = journal
        self.receipt_timeout = receipt_timeout
        self.rules = TxRules(
            confirmations=confirmations,
            replace_after_s=replace_after_s,
            fees=chain.fee_policy(),
        )
        self.clock = clock
        self._keys = {address_of(key): key for key in keys}
        self._used: dict[str, str] = {}  # keys seen in this process: a stuck tx may be re-fee'd

    @property
    def confirmations(self) -> int:
        return self.rules.confirmations

    def _engine(self) -> TxEngine:
        return TxEngine(self.chain, self.rules, timeout_s=self.receipt_timeout, clock=self.clock)

    def open(self, key_hex: str, task_id: str, deposit: int, deadline: int) -> EscrowOutcome:
        """Deposit `deposit` wei for `task_id` from the requester's key."""
        return self.perform(key_hex, open_intent(task_id, deposit, deadline))

    def bond(self, key_hex: str, task_id: str, amount: int, total: int) -> EscrowOutcome:
        """Bond `amount` wei more from the requester's key for `task_id`'s disputes, the task's
        bonds then `total` (a bond sent twice reverts instead of bonding twice)."""
        return self.perform(key_hex, bond_intent(task_id, amount, total))

    def answer(self, key_hex: str, task_id: str, amount: int, total: int) -> EscrowOutcome:
        """Answer `task_id`'s disputes with `amount` wei more from the key's own account (a
        team's bond), its answers then `total` (sent twice, it reverts instead of answering
        twice)."""
        return self.perform(key_hex, answer_intent(task_id, amount, total))

    def reclaim(self, key_hex: str, task_id: str) -> EscrowOutcome:
        """Credit the key's account its answer to refunded `task_id`."""
        return self.perform(key_hex, reclaim_intent(task_id))

    def pay_out(
        self, key_hex: str, task_id: str, payees: Sequence[str], amounts: Sequence[int]
    ) -> EscrowOutcome:
        """Pay `amounts` to `payees` from `task_id`'s deposit with the operator's key (the
        contract's `TaskEscrow.settle`)."""
        return self.perform(key_hex, pay_out_intent(task_id, payees, amounts))

    def release(
        self, key_hex: str, task_id: str, payee: str, amount: int, owner: str = ""
    ) -> EscrowOutcome:
        """Credit `amount` wei that settled `task_id` holds for `owner` to `payee`, with the
        operator's key (the contract's `TaskEscrow.release`).

        A release is keyed by its owner: where the journal already holds one for `owner` on
        this task, done or still pending (a crash before the settlement logged it, and the
        owner bound another address since), that one is resolved and returned instead of a
        second being sent, so a share is never released twice. Raises EscrowError."""
        intent = release_intent(task_id, payee, amount, owner)
        if owner:
            for record in self.journal.records(task_id):
                earlier = record.intent
                if (
                    earlier.kind == "release"
                    and earlier.owner == owner
                    and (record.status in _DONE or record.status in UNRESOLVED)
                ):
                    intent = earlier
                    break
        return self.perform(key_hex, intent)

    def refund(self, key_hex: str, task_id: str) -> EscrowOutcome:
        """Refund `task_id` to its requester (the key's account) after the deadline."""
        return self.perform(key_hex, refund_intent(task_id))

    def withdraw(self, key_hex: str) -> EscrowOutcome:
        """Withdraw the key's account's whole credit."""
        return self.perform(key_hex, withdraw_intent())

    def perform(self, key_hex: str, intent: EscrowIntent) -> EscrowOutcome:
        """Reconcile, then sign, record, send and resolve `intent` unless it is already done
        (status "already-done") or still pending from before (that record's outcome)."""
        sender = address_of(key_hex)
        self._used[sender] = key_hex
        self.reconcile()
        pending = self.journal.pending()
        for record in pending:
            if record.intent == intent and record.sender == sender:
                return EscrowOutcome("pending", intent, sender, record.tx_hash)
        for record in pending:
            if record.sender == sender:
                raise EscrowPendingError(
                    f"{sender} has an unresolved escrow {record.intent.kind} "
                    f"(tx 0x{record.tx_hash.hex()}, nonce {record.nonce}); retry later"
                )
        if intent.kind != "withdraw":
            for record in self.journal.records(intent.task_id):
                if record.intent == intent and record.status in _DONE:
                    return EscrowOutcome(
                        "already-done", intent, sender, record.tx_hash, record.block_number
                    )
        return self.send(self.record(key_hex, intent))

    def _signed_record(
        self, key_hex: str, intent: EscrowIntent, nonce: int | None = None, fees: Fees | None = None
    ) -> EscrowTxRecord:
        tx = self.chain.build_tx(key_hex, intent, nonce=nonce, fees=fees)
        return EscrowTxRecord(
            tx_hash=tx.tx_hash,
            intent=intent,
            sender=tx.sender,
            nonce=tx.nonce,
            raw=tx.raw,
            chain_id=self.chain.chain_id(),
            escrow_address=self.chain.escrow_address(),
            sent_at=self.clock(),
        )

    def record(self, key_hex: str, intent: EscrowIntent) -> EscrowTxRecord:
        """Sign `intent` and record it as pending (nothing is sent). The first half of an
        action: `send` is the second."""
        record = self._signed_record(key_hex, intent)
        self.journal.add(record)
        return record

    def send(self, record: EscrowTxRecord) -> EscrowOutcome:
        """Broadcast a recorded transaction, wait for it and record its outcome."""
        txs = _EscrowTxs(self)
        return _outcome(self._engine().send(record, txs, txs))

    def reconcile(self) -> list[EscrowOutcome]:
        """Mark forgotten the records the chain no longer holds, then resolve every
        unresolved record against the chain, oldest first."""
        outcomes = self.find_forgotten()
        txs = _EscrowTxs(self)
        engine = self._engine()
        outcomes.extend(
            _outcome(engine.resolve(record, txs, txs)) for record in self.journal.pending()
        )
        return outcomes

    def find_forgotten(self) -> list[EscrowOutcome]:
        """Mark `forgotten` each record done on chain that the chain no longer holds: a
        confirmed one with neither a receipt nor an event of its own, a superseded one whose
        effect is gone.

        Only the records above the block the last look found whole are looked at, while the
        chain still has that block (its hash commits to every block below it): one block-hash
        query, one event query from that block on, and a receipt query per record missing from
        it. A look that finds nothing forgotten moves that block up to the head less the
        confirmation depth (a block later reorganised away only makes the next look whole)."""
        intact = self._intact_through()
        outcomes = []
        done = self.journal.done_after(intact)
        held = {e.tx_hash for e in self.chain.events(from_block=intact + 1)} if done else set()
        for record in done:
            if record.status == "confirmed":
                if record.tx_hash in held or self.chain.receipt(record.tx_hash) is not None:
                    continue
            elif record.intent.kind == "withdraw" or self._effect_on_chain(record):
                continue  # a withdrawal's effect (a zero credit) cannot be told apart
            self.journal.mark(record.tx_hash, "forgotten", None)
            outcomes.append(
                EscrowOutcome("forgotten", record.intent, record.sender, record.tx_hash)
            )
        if not outcomes:
            self._move_intact(intact)
        return outcomes

    def _intact_through(self) -> int:
        """The block up to which every done record was held at the last look, when the chain
        still has that very block; -1 (look at everything) otherwise."""
        mark = self.journal.intact_through()
        if mark is None:
            return -1
        number, block_hash = mark
        return number if self.chain.block_hash(number) == block_hash else -1

    def _move_intact(self, intact: int) -> None:
        deep = self.chain.block_number() - self.confirmations
        if deep <= intact:
            return
        block_hash = self.chain.block_hash(deep)
        if block_hash is not None:
            self.journal.record_intact(deep, block_hash)

    def _effect_on_chain(self, record: EscrowTxRecord) -> bool:
        intent = record.intent
        if intent.kind == "withdraw":
            return self.chain.credit(record.sender) == 0
        if intent.kind == "release":
            # A task releases each owner's share once, so a Released event for that payee and
            # amount is the release's effect, through whichever twin; two owners sharing one
            # address and amount need one event each.
            def same(other: EscrowIntent) -> bool:
                return other.payees == intent.payees and other.amounts == intent.amounts

            events = sum(
                1
                for event in self.chain.events(intent.task_id)
                if event.name == "Released"
                and event.account == intent.payees[0]
                and event.amount == intent.amounts[0]
            )
            others = {
                r.intent.owner
                for r in self.journal.records(intent.task_id)
                if r.intent.kind == "release"
                and r.intent.owner != intent.owner
                and same(r.intent)
                and r.status in _DONE
            }
            return events > len(others)
        escrow = self.chain.escrow(intent.task_id)
        if escrow is None:
            return False
        if intent.kind in ("bond", "answer", "reclaim"):
            # Settled or refunded, the bonds and answers were paid out with the deposit: only
            # the event that brought the sender's to this total is the bond's (the answer's)
            # effect; a task's answer is reclaimed once, so its Reclaimed event is the reclaim's.
            name = _EVENT_OF[intent.kind]
            return any(
                event.name == name
                and event.account == record.sender
                and event.amounts == intent.amounts
                for event in self.chain.events(intent.task_id)
            )
        if intent.kind == "open":
            return (
                escrow.requester == record.sender
                and escrow.deposit == intent.deposit
                and escrow.deadline == intent.deadline
            )
        wanted = EscrowState.SETTLED if intent.kind == "settle" else EscrowState.REFUNDED
        return escrow.state == wanted

    def _twins(self, record: EscrowTxRecord) -> dict[bytes, EscrowTxRecord]:
        """The record and every record it replaced at the same nonce: at most one is mined."""
        return {
            r.tx_hash: r
            for r in self.journal.records(record.intent.task_id)
            if r.sender == record.sender and r.nonce == record.nonce and r.intent == record.intent
        }

    def _sign_again(
        self, record: EscrowTxRecord, nonce: int | None, fees: Fees | None
    ) -> EscrowTxRecord | None:
        """The record's action signed again: at a new nonce only with a configured key (an owed
        action); at its own nonce (a stuck one re-fee'd) with any key this process used."""
        key = self._keys.get(record.sender)
        if key is None and nonce is not None:
            key = self._used.get(record.sender)
        if key is None:
            return None
        try:
            return self._signed_record(key, record.intent, nonce, fees)
        except EscrowRefusedError:
            return None  # the contract refuses it now: left as it is, the outcome says so


def _outcome(resolution: Resolution[EscrowTxRecord]) -> EscrowOutcome:
    record = resolution.record
    return EscrowOutcome(
        resolution.status, record.intent, record.sender, resolution.tx_hash, resolution.block_number
    )


class _EscrowTxs:
    """The engine's `TxAction` and `TxJournal` for escrow transactions."""

    def __init__(self, actions: EscrowActions) -> None:
        self.actions = actions
        self.chain = actions.chain
        self.journal = actions.journal

    # TxAction

    def view(self, record: EscrowTxRecord) -> TxView:
        return TxView(
            tx_hash=record.tx_hash,
            sender=record.sender,
            nonce=record.nonce,
            status="forgotten" if record.status == "forgotten" else "pending",
            block_number=record.block_number,
            sent_at=record.sent_at,
            fees=self.chain.fees_of(record.raw),
        )

    def on_chain(self, record: EscrowTxRecord) -> OnChain | None:
        if not self.actions._effect_on_chain(record):
            return None
        name = _EVENT_OF[record.intent.kind]
        twins = self.actions._twins(record)
        for event in self.chain.events(record.intent.task_id or None):
            if event.name == name and event.tx_hash in twins:
                return OnChain(event.tx_hash, event.block_number, ours=True)
        return OnChain(b"", 0, ours=False)

    def broadcast(self, record: EscrowTxRecord) -> None:
        self.chain.broadcast(record.signed())

    def sign(
        self, record: EscrowTxRecord, nonce: int | None, fees: Fees | None
    ) -> EscrowTxRecord | None:
        return self.actions._sign_again(record, nonce, fees)

    # TxJournal

    def seen(self, record: EscrowTxRecord, block_number: int) -> EscrowTxRecord:
        self.journal.mark(record.tx_hash, record.status, block_number)
        return replace(record, block_number=block_number)

    def confirm(self, record: EscrowTxRecord, tx_hash: bytes, block_number: int) -> None:
        self.journal.mark(tx_hash, "confirmed", block_number)
        if tx_hash != record.tx_hash:  # a twin it replaced was mined: this one never can be
            self.journal.mark(record.tx_hash, "replaced", None)

    def superseded(self, record: EscrowTxRecord) -> None:
        self.journal.mark(record.tx_hash, "superseded", None)

    def reverted(self, record: EscrowTxRecord, block_number: int) -> None:
        self.journal.mark(record.tx_hash, "reverted", block_number)

    def reopen(self, record: EscrowTxRecord) -> EscrowTxRecord:
        self.journal.mark(record.tx_hash, "forgotten", None)
        return replace(record, status="forgotten", block_number=None)

    def drop(self, record: EscrowTxRecord) -> None:
        self.journal.mark(record.tx_hash, "dropped", None)

    def swap(self, old: EscrowTxRecord, new: EscrowTxRecord, same_nonce: bool) -> bool:
        del same_nonce  # the old record stays, "replaced": the engine still follows it
        return self.journal.replace(old.tx_hash, new)
