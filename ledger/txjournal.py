"""One transaction-journal engine for every transaction accord sends (anchors and escrow).

The algorithm, shared by `accord.ledger.anchoring` and `accord.market.escrow.actions`:

1. sign the transaction locally (nonce and fees fixed) and *journal* it as pending, raw bytes
   included, before anything is broadcast;
2. broadcast it;
3. reconcile it against the chain until the journal can say what became of it.

Step 3 is `decide`, a pure function of the journal record and of what the chain says now
(`ChainFacts`: the receipt and whether its block is still canonical, the head, the sender's
nonces, whether the node holds the transaction, its effect on the contract, the fee market).
It answers with one `Decision`:

    Confirm      mined, `confirmations` blocks deep (or its effect is on chain through one of
                 our own transactions at that nonce): record it done
    Seen         mined but not deep yet: note the block and wait
    Superseded   the effect is on chain through a transaction that is not ours
    Reverted     mined, refused by the contract
    Reorged      we saw it mined and the chain no longer holds it: journalled, then sent again
    Drop         its nonce went to another transaction (or nothing fills the gap before it):
                 it can never be mined
    SignAnew     as Drop, but the action is owed (it was done once and the chain forgot it):
                 sign it again at the next nonce, the new record replacing the old in one write
    Replace      stuck (unmined for `replace_after_s` with fees under the market): the same
                 nonce signed again with fees bumped by at least 12.5 % within the ceiling;
                 whichever of the two is mined, the journal follows it
    Resend       the node lost it: broadcast the same signed bytes (they cannot be mined twice)
    Wait         in the node's pool: nothing to do yet
    Fail         a typed error (fees above the ceiling): nothing new is sent

`TxEngine.resolve` is the thin I/O shell around it: it gathers the facts through a `TxChain`,
asks the domain (`TxAction`: what the transaction's effect on its contract is, how to sign it
again) and writes the journal (`TxJournal`) before every broadcast, so a crash anywhere leaves
at most a pending record that the next `resolve` finishes; no action is ever paid twice.

Fees follow EIP-1559: maxFeePerGas = min(2 * baseFee + tip, ceiling), the tip from the node's
eth_maxPriorityFeePerGas or a configured default (`FeePolicy`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar

from accord.ledger.chain.protocol import TxChain
from accord.ledger.chain.values import TxReceipt
from accord.ledger.errors import FeesAboveCeilingError
from accord.ledger.fees import FeeMarket, FeePolicy, Fees, below_market, bumped_fees

DEFAULT_REPLACE_AFTER_S = 120.0
_POLL_S = 0.1


# -- values ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TxRules:
    """When a transaction counts as done, and when it counts as stuck."""

    confirmations: int = 0
    replace_after_s: float = DEFAULT_REPLACE_AFTER_S
    fees: FeePolicy = field(default_factory=FeePolicy)

    def __post_init__(self) -> None:
        if self.confirmations < 0:
            raise ValueError(f"confirmations must be 0 or more, got {self.confirmations}")
        if self.replace_after_s < 0:
            raise ValueError(f"replace_after_s must be 0 or more, got {self.replace_after_s}")


JournalStatus = Literal[
    "pending", "confirmed", "superseded", "reverted", "dropped", "forgotten", "replaced"
]
"""What a journal record says of its transaction, in every journal of this engine (escrow:
`accord.market.escrow.journal`; anchors: `accord.ledger.anchor_journal`, which uses two).
`pending`: journalled, sent or about to be; `confirmed`: done on chain; `superseded`: its effect
is on chain through another transaction; `dropped`: it can never be mined (its nonce went to
another transaction); `reverted`: mined, refused by the contract; `forgotten`: recorded as done
but the chain no longer holds it (unresolved, like pending; owed: signed anew when its own
bytes cannot be mined any more); `replaced`: signed again as another record (a forgotten one at
a new nonce, or a stuck one at the same nonce with higher fees: the journal follows whichever
of the two is mined)."""

UNRESOLVED: tuple[JournalStatus, ...] = ("pending", "forgotten")
"""The statuses `resolve` still works on."""
DONE: tuple[JournalStatus, ...] = ("confirmed", "superseded")
"""The statuses whose effect is on chain."""

UnresolvedStatus = Literal["pending", "forgotten"]


@dataclass(frozen=True)
class TxView:
    """What the engine needs of a journal record.

    status: "pending" (sent or about to be) or "forgotten" (done once, the chain lost it: the
    action is owed and is signed anew when its nonce cannot be used any more).
    block_number: where it was last seen mined (None: never seen, or reopened).
    sent_at: seconds since the epoch when it was signed; None when unknown (never replaced).
    fees: its fees, None when unknown (never replaced).
    """

    tx_hash: bytes
    sender: str
    nonce: int
    status: UnresolvedStatus
    block_number: int | None = None
    sent_at: float | None = None
    fees: Fees | None = None


@dataclass(frozen=True)
class OnChain:
    """The transaction's effect as the contract shows it: done by `tx_hash` in `block_number`;
    `ours` when that transaction is this record's or one it replaced (same sender and nonce),
    or does exactly what it does."""

    tx_hash: bytes
    block_number: int
    ours: bool


@dataclass(frozen=True)
class ChainFacts:
    """What the chain says now about one journal record.

    canonical_hash: the hash of the canonical block at the receipt's height (None: not asked).
    nonce_latest, nonce_pending: the sender's nonce, mined only or with its pool; None when
    not asked (the transaction is mined): the decision then never needs them.
    known: the node holds the transaction (in its pool or mined).
    """

    receipt: TxReceipt | None
    canonical_hash: bytes | None
    head: int
    nonce_latest: int | None
    nonce_pending: int | None
    known: bool
    on_chain: OnChain | None
    market: FeeMarket | None
    now: float


# -- decisions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Confirm:
    tx_hash: bytes
    block_number: int


@dataclass(frozen=True)
class Seen:
    block_number: int


@dataclass(frozen=True)
class Superseded:
    pass


@dataclass(frozen=True)
class Reverted:
    block_number: int


@dataclass(frozen=True)
class Reorged:
    pass


@dataclass(frozen=True)
class Drop:
    pass


@dataclass(frozen=True)
class SignAnew:
    pass


@dataclass(frozen=True)
class Replace:
    fees: Fees


@dataclass(frozen=True)
class Resend:
    pass


@dataclass(frozen=True)
class Wait:
    pass


@dataclass(frozen=True)
class Fail:
    error: FeesAboveCeilingError


Decision = (
    Confirm
    | Seen
    | Superseded
    | Reverted
    | Reorged
    | Drop
    | SignAnew
    | Replace
    | Resend
    | Wait
    | Fail
)


def decide(record: TxView, facts: ChainFacts, rules: TxRules) -> Decision:
    """What to do with an unresolved journal record, given the chain now (pure; see the module
    docstring for the decisions)."""
    receipt = facts.receipt
    # (1) a receipt whose block is no longer the canonical one at its height is no receipt.
    if (
        receipt is not None
        and receipt.block_hash is not None
        and facts.canonical_hash is not None
        and receipt.block_hash != facts.canonical_hash
    ):
        receipt = None
    # (2) mined: deep enough or not yet; refused by the contract.
    if receipt is not None:
        if receipt.status_ok:
            return _mined(record, record.tx_hash, receipt.block_number, facts.head, rules)
        if facts.on_chain is not None and not facts.on_chain.ours:
            return Superseded()
        return Reverted(receipt.block_number)
    # (3) its effect is on chain (a receipt may lag behind the logs; a replaced twin mined).
    if facts.on_chain is not None:
        if facts.on_chain.ours:
            found = facts.on_chain
            return _mined(record, found.tx_hash, found.block_number, facts.head, rules)
        return Superseded()
    # (4) seen mined before, gone now: its block was reorganised away.
    if record.block_number is not None:
        return Reorged()
    # (5) its nonce went to another transaction, or nothing the node holds fills the gap.
    if facts.nonce_latest is None or facts.nonce_pending is None:
        return Wait()  # not asked: nothing is known about its nonce yet
    if facts.nonce_latest > record.nonce or facts.nonce_pending < record.nonce:
        return SignAnew() if record.status == "forgotten" else Drop()
    # (6) stuck under the market for long enough: the same nonce, better fees.
    if (
        record.fees is not None
        and record.sent_at is not None
        and facts.market is not None
        and facts.now - record.sent_at >= rules.replace_after_s
        and below_market(record.fees, facts.market)
    ):
        try:
            return Replace(bumped_fees(record.fees, facts.market, rules.fees))
        except FeesAboveCeilingError as exc:
            return Fail(exc)
    # (7) not in the node's pool: the same bytes again.
    return Wait() if facts.known else Resend()


def _mined(record: TxView, tx_hash: bytes, block: int, head: int, rules: TxRules) -> Decision:
    if head >= block + rules.confirmations:
        return Confirm(tx_hash, block)
    if record.block_number != block:
        return Seen(block)
    return Wait()


# -- the I/O shell -----------------------------------------------------------------------

R = TypeVar("R")


class TxAction(Protocol[R]):
    """The domain's part: what a record's transaction does, and how to send it."""

    def view(self, record: R) -> TxView: ...

    def on_chain(self, record: R) -> OnChain | None:
        """The record's effect on its contract now, or None when it is not there.
        Raises the domain's error when the chain contradicts the record."""
        ...

    def broadcast(self, record: R) -> None:
        """Send the record's signed bytes (idempotent). Raises the domain's error when the node
        refuses them for good."""
        ...

    def sign(self, record: R, nonce: int | None, fees: Fees | None) -> R | None:
        """The same action signed again (at `nonce`, or the next one; with `fees`, or the
        market's), not journalled; None when it cannot be (no key, the contract refuses)."""
        ...


