"""The escrow port: what the market needs of the escrow contract (`EscrowPort`), and the
values it answers with (`EscrowReceipt`, `EscrowDeposit`). `accord.market.wiring.ChainEscrow`
implements it over the TaskEscrow contract, every transaction journalled (`EscrowActions`);
tests hand the market one over the in-process chain (`MemoryEscrowChain`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from accord.market.money import Wei


@dataclass(frozen=True)
class EscrowReceipt:
    """A mined escrow transaction (`payee`: the address a release credited, else "")."""

    tx_hash: str
    block_number: int
    payee: str = ""


@dataclass(frozen=True)
class EscrowDeposit:
    """The escrow the contract holds under a task's key, whoever opened it: the account that
    deposited (the contract's `requester`, credited with refunds), the amount, the deadline
    (unix seconds) after which it refunds, and whether it is still open."""

    requester: str
    amount: Wei
    deadline: int
    open: bool


class EscrowPort(Protocol):
    """What the market needs of the escrow contract (see `accord.market.escrow`)."""

    def open(
        self, task_id: str, deadline: datetime, deposit: Wei, requester_key: str
    ) -> EscrowReceipt:
        """Deposit the budget for `task_id` from the requester's account; wait until mined.

        Raises EscrowError when the contract refuses, ChainError when the chain is away.
        """
        ...

    def refund_to_requester(self, task_id: str) -> EscrowReceipt:
        """Pay out `task_id`'s escrow to no payees, crediting the whole deposit to the
        requester."""
        ...

    def requester_address(self, requester_key: str) -> str:
        """The chain account of a requester key."""
        ...

    def deposit_problem(
        self, task_id: str, deadline: datetime, deposit: Wei, requester_key: str
    ) -> str | None:
        """Why the chain would refuse `open` of `task_id`'s escrow from the requester's account
        now (too little money for the deposit and its gas, the contract refusing it), or None.
        Sends nothing. Raises ChainUnavailableError when the chain does not answer,
        FeesAboveCeilingError when its fees are above the service's ceiling."""
        ...

    def deposit_of(self, task_id: str) -> tuple[Wei, bool] | None:
        """The deposit escrowed for `task_id` and whether it is still open, or None."""
        ...

    def deposit_record(self, task_id: str) -> EscrowDeposit | None:
        """The escrow the contract holds under `task_id`'s key (whoever opened it), or None."""
        ...

    def escrow_address(self) -> str:
        """The address of the escrow contract (where a requester's own wallet deposits)."""
        ...

    def pay_out(self, task_id: str, payees: Sequence[str], amounts: Sequence[Wei]) -> EscrowReceipt:
        """Pay `amounts` to `payees` from the deposit (the rest to the requester), once: the
        contract's `TaskEscrow.settle`.

        Raises EscrowError when the contract refuses (already paid out, over the deposit).
        """
        ...

    def release(self, task_id: str, payee: str, amount: Wei, owner: str) -> EscrowReceipt:
        """Credit `amount` wei that settled `task_id` holds for `owner` (a share paid to the
        escrow's own address, `escrow_address`, for want of a payout account) to `payee`: the
        contract's `TaskEscrow.release`. Once per owner: where a release for `owner` was made
        before (to whichever address), that one is the receipt, its `payee` the address paid.

        Raises EscrowError when the contract refuses (more than the task holds).
        """
        ...

    def chain_id(self) -> int:
        """The chain the escrow lives on (payout bindings name it)."""
        ...

    def operator_address(self) -> str:
        """The operator's chain account, which pays out escrows and is paid the fees of the
        disputes its judge model decides."""
        ...

    def bonded(self, task_id: str) -> Wei:
        """What `task_id`'s requester bonded for its disputes beyond the deposit (0 once
        the escrow is paid out)."""
        ...

    def bond(self, task_id: str, amount: Wei, total: Wei, requester_key: str) -> EscrowReceipt:
        """Bond `amount` wei more from the requester's account, the task's bonds then
        `total` (`TaskEscrow.bond`). Raises EscrowError when the contract refuses."""
        ...

    def answer(self, task_id: str, amount: Wei, total: Wei, answer_key: str) -> EscrowReceipt:
        """Answer `task_id`'s disputes with `amount` wei more from the key's own account, its
        answers then `total` (`TaskEscrow.answer`). Raises EscrowError when refused."""
        ...

    def answered(self, task_id: str, account: str) -> Wei:
        """What `account` answered for `task_id`'s disputes (`TaskEscrow.answered`)."""
        ...

    def answers_of(self, task_id: str) -> dict[str, Wei]:
        """What each account answered for `task_id`'s disputes, by address."""
        ...

    def block_number(self) -> int:
        """The chain's head block."""
        ...

    def block_hash(self, number: int) -> bytes | None:
        """The hash of block `number`, or None when it is not mined."""
        ...
