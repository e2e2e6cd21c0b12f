"""An in-process TaskEscrow with the contract's rules, for unit tests (`MemoryEscrowChain`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from accord.ledger.chain.memory_chain import MemoryChainFaults
from accord.ledger.chain.protocol import poll_receipt
from accord.ledger.errors import ChainUnavailableError
from accord.ledger.fees import FeePolicy, Fees
from accord.market.escrow.values import (
    EscrowEvent,
    EscrowIntent,
    EscrowReceipt,
    EscrowRecord,
    EscrowRefusedError,
    EscrowState,
    EscrowTxRejectedError,
    EventPlace,
    SignedEscrowTx,
    address_of,
    task_id_hash,
    validate_intent,
)
from accord.market.money import Wei

MEMORY_RPC_URL = "memory://escrow-chain"
MEMORY_ESCROW_ADDRESS = "0x000000000000000000000000000000000000E5C0"
MEMORY_GAS = {
    "open": 70_000,
    "bond": 50_000,
    "answer": 75_000,
    "reclaim": 35_000,
    "settle": 60_000,
    "release": 35_000,
    "refund": 35_000,
    "withdraw": 35_000,
}
MEMORY_GAS_REVERTED = 25_000


@dataclass
class _MemoryEscrow:
    requester: str
    deposit: int
    deadline: int
    state: EscrowState


class MemoryEscrowChain(MemoryChainFaults):
    """An in-process EscrowChain with TaskEscrow's rules, for unit tests.

    Each mined block advances `timestamp` by one second; `advance_time(s)` moves it on.
    Test switches (as MemoryAnchorChain): `available`, `auto_mine` (else `mine()`),
    `lose_broadcast_replies` (the next n broadcasts reach the mempool, then raise
    ChainUnavailableError like a reply lost to a timeout), `base_fee` and `tip` (the fee
    market: a transaction whose maxFee is under `base_fee` stays in the mempool).
    """

    def __init__(
        self,
        operator: str,
        chain_id: int = 31337,
        timestamp: int = 1_700_000_000,
        fee_policy: FeePolicy | None = None,
    ) -> None:
        self.operator = to_checksum_address(operator)
        self._init_faults(fee_policy)
        self.available = True
        self.auto_mine = True
        self.lose_broadcast_replies = 0
        self.timestamp = timestamp
        self._chain_id = chain_id
        self._block_number = 0
        self._escrows: dict[bytes, _MemoryEscrow] = {}
        self._credit: dict[str, int] = {}
        self._held: dict[bytes, int] = {}
        self._bonded: dict[bytes, int] = {}
        self._answered: dict[tuple[bytes, str], int] = {}
        self._answers: dict[bytes, int] = {}
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

    def held(self, task_id: str) -> Wei:
        self._check_available("held")
        return Wei(self._held.get(task_id_hash(task_id), 0))

    def bonded(self, task_id: str) -> Wei:
        self._check_available("bonded")
        return Wei(self._bonded.get(task_id_hash(task_id), 0))

    def answered(self, task_id: str, account: str) -> Wei:
        self._check_available("answered")
        return Wei(self._answered.get((task_id_hash(task_id), to_checksum_address(account)), 0))

    def answers(self, task_id: str) -> Wei:
        self._check_available("answers")
        return Wei(self._answers.get(task_id_hash(task_id), 0))

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
        if intent.kind == "bond":
            if found is None or state != EscrowState.OPEN:
                return "NotOpen", (key, int(state))
            if sender != found.requester:
                return "NotRequester", ()
            if intent.deposit == 0:
                return "ZeroDeposit", ()
            after = self._bonded.get(key, 0) + intent.deposit
            if after != intent.amounts[0]:
                return "BondMismatch", (intent.amounts[0], after)
            return None
        if intent.kind == "answer":
            if found is None or state != EscrowState.OPEN:
                return "NotOpen", (key, int(state))
            if sender == found.requester:
                return "RequesterAnswer", ()
            if intent.deposit == 0:
                return "ZeroDeposit", ()
            after = self._answered.get((key, sender), 0) + intent.deposit
            if after != intent.amounts[0]:
                return "BondMismatch", (intent.amounts[0], after)
            return None
        if intent.kind == "reclaim":
            if state != EscrowState.REFUNDED or self._answered.get((key, sender), 0) == 0:
                return "NothingToReclaim", (key, int(state))
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
            answering = self._answers.get(key, 0)
            cap = found.deposit + self._bonded.get(key, 0) + answering
            if total > cap:
                return "OverDeposit", (total, cap)
            if total < answering:
                return "AnswersUnpaid", (total, answering)
            return None
        if intent.kind == "release":
            if sender != self.operator:
                return "NotOperator", ()
            if (
                int(intent.payees[0], 16) == 0
                or intent.payees[0].lower() == MEMORY_ESCROW_ADDRESS.lower()
            ):
                return "ZeroPayee", ()
            holding = self._held.get(key, 0)
            if intent.amounts[0] > holding:
                return "OverHeld", (intent.amounts[0], holding)
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
        self,
        key_hex: str,
        intent: EscrowIntent,
        *,
        nonce: int | None = None,
        fees: Fees | None = None,
    ) -> SignedEscrowTx:
        """Raises ValueError, EscrowRefusedError, FeesAboveCeilingError,
        ChainUnavailableError."""
        self._check_available(f"preparing an escrow {intent.kind}")
        validate_intent(intent)
        sender = address_of(key_hex)
        refusal = self._refusal(sender, intent, self.timestamp + 1)
        if refusal is not None:
            raise EscrowRefusedError(intent.kind, intent.task_id, *refusal)
        if nonce is None:
            nonce = self.account_nonce(sender, latest=False)
        fees = self._fees_now(fees)
        raw = json.dumps(
            {
                "intent": intent.to_json(),
                "sender": sender,
                "nonce": nonce,
                "chain": self._chain_id,
                "maxFee": fees.max_fee,
                "tip": fees.tip,
            },
            sort_keys=True,
        ).encode()
        return SignedEscrowTx(intent.kind, intent.task_id, nonce, keccak(raw), raw, sender)

    def broadcast(self, tx: SignedEscrowTx) -> None:
        """Raises EscrowTxRejectedError when the nonce is spent by (or queued for) another
        transaction without 12.5 % better fees, ChainUnavailableError when down or a reply is
        "lost". A queued transaction outbid at its nonce leaves the mempool."""
        self._check_available("eth_sendRawTransaction")
        known = tx.tx_hash in self._receipts or tx.tx_hash in self._mempool
        if not known:
            mined = self._nonces.get(tx.sender, 0)
            queued = [
                q
                for q, _ in self._mempool.values()
                if q.sender == tx.sender and q.nonce == tx.nonce
            ]
            taken = tx.nonce < mined or any(not self._outbids(q.raw, tx.raw) for q in queued)
            if taken:
                raise EscrowTxRejectedError(
                    f"the node refused escrow tx 0x{tx.tx_hash.hex()}: nonce {tx.nonce} of "
                    f"{tx.sender} is already used by another transaction"
                )
            for outbid in queued:
                del self._mempool[outbid.tx_hash]
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
        self._new_block()
        self.timestamp += 1
        self._nonces[address] = self._nonces.get(address, 0) + 1

    def mine(self) -> list[EscrowReceipt]:
        """Mine every queued transaction whose nonce is its sender's next and whose maxFee
        covers the base fee, one block each."""
        mined: list[EscrowReceipt] = []
        while True:
            ready = [
                entry
                for entry in self._mempool.values()
                if entry[0].nonce == self._nonces.get(entry[0].sender, 0)
                and self._affordable(entry[0].raw)
            ]
            if not ready:
                return mined
            mined.append(self._execute(*ready[0]))

    def _execute(self, tx: SignedEscrowTx, intent: EscrowIntent) -> EscrowReceipt:
        del self._mempool[tx.tx_hash]
        block_hash = self._new_block()
        self.timestamp += 1
        self._nonces[tx.sender] = tx.nonce + 1
        ok = self._refusal(tx.sender, intent, self.timestamp) is None
        if ok:
            self._apply(tx, intent)
        gas = MEMORY_GAS[intent.kind] if ok else MEMORY_GAS_REVERTED
        receipt = EscrowReceipt(tx.tx_hash, self._block_number, ok, gas, block_hash)
        self._receipts[tx.tx_hash] = receipt
        return receipt

    def _apply(self, tx: SignedEscrowTx, intent: EscrowIntent) -> None:
        key = task_id_hash(intent.task_id)
        where = EventPlace(block_number=self._block_number, log_index=0, tx_hash=tx.tx_hash)
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
        elif intent.kind == "bond":
            total = self._bonded.get(key, 0) + intent.deposit
            self._bonded[key] = total
            self._balance += intent.deposit
            self._events.append(
                EscrowEvent(
                    "Bonded", key, tx.sender, intent.deposit, amounts=(Wei(total),), **where
                )
            )
        elif intent.kind == "answer":
            total = self._answered.get((key, tx.sender), 0) + intent.deposit
            self._answered[(key, tx.sender)] = total
            self._answers[key] = self._answers.get(key, 0) + intent.deposit
            self._balance += intent.deposit
            self._events.append(
                EscrowEvent(
                    "Answered", key, tx.sender, intent.deposit, amounts=(Wei(total),), **where
                )
            )
        elif intent.kind == "reclaim":
            amount = self._answered.pop((key, tx.sender))
            self._credit[tx.sender] = self._credit.get(tx.sender, 0) + amount
            self._events.append(EscrowEvent("Reclaimed", key, tx.sender, Wei(amount), **where))
        elif intent.kind == "settle":
            escrow = self._escrows[key]
            escrow.state = EscrowState.SETTLED
            bond = self._bonded.pop(key, 0) + self._answers.pop(key, 0)
            for payee, amount in zip(intent.payees, intent.amounts, strict=True):
                if payee.lower() == MEMORY_ESCROW_ADDRESS.lower():  # held until released
                    self._held[key] = self._held.get(key, 0) + amount
                else:
                    self._credit[payee] = self._credit.get(payee, 0) + amount
            remainder = escrow.deposit + bond - sum(intent.amounts)
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
        elif intent.kind == "release":
            payee, amount = intent.payees[0], intent.amounts[0]
            self._held[key] -= amount
            self._credit[payee] = self._credit.get(payee, 0) + amount
            self._events.append(EscrowEvent("Released", key, payee, amount, **where))
        elif intent.kind == "refund":
            escrow = self._escrows[key]
            escrow.state = EscrowState.REFUNDED
            refund = escrow.deposit + self._bonded.pop(key, 0)
            self._answers.pop(key, None)  # each answer stays its account's, to reclaim
            self._credit[tx.sender] = self._credit.get(tx.sender, 0) + refund
            self._events.append(EscrowEvent("Refunded", key, tx.sender, Wei(refund), **where))
        else:
            paid = self._credit.pop(tx.sender)
            self._balance -= paid
            self._events.append(EscrowEvent("Withdrawn", None, tx.sender, Wei(paid), **where))

    def receipt(self, tx_hash: bytes) -> EscrowReceipt | None:
        """(With `auto_mine`, what the mempool holds is mined first, as a node would.)"""
        self._check_available("eth_getTransactionReceipt")
        if self.auto_mine:
            self.mine()
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

    def nonce_of(self, address: str, latest: bool) -> int:
        return self.account_nonce(address, latest)

    def knows(self, tx_hash: bytes) -> bool:
        self._check_available("eth_getTransactionByHash")
        return tx_hash in self._mempool or tx_hash in self._receipts

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
