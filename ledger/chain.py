"""The one seam between the ledger and an EVM chain: anchoring checkpoints in AnchorRegistry.

Everything that talks to a node lives here, and every web3 failure is mapped onto the ledger
error tree before it leaves this module:

    connection refused, timeouts, HTTP errors  -> ChainUnavailableError (nothing was done)
    the registry reverts (NotOperator, SizeNotGrowing)
                                                -> AnchorRefusedError (an AnchorError)
    a transaction the node rejects              -> AnchorError
    a missing or foreign registry contract      -> DeploymentError
    any other node or web3 failure              -> ChainError

Two implementations of `AnchorChain`: `Web3AnchorChain` (any JSON-RPC node, anvil by
default) and `MemoryAnchorChain` (in-process, same rules, for unit tests of the anchoring
service). On chain, a log is keyed by `log_id_hash(log_id)` = keccak256 of its UTF-8 id.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NoReturn, Protocol

import rlp  # type: ignore[import-untyped]
from eth_abi.abi import decode as abi_decode
from eth_account import Account
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from hexbytes import HexBytes
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import (
    BlockNotFound,
    ContractLogicError,
    ProviderConnectionError,
    RequestTimedOut,
    TimeExhausted,
    TransactionNotFound,
    Web3Exception,
    Web3RPCError,
)
from web3.providers.rpc import HTTPProvider
from web3.types import Nonce, RPCEndpoint, TxParams, Wei

from ledger.contracts import ContractArtifact, load_artifact
from ledger.errors import (
    AnchorError,
    ChainError,
    ChainUnavailableError,
    DeploymentError,
)
from ledger.fees import FeeMarket, FeePolicy, Fees, fees_for

REGISTRY_CONTRACT = "AnchorRegistry"

#: anvil's default account 0 (mnemonic "test test ... junk"): the managed devnet's operator.
#: Public knowledge; never use it on a chain where its ether is worth anything.
DEVNET_OPERATOR_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"

RPC_TIMEOUT_S = 5.0
DEPLOY_TIMEOUT_S = 60.0
GAS_MARGIN_NUMERATOR = 12  # gas limit = estimate * 12 / 10
GAS_MARGIN_DENOMINATOR = 10
_RECEIPT_POLL_S = 0.1
_UINT64_MAX = 2**64 - 1
DEFAULT_FEE_POLICY = FeePolicy()
_ZERO_ROOT = bytes(32)


# -- values ------------------------------------------------------------------------------


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
    """Where a contract lives. `code_hash` = keccak256 of its runtime code on chain.

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


# -- the interface -----------------------------------------------------------------------


class AnchorChain(Protocol):
    """What the anchoring service needs from a chain. Every method may raise
    ChainUnavailableError (nothing happened; retry later) or ChainError."""

    def chain_id(self) -> int: ...

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

    def receipt(self, tx_hash: bytes) -> AnchorReceipt | None:
        """The receipt, or None when the transaction is not mined (or unknown)."""
        ...

    def wait_for_receipt(self, tx_hash: bytes, timeout_s: float) -> AnchorReceipt | None:
        """Poll `receipt` until mined or `timeout_s` passes (then None)."""
        ...

    def account_nonce(self, latest: bool) -> int:
        """The operator's nonce: mined transactions only (latest) or with pending ones."""
        ...

    def anchors(self, log_id: str) -> list[OnChainAnchor]:
        """Every `Anchored` event of the log, oldest first."""
        ...

    def block_number(self) -> int:
        """The number of the chain's latest block."""
        ...

    def operator_address(self) -> str:
        """The account that signs anchors."""
        ...

    def nonce_of(self, address: str, latest: bool) -> int: ...

    def block_hash(self, number: int) -> bytes | None:
        """The canonical block's hash at `number` (None beyond the head)."""
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


# -- web3 --------------------------------------------------------------------------------


def make_web3(rpc_url: str, timeout_s: float = RPC_TIMEOUT_S) -> Web3:
    """A Web3 on an HTTP endpoint with a short timeout and no retries (no I/O here).

    web3's default retries connection errors five times with backoff (~2 s): a down node
    must be reported at once, the anchoring service does its own retrying. The chain id, which
    web3 asks before every call and estimate it makes, is cached per Web3 (nearly half of all
    requests otherwise); nothing else is.
    """
    provider = HTTPProvider(
        rpc_url,
        request_kwargs={"timeout": timeout_s},
        exception_retry_configuration=None,
        cache_allowed_requests=True,
        cacheable_requests={RPCEndpoint("eth_chainId")},
    )
    return Web3(provider)


