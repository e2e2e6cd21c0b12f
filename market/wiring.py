"""Wiring at the edge: settings in, a working `Market` (ledger, credentials, escrow) out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from accord.identity.onboarding import Onboarding, open_onboarding
from accord.ledger.chain import DEVNET_OPERATOR_KEY
from accord.ledger.devnet import DevnetInfo, rpc_call
from accord.ledger.errors import ChainError, ChainUnavailableError, FeesAboveCeilingError
from accord.ledger.service import Ledger
from accord.ledger.settings import Settings
from accord.ledger.signing import Signer
from accord.ledger.wiring import connect_chain, devnet_for, open_ledger
from accord.market.errors import EscrowError
from accord.market.escrow import (
    EscrowActions,
    EscrowChain,
    EscrowOutcome,
    EscrowState,
    SqlEscrowJournal,
    Web3EscrowChain,
    address_of,
    ensure_escrow,
)
from accord.market.escrow.port import EscrowDeposit, EscrowReceipt
from accord.market.escrow.values import open_intent
from accord.market.money import Wei
from accord.market.service import Market

ESCROW_DEPLOYMENT_FILE = "escrow-deployment.json"

#: anvil's second default account: a funded requester on the managed devnet.
DEVNET_REQUESTER_KEY = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"


class ChainEscrow:
    """The market's `EscrowPort` over the TaskEscrow contract, every transaction journalled."""

    def __init__(self, chain: EscrowChain, actions: EscrowActions, operator_key: str) -> None:
        self.chain = chain
        self.actions = actions
        self.operator_key = operator_key

    def open(
        self, task_id: str, deadline: datetime, deposit: Wei, requester_key: str
    ) -> EscrowReceipt:
        outcome = self.actions.open(requester_key, task_id, deposit, int(deadline.timestamp()))
        return _receipt(outcome)

    def bond(self, task_id: str, amount: Wei, total: Wei, requester_key: str) -> EscrowReceipt:
        return _receipt(self.actions.bond(requester_key, task_id, amount, total))

    def bonded(self, task_id: str) -> Wei:
        return self.chain.bonded(task_id)

    def answer(self, task_id: str, amount: Wei, total: Wei, answer_key: str) -> EscrowReceipt:
        return _receipt(self.actions.answer(answer_key, task_id, amount, total))

    def answered(self, task_id: str, account: str) -> Wei:
        return self.chain.answered(task_id, account)

    def answers_of(self, task_id: str) -> dict[str, Wei]:
        """What each account answered for the task's disputes, by checksummed address (every
        account an `Answered` event names; 0 after a reclaim)."""
        accounts = sorted(
            {e.account for e in self.chain.events(task_id) if e.name == "Answered" and e.account}
        )
        return {a: self.chain.answered(task_id, a) for a in accounts}

    def block_number(self) -> int:
        return self.chain.block_number()

    def block_hash(self, number: int) -> bytes | None:
        return self.chain.block_hash(number)

    def refund_to_requester(self, task_id: str) -> EscrowReceipt:
        """The deposit and bonds back to the requester, each answer back to its account."""
        answers = {a: w for a, w in self.answers_of(task_id).items() if w > 0}
        return _receipt(
            self.actions.pay_out(self.operator_key, task_id, list(answers), list(answers.values()))
        )

    def pay_out(self, task_id: str, payees: Sequence[str], amounts: Sequence[Wei]) -> EscrowReceipt:
        return _receipt(self.actions.pay_out(self.operator_key, task_id, payees, amounts))

    def release(self, task_id: str, payee: str, amount: Wei, owner: str) -> EscrowReceipt:
        outcome = self.actions.release(self.operator_key, task_id, payee, amount, owner)
        return replace(_receipt(outcome), payee=outcome.intent.payees[0])

    def chain_id(self) -> int:
        return self.chain.chain_id()

    def operator_address(self) -> str:
        return address_of(self.operator_key)

    def requester_address(self, requester_key: str) -> str:
        try:
            return address_of(requester_key)
        except (ValueError, TypeError) as exc:
            raise EscrowError(f"the requester key is not a hex private key: {exc}") from exc

    def deposit_problem(
        self, task_id: str, deadline: datetime, deposit: Wei, requester_key: str
    ) -> str | None:
        """Why the chain would refuse opening `task_id`'s escrow from the requester's key now,
        or None: the transaction is prepared (its gas estimated by the node) and not sent.
        Raises ChainUnavailableError, FeesAboveCeilingError."""
        intent = open_intent(task_id, deposit, int(deadline.timestamp()))
        try:
            self.chain.build_tx(requester_key, intent)
        except (ChainUnavailableError, FeesAboveCeilingError):
            raise
        except (ChainError, EscrowError, ValueError) as exc:
            return str(exc)
        return None

    def withdraw(self, payee_key: str) -> EscrowReceipt:
        """Pull the payee's credit to its account (it pays the gas)."""
        return _receipt(self.actions.withdraw(payee_key))

    def credit(self, address: str) -> Wei:
        return self.chain.credit(address)

    def deposit_of(self, task_id: str) -> tuple[Wei, bool] | None:
        """The escrowed deposit of `task_id` and whether it is still open, or None."""
        record = self.deposit_record(task_id)
        return None if record is None else (record.amount, record.open)

    def deposit_record(self, task_id: str) -> EscrowDeposit | None:
        """The escrow the contract holds under `task_id`'s key, whoever opened it, or None."""
        record = self.chain.escrow(task_id)
        if record is None or record.state == EscrowState.NONE:
            return None
        return EscrowDeposit(
            record.requester, record.deposit, record.deadline, record.state == EscrowState.OPEN
        )

    def escrow_address(self) -> str:
        """The TaskEscrow contract's address."""
        return self.chain.escrow_address()


