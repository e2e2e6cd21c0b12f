"""Task budgets in the `TaskEscrow` contract, and the crash-safe actions that move them.

Two layers:

- `EscrowChain`, the seam to the contract: `Web3EscrowChain` (any JSON-RPC node, anvil by
  default) and `MemoryEscrowChain` (in-process, same rules, for unit tests). Transactions are
  signed locally by the acting account's key (requester, operator or payee), as
  `SignedEscrowTx`, and sent by `broadcast` (idempotent). Failures leave this module as

      the contract would revert (custom error decoded)   -> EscrowRefusedError (an EscrowError)
      the node refuses a transaction it does not know     -> EscrowTxRejectedError (EscrowError)
      connection refused, timeouts                        -> ledger ChainUnavailableError
      any other node or web3 failure                      -> ledger ChainError
      a missing or foreign contract                       -> ledger DeploymentError

- `EscrowActions`, which never moves money twice. Each action is signed (nonce fixed), recorded
  in an `EscrowJournal` as *pending* with its raw bytes, and only then broadcast; its outcome is
  recorded once mined. A crash anywhere leaves at most a pending record, and `reconcile` (run
  before anything new is sent) settles each one exactly like `ledger.anchoring` does: mined →
  confirmed; its effect already on chain → superseded; mined but reverted → reverted; not mined
  and its nonce unspent → the *same bytes* are broadcast again (they cannot be mined twice);
  its nonce spent by another transaction → dropped, after which the action may be signed anew.
  A chain can also forget a confirmed transaction (anvil restarted from an older state dump, a
  reorg): `reconcile` first looks for confirmed records the chain no longer holds (no receipt
  and no event of theirs, or a superseded one whose effect is gone) and marks them
  *forgotten*; a forgotten record is settled like a pending one, except that where a pending
  one would be dropped it is signed anew (when the actions hold the sender's key), the new
  record replacing the old in one journal write, so it is sent again exactly once across
  crashes. A receipt counts once `confirmations` blocks are on top of it (0 on the devnet).
  The journal lives in memory (`MemoryEscrowJournal`) or in the market's SQL database
  (`SqlEscrowJournal`, table `market_escrow_txs`).

On chain a task is keyed by `task_id_hash(task_id)` = keccak256 of its UTF-8 id. Money is
`Wei`, an integer, everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from pathlib import Path
from typing import Any, Literal, NoReturn, Protocol, TypedDict

from eth_account import Account
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from sqlalchemy import BigInteger, Engine, Integer, LargeBinary, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Column, Field, SQLModel
from web3.contract import Contract
from web3.exceptions import ContractLogicError
from web3.types import Nonce, TxParams
from web3.types import Wei as Web3Wei

from ledger.chain import (
    DEPLOY_TIMEOUT_S,
    RPC_TIMEOUT_S,
    Deployment,
    TxReceipt,
    decode_custom_error,
    deep_enough,
    deploy_registry,
    eip1559_fees,
    head_block_number,
    make_web3,
    mapped_chain_errors,
    poll_receipt,
    revert_data,
    send_raw_transaction,
    transaction_receipt,
    wait_until_deep,
    with_gas_margin,
    write_deployment,
)
from ledger.contracts import ContractArtifact, load_artifact
from ledger.errors import ChainUnavailableError, DeploymentError
from market.errors import EscrowError
from market.money import Wei

ESCROW_CONTRACT = "TaskEscrow"

EscrowTxKind = Literal["open", "settle", "refund", "withdraw"]
_ZERO_WEI = Wei(0)
JournalStatus = Literal[
    "pending", "confirmed", "superseded", "reverted", "dropped", "forgotten", "replaced"
]
"""`superseded`: its effect is on chain through another transaction; `dropped`: it can never be
mined (its nonce went to another transaction); `reverted`: mined, refused by the contract;
`forgotten`: recorded as done but the chain no longer holds it (unresolved, like pending);
`replaced`: a forgotten record signed anew as another record."""

_UNRESOLVED: tuple[JournalStatus, ...] = ("pending", "forgotten")

OutcomeStatus = Literal[
    "confirmed",
    "superseded",
    "already-done",
    "pending",
    "reverted",
    "dropped",
    "forgotten",
    "replaced",
]


# -- errors ------------------------------------------------------------------------------


class EscrowRefusedError(EscrowError):
    """The contract refuses (or would refuse) an action.

    `reason` is its custom error name (NotOperator, NotRequester, AlreadyOpened, ZeroDeposit,
    DeadlineNotInFuture, NotOpen, LengthMismatch, ZeroPayee, OverDeposit, DeadlineNotReached,
    NothingToWithdraw, TransferFailed) or the node's revert message; `args` its arguments.
    """

    def __init__(self, kind: str, task_id: str, reason: str, args: tuple[Any, ...] = ()) -> None:
        what = f"{kind} of task {task_id!r}" if task_id else kind
        detail = f"{reason}{args!r}" if args else reason
        super().__init__(f"the escrow refused the {what}: {detail}")
        self.kind = kind
        self.task_id = task_id
        self.reason = reason
        self.reason_args = args


class EscrowTxRejectedError(EscrowError):
    """The node refused a signed transaction it does not know (e.g. its nonce is taken)."""


class EscrowPendingError(EscrowError):
    """The account has an unresolved escrow transaction; reconcile before sending another."""


# -- values ------------------------------------------------------------------------------


class EscrowState(IntEnum):
    NONE = 0
    OPEN = 1
    SETTLED = 2
    REFUNDED = 3


@dataclass(frozen=True)
class EscrowRecord:
    """`escrows(taskId)` of an opened task."""

    task_id_hash: bytes
    requester: str
    deposit: Wei
    deadline: int
    state: EscrowState


@dataclass(frozen=True)
class EscrowIntent:
    """One action on the escrow, before it is signed. Unused fields stay at their defaults."""

    kind: EscrowTxKind
    task_id: str = ""
    deposit: Wei = _ZERO_WEI
    deadline: int = 0
    payees: tuple[str, ...] = ()
    amounts: tuple[Wei, ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "kind": self.kind,
                "taskId": self.task_id,
                "deposit": str(self.deposit),
                "deadline": self.deadline,
                "payees": list(self.payees),
                "amounts": [str(a) for a in self.amounts],
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> EscrowIntent:
        """Raises EscrowError when `text` is not an intent."""
        try:
            data = json.loads(text)
            kind = data["kind"]
            if kind not in ("open", "settle", "refund", "withdraw"):
                raise ValueError(f"unknown kind {kind!r}")
            return cls(
                kind=kind,
                task_id=str(data["taskId"]),
                deposit=Wei(int(data["deposit"])),
                deadline=int(data["deadline"]),
                payees=tuple(str(p) for p in data["payees"]),
                amounts=tuple(Wei(int(a)) for a in data["amounts"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EscrowError(f"malformed escrow intent: {exc!r}") from exc


def open_intent(task_id: str, deposit: int, deadline: int) -> EscrowIntent:
    return EscrowIntent("open", task_id, deposit=Wei(deposit), deadline=deadline)


def settle_intent(task_id: str, payees: Sequence[str], amounts: Sequence[int]) -> EscrowIntent:
    return EscrowIntent(
        "settle",
        task_id,
        payees=tuple(to_checksum_address(p) for p in payees),
        amounts=tuple(Wei(a) for a in amounts),
    )


def refund_intent(task_id: str) -> EscrowIntent:
    return EscrowIntent("refund", task_id)


def withdraw_intent() -> EscrowIntent:
    return EscrowIntent("withdraw")


@dataclass(frozen=True)
class SignedEscrowTx:
    """An escrow call signed by `sender`, not yet (known to be) sent. `task_id` is "" for
    a withdrawal."""

    kind: EscrowTxKind
    task_id: str
    nonce: int
    tx_hash: bytes
    raw: bytes
    sender: str


EscrowReceipt = TxReceipt
"""A mined escrow transaction (`status_ok` is False when it reverted)."""


EscrowEventName = Literal["Opened", "Settled", "Refunded", "Withdrawn"]


@dataclass(frozen=True)
class EscrowEvent:
    """One decoded event. `account` is the requester (Opened, Refunded) or the withdrawer;
    `amount` the deposit, the remainder (Settled), the refund or the withdrawal."""

    name: EscrowEventName
    task_id_hash: bytes | None
    account: str | None
    amount: Wei
    block_number: int
    log_index: int
    tx_hash: bytes
    deadline: int | None = None
    payees: tuple[str, ...] = ()
    amounts: tuple[Wei, ...] = ()


def task_id_hash(task_id: str) -> bytes:
    """The on-chain key of a task: keccak256 of its UTF-8 id."""
    return keccak(text=task_id)


def address_of(key_hex: str) -> str:
    """The checksummed address of a private key."""
    return str(Account.from_key(key_hex).address)


# -- the interface -----------------------------------------------------------------------


class EscrowChain(Protocol):
    """What the market needs from the escrow contract. Every method may raise
    ChainUnavailableError (nothing happened; retry later) or ChainError."""

    def chain_id(self) -> int: ...

    def escrow_address(self) -> str: ...

    def escrow(self, task_id: str) -> EscrowRecord | None:
        """The task's escrow, or None when it was never opened."""
        ...

    def credit(self, address: str) -> Wei: ...

    def balance(self) -> Wei:
        """The contract's balance."""
        ...

    def build_tx(
        self, key_hex: str, intent: EscrowIntent, *, nonce: int | None = None
    ) -> SignedEscrowTx:
        """Sign (not send) `intent` from the key's account, at its pending nonce unless given.

        Raises EscrowRefusedError when the contract would revert it.
        """
        ...

    def broadcast(self, tx: SignedEscrowTx) -> None:
        """Send `tx`; one the node already knows or mined is not an error.
        Raises EscrowTxRejectedError when the node refuses it for good."""
        ...

    def receipt(self, tx_hash: bytes) -> EscrowReceipt | None: ...

    def wait_for_receipt(self, tx_hash: bytes, timeout_s: float) -> EscrowReceipt | None: ...

    def account_nonce(self, address: str, latest: bool) -> int:
        """Mined transactions only (latest) or with pending ones."""
        ...

    def events(self, task_id: str | None = None, *, from_block: int = 0) -> list[EscrowEvent]:
        """Decoded events, oldest first: the task's (without Withdrawn) or all of them."""
        ...

    def block_number(self) -> int:
        """The number of the chain's latest block."""
        ...