@contextlib.contextmanager
def mapped_chain_errors(rpc_url: str, doing: str) -> Iterator[None]:
    """Turn transport and web3 failures inside the block into ledger ChainErrors."""
    try:
        yield
    except ChainError:
        raise
    except (OSError, ProviderConnectionError, TimeExhausted, RequestTimedOut) as exc:
        # requests' ConnectionError, Timeout and HTTPError are OSErrors.
        raise ChainUnavailableError(rpc_url, f"{doing}: {type(exc).__name__}") from exc
    except Web3Exception as exc:
        raise ChainError(f"{doing} failed on {rpc_url}: {exc}") from exc


def send_raw_transaction(w3: Web3, rpc_url: str, raw: bytes, tx_hash: bytes) -> Exception | None:
    """Broadcast signed bytes, idempotently: a refusal of a transaction the node already
    knows (pending or mined) is success. Returns the node's refusal otherwise, for the caller
    to raise as its own error. Raises ChainUnavailableError when the node does not answer."""
    with mapped_chain_errors(rpc_url, "eth_sendRawTransaction"):
        try:
            w3.eth.send_raw_transaction(raw)
        except (Web3RPCError, ValueError) as exc:
            try:
                w3.eth.get_transaction(HexBytes(tx_hash))
            except TransactionNotFound:
                return exc
    return None


def transaction_receipt(w3: Web3, rpc_url: str, tx_hash: bytes) -> TxReceipt | None:
    """The receipt of a mined transaction, or None while it is unknown or pending."""
    with mapped_chain_errors(rpc_url, "eth_getTransactionReceipt"):
        try:
            found = w3.eth.get_transaction_receipt(HexBytes(tx_hash))
        except TransactionNotFound:
            return None
    if found.get("blockNumber") is None:
        return None
    return TxReceipt(
        tx_hash=bytes(found["transactionHash"]),
        block_number=int(found["blockNumber"]),
        status_ok=int(found["status"]) == 1,
        gas_used=int(found["gasUsed"]),
        block_hash=bytes(found["blockHash"]) if found.get("blockHash") else None,
    )


def block_hash_at(w3: Web3, rpc_url: str, number: int) -> bytes | None:
    """The hash of the canonical block at `number`, None beyond the head."""
    with mapped_chain_errors(rpc_url, "eth_getBlockByNumber"):
        try:
            block = w3.eth.get_block(number)
        except BlockNotFound:
            return None
    found = block.get("hash")
    return None if found is None else bytes(found)


def node_knows(w3: Web3, rpc_url: str, tx_hash: bytes) -> bool:
    """Whether the node holds the transaction, pending or mined."""
    with mapped_chain_errors(rpc_url, "eth_getTransactionByHash"):
        try:
            w3.eth.get_transaction(HexBytes(tx_hash))
        except TransactionNotFound:
            return False
    return True


def nonce_at(w3: Web3, rpc_url: str, address: str, latest: bool) -> int:
    """The account's nonce: mined transactions only (latest) or with pending ones."""
    with mapped_chain_errors(rpc_url, "eth_getTransactionCount"):
        checksummed = to_checksum_address(address)
        if latest:
            return int(w3.eth.get_transaction_count(checksummed, "latest"))
        return int(w3.eth.get_transaction_count(checksummed, "pending"))


def fee_market(w3: Web3, rpc_url: str, policy: FeePolicy) -> FeeMarket:
    """The latest block's base fee and the node's suggested tip (the policy's default tip when
    one is configured or the node has no eth_maxPriorityFeePerGas)."""
    with mapped_chain_errors(rpc_url, "reading the fee market"):
        block = w3.eth.get_block("latest")
        base_fee = int(block.get("baseFeePerGas", 0))
        if policy.default_tip is not None:
            return FeeMarket(base_fee, policy.default_tip)
        try:
            tip = int(w3.eth.max_priority_fee)
        except (Web3RPCError, ValueError) as exc:
            raise ChainError(
                f"{rpc_url} suggests no tip (eth_maxPriorityFeePerGas: {exc}); "
                "set ACCORD_PRIORITY_FEE_GWEI"
            ) from exc
    return FeeMarket(base_fee, tip)


def fees_of_raw(raw: bytes) -> Fees | None:
    """The fees of signed EIP-1559 bytes, None for another transaction type (pure)."""
    if not raw or raw[0] != 2:
        return None
    try:
        fields = rlp.decode(raw[1:])
        return Fees(max_fee=int.from_bytes(fields[3], "big"), tip=int.from_bytes(fields[2], "big"))
    except (rlp.DecodingError, IndexError, TypeError):
        return None


def revert_data(exc: ContractLogicError) -> bytes:
    """The raw revert bytes of a ContractLogicError (empty when the node gave none)."""
    data = exc.data
    if isinstance(data, dict):
        data = data.get("data") or data.get("result")
    if isinstance(data, str) and data.startswith("0x"):
        try:
            return bytes.fromhex(data[2:])
        except ValueError:
            return b""
    return b""


