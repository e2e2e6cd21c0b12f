"""What the escrow deals in: intents (one action before it is signed), signed transactions,
the contract's records and events, and the escrow's errors. Pure values, no I/O.

Failures of the escrow seam:

    the contract would revert (custom error decoded)   -> EscrowRefusedError (an EscrowError)
    the node refuses a transaction it does not know     -> EscrowTxRejectedError (EscrowError)
    an account still has an unresolved transaction      -> EscrowPendingError (EscrowError)
    connection refused, timeouts                        -> ledger ChainUnavailableError
    fees above ACCORD_MAX_FEE_GWEI                      -> ledger FeesAboveCeilingError
    any other node or web3 failure                      -> ledger ChainError
    a missing or foreign contract                       -> ledger DeploymentError

On chain a task is keyed by `task_id_hash(task_id)` = keccak256 of its UTF-8 id. Money is
`Wei`, an integer, everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal, TypedDict

from eth_abi.abi import encode as abi_encode
from eth_account import Account
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from accord.ledger.chain.values import TxReceipt
from accord.market.errors import EscrowError
from accord.market.money import Wei

ESCROW_CONTRACT = "TaskEscrow"

EscrowTxKind = Literal[
    "open", "bond", "answer", "settle", "release", "refund", "reclaim", "withdraw"
]
ESCROW_TX_KINDS: tuple[EscrowTxKind, ...] = (
    "open",
    "bond",
    "answer",
    "settle",
    "release",
    "refund",
    "reclaim",
    "withdraw",
)
_ZERO_WEI = Wei(0)
# -- errors ------------------------------------------------------------------------------


class EscrowRefusedError(EscrowError):
    """The contract refuses (or would refuse) an action.

    `reason` is its custom error name (NotOperator, NotRequester, AlreadyOpened, ZeroDeposit,
    DeadlineNotInFuture, NotOpen, BondMismatch, LengthMismatch, ZeroPayee, OverDeposit, OverHeld,
    DeadlineNotReached, NothingToWithdraw, TransferFailed, RequesterAnswer, AnswersUnpaid,
    NothingToReclaim) or the node's revert message; `args`
    its arguments.
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
    #: whose share a release pays (the agent's DID): not sent to the chain, it keys the
    #: release in the journal, so a share is released once whatever address it goes to
    owner: str = ""

    def to_json(self) -> str:
        fields: dict[str, object] = {
            "kind": self.kind,
            "taskId": self.task_id,
            "deposit": str(self.deposit),
            "deadline": self.deadline,
            "payees": list(self.payees),
            "amounts": [str(a) for a in self.amounts],
        }
        if self.owner:
            fields["owner"] = self.owner
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EscrowIntent:
        """Raises EscrowError when `text` is not an intent."""
        try:
            data = json.loads(text)
            kind = data["kind"]
            if kind not in ESCROW_TX_KINDS:
                raise ValueError(f"unknown kind {kind!r}")
            return cls(
                kind=kind,
                task_id=str(data["taskId"]),
                deposit=Wei(int(data["deposit"])),
                deadline=int(data["deadline"]),
                payees=tuple(str(p) for p in data["payees"]),
                amounts=tuple(Wei(int(a)) for a in data["amounts"]),
                owner=str(data.get("owner", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EscrowError(f"malformed escrow intent: {exc!r}") from exc


def open_intent(task_id: str, deposit: int, deadline: int) -> EscrowIntent:
    return EscrowIntent("open", task_id, deposit=Wei(deposit), deadline=deadline)


def bond_intent(task_id: str, amount: int, total: int) -> EscrowIntent:
    """The intent of the requester to bond `amount` wei more for `task_id`'s disputes, the
    task's bonds then `total` (`TaskEscrow.bond`: the total makes a bond sent twice revert
    rather than bond twice). The value travels as `deposit`, the total as the one amount."""
    return EscrowIntent("bond", task_id, deposit=Wei(amount), amounts=(Wei(total),))


def answer_intent(task_id: str, amount: int, total: int) -> EscrowIntent:
    """The intent of a team's account to answer `task_id`'s disputes with `amount` wei more of
    its own, its answers then `total` (`TaskEscrow.answer`; the value travels as `deposit`,
    the total as the one amount, as a bond's)."""
    return EscrowIntent("answer", task_id, deposit=Wei(amount), amounts=(Wei(total),))


def reclaim_intent(task_id: str) -> EscrowIntent:
    """The intent of an answering account to take its answer back from refunded `task_id`
    (`TaskEscrow.reclaim`)."""
    return EscrowIntent("reclaim", task_id)


def pay_out_intent(task_id: str, payees: Sequence[str], amounts: Sequence[int]) -> EscrowIntent:
    """The intent to pay `amounts` to `payees` from the deposit: kind "settle", a call of the
    contract's `TaskEscrow.settle` (the kind names the contract's function)."""
    return EscrowIntent(
        "settle",
        task_id,
        payees=tuple(to_checksum_address(p) for p in payees),
        amounts=tuple(Wei(a) for a in amounts),
    )


def release_intent(task_id: str, payee: str, amount: int, owner: str = "") -> EscrowIntent:
    """The intent to credit `amount` wei that settled `task_id` holds for `owner` (a payout to
    the escrow's own address: its payee had no payout account) to `payee`, the address `owner`
    bound since: `TaskEscrow.release`."""
    return EscrowIntent(
        "release",
        task_id,
        payees=(to_checksum_address(payee),),
        amounts=(Wei(amount),),
        owner=owner,
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


EscrowEventName = Literal[
    "Opened",
    "Bonded",
    "Answered",
    "Settled",
    "Released",
    "Refunded",
    "Reclaimed",
    "Withdrawn",
]


@dataclass(frozen=True)
class EscrowEvent:
    """One decoded event. `account` is the requester (Opened, Bonded, Refunded), the answering
    account (Answered, Reclaimed), the payee (Released) or the withdrawer; `amount` the
    deposit, the wei bonded or answered (Bonded, Answered: `amounts` holds the account's total),
    the remainder (Settled), the amount released, the refund, the answer reclaimed or the
    withdrawal."""

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


OPEN_SIGNATURE = "open(bytes32,uint64)"
"""The escrow's `open` function, as `cast send` and the ABI name it."""


def open_calldata(task_id: str, deadline: int) -> bytes:
    """The calldata of `TaskEscrow.open(task_id_hash(task_id), deadline)`: what a requester's
    own wallet sends, with the budget as its value, to open a task's escrow. Pure.

    Raises ValueError for a deadline outside uint64.
    """
    if not 0 <= deadline < 2**64:
        raise ValueError(f"deadline out of uint64 range: {deadline}")
    selector = keccak(text=OPEN_SIGNATURE)[:4]
    return selector + abi_encode(["bytes32", "uint64"], [task_id_hash(task_id), deadline])


def address_of(key_hex: str) -> str:
    """The checksummed address of a private key."""
    return str(Account.from_key(key_hex).address)


class EventPlace(TypedDict):
    """Where an event was emitted (the keyword arguments every EscrowEvent shares)."""

    block_number: int
    log_index: int
    tx_hash: bytes


def validate_intent(intent: EscrowIntent) -> None:
    """Raises ValueError for an intent no contract call can express."""
    if intent.kind != "withdraw" and not intent.task_id:
        raise ValueError(f"a {intent.kind} needs a task id")
    if intent.kind == "release" and (len(intent.payees), len(intent.amounts)) != (1, 1):
        raise ValueError("a release names one payee and one amount")
    if intent.kind in ("bond", "answer") and (len(intent.amounts) != 1 or intent.deposit <= 0):
        raise ValueError(f"a {intent.kind} names a positive amount and the total it brings")
    if intent.kind == "open" and not (0 <= intent.deadline < 2**64):
        raise ValueError(f"deadline out of uint64 range: {intent.deadline}")
    if any(a < 0 or a >= 2**256 for a in (intent.deposit, *intent.amounts)):
        raise ValueError("amounts must be in 0..2**256-1 wei")