def build_open_tx(
    chain: EscrowChain, key_hex: str, task_id: str, deposit: int, deadline: int
) -> SignedEscrowTx:
    return chain.build_tx(key_hex, open_intent(task_id, deposit, deadline))


def build_settle_tx(
    chain: EscrowChain,
    key_hex: str,
    task_id: str,
    payees: Sequence[str],
    amounts: Sequence[int],
) -> SignedEscrowTx:
    return chain.build_tx(key_hex, settle_intent(task_id, payees, amounts))


def build_refund_tx(chain: EscrowChain, key_hex: str, task_id: str) -> SignedEscrowTx:
    return chain.build_tx(key_hex, refund_intent(task_id))


def build_withdraw_tx(chain: EscrowChain, key_hex: str) -> SignedEscrowTx:
    return chain.build_tx(key_hex, withdraw_intent())


def _validate(intent: EscrowIntent) -> None:
    """Raises ValueError for an intent no contract call can express."""
    if intent.kind != "withdraw" and not intent.task_id:
        raise ValueError(f"a {intent.kind} needs a task id")
    if intent.kind == "open" and not (0 <= intent.deadline < 2**64):
        raise ValueError(f"deadline out of uint64 range: {intent.deadline}")
    if any(a < 0 or a >= 2**256 for a in (intent.deposit, *intent.amounts)):
        raise ValueError("amounts must be in 0..2**256-1 wei")


# -- web3 --------------------------------------------------------------------------------