def decode_custom_error(abi: list[dict[str, Any]], data: bytes) -> tuple[str, tuple[Any, ...]]:
    """Name and arguments of the ABI custom error `data` encodes; ("", ()) when none (pure)."""
    for entry in abi:
        if entry.get("type") != "error":
            continue
        types = [param["type"] for param in entry.get("inputs", [])]
        selector = keccak(text=f"{entry['name']}({','.join(types)})")[:4]
        if data[:4] == selector:
            try:
                return str(entry["name"]), tuple(abi_decode(types, data[4:]))
            except Exception:  # malformed arguments: report the name alone
                return str(entry["name"]), ()
    return "", ()


def refusal_from_revert(
    abi: list[dict[str, Any]], log_id: str, exc: ContractLogicError
) -> AnchorRefusedError:
    """The AnchorRefusedError a registry revert means."""
    name, args = decode_custom_error(abi, revert_data(exc))
    if name == "SizeNotGrowing" and len(args) == 2:
        return AnchorRefusedError(log_id, name, int(args[0]), int(args[1]))
    return AnchorRefusedError(log_id, name or (exc.message or "execution reverted"))


def eip1559_fees(
    w3: Web3, rpc_url: str = "the node", policy: FeePolicy = DEFAULT_FEE_POLICY
) -> tuple[int, int]:
    """(maxFeePerGas, maxPriorityFeePerGas): min(2 * base fee + tip, ceiling) and the tip.

    Raises FeesAboveCeilingError when the market is above the policy's ceiling.
    """
    fees = fees_for(fee_market(w3, rpc_url, policy), policy)
    return fees.max_fee, fees.tip


def with_gas_margin(gas_estimate: int) -> int:
    return gas_estimate * GAS_MARGIN_NUMERATOR // GAS_MARGIN_DENOMINATOR


class Web3Transactions:
    """What both JSON-RPC chains (anchors and escrow) share: the chain id (asked once), and
    the transaction journal's reads of receipts, nonces, blocks, the pool and the fee market.
    A subclass sets `_rpc_url`, `_w3`, `_fee_policy` and `_chain_id` (None)."""

    _rpc_url: str
    _w3: Web3
    _fee_policy: FeePolicy
    _chain_id: int | None

    def chain_id(self) -> int:
        if self._chain_id is None:
            with mapped_chain_errors(self._rpc_url, "eth_chainId"):
                self._chain_id = int(self._w3.eth.chain_id)
        return self._chain_id

    def receipt(self, tx_hash: bytes) -> TxReceipt | None:
        return transaction_receipt(self._w3, self._rpc_url, tx_hash)

    def wait_for_receipt(self, tx_hash: bytes, timeout_s: float) -> TxReceipt | None:
        return poll_receipt(self.receipt, tx_hash, timeout_s)

    def nonce_of(self, address: str, latest: bool) -> int:
        return nonce_at(self._w3, self._rpc_url, address, latest)

    def block_hash(self, number: int) -> bytes | None:
        return block_hash_at(self._w3, self._rpc_url, number)

    def block_number(self) -> int:
        return head_block_number(self._w3, self._rpc_url)

    def knows(self, tx_hash: bytes) -> bool:
        return node_knows(self._w3, self._rpc_url, tx_hash)

    def fee_market(self) -> FeeMarket:
        return fee_market(self._w3, self._rpc_url, self._fee_policy)

    def fees_of(self, raw: bytes) -> Fees | None:
        return fees_of_raw(raw)

    def fee_policy(self) -> FeePolicy:
        return self._fee_policy


