"""Anchoring checkpoints on the chain, without ever anchoring one twice.

A checkpoint's anchor is one transaction of the journal engine (`accord.ledger.txjournal`):
signed (nonce and fees fixed), recorded as *pending* in the anchor journal
(`accord.ledger.anchor_journal`) with its raw bytes, only then broadcast, and resolved against
the chain by the engine: mined and `confirmations` deep → confirmed; the root already on chain
(this transaction's logs, or the one it replaced) → confirmed with the transaction that put it
there; a larger anchor on chain → dropped (it covers this one); not mined and its nonce free →
the *same signed bytes* again; stuck under a risen base fee → replaced at the same nonce with
bumped fees (`AnchorJournal.replace`, one write); its nonce used by another transaction →
dropped, and only then a fresh anchor may be signed. So no checkpoint is anchored twice, and
nothing appended is lost while the chain is away: the next anchor covers it.

What is specific to anchors lives here: which call to make (`build_anchor_tx`), what the
registry's state means (`_AnchorTxs.on_chain`), and the chain *forgetting* a confirmed anchor
(anvil restarted from an older state, a reorg on a public chain): `reconcile` first compares
the confirmed records with the anchors the chain holds; one the chain lacks is marked pending
again (that mark is the journal: it is reconciled once, whatever crashes follow) and then
resolved as above.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from accord.ledger.anchor_journal import AnchorJournal, AnchorRecord
from accord.ledger.chain import AnchorChain, AnchorRefusedError, SignedAnchorTx
from accord.ledger.checkpoint import SignedCheckpoint, take_checkpoint
from accord.ledger.errors import AnchorError
from accord.ledger.events import Entry, format_time, parse_time
from accord.ledger.fees import Fees
from accord.ledger.signing import Signer
from accord.ledger.store import LogStore
from accord.ledger.txjournal import (
    DEFAULT_REPLACE_AFTER_S,
    OnChain,
    Resolution,
    TxEngine,
    TxRules,
    TxView,
)

AnchorStatus = Literal[
    "confirmed", "pending", "already-anchored", "dropped", "empty", "forgotten-by-chain"
]
"""`dropped`: a pending record the chain proved can never be mined (it is forgotten).
`forgotten-by-chain`: a confirmed record the chain no longer holds, reopened as pending."""


@dataclass(frozen=True)
class AnchorOutcome:
    """What one anchoring attempt did."""

    status: AnchorStatus
    size: int
    root: bytes | None = None
    tx_hash: bytes | None = None
    block_number: int | None = None


class Anchorer:
    """Anchors the log's checkpoints through an `AnchorChain`, journalled in an `AnchorJournal`
    in the store's database (`journal`).

    Raises ChainUnavailableError when the chain does not answer (the record stays pending and
    is resolved next time), FeesAboveCeilingError when the fee market is above the configured
    ceiling (nothing new is signed or sent), AnchorError when the chain refuses or contradicts
    the log.
    """

    def __init__(
        self,
        store: LogStore,
        chain: AnchorChain,
        operator: Signer,
        clock: Callable[[], datetime],
        *,
        every_entries: int = 1000,
        every_seconds: float = 60.0,
        receipt_timeout: float = 30.0,
        confirmations: int = 0,
        replace_after_s: float = DEFAULT_REPLACE_AFTER_S,
    ) -> None:
        """Raises ValueError for a negative `confirmations` or `replace_after_s`, StoreError
        when the journal's table cannot be prepared."""
        self.store = store
        self.journal = AnchorJournal(store.engine)
        self.chain = chain
        self.operator = operator
        self.clock = clock
        self.every_entries = every_entries
        self.every_seconds = every_seconds
        self.receipt_timeout = receipt_timeout
        self.rules = TxRules(
            confirmations=confirmations,
            replace_after_s=replace_after_s,
            fees=chain.fee_policy(),
        )
        self._latest: AnchorRecord | None = _UNREAD
        self._first_at: datetime | None = None

    @property
    def confirmations(self) -> int:
        return self.rules.confirmations

    def _engine(self) -> TxEngine:
        return TxEngine(
            self.chain,
            self.rules,
            timeout_s=self.receipt_timeout,
            clock=lambda: self.clock().timestamp(),
        )

    # -- checkpoints -------------------------------------------------------------------------

    def checkpoint(self) -> SignedCheckpoint:
        """A signed checkpoint of the log as it is now (stored; reused if one exists)."""
        return take_checkpoint(self.store, self.operator, self.clock())

    # -- anchoring ---------------------------------------------------------------------------

    def anchor_latest(self) -> AnchorOutcome:
        """Reconcile pending anchors, then anchor the current checkpoint if the chain lacks it."""
        self._latest = _UNREAD
        reconciled = self.reconcile()
        for outcome in reconciled:
            if outcome.status == "pending":
                return outcome  # one unresolved transaction at a time: nonces stay in order
        size = self.store.size()
        if size == 0:
            return AnchorOutcome("empty", 0)
        log_id = self.store.log_id
        if self.chain.latest_size(log_id) >= size:
            for outcome in reconciled:
                if outcome.status == "confirmed" and outcome.size == size:
                    return outcome
            return AnchorOutcome("already-anchored", size, self.store.root(size))
        signed = self.checkpoint()
        root = signed.checkpoint.root
        tx = self.chain.build_anchor_tx(log_id, size, root)
        record = AnchorRecord(
            size=size,
            root=root,
            status="pending",
            chain_id=self.chain.chain_id(),
            registry_address=self.chain.registry_address(),
            nonce=tx.nonce,
            tx_hash=tx.tx_hash,
            raw_tx=tx.raw,
            block_number=None,
            sent_at=format_time(self.clock()),
        )
        if not self.journal.add(record):
            # Another process records this checkpoint's anchor: resolve its record instead.
            return self._resolve_recorded(size)
        txs = _AnchorTxs(self)
        return _outcome(self._engine().send(record, txs, txs))

    def reconcile(self) -> list[AnchorOutcome]:
        """Reopen confirmed anchors the chain forgot, then resolve every pending anchor
        against the chain (see the module docstring)."""
        self._latest = _UNREAD
        outcomes = self.reopen_forgotten()
        for pending in self.journal.pending():
            outcomes.append(self._reconcile_one(pending))
        return outcomes

    def reopen_forgotten(self) -> list[AnchorOutcome]:
        """Mark pending again each confirmed anchor whose root the chain does not hold."""
        confirmed = self.journal.records("confirmed")
        if not confirmed:
            return []
        held = {(a.size, a.root) for a in self.chain.anchors(self.store.log_id)}
        outcomes = []
        for record in confirmed:
            if (record.size, record.root) in held:
                continue
            if self.journal.reopen(record.size):
                outcomes.append(
                    AnchorOutcome("forgotten-by-chain", record.size, record.root, record.tx_hash)
                )
        return outcomes

    def _resolve_recorded(self, size: int) -> AnchorOutcome:
        for record in self.journal.records():
            if record.size != size:
                continue
            if record.status == "pending":
                return self._reconcile_one(record)
            return AnchorOutcome(
                "confirmed", size, record.root, record.tx_hash, record.block_number
            )
        return AnchorOutcome("dropped", size)

    def _reconcile_one(self, pending: AnchorRecord) -> AnchorOutcome:
        txs = _AnchorTxs(self)
        return _outcome(self._engine().resolve(pending, txs, txs))

    # -- automatic anchoring -----------------------------------------------------------------

    def due(self, now: datetime, size: int | None = None) -> bool:
        """Whether N entries or T seconds have passed since the last anchor sent.

        `size`: the log's size when the caller knows it (an append just reached it); else it
        is read. The latest anchor record read is remembered: anchors only grow and are sent
        in order, so one that another process recorded since can only make the remembered one
        look more due than the true latest, never less. While the remembered one says "not
        due" no query is made; when it says "due" the latest record is read again and decides.
        (A record another process drops is seen at the latest one period late; this process's
        own anchoring forgets what it remembered.) The first entry's time, for a log never
        anchored, is read once.
        """
        if size is None:
            size = self.store.size()
        if self._latest is not _UNREAD and not self._due_since(self._latest, size, now):
            return False
        self._latest = self.journal.latest()
        return self._due_since(self._latest, size, now)

    def _due_since(self, last: AnchorRecord | None, size: int, now: datetime) -> bool:
        if last is None:
            if size == 0:
                return False
            if size >= self.every_entries:
                return True
            if self._first_at is None:
                first = Entry.from_bytes(self.store.entry(0).data)
                self._first_at = parse_time(first.event.at)
            return (now - self._first_at).total_seconds() >= self.every_seconds
        if size <= last.size:
            return last.status == "pending"
        if size - last.size >= self.every_entries:
            return True
        return (now - parse_time(last.sent_at)).total_seconds() >= self.every_seconds