class Web3EscrowChain:
    """EscrowChain over JSON-RPC. Constructing it does no I/O."""

    def __init__(
        self,
        rpc_url: str,
        escrow_address: str,
        *,
        timeout_s: float = RPC_TIMEOUT_S,
        artifact: ContractArtifact | None = None,
    ) -> None:
        self._rpc_url = rpc_url
        self._w3 = make_web3(rpc_url, timeout_s)
        self._artifact = artifact or load_artifact(ESCROW_CONTRACT)
        self._address = to_checksum_address(escrow_address)
        self._contract: Contract = self._w3.eth.contract(
            address=self._address, abi=self._artifact.abi
        )
        self._chain_id: int | None = None

    def chain_id(self) -> int:
        if self._chain_id is None:
            with mapped_chain_errors(self._rpc_url, "eth_chainId"):
                self._chain_id = int(self._w3.eth.chain_id)
        return self._chain_id

    def escrow_address(self) -> str:
        return self._address

    def operator(self) -> str:
        with mapped_chain_errors(self._rpc_url, "operator"):
            return str(to_checksum_address(self._contract.functions.operator().call()))

    def escrow(self, task_id: str) -> EscrowRecord | None:
        key = task_id_hash(task_id)
        with mapped_chain_errors(self._rpc_url, "escrows"):
            requester, deposit, deadline, state = self._contract.functions.escrows(key).call()
        if int(state) == EscrowState.NONE:
            return None
        return EscrowRecord(
            key,
            to_checksum_address(requester),
            Wei(int(deposit)),
            int(deadline),
            EscrowState(state),
        )

    def credit(self, address: str) -> Wei:
        with mapped_chain_errors(self._rpc_url, "credit"):
            return Wei(int(self._contract.functions.credit(to_checksum_address(address)).call()))

    def balance(self) -> Wei:
        with mapped_chain_errors(self._rpc_url, "eth_getBalance"):
            return Wei(int(self._w3.eth.get_balance(self._address)))

    def build_tx(
        self, key_hex: str, intent: EscrowIntent, *, nonce: int | None = None
    ) -> SignedEscrowTx:
        """Sign `intent` with EIP-1559 fees and an estimated gas limit.

        Raises ValueError, EscrowRefusedError (the contract's custom error decoded),
        ChainUnavailableError.
        """
        _validate(intent)
        account = Account.from_key(key_hex)
        functions = self._contract.functions
        key = task_id_hash(intent.task_id)
        value = 0
        if intent.kind == "open":
            call = functions.open(key, intent.deadline)
            value = intent.deposit
        elif intent.kind == "settle":
            call = functions.settle(key, list(intent.payees), list(intent.amounts))
        elif intent.kind == "refund":
            call = functions.refund(key)
        else:
            call = functions.withdraw()
        with mapped_chain_errors(self._rpc_url, f"preparing an escrow {intent.kind}"):
            try:
                gas = call.estimate_gas({"from": account.address, "value": Web3Wei(value)})
            except ContractLogicError as exc:
                name, args = decode_custom_error(self._artifact.abi, revert_data(exc))
                raise EscrowRefusedError(
                    intent.kind, intent.task_id, name or (exc.message or "reverted"), args
                ) from exc
            if nonce is None:
                nonce = int(self._w3.eth.get_transaction_count(account.address, "pending"))
            max_fee, tip = eip1559_fees(self._w3)
            params: TxParams = {
                "from": account.address,
                "chainId": self.chain_id(),
                "nonce": Nonce(nonce),
                "gas": with_gas_margin(gas),
                "value": Web3Wei(value),
                "maxFeePerGas": Web3Wei(max_fee),
                "maxPriorityFeePerGas": Web3Wei(tip),
            }
            tx = call.build_transaction(params)
        signed = account.sign_transaction(tx)
        return SignedEscrowTx(
            kind=intent.kind,
            task_id=intent.task_id,
            nonce=nonce,
            tx_hash=bytes(signed.hash),
            raw=bytes(signed.raw_transaction),
            sender=str(account.address),
        )

    def broadcast(self, tx: SignedEscrowTx) -> None:
        """Idempotent: a refusal for a transaction the node knows (pending or mined) is success.

        Raises EscrowTxRejectedError, ChainUnavailableError.
        """
        refusal = send_raw_transaction(self._w3, self._rpc_url, tx.raw, tx.tx_hash)
        if refusal is not None:
            raise EscrowTxRejectedError(
                f"the node refused escrow {tx.kind} tx 0x{tx.tx_hash.hex()} "
                f"(task {tx.task_id!r}, sender {tx.sender}, nonce {tx.nonce}): {refusal}"
            ) from refusal

    def receipt(self, tx_hash: bytes) -> EscrowReceipt | None:
        return transaction_receipt(self._w3, self._rpc_url, tx_hash)

    def wait_for_receipt(self, tx_hash: bytes, timeout_s: float) -> EscrowReceipt | None:
        return poll_receipt(self.receipt, tx_hash, timeout_s)

    def account_nonce(self, address: str, latest: bool) -> int:
        with mapped_chain_errors(self._rpc_url, "eth_getTransactionCount"):
            checksummed = to_checksum_address(address)
            if latest:
                return int(self._w3.eth.get_transaction_count(checksummed, "latest"))
            return int(self._w3.eth.get_transaction_count(checksummed, "pending"))

    def block_number(self) -> int:
        return head_block_number(self._w3, self._rpc_url)

    def events(self, task_id: str | None = None, *, from_block: int = 0) -> list[EscrowEvent]:
        names: list[EscrowEventName] = ["Opened", "Settled", "Refunded"]
        filters: dict[str, Any] = {}
        if task_id is None:
            names.append("Withdrawn")
        else:
            filters = {"taskId": task_id_hash(task_id)}
        logs: list[Any] = []
        with mapped_chain_errors(self._rpc_url, "eth_getLogs"):
            if from_block > 0 and from_block > int(self._w3.eth.block_number):
                return []  # nodes refuse a range that starts after the head
            for name in names:
                logs.extend(
                    getattr(self._contract.events, name).get_logs(
                        from_block=from_block, to_block="latest", argument_filters=filters
                    )
                )
        logs.sort(key=lambda log: (log["blockNumber"], log["logIndex"]))
        return [_decode_event(log) for log in logs]


class _Where(TypedDict):
    block_number: int
    log_index: int
    tx_hash: bytes