class Web3AnchorChain(Web3Transactions):
    """AnchorChain over JSON-RPC (web3 HTTPProvider). Constructing it does no I/O."""

    def __init__(
        self,
        rpc_url: str,
        operator_key_hex: str,
        registry_address: str,
        *,
        timeout_s: float = RPC_TIMEOUT_S,
        artifact: ContractArtifact | None = None,
        fee_policy: FeePolicy | None = None,
    ) -> None:
        self._rpc_url = rpc_url
        self._w3 = make_web3(rpc_url, timeout_s)
        self._fee_policy = fee_policy or FeePolicy()
        self._account = Account.from_key(operator_key_hex)
        self._artifact = artifact or load_artifact(REGISTRY_CONTRACT)
        self._address = to_checksum_address(registry_address)
        self._registry: Contract = self._w3.eth.contract(
            address=self._address, abi=self._artifact.abi
        )
        self._chain_id: int | None = None

    def operator_address(self) -> str:
        return str(self._account.address)

    def registry_address(self) -> str:
        return self._address

    def latest_size(self, log_id: str) -> int:
        with mapped_chain_errors(self._rpc_url, "latestSize"):
            return int(self._registry.functions.latestSize(log_id_hash(log_id)).call())

    def root_at(self, log_id: str, size: int) -> bytes | None:
        with mapped_chain_errors(self._rpc_url, "rootAt"):
            root = bytes(self._registry.functions.rootAt(log_id_hash(log_id), size).call())
        return None if root == _ZERO_ROOT else root

    def build_anchor_tx(
        self,
        log_id: str,
        size: int,
        root: bytes,
        *,
        nonce: int | None = None,
        fees: Fees | None = None,
    ) -> SignedAnchorTx:
        """Sign an anchor at `nonce` (the pending one by default), with `fees` (EIP-1559 under
        the ceiling by default) and an estimated gas limit.

        Raises ValueError for a size or root that cannot be anchored, AnchorRefusedError when
        the registry would revert (NotOperator, SizeNotGrowing), FeesAboveCeilingError,
        ChainUnavailableError.
        """
        validate_anchor(size, root)
        call = self._registry.functions.anchor(log_id_hash(log_id), size, root)
        with mapped_chain_errors(self._rpc_url, "preparing an anchor"):
            try:
                gas = call.estimate_gas({"from": self._account.address})
            except ContractLogicError as exc:
                raise refusal_from_revert(self._artifact.abi, log_id, exc) from exc
            if nonce is None:
                nonce = int(self._w3.eth.get_transaction_count(self._account.address, "pending"))
            fees = fees or fees_for(self.fee_market(), self._fee_policy)
            params: TxParams = {
                "from": self._account.address,
                "chainId": self.chain_id(),
                "nonce": Nonce(nonce),
                "gas": with_gas_margin(gas),
                "maxFeePerGas": Wei(fees.max_fee),
                "maxPriorityFeePerGas": Wei(fees.tip),
            }
            tx = call.build_transaction(params)
        signed = self._account.sign_transaction(tx)
        return SignedAnchorTx(
            log_id=log_id,
            size=size,
            root=bytes(root),
            nonce=nonce,
            tx_hash=bytes(signed.hash),
            raw=bytes(signed.raw_transaction),
        )

    def broadcast(self, tx: SignedAnchorTx) -> None:
        """Send the raw transaction. Idempotent: if the node refuses it but knows it (pending
        or mined: "already known", "nonce too low" for this very tx), that is success.

        Raises AnchorError when the node refuses a transaction it does not know,
        ChainUnavailableError when it does not answer.
        """
        refusal = send_raw_transaction(self._w3, self._rpc_url, tx.raw, tx.tx_hash)
        if refusal is not None:
            raise AnchorError(
                f"the node refused anchor tx 0x{tx.tx_hash.hex()} "
                f"(log {tx.log_id!r}, size {tx.size}, nonce {tx.nonce}): {refusal}"
            ) from refusal

    def account_nonce(self, latest: bool) -> int:
        return nonce_at(self._w3, self._rpc_url, self._account.address, latest)

    def anchors(self, log_id: str) -> list[OnChainAnchor]:
        with mapped_chain_errors(self._rpc_url, "eth_getLogs"):
            logs = self._registry.events.Anchored.get_logs(
                from_block=0,
                to_block="latest",
                argument_filters={"logId": log_id_hash(log_id)},
            )
        ordered = sorted(logs, key=lambda log: (log["blockNumber"], log["logIndex"]))
        return [
            OnChainAnchor(
                log_id_hash=bytes(log["args"]["logId"]),
                size=int(log["args"]["size"]),
                root=bytes(log["args"]["root"]),
                block_number=int(log["blockNumber"]),
                tx_hash=bytes(log["transactionHash"]),
            )
            for log in ordered
        ]

    def operator(self) -> str:
        """The registry's operator address as the contract reports it."""
        with mapped_chain_errors(self._rpc_url, "operator"):
            return str(to_checksum_address(self._registry.functions.operator().call()))


def poll_receipt(
    receipt: Callable[[bytes], TxReceipt | None], tx_hash: bytes, timeout_s: float
) -> TxReceipt | None:
    """Ask `receipt(tx_hash)` until it answers or `timeout_s` passes (then None)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = receipt(tx_hash)
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(min(_RECEIPT_POLL_S, max(0.0, deadline - time.monotonic())))


def deep_enough(receipt: TxReceipt, head: int, confirmations: int) -> bool:
    """Whether `confirmations` blocks are on top of the receipt's block (pure; 0: mined)."""
    return head >= receipt.block_number + confirmations


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
        time.sleep(min(_RECEIPT_POLL_S, max(0.0, deadline - time.monotonic())))


def head_block_number(w3: Web3, rpc_url: str) -> int:
    """eth_blockNumber, mapped onto the ledger's errors."""
    with mapped_chain_errors(rpc_url, "eth_blockNumber"):
        return int(w3.eth.block_number)


# -- deployment --------------------------------------------------------------------------


