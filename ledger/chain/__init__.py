"""The one seam between the ledger and an EVM chain: anchoring checkpoints in AnchorRegistry.

Everything that talks to a node lives here, and every web3 failure is mapped onto the ledger
error tree before it leaves this package:

    connection refused, timeouts, HTTP errors  -> ChainUnavailableError (nothing was done)
    the registry reverts (NotOperator, SizeNotGrowing)
                                                -> AnchorRefusedError (an AnchorError)
    a transaction the node rejects              -> AnchorError
    a missing or foreign registry contract      -> DeploymentError
    any other node or web3 failure              -> ChainError

Two implementations of `AnchorChain`: `Web3AnchorChain` (any JSON-RPC node, anvil by
default) and `MemoryAnchorChain` (in-process, same rules, for unit tests of the anchoring
service). On chain, a log is keyed by `log_id_hash(log_id)` = keccak256 of its UTF-8 id.

The package, by what each module holds:

    values        signed anchors, receipts, events, deployment records, the registry's
                  refusal, and the pure arithmetic on them (no web3)
    protocol      `TxChain`, what every chain answers (extended by `AnchorChain` and the
                  escrow's `EscrowChain`), and the receipt polling every chain shares
    web3_chain    `Web3AnchorChain` and the JSON-RPC helpers the escrow's chain shares
    deploy        deploying the registry, checking a recorded deployment
    memory_chain  `MemoryAnchorChain` and `MemoryChainFaults`, for unit tests (no web3)

Everything public is re-exported here, lazily: `from ledger.chain import X` imports only the
module that holds X, so `accord.ledger.chain.values` (or the in-memory chain) never loads web3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accord.ledger.lazy import lazy_exports

if TYPE_CHECKING:
    from accord.ledger.chain.deploy import (
        deploy_registry,
        ensure_contract,
        ensure_registry,
        write_deployment,
    )
    from accord.ledger.chain.memory_chain import (
        MEMORY_BASE_FEE,
        MEMORY_EXEC_GAS_FIRST_ANCHOR,
        MEMORY_EXEC_GAS_LATER_ANCHOR,
        MEMORY_EXEC_GAS_REVERTED,
        MEMORY_OPERATOR_ADDRESS,
        MEMORY_REGISTRY_ADDRESS,
        MEMORY_RPC_URL,
        MEMORY_TIP,
        MemoryAnchorChain,
        MemoryChainFaults,
        anchor_calldata,
        intrinsic_gas,
        memory_block_hash,
        memory_fees_of,
        replaces_queued,
    )
    from accord.ledger.chain.protocol import (
        AnchorChain,
        TxChain,
        poll_receipt,
        wait_until_deep,
    )
    from accord.ledger.chain.values import (
        DEFAULT_FEE_POLICY,
        DEPLOY_TIMEOUT_S,
        DEVNET_OPERATOR_KEY,
        GAS_MARGIN_DENOMINATOR,
        GAS_MARGIN_NUMERATOR,
        RECEIPT_POLL_S,
        REGISTRY_CONTRACT,
        RPC_TIMEOUT_S,
        AnchorReceipt,
        AnchorRefusedError,
        Deployment,
        DeploymentAction,
        OnChainAnchor,
        SignedAnchorTx,
        TxReceipt,
        deep_enough,
        fees_of_raw,
        log_id_hash,
        validate_anchor,
        with_gas_margin,
    )
    from accord.ledger.chain.web3_chain import (
        Web3AnchorChain,
        Web3Transactions,
        block_hash_at,
        decode_custom_error,
        eip1559_fees,
        fee_market,
        head_block_number,
        make_web3,
        mapped_chain_errors,
        node_knows,
        nonce_at,
        refusal_from_revert,
        revert_data,
        send_raw_transaction,
        transaction_receipt,
    )

_EXPORTS = {
    "AnchorReceipt": "accord.ledger.chain.values",
    "AnchorRefusedError": "accord.ledger.chain.values",
    "DEFAULT_FEE_POLICY": "accord.ledger.chain.values",
    "DEPLOY_TIMEOUT_S": "accord.ledger.chain.values",
    "DEVNET_OPERATOR_KEY": "accord.ledger.chain.values",
    "Deployment": "accord.ledger.chain.values",
    "DeploymentAction": "accord.ledger.chain.values",
    "GAS_MARGIN_DENOMINATOR": "accord.ledger.chain.values",
    "GAS_MARGIN_NUMERATOR": "accord.ledger.chain.values",
    "OnChainAnchor": "accord.ledger.chain.values",
    "RECEIPT_POLL_S": "accord.ledger.chain.values",
    "REGISTRY_CONTRACT": "accord.ledger.chain.values",
    "RPC_TIMEOUT_S": "accord.ledger.chain.values",
    "SignedAnchorTx": "accord.ledger.chain.values",
    "TxReceipt": "accord.ledger.chain.values",
    "deep_enough": "accord.ledger.chain.values",
    "fees_of_raw": "accord.ledger.chain.values",
    "log_id_hash": "accord.ledger.chain.values",
    "validate_anchor": "accord.ledger.chain.values",
    "with_gas_margin": "accord.ledger.chain.values",
    "AnchorChain": "accord.ledger.chain.protocol",
    "TxChain": "accord.ledger.chain.protocol",
    "poll_receipt": "accord.ledger.chain.protocol",
    "wait_until_deep": "accord.ledger.chain.protocol",
    "Web3AnchorChain": "accord.ledger.chain.web3_chain",
    "Web3Transactions": "accord.ledger.chain.web3_chain",
    "block_hash_at": "accord.ledger.chain.web3_chain",
    "decode_custom_error": "accord.ledger.chain.web3_chain",
    "eip1559_fees": "accord.ledger.chain.web3_chain",
    "fee_market": "accord.ledger.chain.web3_chain",
    "head_block_number": "accord.ledger.chain.web3_chain",
    "make_web3": "accord.ledger.chain.web3_chain",
    "mapped_chain_errors": "accord.ledger.chain.web3_chain",
    "node_knows": "accord.ledger.chain.web3_chain",
    "nonce_at": "accord.ledger.chain.web3_chain",
    "refusal_from_revert": "accord.ledger.chain.web3_chain",
    "revert_data": "accord.ledger.chain.web3_chain",
    "send_raw_transaction": "accord.ledger.chain.web3_chain",
    "transaction_receipt": "accord.ledger.chain.web3_chain",
    "deploy_registry": "accord.ledger.chain.deploy",
    "ensure_contract": "accord.ledger.chain.deploy",
    "ensure_registry": "accord.ledger.chain.deploy",
    "write_deployment": "accord.ledger.chain.deploy",
    "MEMORY_BASE_FEE": "accord.ledger.chain.memory_chain",
    "MEMORY_EXEC_GAS_FIRST_ANCHOR": "accord.ledger.chain.memory_chain",
    "MEMORY_EXEC_GAS_LATER_ANCHOR": "accord.ledger.chain.memory_chain",
    "MEMORY_EXEC_GAS_REVERTED": "accord.ledger.chain.memory_chain",
    "MEMORY_OPERATOR_ADDRESS": "accord.ledger.chain.memory_chain",
    "MEMORY_REGISTRY_ADDRESS": "accord.ledger.chain.memory_chain",
    "MEMORY_RPC_URL": "accord.ledger.chain.memory_chain",
    "MEMORY_TIP": "accord.ledger.chain.memory_chain",
    "MemoryAnchorChain": "accord.ledger.chain.memory_chain",
    "MemoryChainFaults": "accord.ledger.chain.memory_chain",
    "anchor_calldata": "accord.ledger.chain.memory_chain",
    "intrinsic_gas": "accord.ledger.chain.memory_chain",
    "memory_block_hash": "accord.ledger.chain.memory_chain",
    "memory_fees_of": "accord.ledger.chain.memory_chain",
    "replaces_queued": "accord.ledger.chain.memory_chain",
}

__all__ = [
    "DEFAULT_FEE_POLICY",
    "DEPLOY_TIMEOUT_S",
    "DEVNET_OPERATOR_KEY",
    "GAS_MARGIN_DENOMINATOR",
    "GAS_MARGIN_NUMERATOR",
    "MEMORY_BASE_FEE",
    "MEMORY_EXEC_GAS_FIRST_ANCHOR",
    "MEMORY_EXEC_GAS_LATER_ANCHOR",
    "MEMORY_EXEC_GAS_REVERTED",
    "MEMORY_OPERATOR_ADDRESS",
    "MEMORY_REGISTRY_ADDRESS",
    "MEMORY_RPC_URL",
    "MEMORY_TIP",
    "RECEIPT_POLL_S",
    "REGISTRY_CONTRACT",
    "RPC_TIMEOUT_S",
    "AnchorChain",
    "AnchorReceipt",
    "AnchorRefusedError",
    "Deployment",
    "DeploymentAction",
    "MemoryAnchorChain",
    "MemoryChainFaults",
    "OnChainAnchor",
    "SignedAnchorTx",
    "TxChain",
    "TxReceipt",
    "Web3AnchorChain",
    "Web3Transactions",
    "anchor_calldata",
    "block_hash_at",
    "decode_custom_error",
    "deep_enough",
    "deploy_registry",
    "eip1559_fees",
    "ensure_contract",
    "ensure_registry",
    "fee_market",
    "fees_of_raw",
    "head_block_number",
    "intrinsic_gas",
    "log_id_hash",
    "make_web3",
    "mapped_chain_errors",
    "memory_block_hash",
    "memory_fees_of",
    "node_knows",
    "nonce_at",
    "poll_receipt",
    "refusal_from_revert",
    "replaces_queued",
    "revert_data",
    "send_raw_transaction",
    "transaction_receipt",
    "validate_anchor",
    "wait_until_deep",
    "with_gas_margin",
    "write_deployment",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