def _decode_event(log: Any) -> EscrowEvent:
    name: EscrowEventName = log["event"]
    args = log["args"]
    common = _Where(
        block_number=int(log["blockNumber"]),
        log_index=int(log["logIndex"]),
        tx_hash=bytes(log["transactionHash"]),
    )
    if name == "Opened":
        return EscrowEvent(
            name,
            bytes(args["taskId"]),
            to_checksum_address(args["requester"]),
            Wei(int(args["deposit"])),
            deadline=int(args["deadline"]),
            **common,
        )
    if name == "Settled":
        return EscrowEvent(
            name,
            bytes(args["taskId"]),
            None,
            Wei(int(args["remainder"])),
            payees=tuple(to_checksum_address(p) for p in args["payees"]),
            amounts=tuple(Wei(int(a)) for a in args["amounts"]),
            **common,
        )
    if name == "Refunded":
        return EscrowEvent(
            name,
            bytes(args["taskId"]),
            to_checksum_address(args["requester"]),
            Wei(int(args["amount"])),
            **common,
        )
    return EscrowEvent(
        name, None, to_checksum_address(args["account"]), Wei(int(args["amount"])), **common
    )


# -- deployment --------------------------------------------------------------------------

EscrowDeployment = Deployment
"""Where TaskEscrow lives (a `Deployment` whose `contract` is TaskEscrow)."""


def _deploy(
    rpc_url: str, operator_key_hex: str, artifact: ContractArtifact, timeout_s: float
) -> EscrowDeployment:
    deployed = deploy_registry(rpc_url, operator_key_hex, artifact=artifact, timeout_s=timeout_s)
    return replace(deployed, contract=ESCROW_CONTRACT)


def deploy_escrow(
    rpc_url: str,
    operator_key_hex: str,
    *,
    artifact: ContractArtifact | None = None,
    timeout_s: float = DEPLOY_TIMEOUT_S,
) -> str:
    """Deploy a fresh TaskEscrow operated by the key's account; returns its address.

    Raises ChainUnavailableError, DeploymentError.
    """
    artifact = artifact or load_artifact(ESCROW_CONTRACT)
    return _deploy(rpc_url, operator_key_hex, artifact, timeout_s).address


def ensure_escrow(
    rpc_url: str,
    operator_key_hex: str,
    deployment_file: Path,
    *,
    artifact: ContractArtifact | None = None,
) -> EscrowDeployment:
    """The escrow recorded in `deployment_file`, checked on chain; deploys when needed
    (no record: "deployed"; no code at the recorded address: "redeployed"; else "reused").

    Raises DeploymentError when the record is malformed, names another chain, or the address
    holds other code or another operator's escrow; ChainUnavailableError.
    """
    artifact = artifact or load_artifact(ESCROW_CONTRACT)
    try:
        text = deployment_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        deployment = _deploy(rpc_url, operator_key_hex, artifact, DEPLOY_TIMEOUT_S)
        write_deployment(deployment_file, deployment)
        return deployment
    except OSError as exc:
        raise DeploymentError(f"cannot read {deployment_file}: {exc}") from exc
    recorded = Deployment.from_json(text, ESCROW_CONTRACT)
    w3 = make_web3(rpc_url)
    with mapped_chain_errors(rpc_url, "checking the escrow"):
        chain_id = int(w3.eth.chain_id)
        if chain_id != recorded.chain_id:
            _refuse(
                deployment_file,
                f"it records chain id {recorded.chain_id} but {rpc_url} is chain {chain_id}",
            )
        code = bytes(w3.eth.get_code(to_checksum_address(recorded.address)))
    if not code:
        deployment = replace(
            _deploy(rpc_url, operator_key_hex, artifact, DEPLOY_TIMEOUT_S), action="redeployed"
        )
        write_deployment(deployment_file, deployment)
        return deployment
    if keccak(code) != recorded.code_hash:
        _refuse(deployment_file, f"the code at {recorded.address} has another hash")
    if not artifact.runtime_code_matches(code):
        _refuse(deployment_file, f"the code at {recorded.address} is not the current TaskEscrow")
    operator = Web3EscrowChain(rpc_url, recorded.address, artifact=artifact).operator()
    if operator != address_of(operator_key_hex):
        _refuse(deployment_file, f"the escrow at {recorded.address} belongs to {operator}")
    return recorded


def _refuse(deployment_file: Path, why: str) -> NoReturn:
    raise DeploymentError(f"the escrow recorded in {deployment_file} does not hold: {why}")


# -- in memory ---------------------------------------------------------------------------

MEMORY_RPC_URL = "memory://escrow-chain"
MEMORY_ESCROW_ADDRESS = "0x000000000000000000000000000000000000E5C0"
MEMORY_GAS = {"open": 70_000, "settle": 60_000, "refund": 35_000, "withdraw": 35_000}
MEMORY_GAS_REVERTED = 25_000


@dataclass
class _MemoryEscrow:
    requester: str
    deposit: int
    deadline: int
    state: EscrowState


