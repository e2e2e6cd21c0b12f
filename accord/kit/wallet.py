"""An Ethereum account its user holds: the requester's deposits into the task escrow, and the
credit the escrow holds for it (refunds, the rest of a settled budget; an agent's pay), pulled
with `withdraw()`. Nothing here goes through an accord service: the wallet signs with its own
key and talks to the chain's JSON-RPC endpoint (`GET /chain` names the chain, the contract and
an RPC URL), over the same escrow seam the service uses (`accord.market.escrow.EscrowChain`).

    wallet = Wallet.from_key_file(Path("requester.eth.json"), chain_info)
    wallet.deposit(task_id, answer["escrow"])     # the call POST /tasks answered
    wallet.credit(); wallet.withdraw()

A key file is what accord keeps payout keys in: JSON `{"key": "0x<64 hex>"}` (other fields
ignored), mode 0600 (`write_key_file` makes one).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_account import Account

from accord.ledger.chain import TxReceipt
from accord.ledger.devnet import rpc_call
from accord.ledger.errors import ChainError
from accord.market.errors import MarketError
from accord.market.escrow import (
    EscrowChain,
    EscrowRefusedError,
    EscrowTxRejectedError,
    SignedEscrowTx,
    Web3EscrowChain,
    answer_intent,
    bond_intent,
    open_calldata,
    open_intent,
    reclaim_intent,
    withdraw_intent,
)
from accord.market.money import Wei

RECEIPT_TIMEOUT_S = 60.0
GAS_RESERVE = Wei(10**16)
"""On a devnet the service manages, what a wallet's account is topped up to before it sends a
withdrawal and holds less (`anvil_setBalance`): the service covers hosted agents' gas
there the same way (`accord.market.wiring.MarketContext.fund_gas`)."""


class WalletError(MarketError):
    """The wallet refuses to sign (a call that is not the task's deposit, another chain), its
    key cannot be read, or its transaction was not mined or reverted."""


@dataclass(frozen=True)
class Sent:
    """A mined transaction of the wallet (`already`: nothing was sent, it was done before)."""

    tx_hash: str
    block_number: int
    already: bool = False


def write_key_file(path: Path) -> str:
    """Make a fresh account's key file at `path` (mode 0600, never overwritten); returns its
    address. Raises WalletError when the file exists or cannot be written."""
    key = "0x" + secrets.token_bytes(32).hex()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise WalletError(f"cannot make the key file {path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "w") as handle:
        json.dump({"key": key}, handle)
    return str(Account.from_key(key).address)


def read_key_file(path: Path) -> str:
    """The hex private key in a key file (`{"key": "0x..."}`). Raises WalletError when it
    cannot be read, holds no key, or others may read it."""
    try:
        mode = path.stat().st_mode & 0o777
        document = json.loads(path.read_text())
        key = str(document["key"])
        Account.from_key(key)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WalletError(f"cannot read the Ethereum key file {path}: {exc}") from exc
    if mode & 0o077:
        raise WalletError(f"the key file {path} is readable by others (mode {mode:o}); chmod 600")
    return key


class Wallet:
    """One Ethereum account (its key held here) and the escrow contract on one chain."""

    def __init__(
        self,
        key_hex: str,
        chain: EscrowChain,
        *,
        expected_chain_id: int | None = None,
        devnet_rpc_url: str | None = None,
    ) -> None:
        try:
            self._account = Account.from_key(key_hex)
        except (ValueError, TypeError) as exc:
            raise WalletError(f"not a hex private key: {exc}") from exc
        self._key = key_hex
        self.chain = chain
        self.expected_chain_id = expected_chain_id
        self.devnet_rpc_url = devnet_rpc_url
        """The JSON-RPC URL of a devnet the service manages (`GET /chain`'s `devnet`), where
        the account's gas is covered before a withdrawal; None elsewhere."""

    @classmethod
    def connect(
        cls, key_hex: str, chain_info: Mapping[str, Any], rpc_url: str | None = None
    ) -> Wallet:
        """A wallet on the chain `GET /chain` describes (`chain_id`, `escrow_contract`,
        `rpc_url`), through `rpc_url` when given (else the one advertised). Connecting does
        no I/O; the first call checks the chain id. Raises WalletError without an RPC URL."""
        url = rpc_url or chain_info.get("rpc_url")
        if not url:
            raise WalletError(
                "the service advertises no RPC URL for its chain: give one for chain id "
                f"{chain_info.get('chain_id')}"
            )
        chain = Web3EscrowChain(str(url), str(chain_info["escrow_contract"]))
        devnet = str(url) if chain_info.get("devnet") is True else None
        return cls(
            key_hex, chain, expected_chain_id=int(chain_info["chain_id"]), devnet_rpc_url=devnet
        )

    @classmethod
    def from_key_file(
        cls, path: Path, chain_info: Mapping[str, Any], rpc_url: str | None = None
    ) -> Wallet:
        """`connect` with the key in a key file (see `read_key_file`)."""
        return cls.connect(read_key_file(path), chain_info, rpc_url)

    @property
    def address(self) -> str:
        return str(self._account.address)

    def credit(self) -> Wei:
        """What the escrow holds for this account (refunds, pay), withdrawable."""
        return self.chain.credit(self.address)

    def deposit(self, task_id: str, call: Mapping[str, Any]) -> Sent:
        """Open `task_id`'s escrow with the call the service answered (`POST /tasks`'s
        `escrow`): checked first to be exactly `TaskEscrow.open(task_id_hash, deadline)` on
        this chain's contract, from this account, so a service cannot make the wallet sign
        anything else. Done already (this account opened it) is not an error.

        Raises WalletError for a call that is not that, for another chain or account, or a
        transaction that reverted or was not mined; EscrowRefusedError when the contract
        refuses (someone else opened the task's escrow first, a deadline passed); ChainError.
        """
        deadline = int(call["deadline"])
        value = Wei(int(call["value"]))
        self._check_chain(int(call["chain_id"]))
        if str(call.get("from", "")).lower() != self.address.lower():
            raise WalletError(f"the deposit is to come from {call.get('from')}, not {self.address}")
        if str(call["to"]).lower() != self.chain.escrow_address().lower():
            raise WalletError(f"the call is to {call['to']}, not the escrow contract")
        if str(call["data"]).lower() != "0x" + open_calldata(task_id, deadline).hex():
            raise WalletError(f"the call's data is not TaskEscrow.open for {task_id}")
        try:
            tx = self.chain.build_tx(self._key, open_intent(task_id, value, deadline))
        except EscrowRefusedError as exc:
            record = self.chain.escrow(task_id) if exc.reason == "AlreadyOpened" else None
            if record is not None and record.requester.lower() == self.address.lower():
                return Sent("", 0, already=True)
            raise
        return self._send(tx)

    def bond(self, task_id: str, amount: Wei) -> Sent:
        """Bond `amount` wei more for `task_id`'s disputes from this account
        (`TaskEscrow.bond`, which only the task's requester may call), the task's bonds then
        what the contract holds plus `amount`. Raises EscrowRefusedError when the contract
        refuses (not the requester, the escrow not open), WalletError, ChainError."""
        total = Wei(self.chain.bonded(task_id) + amount)
        return self._send(self.chain.build_tx(self._key, bond_intent(task_id, amount, total)))

    def answer(self, task_id: str, total: Wei) -> Sent:
        """Bring this account's answer to `task_id`'s disputes to `total` wei
        (`TaskEscrow.answer`: a team's bond from its own account, any account but the
        requester's). Idempotent: an account whose answer already reaches `total` sends nothing
        (`already`), so a retry after a lost reply never answers twice. Raises
        EscrowRefusedError when the contract refuses (the requester's account, the escrow not
        open), WalletError, ChainError."""
        held = self.chain.answered(task_id, self.address)
        if held >= total:
            return Sent("", 0, already=True)
        intent = answer_intent(task_id, Wei(total - held), total)
        return self._send(self.chain.build_tx(self._key, intent))

    def reclaim(self, task_id: str) -> Sent:
        """Take this account's answer to refunded `task_id` back into its credit
        (`TaskEscrow.reclaim`; `withdraw` then pays it out). Idempotent: an account with
        nothing answered there sends nothing (`already`). Raises EscrowRefusedError when the
        task is not refunded (a settlement pays answers out itself), WalletError, ChainError."""
        if self.chain.answered(task_id, self.address) == 0:
            return Sent("", 0, already=True)
        return self._send(self.chain.build_tx(self._key, reclaim_intent(task_id)))

    def head(self) -> int:
        """The chain's head block: a rejection names it (`after_block`), and its dispute's
        panel is drawn with the hash of the next one."""
        return self.chain.block_number()

    def withdraw(self) -> Sent:
        """Pull this account's whole credit from the escrow. The account pays the gas: on a
        devnet the service manages it is topped up first (`cover_gas`).

        Raises EscrowRefusedError (NothingToWithdraw) with no credit; WalletError when the
        account cannot pay the gas (saying so), or the transaction fails; ChainError.
        """
        self.cover_gas()
        try:
            return self._send(self.chain.build_tx(self._key, withdraw_intent()))
        except (EscrowTxRejectedError, ChainError) as exc:
            if "insufficient funds" not in str(exc).lower():
                raise
            raise WalletError(
                f"the account {self.address} has too little ether to pay the gas of its "
                "withdrawal: send it some on this chain (a few 0.001 eth), then withdraw again"
            ) from exc

    def cover_gas(self) -> None:
        """On a devnet the service manages (`devnet_rpc_url`): top the account up to
        `GAS_RESERVE` when it holds less (`anvil_setBalance`). A node that refuses (not a
        devnet after all) is left alone: the withdrawal then says what the account lacks."""
        url = self.devnet_rpc_url
        if url is None:
            return
        try:
            held = int(str(rpc_call(url, "eth_getBalance", params=[self.address, "latest"])), 16)
            if held < GAS_RESERVE:
                rpc_call(url, "anvil_setBalance", params=[self.address, hex(GAS_RESERVE)])
        except (OSError, ValueError):
            return

    def _send(self, tx: SignedEscrowTx) -> Sent:
        self.chain.broadcast(tx)
        receipt: TxReceipt | None = self.chain.wait_for_receipt(tx.tx_hash, RECEIPT_TIMEOUT_S)
        if receipt is None:
            raise WalletError(f"the {tx.kind} 0x{tx.tx_hash.hex()} was not mined in time")
        if not receipt.status_ok:
            raise WalletError(f"the {tx.kind} 0x{tx.tx_hash.hex()} reverted")
        return Sent("0x" + tx.tx_hash.hex(), receipt.block_number)

    def _check_chain(self, chain_id: int) -> None:
        actual = self.chain.chain_id()
        if chain_id != actual or self.expected_chain_id not in (None, actual):
            raise WalletError(f"the call is for chain {chain_id}; this wallet is on {actual}")
