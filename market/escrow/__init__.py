"""Task budgets in the `TaskEscrow` contract, and the crash-safe actions that move them.

The package, by what each module holds:

    values        intents, signed transactions, the contract's records and events, the errors
    chain         `EscrowChain`, the seam to the contract (and the build_*_tx helpers)
    web3_chain    `Web3EscrowChain` over JSON-RPC; deploying and checking the contract
    memory_chain  `MemoryEscrowChain`, the contract's rules in process, for unit tests
    journal       `EscrowJournal`: where each transaction is recorded before it is sent
    actions       `EscrowActions`: open, settle, refund, withdraw through the journal engine
                  of `ledger.txjournal`, so that no action ever moves money twice

Everything public is re-exported here: import from `market.escrow`.
"""

from market.escrow.actions import EscrowActions, EscrowOutcome, OutcomeStatus
from market.escrow.chain import (
    EscrowChain,
    build_open_tx,
    build_refund_tx,
    build_settle_tx,
    build_withdraw_tx,
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
    "build_open_tx",
    "build_refund_tx",
    "build_settle_tx",
    "build_withdraw_tx",
    "deploy_escrow",
    "ensure_escrow",
    "open_calldata",
    "open_intent",
    "refund_intent",
    "settle_intent",
    "task_id_hash",
    "withdraw_intent",
]