class MemoryEscrowChain:
    """An in-process EscrowChain with TaskEscrow's rules, for unit tests.

    Each mined block advances `timestamp` by one second; `advance_time(s)` moves it on.
    Test switches (as MemoryAnchorChain): `available`, `auto_mine` (else `mine()`),
    `lose_broadcast_replies` (the next n broadcasts reach the mempool, then raise
    ChainUnavailableError like a reply lost to a timeout).
    """

    def __init__(
        self, operator: str, chain_id: int = 31337, timestamp: int = 1_700_000_000
    ) -> None:
        self.operator = to_checksum_address(operator)
        self.available = True
        self.auto_mine = True
        self.lose_broadcast_replies = 0
        self.timestamp = timestamp
        self._chain_id = chain_id
        self._block_number = 0
        self._escrows: dict[bytes, _MemoryEscrow] = {}
        self._credit: dict[str, int] = {}
        self._balance = 0
        self._events: list[EscrowEvent] = []
        self._mempool: dict[bytes, tuple[SignedEscrowTx, EscrowIntent]] = {}
        self._receipts: dict[bytes, EscrowReceipt] = {}
        self._nonces: dict[str, int] = {}

    def _check_available(self, doing: str) -> None:
        if not self.available:
            raise ChainUnavailableError(MEMORY_RPC_URL, f"{doing}: simulated outage")

    def advance_time(self, seconds: int) -> None:
        self.timestamp += seconds

    def chain_id(self) -> int:
        self._check_available("eth_chainId")
        return self._chain_id

    def escrow_address(self) -> str:
        return MEMORY_ESCROW_ADDRESS

    def escrow(self, task_id: str) -> EscrowRecord | None:
        self._check_available("escrows")
        key = task_id_hash(task_id)
        found = self._escrows.get(key)
        if found is None:
            return None
        return EscrowRecord(key, found.requester, Wei(found.deposit), found.deadline, found.state)

    def credit(self, address: str) -> Wei:
        self._check_available("credit")
        return Wei(self._credit.get(to_checksum_address(address), 0))

    def balance(self) -> Wei:
        self._check_available("eth_getBalance")
        return Wei(self._balance)

    def _refusal(
        self, sender: str, intent: EscrowIntent, now: int
    ) -> tuple[str, tuple[Any, ...]] | None:
        """The custom error the contract would revert `intent` with at time `now`, if any."""
        key = task_id_hash(intent.task_id)
        found = self._escrows.get(key)
        state = found.state if found is not None else EscrowState.NONE
        if intent.kind == "open":
            if found is not None:
                return "AlreadyOpened", (key,)
            if intent.deposit == 0:
                return "ZeroDeposit", ()
            if intent.deadline <= now:
                return "DeadlineNotInFuture", (intent.deadline, now)
            return None
        if intent.kind == "settle":
            if sender != self.operator:
                return "NotOperator", ()
            if found is None or state != EscrowState.OPEN:
                return "NotOpen", (key, int(state))
            if len(intent.payees) != len(intent.amounts):
                return "LengthMismatch", (len(intent.payees), len(intent.amounts))
            if any(int(p, 16) == 0 for p in intent.payees):
                return "ZeroPayee", ()
            total = sum(intent.amounts)
            if total > found.deposit:
                return "OverDeposit", (total, found.deposit)
            return None
        if intent.kind == "refund":
            if found is None or state != EscrowState.OPEN:
                return "NotOpen", (key, int(state))
            if sender != found.requester:
                return "NotRequester", ()
            if now <= found.deadline:
                return "DeadlineNotReached", (found.deadline, now)
            return None
        if self._credit.get(sender, 0) == 0:
            return "NothingToWithdraw", ()
        return None

    def build_tx(
        self, key_hex: str, intent: EscrowIntent, *, nonce: int | None = None
    ) -> SignedEscrowTx:
        """Raises ValueError, EscrowRefusedError, ChainUnavailableError."""
        self._check_available(f"preparing an escrow {intent.kind}")
        _validate(intent)
        sender = address_of(key_hex)
        refusal = self._refusal(sender, intent, self.timestamp + 1)
        if refusal is not None:
            raise EscrowRefusedError(intent.kind, intent.task_id, *refusal)
        if nonce is None:
            nonce = self.account_nonce(sender, latest=False)
        raw = json.dumps(
            {"intent": intent.to_json(), "sender": sender, "nonce": nonce, "chain": self._chain_id},
            sort_keys=True,
        ).encode()
        return SignedEscrowTx(intent.kind, intent.task_id, nonce, keccak(raw), raw, sender)

    def broadcast(self, tx: SignedEscrowTx) -> None:
        """Raises EscrowTxRejectedError when the nonce is spent by (or queued for) another
        transaction, ChainUnavailableError when down or a reply is "lost"."""
        self._check_available("eth_sendRawTransaction")
        known = tx.tx_hash in self._receipts or tx.tx_hash in self._mempool
        if not known:
            mined = self._nonces.get(tx.sender, 0)
            taken = tx.nonce < mined or any(
                queued.sender == tx.sender and queued.nonce == tx.nonce
                for queued, _ in self._mempool.values()
            )
            if taken:
                raise EscrowTxRejectedError(
                    f"the node refused escrow tx 0x{tx.tx_hash.hex()}: nonce {tx.nonce} of "
                    f"{tx.sender} is already used by another transaction"
                )
            intent = EscrowIntent.from_json(json.loads(tx.raw)["intent"])
            self._mempool[tx.tx_hash] = (tx, intent)
        if self.auto_mine:
            self.mine()
        if not known and self.lose_broadcast_replies > 0:
            self.lose_broadcast_replies -= 1
            raise ChainUnavailableError(MEMORY_RPC_URL, "eth_sendRawTransaction: timed out")

    def spend_nonce(self, address: str) -> None:
        """Mine an unrelated transaction from `address` (e.g. a transfer sent by another
        program holding the same key): its next nonce is used up."""
        address = to_checksum_address(address)
        self._block_number += 1
        self.timestamp += 1
        self._nonces[address] = self._nonces.get(address, 0) + 1

    def mine(self) -> list[EscrowReceipt]:
        """Mine every queued transaction whose nonce is its sender's next, one block each."""
        mined: list[EscrowReceipt] = []
        while True:
            ready = [
                entry
                for entry in self._mempool.values()
                if entry[0].nonce == self._nonces.get(entry[0].sender, 0)
            ]
            if not ready:
                return mined
            mined.append(self._execute(*ready[0]))

    def _execute(self, tx: SignedEscrowTx, intent: EscrowIntent) -> EscrowReceipt:
        del self._mempool[tx.tx_hash]
        self._block_number += 1
        self.timestamp += 1
        self._nonces[tx.sender] = tx.nonce + 1
        ok = self._refusal(tx.sender, intent, self.timestamp) is None
        if ok:
            self._apply(tx, intent)
        gas = MEMORY_GAS[intent.kind] if ok else MEMORY_GAS_REVERTED
        receipt = EscrowReceipt(tx.tx_hash, self._block_number, ok, gas)
        self._receipts[tx.tx_hash] = receipt
        return receipt

    def _apply(self, tx: SignedEscrowTx, intent: EscrowIntent) -> None:
        key = task_id_hash(intent.task_id)
        where = _Where(block_number=self._block_number, log_index=0, tx_hash=tx.tx_hash)
        if intent.kind == "open":
            self._escrows[key] = _MemoryEscrow(
                tx.sender, intent.deposit, intent.deadline, EscrowState.OPEN
            )
            self._balance += intent.deposit
            self._events.append(
                EscrowEvent(
                    "Opened", key, tx.sender, intent.deposit, deadline=intent.deadline, **where
                )
            )
        elif intent.kind == "settle":
            escrow = self._escrows[key]
            escrow.state = EscrowState.SETTLED
            for payee, amount in zip(intent.payees, intent.amounts, strict=True):
                self._credit[payee] = self._credit.get(payee, 0) + amount
            remainder = escrow.deposit - sum(intent.amounts)
            if remainder:
                self._credit[escrow.requester] = self._credit.get(escrow.requester, 0) + remainder
            self._events.append(
                EscrowEvent(
                    "Settled",
                    key,
                    None,
                    Wei(remainder),
                    payees=intent.payees,
                    amounts=intent.amounts,
                    **where,
                )
            )
        elif intent.kind == "refund":
            escrow = self._escrows[key]
            escrow.state = EscrowState.REFUNDED
            self._credit[tx.sender] = self._credit.get(tx.sender, 0) + escrow.deposit
            self._events.append(
                EscrowEvent("Refunded", key, tx.sender, Wei(escrow.deposit), **where)
            )
        else:
            paid = self._credit.pop(tx.sender)
            self._balance -= paid
            self._events.append(EscrowEvent("Withdrawn", None, tx.sender, Wei(paid), **where))

    def receipt(self, tx_hash: bytes) -> EscrowReceipt | None:
        self._check_available("eth_getTransactionReceipt")
        return self._receipts.get(tx_hash)

    def wait_for_receipt(self, tx_hash: bytes, timeout_s: float) -> EscrowReceipt | None:
        return poll_receipt(self.receipt, tx_hash, timeout_s)

    def account_nonce(self, address: str, latest: bool) -> int:
        self._check_available("eth_getTransactionCount")
        address = to_checksum_address(address)
        mined = self._nonces.get(address, 0)
        if latest:
            return mined
        return mined + sum(1 for tx, _ in self._mempool.values() if tx.sender == address)

    def block_number(self) -> int:
        self._check_available("eth_blockNumber")
        return self._block_number

    def events(self, task_id: str | None = None, *, from_block: int = 0) -> list[EscrowEvent]:
        self._check_available("eth_getLogs")
        found = [e for e in self._events if e.block_number >= from_block]
        if task_id is None:
            return found
        key = task_id_hash(task_id)
        return [e for e in found if e.task_id_hash == key]


