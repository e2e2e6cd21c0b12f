"""Task budgets in the `TaskEscrow` contract, and the crash-safe actions that move them.

The package, by what each module holds:

    values        intents, signed transactions, the contract's records and events, the errors
    chain         `EscrowChain`, the seam to the contract (and the build_*_tx helpers)
    web3_chain    `Web3EscrowChain` over JSON-RPC; deploying and checking the contract
    memory_chain  `MemoryEscrowChain`, the contract's rules in process, for unit tests
    journal       `EscrowJournal`: where each transaction is recorded before it is sent
    actions       `EscrowActions`: open, pay out, refund, withdraw through the journal engine
                  of `accord.ledger.txjournal`, so that no action ever moves money twice

Everything public is re-exported here, lazily: import from `accord.market.escrow`. Importing a name
imports only the module that holds it, so `accord.market.escrow.values` loads no web3 or SQLAlchemy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accord.ledger.lazy import lazy_exports

if TYPE_CHECKING:
    from accord.ledger.txjournal import JournalStatus
    from accord.market.escrow.actions import EscrowActions, EscrowOutcome, OutcomeStatus
    from accord.market.escrow.chain import (
        EscrowChain,
    )
    from accord.market.escrow.journal import (
        EscrowJournal,
        EscrowTxRecord,
        MarketEscrowTx,
        MemoryEscrowJournal,
        SqlEscrowJournal,
    )
    from accord.market.escrow.memory_chain import (
        MEMORY_ESCROW_ADDRESS,
        MEMORY_GAS,
        MEMORY_GAS_REVERTED,
        MEMORY_RPC_URL,
        MemoryEscrowChain,
    )
    from accord.market.escrow.values import (
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
        answer_intent,
        bond_intent,
        open_calldata,
        open_intent,
        pay_out_intent,
        reclaim_intent,
        refund_intent,
        release_intent,
        task_id_hash,
        withdraw_intent,
    )
    from accord.market.escrow.web3_chain import (
        EscrowDeployment,
        Web3EscrowChain,
        deploy_escrow,
        ensure_escrow,
    )

_EXPORTS = {
    "EscrowActions": "accord.market.escrow.actions",
    "EscrowOutcome": "accord.market.escrow.actions",
    "OutcomeStatus": "accord.market.escrow.actions",
    "EscrowChain": "accord.market.escrow.chain",
    "EscrowJournal": "accord.market.escrow.journal",
    "EscrowTxRecord": "accord.market.escrow.journal",
    "JournalStatus": "accord.ledger.txjournal",
    "MarketEscrowTx": "accord.market.escrow.journal",
    "MemoryEscrowJournal": "accord.market.escrow.journal",
    "SqlEscrowJournal": "accord.market.escrow.journal",
    "MEMORY_ESCROW_ADDRESS": "accord.market.escrow.memory_chain",
    "MEMORY_GAS": "accord.market.escrow.memory_chain",
    "MEMORY_GAS_REVERTED": "accord.market.escrow.memory_chain",
    "MEMORY_RPC_URL": "accord.market.escrow.memory_chain",
    "MemoryEscrowChain": "accord.market.escrow.memory_chain",
    "ESCROW_CONTRACT": "accord.market.escrow.values",
    "OPEN_SIGNATURE": "accord.market.escrow.values",
    "EscrowEvent": "accord.market.escrow.values",
    "EscrowEventName": "accord.market.escrow.values",
    "EscrowIntent": "accord.market.escrow.values",
    "EscrowPendingError": "accord.market.escrow.values",
    "EscrowReceipt": "accord.market.escrow.values",
    "EscrowRecord": "accord.market.escrow.values",
    "EscrowRefusedError": "accord.market.escrow.values",
    "EscrowState": "accord.market.escrow.values",
    "EscrowTxKind": "accord.market.escrow.values",
    "EscrowTxRejectedError": "accord.market.escrow.values",
    "SignedEscrowTx": "accord.market.escrow.values",
    "address_of": "accord.market.escrow.values",
    "answer_intent": "accord.market.escrow.values",
    "bond_intent": "accord.market.escrow.values",
    "reclaim_intent": "accord.market.escrow.values",
    "open_calldata": "accord.market.escrow.values",
    "open_intent": "accord.market.escrow.values",
    "refund_intent": "accord.market.escrow.values",
    "release_intent": "accord.market.escrow.values",
    "pay_out_intent": "accord.market.escrow.values",
    "task_id_hash": "accord.market.escrow.values",
    "withdraw_intent": "accord.market.escrow.values",
    "EscrowDeployment": "accord.market.escrow.web3_chain",
    "Web3EscrowChain": "accord.market.escrow.web3_chain",
    "deploy_escrow": "accord.market.escrow.web3_chain",
    "ensure_escrow": "accord.market.escrow.web3_chain",
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
    "answer_intent",
    "bond_intent",
    "deploy_escrow",
    "ensure_escrow",
    "open_calldata",
    "open_intent",
    "pay_out_intent",
    "reclaim_intent",
    "refund_intent",
    "release_intent",
    "task_id_hash",
    "withdraw_intent",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
