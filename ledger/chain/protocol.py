"""The seams to a chain: `TxChain`, what every chain that sends transactions answers (the
journal engine asks it), `AnchorChain`, what the anchoring service needs, and the receipt
polling every implementation shares.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from accord.ledger.chain.values import (
    RECEIPT_POLL_S,
    OnChainAnchor,
    SignedAnchorTx,
    TxReceipt,
    deep_enough,
)
from accord.ledger.fees import FeeMarket, FeePolicy, Fees


class TxChain(Protocol):
    """What every chain that sends transactions answers: the anchor chain and the escrow
    chain extend it, and it is what the transaction journal's engine (`accord.ledger.txjournal`)
    asks. Every method may raise ChainUnavailableError (nothing happened; retry later) or
    ChainError.

    (`broadcast` and `account_nonce` are each chain's own: they take its transaction, and the
    escrow's nonce is per account.)"""

    def chain_id(self) -> int: ...

    def receipt(self, tx_hash: bytes) -> TxReceipt | None:
        """The receipt, or None when the transaction is not mined (or unknown)."""
        ...

    def wait_for_receipt(self, tx_hash: bytes, timeout_s: float) -> TxReceipt | None:
        """Poll `receipt` until mined or `timeout_s` passes (then None)."""
        ...

    def nonce_of(self, address: str, latest: bool) -> int:
        """The account's nonce: mined transactions only (latest) or with pending ones."""
        ...

    def block_hash(self, number: int) -> bytes | None:
        """The canonical block's hash at `number` (None beyond the head)."""
        ...

    def block_number(self) -> int:
        """The number of the chain's latest block."""
        ...

    def knows(self, tx_hash: bytes) -> bool:
        """Whether the node holds the transaction (pending or mined)."""
        ...

    def fee_market(self) -> FeeMarket: ...

    def fees_of(self, raw: bytes) -> Fees | None:
        """The fees signed into `raw` (None when they cannot be read)."""
        ...

    def fee_policy(self) -> FeePolicy:
        """The ceiling and tip this chain's transactions are signed under."""
        ...


class AnchorChain(TxChain, Protocol):
    """What the anchoring service needs from a chain: a `TxChain` with the registry."""

    def registry_address(self) -> str: ...

    def latest_size(self, log_id: str) -> int:
        """The largest anchored size of the log (0 when never anchored)."""
        ...

    def root_at(self, log_id: str, size: int) -> bytes | None:
        """The root anchored at exactly `size`, or None when that size was never anchored."""
        ...

    def build_anchor_tx(
        self,
        log_id: str,
        size: int,
        root: bytes,
        *,
        nonce: int | None = None,
        fees: Fees | None = None,
    ) -> SignedAnchorTx:
        """Sign (not send) an anchor at `nonce` (the operator's pending nonce by default) with
        `fees` (the market's under the ceiling by default).

        Raises AnchorRefusedError when the registry would revert it (e.g. size not growing),
        FeesAboveCeilingError when the market is above the ceiling.
        """
        ...

    def broadcast(self, tx: SignedAnchorTx) -> None:
        """Send `tx`; sending one the node already knows or mined is not an error.

        Raises AnchorError when the node rejects it for good (e.g. its nonce went to
        another transaction).
        """
        ...

    def account_nonce(self, latest: bool) -> int:
        """The operator's nonce: mined transactions only (latest) or with pending ones."""
        ...

    def anchors(self, log_id: str) -> list[OnChainAnchor]:
        """Every `Anchored` event of the log, oldest first."""
        ...

    def operator_address(self) -> str:
        """The account that signs anchors."""
        ...


def poll_receipt(
    receipt: Callable[[bytes], TxReceipt | None], tx_hash: bytes, timeout_s: float
) -> TxReceipt | None:
    """Ask `receipt(tx_hash)` until it answers or `timeout_s` passes (then None)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = receipt(tx_hash)
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(min(RECEIPT_POLL_S, max(0.0, deadline - time.monotonic())))


def wait_until_deep(
    head: Callable[[], int], receipt: TxReceipt, confirmations: int, timeout_s: float
) -> bool:
    """Poll `head()` until the receipt is `confirmations` deep or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        if deep_enough(receipt, head(), confirmations):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(RECEIPT_POLL_S, max(0.0, deadline - time.monotonic())))