# -- the journal -------------------------------------------------------------------------


@dataclass(frozen=True)
class EscrowTxRecord:
    """One signed escrow transaction as the market recorded it (before sending it)."""

    tx_hash: bytes
    intent: EscrowIntent
    sender: str
    nonce: int
    raw: bytes
    chain_id: int
    escrow_address: str
    status: JournalStatus = "pending"
    block_number: int | None = None

    @property
    def intent_key(self) -> str:
        """What may be done at most once: the task's open/settle/refund, or one withdrawal."""
        if self.intent.kind == "withdraw":
            return f"withdraw:{self.sender}:{self.nonce}"
        return f"{self.intent.kind}:{self.intent.task_id}"

    def signed(self) -> SignedEscrowTx:
        return SignedEscrowTx(
            self.intent.kind, self.intent.task_id, self.nonce, self.tx_hash, self.raw, self.sender
        )


class EscrowJournal(Protocol):
    """Where the market records escrow transactions before sending them."""

    def add(self, record: EscrowTxRecord) -> None:
        """Record a new transaction (status pending). Raises EscrowError if known."""
        ...

    def pending(self) -> list[EscrowTxRecord]:
        """Unresolved records (pending or forgotten), oldest first."""
        ...

    def records(self, task_id: str | None = None) -> list[EscrowTxRecord]:
        """Every record (of the task), oldest first."""
        ...

    def mark(self, tx_hash: bytes, status: JournalStatus, block_number: int | None) -> None:
        """Record a pending transaction's outcome. Raises EscrowError if unknown."""
        ...

    def replace(self, old_hash: bytes, record: EscrowTxRecord) -> None:
        """In one write: mark `old_hash` replaced and add `record` (pending).
        Raises EscrowError if `old_hash` is unknown or `record` known."""
        ...


class MemoryEscrowJournal:
    """An EscrowJournal in a list (survives a "crash" of the EscrowActions using it)."""

    def __init__(self) -> None:
        self._records: list[EscrowTxRecord] = []

    def add(self, record: EscrowTxRecord) -> None:
        if any(r.tx_hash == record.tx_hash for r in self._records):
            raise EscrowError(f"escrow tx 0x{record.tx_hash.hex()} is already recorded")
        self._records.append(record)

    def pending(self) -> list[EscrowTxRecord]:
        return [r for r in self._records if r.status in _UNRESOLVED]

    def records(self, task_id: str | None = None) -> list[EscrowTxRecord]:
        return [r for r in self._records if task_id is None or r.intent.task_id == task_id]

    def mark(self, tx_hash: bytes, status: JournalStatus, block_number: int | None) -> None:
        for index, record in enumerate(self._records):
            if record.tx_hash == tx_hash:
                self._records[index] = replace(record, status=status, block_number=block_number)
                return
        raise EscrowError(f"escrow tx 0x{tx_hash.hex()} is not recorded")

    def replace(self, old_hash: bytes, record: EscrowTxRecord) -> None:
        if any(r.tx_hash == record.tx_hash for r in self._records):
            raise EscrowError(f"escrow tx 0x{record.tx_hash.hex()} is already recorded")
        self.mark(old_hash, "replaced", None)
        self._records.append(record)


class MarketEscrowTx(SQLModel, table=True):
    """One row per signed escrow transaction (see EscrowTxRecord)."""

    __tablename__ = "market_escrow_txs"

    id: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True))
    tx_hash: bytes = Field(sa_column=Column(LargeBinary, nullable=False, unique=True))
    kind: str
    task_id: str = Field(index=True)
    intent: str
    sender: str
    nonce: int = Field(sa_column=Column(BigInteger, nullable=False))
    raw: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    chain_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    escrow_address: str
    status: str = Field(index=True)
    block_number: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


_TXS = MarketEscrowTx.__table__  # type: ignore[attr-defined]


