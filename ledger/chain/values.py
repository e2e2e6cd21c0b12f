"""The anchor chain's values, pure: signed anchors, receipts, `Anchored` events, deployment
records, the registry's refusal, and the arithmetic on them (no I/O, no web3).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

import rlp  # type: ignore[import-untyped]
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from accord.ledger.errors import AnchorError, DeploymentError
from accord.ledger.fees import FeePolicy, Fees

REGISTRY_CONTRACT = "AnchorRegistry"

#: anvil's default account 0 (mnemonic "test test ... junk"): the managed devnet's operator.
#: Public knowledge; never use it on a chain where its ether is worth anything.
DEVNET_OPERATOR_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"

RPC_TIMEOUT_S = 5.0
DEPLOY_TIMEOUT_S = 60.0
GAS_MARGIN_NUMERATOR = 12  # gas limit = estimate * 12 / 10
GAS_MARGIN_DENOMINATOR = 10
RECEIPT_POLL_S = 0.1
_UINT64_MAX = 2**64 - 1
DEFAULT_FEE_POLICY = FeePolicy()


@dataclass(frozen=True)
class SignedAnchorTx:
    """An `anchor(logId, size, root)` call signed by the operator, not yet (known) sent."""

    log_id: str
    size: int
    root: bytes
    nonce: int
    tx_hash: bytes
    raw: bytes


@dataclass(frozen=True)
class TxReceipt:
    """A mined transaction. `status_ok` is False when it reverted (its nonce is spent)."""

    tx_hash: bytes
    block_number: int
    status_ok: bool
    gas_used: int
    block_hash: bytes | None = None


AnchorReceipt = TxReceipt


@dataclass(frozen=True)
class OnChainAnchor:
    """One `Anchored` event."""

    log_id_hash: bytes
    size: int
    root: bytes
    block_number: int
    tx_hash: bytes


DeploymentAction = Literal["deployed", "reused", "redeployed"]


@dataclass(frozen=True)
class Deployment:
    """Where a contract lives. `code_hash` = keccak256 of its deployed code on chain.

    `action` says what `ensure_registry` (or `ensure_escrow`) did; it is not recorded.
    """

    address: str
    chain_id: int
    tx_hash: bytes
    code_hash: bytes
    block_number: int
    action: DeploymentAction = field(default="deployed", compare=False)
    contract: str = REGISTRY_CONTRACT

    def to_json(self) -> str:
        """The deployment record's text (sorted keys, trailing newline)."""
        record = {
            "contract": self.contract,
            "address": self.address,
            "chainId": self.chain_id,
            "txHash": "0x" + self.tx_hash.hex(),
            "codeHash": "0x" + self.code_hash.hex(),
            "blockNumber": self.block_number,
        }
        return json.dumps(record, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, contract: str = REGISTRY_CONTRACT) -> Deployment:
        """Parse a deployment record of `contract`; raises DeploymentError when it is
        malformed or records another contract."""
        try:
            record = json.loads(text)
            if record.get("contract", contract) != contract:
                raise ValueError(f"it records {record.get('contract')!r}, not {contract}")
            return cls(
                address=to_checksum_address(record["address"]),
                chain_id=int(record["chainId"]),
                tx_hash=_hex_bytes(record["txHash"]),
                code_hash=_hex_bytes(record["codeHash"]),
                block_number=int(record["blockNumber"]),
                action="reused",
                contract=contract,
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise DeploymentError(f"{contract} deployment record is malformed: {exc!r}") from exc


class AnchorRefusedError(AnchorError):
    """The registry refused an anchor.

    `reason` is the contract's custom error name ("NotOperator", "SizeNotGrowing") or the
    node's revert message; for SizeNotGrowing, `latest_size` and `proposed_size` are set.
    """

    def __init__(
        self,
        log_id: str,
        reason: str,
        latest_size: int | None = None,
        proposed_size: int | None = None,
    ) -> None:
        detail = (
            f"{reason}(latest={latest_size}, proposed={proposed_size})"
            if latest_size is not None
            else reason
        )
        super().__init__(f"the registry refused the anchor for log {log_id!r}: {detail}")
        self.log_id = log_id
        self.reason = reason
        self.latest_size = latest_size
        self.proposed_size = proposed_size


def log_id_hash(log_id: str) -> bytes:
    """The on-chain key of a log: keccak256 of its UTF-8 id (= Web3.keccak(text=log_id))."""
    return keccak(text=log_id)


def validate_anchor(size: int, root: bytes) -> None:
    """Raises ValueError unless `size` fits uint64 and is positive and `root` is 32 bytes."""
    if not 0 < size <= _UINT64_MAX:
        raise ValueError(f"anchor size must be in 1..2**64-1, got {size}")
    if len(root) != 32:
        raise ValueError(f"anchor root must be 32 bytes, got {len(root)}")


def fees_of_raw(raw: bytes) -> Fees | None:
    """The fees of signed EIP-1559 bytes, None for another transaction type (pure)."""
    if not raw or raw[0] != 2:
        return None
    try:
        fields = rlp.decode(raw[1:])
        return Fees(max_fee=int.from_bytes(fields[3], "big"), tip=int.from_bytes(fields[2], "big"))
    except (rlp.DecodingError, IndexError, TypeError):
        return None


def with_gas_margin(gas_estimate: int) -> int:
    return gas_estimate * GAS_MARGIN_NUMERATOR // GAS_MARGIN_DENOMINATOR


def deep_enough(receipt: TxReceipt, head: int, confirmations: int) -> bool:
    """Whether `confirmations` blocks are on top of the receipt's block (pure; 0: mined)."""
    return head >= receipt.block_number + confirmations


def _hex_bytes(value: str) -> bytes:
    return bytes.fromhex(value[2:] if value.startswith("0x") else value)
