"""Anchoring checkpoints on the chain, without ever anchoring one twice.

A checkpoint is anchored in three recorded steps:

1. sign the transaction locally (nonce fixed) and record it as *pending*, raw bytes included;
2. broadcast it;
3. wait for the receipt and mark it *confirmed*.

A crash, a timeout or a chain that is down leaves a pending record. Before anything new is
sent, `reconcile` settles every pending record against the chain: mined → confirmed; the root
already on chain → confirmed; not mined but still possible → the *same signed bytes* are
broadcast again (they cannot be mined twice); its nonce used by another transaction → dropped,
and only then a fresh transaction may be signed. So no checkpoint is anchored twice, and
nothing appended is lost while the chain is away: the next anchor covers it.

A chain can also *forget* a confirmed anchor: anvil restarted from a state dumped before the
block, or a reorg on a public chain. `reconcile` therefore first compares the confirmed records
with the anchors the chain holds; one the chain lacks is marked pending again (that mark is
the journal: it is reconciled once, whatever crashes follow) and then settled as above: its
same bytes are sent again when its nonce is the account's next, a fresh transaction is signed
otherwise, and a record a larger on-chain anchor already covers is dropped. A receipt counts as
confirmed only once `confirmations` blocks are on top of its own (0 on the devnet).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from ledger.chain import (
    AnchorChain,
    SignedAnchorTx,
    TxReceipt,
    deep_enough,
    wait_until_deep,
)
from ledger.checkpoint import SignedCheckpoint, take_checkpoint
from ledger.errors import AnchorError
from ledger.events import Entry, format_time, parse_time
from ledger.signing import Signer
from ledger.store import LogStore, StoredAnchor

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
    """Anchors the log's checkpoints through an `AnchorChain`.

    Raises ChainUnavailableError when the chain does not answer (the record stays pending and
    is settled next time), AnchorError when the chain refuses or contradicts the log.
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
    ) -> None:
        if confirmations < 0:
            raise ValueError(f"confirmations must be 0 or more, got {confirmations}")
        self.store = store
        self.chain = chain
        self.operator = operator
        self.clock = clock
        self.every_entries = every_entries
        self.every_seconds = every_seconds
        self.receipt_timeout = receipt_timeout
        self.confirmations = confirmations

    # -- checkpoints -------------------------------------------------------------------------

    def checkpoint(self) -> SignedCheckpoint:
        """A signed checkpoint of the log as it is now (stored; reused if one exists)."""
        return take_checkpoint(self.store, self.operator, self.clock())

    # -- anchoring ---------------------------------------------------------------------------

    def anchor_latest(self) -> AnchorOutcome:
        """Reconcile pending anchors, then anchor the current checkpoint if the chain lacks it."""
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
        recorded = self.store.record_anchor(
            StoredAnchor(
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
        )
        if not recorded:
            # Another process records this checkpoint's anchor: settle its record instead.
            return self._settle_recorded(size)
        return self._send_and_settle(tx, size, root)

    def reconcile(self) -> list[AnchorOutcome]:
        """Reopen confirmed anchors the chain forgot, then settle every pending anchor
        against the chain (see the module docstring)."""
        outcomes = self.reopen_forgotten()
        for pending in self.store.anchors(status="pending"):
            outcomes.append(self._reconcile_one(pending))
        return outcomes

    def reopen_forgotten(self) -> list[AnchorOutcome]:
        """Mark pending again each confirmed anchor whose root the chain does not hold."""
        confirmed = self.store.anchors(status="confirmed")
        if not confirmed:
            return []
        held = {(a.size, a.root) for a in self.chain.anchors(self.store.log_id)}
        outcomes = []
        for record in confirmed:
            if (record.size, record.root) in held:
                continue
            if self.store.reopen_anchor(record.size):
                outcomes.append(
                    AnchorOutcome("forgotten-by-chain", record.size, record.root, record.tx_hash)
                )
        return outcomes

    def _settle_recorded(self, size: int) -> AnchorOutcome:
        for record in self.store.anchors():
            if record.size != size:
                continue
            if record.status == "pending":
                return self._reconcile_one(record)
            return AnchorOutcome(
                "confirmed", size, record.root, record.tx_hash, record.block_number
            )
        return AnchorOutcome("dropped", size)

    def _reconcile_one(self, pending: StoredAnchor) -> AnchorOutcome:
        log_id = self.store.log_id
        receipt = self.chain.receipt(pending.tx_hash)
        if receipt is not None and receipt.status_ok:
            return self._confirm(pending.size, pending.root, pending.tx_hash, receipt)
        on_chain = self.chain.root_at(log_id, pending.size)
        if on_chain is not None:
            if on_chain != pending.root:
                raise AnchorError(
                    f"the chain holds root {on_chain.hex()} for size {pending.size}, "
                    f"but the log's checkpoint has {pending.root.hex()}"
                )
            block = next(
                (a.block_number for a in self.chain.anchors(log_id) if a.size == pending.size),
                0,
            )
            self.store.confirm_anchor(pending.size, block, pending.tx_hash)
            return AnchorOutcome("confirmed", pending.size, pending.root, pending.tx_hash, block)
        if receipt is not None:  # mined but reverted, and the root is not there
            if self.chain.latest_size(log_id) > pending.size:
                self.store.forget_anchor(pending.size)  # a larger anchor covers it
                return AnchorOutcome("dropped", pending.size, pending.root, pending.tx_hash)
            raise AnchorError(
                f"the anchor of size {pending.size} was reverted on chain "
                f"(transaction {pending.tx_hash.hex()})"
            )
        if self.chain.latest_size(log_id) > pending.size:
            # A larger anchor is on chain (the registry would refuse this one): it covers it.
            self.store.forget_anchor(pending.size)
            return AnchorOutcome("dropped", pending.size, pending.root, pending.tx_hash)
        if self.chain.account_nonce(latest=True) > pending.nonce:
            # Its nonce was spent by another transaction: this one can never be mined.
            self.store.forget_anchor(pending.size)
            return AnchorOutcome("dropped", pending.size, pending.root, pending.tx_hash)
        if self.chain.account_nonce(latest=False) < pending.nonce:
            # Nothing the node holds comes before its nonce (the chain forgot those too): sent
            # as is, it would wait forever. A fresh anchor is signed at the next nonce instead.
            self.store.forget_anchor(pending.size)
            return AnchorOutcome("dropped", pending.size, pending.root, pending.tx_hash)
        tx = SignedAnchorTx(
            log_id, pending.size, pending.root, pending.nonce, pending.tx_hash, pending.raw_tx
        )
        return self._send_and_settle(tx, pending.size, pending.root)

    def _send_and_settle(self, tx: SignedAnchorTx, size: int, root: bytes) -> AnchorOutcome:
        self.chain.broadcast(tx)
        receipt = self.chain.wait_for_receipt(tx.tx_hash, self.receipt_timeout)
        if receipt is None:
            return AnchorOutcome("pending", size, root, tx.tx_hash)
        if not receipt.status_ok:
            for record in self.store.anchors(status="pending"):
                if record.size == size:
                    return self._reconcile_one(record)
            return self._settle_recorded(size)  # another process settled it meanwhile
        return self._confirm(size, root, tx.tx_hash, receipt)

    def _confirm(self, size: int, root: bytes, tx_hash: bytes, receipt: TxReceipt) -> AnchorOutcome:
        """Record the anchor confirmed once `confirmations` blocks are on top of its own
        (waiting up to `receipt_timeout`); until then it stays pending."""
        if not deep_enough(receipt, self.chain.block_number(), self.confirmations):
            timeout = self.receipt_timeout
            if not wait_until_deep(self.chain.block_number, receipt, self.confirmations, timeout):
                return AnchorOutcome("pending", size, root, tx_hash, receipt.block_number)
            mined = self.chain.receipt(tx_hash)  # a reorg meanwhile may have moved or dropped it
            if mined is None or not mined.status_ok:
                return AnchorOutcome("pending", size, root, tx_hash)
            receipt = mined
        self.store.confirm_anchor(size, receipt.block_number, tx_hash)
        return AnchorOutcome("confirmed", size, root, tx_hash, receipt.block_number)

    # -- automatic anchoring -----------------------------------------------------------------

    def due(self, now: datetime) -> bool:
        """Whether N entries or T seconds have passed since the last anchor sent."""
        size = self.store.size()
        anchors = self.store.anchors()
        if not anchors:
            if size == 0:
                return False
            if size >= self.every_entries:
                return True
            first = Entry.from_bytes(self.store.entry(0).data)
            return (now - parse_time(first.event.at)).total_seconds() >= self.every_seconds
        last = anchors[-1]
        if size <= last.size:
            return last.status == "pending"
        if size - last.size >= self.every_entries:
            return True
        return (now - parse_time(last.sent_at)).total_seconds() >= self.every_seconds