def _receipt(outcome: EscrowOutcome) -> EscrowReceipt:
    if outcome.status in ("confirmed", "already-done", "superseded"):
        return EscrowReceipt(
            "0x" + outcome.tx_hash.hex() if outcome.tx_hash else "",
            outcome.block_number or 0,
        )
    if outcome.status == "pending":
        raise EscrowError(
            f"the escrow transaction for {outcome.intent.task_id} is sent but not mined yet; "
            "run the command again to reconcile it"
        )
    raise EscrowError(
        f"the escrow {outcome.intent.kind} of {outcome.intent.task_id} ended {outcome.status}"
    )


@dataclass
class MarketContext:
    """Everything a market command needs, opened once."""

    settings: Settings
    onboarding: Onboarding
    market: Market
    escrow: ChainEscrow

    def signer_for(self, agent: str | None) -> Signer:
        """The operator (None) or a registered agent's key, by name or DID."""
        if agent is None:
            return self.market.ledger.operator
        registry = self.onboarding.registry
        return registry.signer(registry.get(agent))

    def fund_gas(self, address: str, amount: Wei) -> None:
        """On the managed devnet only: give an account gas money (anvil_setBalance), so a
        fresh payout account can pay for its withdrawal. Elsewhere the payee funds itself."""
        if not self.settings.managed_devnet:
            return
        rpc_call(
            devnet_for(self.settings).rpc_url, "anvil_setBalance", params=[address, hex(amount)]
        )

    def default_requester_key(self) -> str:
        """A funded account on the managed devnet. Raises EscrowError on any other chain."""
        if not self.settings.managed_devnet:
            raise EscrowError(
                "give the requester's funded account with --eth-key or ACCORD_REQUESTER_ETH_KEY"
            )
        return DEVNET_REQUESTER_KEY


def advertised_rpc_url(settings: Settings) -> str | None:
    """The JSON-RPC URL requesters' wallets are told to use (`GET /chain`): ACCORD_PUBLIC_RPC_URL,
    else the managed devnet's loopback URL; None on an external chain without it (its
    ACCORD_RPC_URL is never shown: it may hold the operator's provider key)."""
    if settings.public_rpc_url is not None:
        return settings.public_rpc_url
    if settings.managed_devnet:
        return devnet_for(settings).rpc_url
    return None


def connect_escrow(settings: Settings, *, start_devnet: bool = True) -> tuple[EscrowChain, str]:
    """TaskEscrow on the configured chain, deployed once; returns it and the operator key.

    Raises ChainError, DevnetError.
    """
    if settings.rpc_url is not None:
        if settings.operator_eth_key is None:
            raise ChainError("ACCORD_RPC_URL is set but ACCORD_OPERATOR_ETH_KEY is not")
        rpc_url, key = settings.rpc_url, settings.operator_eth_key
    else:
        devnet = devnet_for(settings)
        if start_devnet:
            devnet.up()
        rpc_url, key = devnet.rpc_url, DEVNET_OPERATOR_KEY
    deployment = ensure_escrow(
        rpc_url, key, settings.home / ESCROW_DEPLOYMENT_FILE, fee_policy=settings.fee_policy
    )
    return Web3EscrowChain(rpc_url, deployment.address, fee_policy=settings.fee_policy), key


def open_market(
    settings: Settings,
    ledger: Ledger | None = None,
    onboarding: Onboarding | None = None,
    *,
    devnet_started: Callable[[DevnetInfo], None] | None = None,
) -> MarketContext:
    """The market over the configured ledger, credentials and chain; reconciles escrow
    transactions and anchors left pending by a crash or forgotten by the chain, then the task
    records that lag behind the chain. Opening the ledger starts the managed devnet when it
    is not running; `devnet_started` is told when it does."""
    if ledger is None:
        ledger = open_ledger(settings, connect_chain(settings, started=devnet_started))
    if onboarding is None:
        onboarding = open_onboarding(settings, ledger)
    chain, operator_key = connect_escrow(settings, start_devnet=False)
    actions = EscrowActions(
        chain,
        SqlEscrowJournal(ledger.store.engine),
        confirmations=settings.confirmations,
        replace_after_s=settings.replace_after_seconds,
        keys=[operator_key],
    )
    # Escrow first, then anchors: when the chain forgot both, the operator's transactions are
    # sent again in the order they were first sent, with their own nonces.
    actions.reconcile()
    if ledger.anchorer is not None:
        try:
            reconciled = ledger.anchorer.reconcile()
            if any(outcome.status == "forgotten-by-chain" for outcome in reconciled):
                ledger.anchorer.anchor_latest()  # anchored again, covering what was forgotten
        except ChainError as exc:  # kept, as an automatic anchor keeps it; retried next time
            ledger.last_anchor_error = exc
    escrow = ChainEscrow(chain, actions, operator_key)
    market = Market(ledger, onboarding, escrow)
    market.recover()
    return MarketContext(settings, onboarding, market, escrow)