def deploy_registry(
    rpc_url: str,
    operator_key_hex: str,
    *,
    artifact: ContractArtifact | None = None,
    timeout_s: float = DEPLOY_TIMEOUT_S,
    fee_policy: FeePolicy = DEFAULT_FEE_POLICY,
) -> Deployment:
    """Deploy a fresh AnchorRegistry whose operator is the key's account, with fees under
    `fee_policy`; wait until mined.

    Raises ChainUnavailableError, FeesAboveCeilingError, DeploymentError when the deployment
    reverts, is not mined within `timeout_s`, or leaves code other than the artifact's.
    """
    artifact = artifact or load_artifact(REGISTRY_CONTRACT)
    w3 = make_web3(rpc_url)
    account = Account.from_key(operator_key_hex)
    factory = w3.eth.contract(abi=artifact.abi, bytecode=artifact.bytecode)
    with mapped_chain_errors(rpc_url, "deploying the registry"):
        chain_id = int(w3.eth.chain_id)
        constructor = factory.constructor()
        gas = constructor.estimate_gas({"from": account.address})
        max_fee, tip = eip1559_fees(w3, rpc_url, fee_policy)
        tx = constructor.build_transaction(
            {
                "from": account.address,
                "chainId": chain_id,
                "nonce": w3.eth.get_transaction_count(account.address, "pending"),
                "gas": with_gas_margin(gas),
                "maxFeePerGas": max_fee,
                "maxPriorityFeePerGas": tip,
            }
        )
        signed = account.sign_transaction(tx)
        w3.eth.send_raw_transaction(signed.raw_transaction)
        try:
            receipt = w3.eth.wait_for_transaction_receipt(
                signed.hash, timeout=timeout_s, poll_latency=_RECEIPT_POLL_S
            )
        except TimeExhausted as exc:
            raise DeploymentError(
                f"registry deployment 0x{bytes(signed.hash).hex()} not mined in {timeout_s} s"
            ) from exc
        created = receipt.get("contractAddress")
        if int(receipt["status"]) != 1 or created is None:
            raise DeploymentError(f"registry deployment 0x{bytes(signed.hash).hex()} reverted")
        address = to_checksum_address(created)
        code = bytes(w3.eth.get_code(address))
    if not artifact.runtime_code_matches(code):
        raise DeploymentError(f"the code deployed at {address} is not {artifact.name}'s")
    return Deployment(
        address=address,
        chain_id=chain_id,
        tx_hash=bytes(signed.hash),
        code_hash=keccak(code),
        block_number=int(receipt["blockNumber"]),
        action="deployed",
    )


def ensure_registry(
    rpc_url: str,
    operator_key_hex: str,
    deployment_file: Path,
    *,
    artifact: ContractArtifact | None = None,
    fee_policy: FeePolicy = DEFAULT_FEE_POLICY,
) -> Deployment:
    """The registry recorded in `deployment_file`, checked on chain; deploys when needed
    (see `ensure_contract`), with fees under `fee_policy`. Raises DeploymentError,
    ChainUnavailableError, FeesAboveCeilingError."""
    artifact = artifact or load_artifact(REGISTRY_CONTRACT)
    return ensure_contract(
        rpc_url,
        operator_key_hex,
        deployment_file,
        artifact,
        deploy=lambda: deploy_registry(
            rpc_url, operator_key_hex, artifact=artifact, fee_policy=fee_policy
        ),
        operator_of=lambda address: Web3AnchorChain(
            rpc_url, operator_key_hex, address, artifact=artifact
        ).operator(),
    )


def ensure_contract(
    rpc_url: str,
    operator_key_hex: str,
    deployment_file: Path,
    artifact: ContractArtifact,
    *,
    deploy: Callable[[], Deployment],
    operator_of: Callable[[str], str],
) -> Deployment:
    """The contract of `artifact` recorded in `deployment_file`, checked on chain; `deploy`
    makes a fresh one when needed, `operator_of(address)` reads a deployed one's operator.

    - no record: deploy, record, action="deployed";
    - recorded and on chain with the recorded code hash, the artifact's runtime code (up to
      the immutables) and this operator: action="reused";
    - recorded but no code at the address (the chain was reset): deploy again, record,
      action="redeployed".

    Raises DeploymentError when the record is malformed, names another chain id, or the
    address holds other code (or another operator's contract); ChainUnavailableError.
    """
    name = artifact.name

    def refuse(why: str) -> NoReturn:
        raise DeploymentError(f"the {name} recorded in {deployment_file} does not hold: {why}")

    try:
        text = deployment_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        deployment = deploy()
        write_deployment(deployment_file, deployment)
        return deployment
    except OSError as exc:
        raise DeploymentError(f"cannot read {deployment_file}: {exc}") from exc
    recorded = Deployment.from_json(text, name)
    w3 = make_web3(rpc_url)
    with mapped_chain_errors(rpc_url, f"checking the {name}"):
        chain_id = int(w3.eth.chain_id)
        if chain_id != recorded.chain_id:
            refuse(f"it records chain id {recorded.chain_id} but {rpc_url} is chain {chain_id}")
        code = bytes(w3.eth.get_code(to_checksum_address(recorded.address)))
    if not code:
        deployment = replace(deploy(), action="redeployed")
        write_deployment(deployment_file, deployment)
        return deployment
    if keccak(code) != recorded.code_hash:
        refuse(f"the code at {recorded.address} has another hash")
    if not artifact.runtime_code_matches(code):
        refuse(
            f"the code at {recorded.address} is not the current {name} artifact "
            "(the contract changed since it was deployed)"
        )
    operator, ours = operator_of(recorded.address), Account.from_key(operator_key_hex).address
    if operator != ours:
        refuse(f"the {name} at {recorded.address} belongs to operator {operator}, not {ours}")
    return recorded