_UNREAD: Any = object()
"""The latest anchor record before `Anchorer.due` first reads it."""


def _outcome(resolution: Resolution[AnchorRecord]) -> AnchorOutcome:
    record = resolution.record
    match resolution.status:
        case "confirmed":
            status: AnchorStatus = "confirmed"
        case "pending":
            status = "pending"
        case _:
            status = "dropped"
    return AnchorOutcome(
        status, record.size, record.root, resolution.tx_hash, resolution.block_number
    )


class _AnchorTxs:
    """The engine's `TxAction` and `TxJournal` for anchors: records of the anchor journal, one
    per checkpoint size."""

    def __init__(self, anchorer: Anchorer) -> None:
        self.journal = anchorer.journal
        self.chain = anchorer.chain
        self.log_id = anchorer.store.log_id
        self.clock = anchorer.clock

    # TxAction

    def view(self, record: AnchorRecord) -> TxView:
        return TxView(
            tx_hash=record.tx_hash,
            sender=self.chain.operator_address(),
            nonce=record.nonce,
            status="pending",
            block_number=record.block_number if record.status == "pending" else None,
            sent_at=parse_time(record.sent_at).timestamp(),
            fees=self.chain.fees_of(record.raw_tx),
        )

    def on_chain(self, record: AnchorRecord) -> OnChain | None:
        """Raises AnchorError when the chain holds another root for the record's size."""
        on_chain = self.chain.root_at(self.log_id, record.size)
        if on_chain is not None:
            if on_chain != record.root:
                raise AnchorError(
                    f"the chain holds root {on_chain.hex()} for size {record.size}, "
                    f"but the log's checkpoint has {record.root.hex()}"
                )
            for event in self.chain.anchors(self.log_id):
                if event.size == record.size:
                    return OnChain(event.tx_hash, event.block_number, ours=True)
            return OnChain(record.tx_hash, 0, ours=True)
        if self.chain.latest_size(self.log_id) > record.size:
            return OnChain(b"", 0, ours=False)  # a larger anchor covers it
        return None

    def broadcast(self, record: AnchorRecord) -> None:
        self.chain.broadcast(
            SignedAnchorTx(
                self.log_id, record.size, record.root, record.nonce, record.tx_hash, record.raw_tx
            )
        )

    def sign(
        self, record: AnchorRecord, nonce: int | None, fees: Fees | None
    ) -> AnchorRecord | None:
        try:
            tx = self.chain.build_anchor_tx(
                self.log_id, record.size, record.root, nonce=nonce, fees=fees
            )
        except AnchorRefusedError:
            return None
        return replace(
            record,
            nonce=tx.nonce,
            tx_hash=tx.tx_hash,
            raw_tx=tx.raw,
            sent_at=format_time(self.clock()),
        )

    # TxJournal

    def seen(self, record: AnchorRecord, block_number: int) -> AnchorRecord:
        return replace(record, block_number=block_number)  # kept in memory until confirmed

    def confirm(self, record: AnchorRecord, tx_hash: bytes, block_number: int) -> None:
        self.journal.confirm(record.size, tx_hash, block_number)

    def superseded(self, record: AnchorRecord) -> None:
        self.journal.drop(record.size)  # a larger anchor covers it

    def reverted(self, record: AnchorRecord, block_number: int) -> None:
        """Raises AnchorError: the registry refused an anchor nothing on chain covers."""
        raise AnchorError(
            f"the anchor of size {record.size} was reverted on chain "
            f"(transaction {record.tx_hash.hex()}, block {block_number})"
        )

    def reopen(self, record: AnchorRecord) -> AnchorRecord:
        self.journal.reopen(record.size)
        return replace(record, status="pending", block_number=None)

    def drop(self, record: AnchorRecord) -> None:
        self.journal.drop(record.size)

    def swap(self, old: AnchorRecord, new: AnchorRecord, same_nonce: bool) -> bool:
        del same_nonce  # one row per size: the row follows the newest signing
        return self.journal.replace(old.tx_hash, new)