class TxJournal(Protocol[R]):
    """The domain's journal, as the engine writes it."""

    def seen(self, record: R, block_number: int) -> R:
        """Note where the record was mined (it stays unresolved)."""
        ...

    def confirm(self, record: R, tx_hash: bytes, block_number: int) -> None:
        """Record the action done by `tx_hash` (the record's own, or a twin it replaced)."""
        ...

    def superseded(self, record: R) -> None: ...

    def reverted(self, record: R, block_number: int) -> None: ...

    def reopen(self, record: R) -> R:
        """Its block was reorganised away: unresolved again, no block, owed."""
        ...

    def drop(self, record: R) -> None: ...

    def swap(self, old: R, new: R, same_nonce: bool) -> bool:
        """In one write: retire `old` (replaced) and add `new` (pending). False, writing
        nothing, when `old` is no longer unresolved (another process resolved it)."""
        ...


ResolutionStatus = Literal["confirmed", "superseded", "reverted", "dropped", "pending", "forgotten"]


@dataclass(frozen=True)
class Resolution(Generic[R]):
    """What `resolve` made of a record: its final status (or "pending" when it is not
    resolved yet) and the record it ended on."""

    status: ResolutionStatus
    record: R
    tx_hash: bytes
    block_number: int | None = None


class TxEngine:
    """Resolves journal records against the chain (module docstring).

    Raises ChainUnavailableError (the record stays as journalled; resolve again later),
    FeesAboveCeilingError (a stuck transaction cannot be replaced under the ceiling: it stays
    pending), and whatever the domain's `TxAction` raises.
    """

    def __init__(
        self,
        chain: TxChain,
        rules: TxRules,
        *,
        timeout_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.chain = chain
        self.rules = rules
        self.timeout_s = timeout_s
        self.clock = clock

    def facts(self, view: TxView, on_chain: Callable[[], OnChain | None]) -> ChainFacts:
        """Ask the chain about one record: its receipt and the block hash at its height, the
        head; when it is not mined, the sender's nonces and then the receipt once more (a
        transaction mined while the nonces were read is never mistaken for a lost one), its
        effect on the contract, the pool, the fee market."""
        receipt, canonical = self._receipt(view.tx_hash)
        nonce_latest = nonce_pending = None
        if receipt is None:
            nonce_latest = self.chain.nonce_of(view.sender, latest=True)
            nonce_pending = self.chain.nonce_of(view.sender, latest=False)
            receipt, canonical = self._receipt(view.tx_hash)
        effect = None if receipt is not None and receipt.status_ok else on_chain()
        unmined = receipt is None and effect is None
        return ChainFacts(
            receipt=receipt,
            canonical_hash=canonical,
            head=self.chain.block_number(),
            nonce_latest=nonce_latest,
            nonce_pending=nonce_pending,
            known=self.chain.knows(view.tx_hash) if unmined else True,
            on_chain=effect,
            market=self.chain.fee_market() if unmined and view.fees is not None else None,
            now=self.clock(),
        )

    def _receipt(self, tx_hash: bytes) -> tuple[TxReceipt | None, bytes | None]:
        """The receipt (None when its block is no longer canonical) and the canonical hash."""
        receipt = self.chain.receipt(tx_hash)
        if receipt is None or receipt.block_hash is None:
            return receipt, None
        canonical = self.chain.block_hash(receipt.block_number)
        if canonical != receipt.block_hash:
            return None, canonical  # its block was reorganised away (decide says so too)
        return receipt, canonical

    def send(self, record: R, action: TxAction[R], journal: TxJournal[R]) -> Resolution[R]:
        """Broadcast a journalled record, then resolve it."""
        action.broadcast(record)
        return self.resolve(record, action, journal, sent=True)

    def resolve(
        self, record: R, action: TxAction[R], journal: TxJournal[R], *, sent: bool = False
    ) -> Resolution[R]:
        """Decide and act until the record is resolved or `timeout_s` passes (then "pending").

        Every new signed transaction is journalled before it is broadcast; the same bytes are
        broadcast at most once per call (`sent`: already broadcast by the caller)."""
        deadline = time.monotonic() + self.timeout_s
        replaced = False  # at most one replacement per call: the next waits its turn
        while True:
            view = action.view(record)
            facts = self.facts(view, lambda: action.on_chain(record))  # noqa: B023
            decision = decide(view, facts, self.rules)
            match decision:
                case Confirm(tx_hash, block):
                    journal.confirm(record, tx_hash, block)
                    return Resolution("confirmed", record, tx_hash, block)
                case Superseded():
                    journal.superseded(record)
                    return Resolution("superseded", record, view.tx_hash)
                case Reverted(block):
                    journal.reverted(record, block)
                    return Resolution("reverted", record, view.tx_hash, block)
                case Drop():
                    journal.drop(record)
                    return Resolution("dropped", record, view.tx_hash)
                case Reorged():
                    record = journal.reopen(record)
                    sent = False
                    continue
                case SignAnew():
                    fresh = action.sign(record, None, None)
                    if fresh is None:
                        return Resolution("forgotten", record, view.tx_hash)
                    if not journal.swap(record, fresh, same_nonce=False):
                        return Resolution("pending", record, view.tx_hash)
                    record, sent = fresh, True
                    action.broadcast(record)
                    continue
                case Replace(fees) if not replaced:
                    bumped = action.sign(record, view.nonce, fees)
                    if bumped is not None:
                        if not journal.swap(record, bumped, same_nonce=True):
                            return Resolution("pending", record, view.tx_hash)
                        record, sent, replaced = bumped, True, True
                        action.broadcast(record)
                        continue
                case Resend():
                    if not sent:
                        action.broadcast(record)
                        sent = True
                        continue
                case Seen(block):
                    record = journal.seen(record, block)
                case Fail(error):
                    raise error
                case Wait() | Replace():
                    pass
            if time.monotonic() >= deadline:
                last = action.view(record)  # block_number: where it was seen mined, if it was
                return Resolution("pending", record, last.tx_hash, last.block_number)
            time.sleep(min(_POLL_S, max(0.0, deadline - time.monotonic())))