class SqlEscrowJournal:
    """An EscrowJournal in the `market_escrow_txs` table (SQLite or PostgreSQL).

    Raises EscrowError when the database refuses.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        try:
            SQLModel.metadata.create_all(engine, tables=[_TXS])
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot prepare the escrow journal: {exc}") from exc

    def add(self, record: EscrowTxRecord) -> None:
        try:
            with self.engine.begin() as connection:
                self._insert(connection, record)
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot record escrow tx 0x{record.tx_hash.hex()}: {exc}") from exc

    def replace(self, old_hash: bytes, record: EscrowTxRecord) -> None:
        try:
            with self.engine.begin() as connection:
                result = connection.execute(
                    update(_TXS)
                    .where(_TXS.c.tx_hash == old_hash, _TXS.c.status.in_(_UNRESOLVED))
                    .values(status="replaced")
                )
                if result.rowcount != 1:
                    raise EscrowError(f"escrow tx 0x{old_hash.hex()} is not unresolved")
                self._insert(connection, record)
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot replace escrow tx 0x{old_hash.hex()}: {exc}") from exc

    @staticmethod
    def _insert(connection: Any, record: EscrowTxRecord) -> None:
        connection.execute(
            insert(_TXS).values(
                tx_hash=record.tx_hash,
                kind=record.intent.kind,
                task_id=record.intent.task_id,
                intent=record.intent.to_json(),
                sender=record.sender,
                nonce=record.nonce,
                raw=record.raw,
                chain_id=record.chain_id,
                escrow_address=record.escrow_address,
                status=record.status,
                block_number=record.block_number,
            )
        )

    def _select(self, *conditions: Any) -> list[EscrowTxRecord]:
        try:
            with self.engine.connect() as connection:
                rows = connection.execute(select(_TXS).where(*conditions).order_by(_TXS.c.id)).all()
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot read the escrow journal: {exc}") from exc
        return [
            EscrowTxRecord(
                tx_hash=bytes(row.tx_hash),
                intent=EscrowIntent.from_json(row.intent),
                sender=row.sender,
                nonce=int(row.nonce),
                raw=bytes(row.raw),
                chain_id=int(row.chain_id),
                escrow_address=row.escrow_address,
                status=row.status,
                block_number=None if row.block_number is None else int(row.block_number),
            )
            for row in rows
        ]

    def pending(self) -> list[EscrowTxRecord]:
        return self._select(_TXS.c.status.in_(_UNRESOLVED))

    def records(self, task_id: str | None = None) -> list[EscrowTxRecord]:
        if task_id is None:
            return self._select()
        return self._select(_TXS.c.task_id == task_id)

    def mark(self, tx_hash: bytes, status: JournalStatus, block_number: int | None) -> None:
        try:
            with self.engine.begin() as connection:
                result = connection.execute(
                    update(_TXS)
                    .where(_TXS.c.tx_hash == tx_hash)
                    .values(status=status, block_number=block_number)
                )
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot update escrow tx 0x{tx_hash.hex()}: {exc}") from exc
        if result.rowcount != 1:
            raise EscrowError(f"escrow tx 0x{tx_hash.hex()} is not recorded")


# -- crash-safe actions ------------------------------------------------------------------


@dataclass(frozen=True)
class EscrowOutcome:
    """What one action (or the reconciliation of one record) did."""

    status: OutcomeStatus
    intent: EscrowIntent
    sender: str
    tx_hash: bytes | None = None
    block_number: int | None = None


_DONE: tuple[JournalStatus, ...] = ("confirmed", "superseded")
_EVENT_OF: dict[EscrowTxKind, EscrowEventName] = {
    "open": "Opened",
    "settle": "Settled",
    "refund": "Refunded",
    "withdraw": "Withdrawn",
}


class EscrowActions:
    """Open, settle, refund and withdraw through an EscrowChain, journalled so that a crash
    between the chain and the record is reconciled on the next start (module docstring).

    Raises ChainUnavailableError when the chain does not answer (a record may stay pending and
    is settled next time), EscrowRefusedError when the contract refuses, EscrowPendingError
    when the acting account still has an unresolved transaction.
    """

    def __init__(
        self,
        chain: EscrowChain,
        journal: EscrowJournal,
        *,
        receipt_timeout: float = 30.0,
        confirmations: int = 0,
        keys: Sequence[str] = (),
    ) -> None:
        """`keys`: private keys the actions may sign anew with, for a transaction the chain
        forgot that cannot be sent again as it was (the operator's key, typically)."""
        if confirmations < 0:
            raise ValueError(f"confirmations must be 0 or more, got {confirmations}")
        self.chain = chain
        self.journal = journal
        self.receipt_timeout = receipt_timeout
        self.confirmations = confirmations
        self._keys = {address_of(key): key for key in keys}

    def open(self, key_hex: str, task_id: str, deposit: int, deadline: int) -> EscrowOutcome:
        """Deposit `deposit` wei for `task_id` from the requester's key."""
        return self.perform(key_hex, open_intent(task_id, deposit, deadline))

    def settle(
        self, key_hex: str, task_id: str, payees: Sequence[str], amounts: Sequence[int]
    ) -> EscrowOutcome:
        """Settle `task_id` with the operator's key."""
        return self.perform(key_hex, settle_intent(task_id, payees, amounts))

    def refund(self, key_hex: str, task_id: str) -> EscrowOutcome:
        """Refund `task_id` to its requester (the key's account) after the deadline."""
        return self.perform(key_hex, refund_intent(task_id))

    def withdraw(self, key_hex: str) -> EscrowOutcome:
        """Withdraw the key's account's whole credit."""
        return self.perform(key_hex, withdraw_intent())

    def perform(self, key_hex: str, intent: EscrowIntent) -> EscrowOutcome:
        """Reconcile, then sign, record, send and settle `intent` unless it is already done
        (status "already-done") or still pending from before (that record's outcome)."""
        sender = address_of(key_hex)
        self.reconcile()
        pending = self.journal.pending()
        for record in pending:
            if record.intent == intent and record.sender == sender:
                return EscrowOutcome("pending", intent, sender, record.tx_hash)
        for record in pending:
            if record.sender == sender:
                raise EscrowPendingError(
                    f"{sender} has an unresolved escrow {record.intent.kind} "
                    f"(tx 0x{record.tx_hash.hex()}, nonce {record.nonce}); retry later"
                )
        if intent.kind != "withdraw":
            for record in self.journal.records(intent.task_id):
                if record.intent == intent and record.status in _DONE:
                    return EscrowOutcome(
                        "already-done", intent, sender, record.tx_hash, record.block_number
                    )
        return self.send(self.record(key_hex, intent))

    def record(self, key_hex: str, intent: EscrowIntent) -> EscrowTxRecord:
        """Sign `intent` and record it as pending (nothing is sent). The first half of an
        action: `send` is the second."""
        tx = self.chain.build_tx(key_hex, intent)
        record = EscrowTxRecord(
            tx_hash=tx.tx_hash,
            intent=intent,
            sender=tx.sender,
            nonce=tx.nonce,
            raw=tx.raw,
            chain_id=self.chain.chain_id(),
            escrow_address=self.chain.escrow_address(),
        )
        self.journal.add(record)
        return record

    def send(self, record: EscrowTxRecord) -> EscrowOutcome:
        """Broadcast a recorded transaction, wait for it and record its outcome."""
        self.chain.broadcast(record.signed())
        receipt = self.chain.wait_for_receipt(record.tx_hash, self.receipt_timeout)
        if receipt is None:
            return EscrowOutcome("pending", record.intent, record.sender, record.tx_hash)
        if not receipt.status_ok:
            return self._reconcile_one(record)
        return self._confirm(record, receipt)

    def _confirm(self, record: EscrowTxRecord, receipt: EscrowReceipt) -> EscrowOutcome:
        """Record it confirmed once `confirmations` blocks are on top of its own (waiting up
        to `receipt_timeout`); until then it stays unresolved and the outcome is pending."""
        if not deep_enough(receipt, self.chain.block_number(), self.confirmations):
            deep = wait_until_deep(
                self.chain.block_number, receipt, self.confirmations, self.receipt_timeout
            )
            mined = self.chain.receipt(record.tx_hash) if deep else None
            if mined is None or not mined.status_ok:
                return EscrowOutcome("pending", record.intent, record.sender, record.tx_hash)
            receipt = mined
        self.journal.mark(record.tx_hash, "confirmed", receipt.block_number)
        return EscrowOutcome(
            "confirmed", record.intent, record.sender, record.tx_hash, receipt.block_number
        )

    def reconcile(self) -> list[EscrowOutcome]:
        """Mark forgotten the records the chain no longer holds, then settle every
        unresolved record against the chain, oldest first."""
        outcomes = self.find_forgotten()
        outcomes.extend(self._reconcile_one(record) for record in self.journal.pending())
        return outcomes

    def find_forgotten(self) -> list[EscrowOutcome]:
        """Mark `forgotten` each record done on chain that the chain no longer holds: a
        confirmed one with neither a receipt nor an event of its own, a superseded one whose
        effect is gone. (One event query, and a receipt query per record missing from it.)"""
        done = [r for r in self.journal.records() if r.status in _DONE]
        if not done:
            return []
        held = {event.tx_hash for event in self.chain.events()}
        outcomes = []
        for record in done:
            if record.status == "confirmed":
                if record.tx_hash in held or self.chain.receipt(record.tx_hash) is not None:
                    continue
            elif record.intent.kind == "withdraw" or self._effect_on_chain(record):
                continue  # a withdrawal's effect (a zero credit) cannot be told apart
            self.journal.mark(record.tx_hash, "forgotten", None)
            outcomes.append(
                EscrowOutcome("forgotten", record.intent, record.sender, record.tx_hash)
            )
        return outcomes

    def _effect_on_chain(self, record: EscrowTxRecord) -> bool:
        intent = record.intent
        if intent.kind == "withdraw":
            return self.chain.credit(record.sender) == 0
        escrow = self.chain.escrow(intent.task_id)
        if escrow is None:
            return False
        if intent.kind == "open":
            return (
                escrow.requester == record.sender
                and escrow.deposit == intent.deposit
                and escrow.deadline == intent.deadline
            )
        wanted = EscrowState.SETTLED if intent.kind == "settle" else EscrowState.REFUNDED
        return escrow.state == wanted

    def _finish(
        self, record: EscrowTxRecord, status: JournalStatus, block: int | None
    ) -> EscrowOutcome:
        self.journal.mark(record.tx_hash, status, block)
        outcome: OutcomeStatus = status if status != "pending" else "pending"
        return EscrowOutcome(outcome, record.intent, record.sender, record.tx_hash, block)

    def _reconcile_one(self, record: EscrowTxRecord) -> EscrowOutcome:
        receipt = self.chain.receipt(record.tx_hash)
        if receipt is not None and receipt.status_ok:
            return self._confirm(record, receipt)
        if self._effect_on_chain(record):
            # Mined by this very transaction (its receipt may lag behind its logs) or another.
            name = _EVENT_OF[record.intent.kind]
            for event in self.chain.events(record.intent.task_id or None):
                if event.name == name and event.tx_hash == record.tx_hash:
                    return self._finish(record, "confirmed", event.block_number)
            return self._finish(record, "superseded", None)
        if receipt is not None:
            return self._finish(record, "reverted", receipt.block_number)
        if self.chain.account_nonce(record.sender, latest=True) > record.nonce:
            # Its nonce went to another transaction: this one can never be mined.
            if record.status == "forgotten":
                return self._sign_anew(record)
            return self._finish(record, "dropped", None)
        if (
            record.status == "forgotten"
            and self.chain.account_nonce(record.sender, latest=False) < record.nonce
        ):
            # The transactions before it were forgotten too and nothing fills the gap: sent
            # as it was, it would wait forever.
            return self._sign_anew(record)
        return self.send(record)

    def _sign_anew(self, forgotten: EscrowTxRecord) -> EscrowOutcome:
        """Sign a forgotten action again at the sender's next nonce, the new record replacing
        the old in one journal write, and send it. Without the sender's key, or when the
        contract refuses it now, the record is left forgotten and the outcome says so."""
        key = self._keys.get(forgotten.sender)
        if key is None:
            return EscrowOutcome("forgotten", forgotten.intent, forgotten.sender, forgotten.tx_hash)
        try:
            tx = self.chain.build_tx(key, forgotten.intent)
        except EscrowRefusedError:
            return EscrowOutcome("forgotten", forgotten.intent, forgotten.sender, forgotten.tx_hash)
        record = EscrowTxRecord(
            tx_hash=tx.tx_hash,
            intent=forgotten.intent,
            sender=tx.sender,
            nonce=tx.nonce,
            raw=tx.raw,
            chain_id=self.chain.chain_id(),
            escrow_address=self.chain.escrow_address(),
        )
        self.journal.replace(forgotten.tx_hash, record)
        return self.send(record)