def write_deployment(path: Path, deployment: Deployment) -> None:
    """Write deployment.json atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(deployment.to_json(), encoding="utf-8")
    os.replace(temporary, path)


def _hex_bytes(value: str) -> bytes:
    return bytes.fromhex(value[2:] if value.startswith("0x") else value)


# -- in memory ---------------------------------------------------------------------------

MEMORY_RPC_URL = "memory://anchor-chain"
MEMORY_REGISTRY_ADDRESS = "0x000000000000000000000000000000000000A4C0"
#: Execution gas of the real AnchorRegistry.anchor beyond the intrinsic 21000 and calldata
#: (measured on anvil 1.7.1, solc 0.8.28 -O200 cancun; tests/integration/test_chain.py keeps
#: these honest). The first anchor of a log fills two empty storage slots; later ones fill
#: one and overwrite latestSize. A SizeNotGrowing revert that is mined anyway (signed before
#: a competing anchor landed) still costs gas.
MEMORY_EXEC_GAS_FIRST_ANCHOR = 46_747
MEMORY_EXEC_GAS_LATER_ANCHOR = 29_647
MEMORY_EXEC_GAS_REVERTED = 2_677
_TX_BASE_GAS = 21_000
_ANCHOR_SELECTOR = keccak(text="anchor(bytes32,uint64,bytes32)")[:4]


def anchor_calldata(log_id: str, size: int, root: bytes) -> bytes:
    """The ABI-encoded `anchor(logId, size, root)` call data (pure)."""
    return _ANCHOR_SELECTOR + log_id_hash(log_id) + size.to_bytes(32, "big") + root


def intrinsic_gas(calldata: bytes) -> int:
    """21000 plus 4 gas per zero and 16 per non-zero calldata byte (pure)."""
    return _TX_BASE_GAS + sum(4 if byte == 0 else 16 for byte in calldata)


MEMORY_OPERATOR_ADDRESS = "0x000000000000000000000000000000000000A4C1"
MEMORY_BASE_FEE = 1_000_000_000
MEMORY_TIP = 1_000_000_000


def memory_block_hash(number: int, fork: int) -> bytes:
    """The in-memory chains' block hash: a block mined again after a rewind has another."""
    return keccak(f"memory-block:{fork}:{number}".encode())


def replaces_queued(old: Fees | None, new: Fees | None) -> bool:
    """Whether `new` fees may replace a queued transaction with `old` ones at the same nonce:
    both raised by at least 12.5 %, as geth and anvil require (pure)."""
    if old is None or new is None:
        return False
    return new.max_fee * 8 >= old.max_fee * 9 and new.tip * 8 >= old.tip * 9


