"""The seam to the TaskEscrow contract: `EscrowChain`, implemented over JSON-RPC by
`accord.market.escrow.web3_chain` and in process by `accord.market.escrow.memory_chain`.

Transactions are signed locally by the acting account's key (requester, operator or payee), as
`SignedEscrowTx`, and sent by `broadcast` (idempotent). The chain also answers what the journal
engine asks (`accord.ledger.chain.TxChain`): block hashes, the pool, the fee market.
"""

from __future__ import annotations

from typing import Protocol

from accord.ledger.chain.protocol import TxChain
from accord.ledger.fees import Fees
from accord.market.escrow.values import (
    EscrowEvent,
    EscrowIntent,
    EscrowRecord,
    SignedEscrowTx,
)
from accord.market.money import Wei


class EscrowChain(TxChain, Protocol):
    """What the market needs from the escrow contract: a `TxChain` with the contract. Every
    method may raise ChainUnavailableError (nothing happened; retry later) or ChainError."""

    def escrow_address(self) -> str: ...

    def escrow(self, task_id: str) -> EscrowRecord | None:
        """The task's escrow, or None when it was never opened."""
        ...

    def credit(self, address: str) -> Wei: ...

    def held(self, task_id: str) -> Wei:
        """What the settled task holds for payees that had no payout account (`release`)."""
        ...

    def bonded(self, task_id: str) -> Wei:
        """What the open task's requester bonded for its disputes (0 once settled)."""
        ...

    def answered(self, task_id: str, account: str) -> Wei:
        """What `account` answered for the task's disputes (`TaskEscrow.answer`; kept after
        a settlement as a record, zeroed by a reclaim)."""
        ...

    def answers(self, task_id: str) -> Wei:
        """What every account answered for the open task, in all (0 once settled)."""
        ...

    def balance(self) -> Wei:
        """The contract's balance."""
        ...

    def build_tx(
        self,
        key_hex: str,
        intent: EscrowIntent,
        *,
        nonce: int | None = None,
        fees: Fees | None = None,
    ) -> SignedEscrowTx:
        """Sign (not send) `intent` from the key's account, at its pending nonce unless given,
        with `fees` (the market's under the ceiling unless given).

        Raises ValueError for an intent no call can express, EscrowRefusedError when the
        contract would revert it, FeesAboveCeilingError when the market is above the ceiling.
        """
        ...

    def broadcast(self, tx: SignedEscrowTx) -> None:
        """Send `tx`; one the node already knows or mined is not an error.
        Raises EscrowTxRejectedError when the node refuses it for good."""
        ...

    def account_nonce(self, address: str, latest: bool) -> int:
        """Mined transactions only (latest) or with pending ones (the same as `nonce_of`)."""
        ...

    def events(self, task_id: str | None = None, *, from_block: int = 0) -> list[EscrowEvent]:
        """Decoded events, oldest first: the task's (without Withdrawn) or all of them."""
        ...
