"""Task budgets in the `TaskEscrow` contract, and the crash-safe actions that move them.

The package, by what each module holds:

    values        intents, signed transactions, the contract's records and events, the errors
    chain         `EscrowChain`, the seam to the contract (and the build_*_tx helpers)
    web3_chain    `Web3EscrowChain` over JSON-RPC; deploying and checking the contract
    memory_chain  `MemoryEscrowChain`, the contract's rules in process, for unit tests
    journal       `EscrowJournal`: where each transaction is recorded before it is sent
    actions       `EscrowActions`: open, settle, refund, withdraw through the journal engine
                  of `ledger.txjournal`, so that no action ever moves money twice

Everything public is re-exported here, lazily: import from `market.escrow`. Importing a name
imports only the module that holds it, so `market.escrow.values` loads no web3 or SQLAlchemy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger.lazy import lazy_exports

if TYPE_CHECKING:
    from market.escrow.actions import EscrowActions, EscrowOutcome, OutcomeStatus
    from market.escrow.chain import (
        EscrowChain,
    )
    from market.escrow.journal import (
        EscrowJournal,
        EscrowTxRecord,
        JournalStatus,
        MarketEscrowTx,
        MemoryEscrowJournal,
        SqlEscrowJournal,
    )
    from market.escrow.memory_chain import (
        MEMORY_ESCROW_ADDRESS,
        MEMORY_GAS,
        MEMORY_GAS_REVERTED,
        MEMORY_RPC_URL,
        MemoryEscrowChain,
    )
    from market.escrow.values import (
        ESCROW_CONTRACT,
        OPEN_SIGNATURE,
        EscrowEvent,
        EscrowEventName,
        EscrowIntent,
        EscrowPendingError,
        EscrowReceipt,
        EscrowRecord,
        EscrowRefusedError,
        EscrowState,
        EscrowTxKind,
        EscrowTxRejectedError,
        SignedEscrowTx,
        address_of,
        open_calldata,
        open_intent,
        refund_intent,
        settle_intent,
        task_id_hash,
        withdraw_intent,
    )
    from market.escrow.web3_chain import (
        EscrowDeployment,
        Web3EscrowChain,
        deploy_escrow,
        ensure_escrow,
    )

_EXPORTS = {
    "EscrowActions": "market.escrow.actions",
    "EscrowOutcome": "market.escrow.actions",
    "OutcomeStatus": "market.escrow.actions",
    "EscrowChain": "market.escrow.chain",
    "EscrowJournal": "market.escrow.journal",
    "EscrowTxRecord": "market.escrow.journal",
    "JournalStatus": "market.escrow.journal",
    "MarketEscrowTx": "market.escrow.journal",
    "MemoryEscrowJournal": "market.escrow.journal",
    "SqlEscrowJournal": "market.escrow.journal",
    "MEMORY_ESCROW_ADDRESS": "market.escrow.memory_chain",
    "MEMORY_GAS": "market.escrow.memory_chain",
    "MEMORY_GAS_REVERTED": "market.escrow.memory_chain",
    "MEMORY_RPC_URL": "market.escrow.memory_chain",
    "MemoryEscrowChain": "market.escrow.memory_chain",
    "ESCROW_CONTRACT": "market.escrow.values",
    "OPEN_SIGNATURE": "market.escrow.values",
    "EscrowEvent": "market.escrow.values",
    "EscrowEventName": "market.escrow.values",
    "EscrowIntent": "market.escrow.values",
    "EscrowPendingError": "market.escrow.values",
    "EscrowReceipt": "market.escrow.values",
    "EscrowRecord": "market.escrow.values",
    "EscrowRefusedError": "market.escrow.values",
    "EscrowState": "market.escrow.values",
    "EscrowTxKind": "market.escrow.values",
    "EscrowTxRejectedError": "market.escrow.values",
    "SignedEscrowTx": "market.escrow.values",
    "address_of": "market.escrow.values",
    "open_calldata": "market.escrow.values",
    "open_intent": "market.escrow.values",
    "refund_intent": "market.escrow.values",
    "settle_intent": "market.escrow.values",
    "task_id_hash": "market.escrow.values",
    "withdraw_intent": "market.escrow.values",
    "EscrowDeployment": "market.escrow.web3_chain",
    "Web3EscrowChain": "market.escrow.web3_chain",
    "deploy_escrow": "market.escrow.web3_chain",
    "ensure_escrow": "market.escrow.web3_chain",
}

__all__ = [
    "ESCROW_CONTRACT",
    "MEMORY_ESCROW_ADDRESS",
    "MEMORY_GAS",
    "MEMORY_GAS_REVERTED",
    "MEMORY_RPC_URL",
    "OPEN_SIGNATURE",
    "EscrowActions",
    "EscrowChain",
    "EscrowDeployment",
    "EscrowEvent",
    "EscrowEventName",
    "EscrowIntent",
    "EscrowJournal",
    "EscrowOutcome",
    "EscrowPendingError",
    "EscrowReceipt",
    "EscrowRecord",
    "EscrowRefusedError",
    "EscrowState",
    "EscrowTxKind",
    "EscrowTxRecord",
    "EscrowTxRejectedError",
    "JournalStatus",
    "MarketEscrowTx",
    "MemoryEscrowChain",
    "MemoryEscrowJournal",
    "OutcomeStatus",
    "SignedEscrowTx",
    "SqlEscrowJournal",
    "Web3EscrowChain",
    "address_of",
    "deploy_escrow",
    "ensure_escrow",
    "open_calldata",
    "open_intent",
    "refund_intent",
    "settle_intent",
    "task_id_hash",
    "withdraw_intent",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