class MemoryChainFaults:
    """What both in-memory chains share of a public chain's faults: a fee market (`base_fee`
    and `tip` are test switches; a transaction whose maxFee is under the base fee is not
    mined), replacement at a nonce, and block hashes that change when blocks are mined again
    after a `rewind`. A subclass calls `_init_faults` and keeps `_block_number`."""

    base_fee: int
    tip: int
    _fee_policy: FeePolicy
    _block_number: int
    _fork: int
    _hashes: dict[int, bytes]

    def _init_faults(self, fee_policy: FeePolicy | None) -> None:
        self.base_fee = MEMORY_BASE_FEE
        self.tip = MEMORY_TIP
        self._fee_policy = fee_policy or FeePolicy()
        self._fork = 0
        self._hashes = {}

    def _check_available(self, doing: str) -> None:
        """Raises ChainUnavailableError when the chain is switched off (the subclass's)."""

    def fee_market(self) -> FeeMarket:
        self._check_available("reading the fee market")
        tip = self.tip if self._fee_policy.default_tip is None else self._fee_policy.default_tip
        return FeeMarket(self.base_fee, tip)

    def fees_of(self, raw: bytes) -> Fees | None:
        return memory_fees_of(raw)

    def fee_policy(self) -> FeePolicy:
        return self._fee_policy

    def _fees_now(self, fees: Fees | None) -> Fees:
        """`fees`, or the market's under the ceiling. Raises FeesAboveCeilingError."""
        return fees or fees_for(self.fee_market(), self._fee_policy)

    def _affordable(self, raw: bytes) -> bool:
        """Whether the transaction's maxFee covers the base fee (it may be mined now)."""
        fees = self.fees_of(raw)
        return fees is None or fees.max_fee >= self.base_fee

    def _outbids(self, queued_raw: bytes, raw: bytes) -> bool:
        return replaces_queued(self.fees_of(queued_raw), self.fees_of(raw))

    def block_hash(self, number: int) -> bytes | None:
        self._check_available("eth_getBlockByNumber")
        if number > self._block_number:
            return None
        return self._hashes.get(number, memory_block_hash(number, 0))

    def _new_block(self) -> bytes:
        """Mine the next block number; returns its hash."""
        self._block_number += 1
        self._hashes[self._block_number] = memory_block_hash(self._block_number, self._fork)
        return self._hashes[self._block_number]

    def _forget_blocks_after(self, block: int) -> None:
        self._block_number = min(self._block_number, block)
        self._hashes = {n: h for n, h in self._hashes.items() if n <= block}
        self._fork += 1  # blocks mined from here on are other blocks


class MemoryAnchorChain(MemoryChainFaults):
    """An in-process AnchorChain with the registry's rules, for unit tests.

    Test switches:
      available = False      every call raises ChainUnavailableError
      auto_mine = False      broadcasts wait in the mempool until `mine()`
      lose_broadcast_replies = n
                             the next n broadcasts reach the mempool but then raise
                             ChainUnavailableError, like a reply lost to a timeout
      base_fee, tip          the fee market; `mine()` leaves a transaction whose maxFee is
                             under `base_fee` in the mempool (stuck)
      rewind(block)          forget every block after `block`, as a node restarted from an
                             older state (or a reorg) does; the mempool is forgotten too
    """

    def __init__(self, chain_id: int = 31337, fee_policy: FeePolicy | None = None) -> None:
        self.available = True
        self.auto_mine = True
        self.lose_broadcast_replies = 0
        self._init_faults(fee_policy)
        self._chain_id = chain_id
        self._block_number = 0
        self._latest: dict[bytes, int] = {}
        self._roots: dict[tuple[bytes, int], bytes] = {}
        self._events: list[OnChainAnchor] = []
        self._mempool: dict[bytes, SignedAnchorTx] = {}
        self._receipts: dict[bytes, AnchorReceipt] = {}
        self._mined_nonce = 0

    def _check_available(self, doing: str) -> None:
        if not self.available:
            raise ChainUnavailableError(MEMORY_RPC_URL, f"{doing}: simulated outage")

    def chain_id(self) -> int:
        self._check_available("eth_chainId")
        return self._chain_id

    def registry_address(self) -> str:
        return MEMORY_REGISTRY_ADDRESS

    def operator_address(self) -> str:
        return MEMORY_OPERATOR_ADDRESS

    def latest_size(self, log_id: str) -> int:
        self._check_available("latestSize")
        return self._latest.get(log_id_hash(log_id), 0)

    def root_at(self, log_id: str, size: int) -> bytes | None:
        self._check_available("rootAt")
        return self._roots.get((log_id_hash(log_id), size))

    def build_anchor_tx(
        self,
        log_id: str,
        size: int,
        root: bytes,
        *,
        nonce: int | None = None,
        fees: Fees | None = None,
    ) -> SignedAnchorTx:
        """Raises ValueError, AnchorRefusedError (size not growing), FeesAboveCeilingError,
        ChainUnavailableError."""
        self._check_available("preparing an anchor")
        validate_anchor(size, root)
        latest = self._latest.get(log_id_hash(log_id), 0)
        if size <= latest:
            raise AnchorRefusedError(log_id, "SizeNotGrowing", latest, size)
        if nonce is None:
            nonce = self.account_nonce(latest=False)
        fees = self._fees_now(fees)
        raw = json.dumps(
            {
                "logId": log_id,
                "size": size,
                "root": root.hex(),
                "nonce": nonce,
                "maxFee": fees.max_fee,
                "tip": fees.tip,
            },
            sort_keys=True,
        ).encode()
        return SignedAnchorTx(
            log_id=log_id, size=size, root=bytes(root), nonce=nonce, tx_hash=keccak(raw), raw=raw
        )

    def broadcast(self, tx: SignedAnchorTx) -> None:
        """Raises AnchorError when the nonce is spent by (or queued for) another
        transaction without better fees, ChainUnavailableError when down or a reply is
        "lost"."""
        self._check_available("eth_sendRawTransaction")
        known = tx.tx_hash in self._receipts or tx.tx_hash in self._mempool
        if not known:
            queued = [q for q in self._mempool.values() if q.nonce == tx.nonce]
            taken = tx.nonce < self._mined_nonce or any(
                not self._outbids(q.raw, tx.raw) for q in queued
            )
            if taken:
                raise AnchorError(
                    f"the node refused anchor tx 0x{tx.tx_hash.hex()}: nonce {tx.nonce} "
                    "is already used by another transaction"
                )
            for replaced in queued:
                del self._mempool[replaced.tx_hash]
            self._mempool[tx.tx_hash] = tx
        if self.auto_mine:
            self.mine()
        if not known and self.lose_broadcast_replies > 0:
            self.lose_broadcast_replies -= 1
            raise ChainUnavailableError(MEMORY_RPC_URL, "eth_sendRawTransaction: timed out")

    def mine(self) -> list[AnchorReceipt]:
        """Mine every queued transaction whose nonce is next and whose maxFee covers the base
        fee, one block each."""
        mined: list[AnchorReceipt] = []
        while True:
            ready = [
                tx
                for tx in self._mempool.values()
                if tx.nonce == self._mined_nonce and self._affordable(tx.raw)
            ]
            if not ready:
                return mined
            mined.append(self._execute(ready[0]))

    def _execute(self, tx: SignedAnchorTx) -> AnchorReceipt:
        del self._mempool[tx.tx_hash]
        block_hash = self._new_block()
        self._mined_nonce += 1
        key = log_id_hash(tx.log_id)
        latest = self._latest.get(key, 0)
        ok = tx.size > latest
        if ok:
            self._latest[key] = tx.size
            self._roots[(key, tx.size)] = tx.root
            self._events.append(
                OnChainAnchor(key, tx.size, tx.root, self._block_number, tx.tx_hash)
            )
        execution = (
            MEMORY_EXEC_GAS_REVERTED
            if not ok
            else MEMORY_EXEC_GAS_FIRST_ANCHOR
            if latest == 0
            else MEMORY_EXEC_GAS_LATER_ANCHOR
        )
        gas = intrinsic_gas(anchor_calldata(tx.log_id, tx.size, tx.root)) + execution
        receipt = AnchorReceipt(tx.tx_hash, self._block_number, ok, gas, block_hash)
        self._receipts[tx.tx_hash] = receipt
        return receipt

    def receipt(self, tx_hash: bytes) -> AnchorReceipt | None:
        """(With `auto_mine`, what the mempool holds is mined first, as a node would.)"""
        self._check_available("eth_getTransactionReceipt")
        if self.auto_mine:
            self.mine()
        return self._receipts.get(tx_hash)

    def wait_for_receipt(self, tx_hash: bytes, timeout_s: float) -> AnchorReceipt | None:
        return poll_receipt(self.receipt, tx_hash, timeout_s)

    def account_nonce(self, latest: bool) -> int:
        self._check_available("eth_getTransactionCount")
        return self._mined_nonce if latest else self._mined_nonce + len(self._mempool)

    def nonce_of(self, address: str, latest: bool) -> int:
        return self.account_nonce(latest) if address == MEMORY_OPERATOR_ADDRESS else 0

    def knows(self, tx_hash: bytes) -> bool:
        self._check_available("eth_getTransactionByHash")
        return tx_hash in self._mempool or tx_hash in self._receipts

    def anchors(self, log_id: str) -> list[OnChainAnchor]:
        self._check_available("eth_getLogs")
        key = log_id_hash(log_id)
        return [event for event in self._events if event.log_id_hash == key]

    def block_number(self) -> int:
        self._check_available("eth_blockNumber")
        return self._block_number

    def mine_empty(self, blocks: int = 1) -> None:
        """Mine `blocks` empty blocks (confirmations pile up)."""
        for _ in range(blocks):
            self._new_block()

    def rewind(self, block: int) -> None:
        """Forget every block after `block` (one transaction per block here)."""
        self._receipts = {h: r for h, r in self._receipts.items() if r.block_number <= block}
        self._events = [e for e in self._events if e.block_number <= block]
        self._mempool.clear()
        self._latest = {}
        self._roots = {}
        for event in self._events:
            self._latest[event.log_id_hash] = event.size
            self._roots[(event.log_id_hash, event.size)] = event.root
        self._mined_nonce = len(self._receipts)
        self._forget_blocks_after(block)


def memory_fees_of(raw: bytes) -> Fees | None:
    """The fees the in-memory chains sign into their JSON "raw" bytes (pure)."""
    try:
        data = json.loads(raw)
        return Fees(int(data["maxFee"]), int(data["tip"]))
    except (ValueError, KeyError, TypeError):
        return None
