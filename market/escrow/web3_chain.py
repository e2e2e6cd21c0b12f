"""TaskEscrow over JSON-RPC (any node; anvil by default), and its deployment: `deploy_escrow`
and `ensure_escrow` (the address recorded, checked on chain, deployed when missing).

Every web3 failure is mapped here: a revert to EscrowRefusedError with the custom error
decoded, a refused transaction to EscrowTxRejectedError, the rest to the ledger's ChainErrors.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_utils.address import to_checksum_address
from web3.contract import Contract
from web3.exceptions import ContractLogicError
from web3.types import Nonce, TxParams
from web3.types import Wei as Web3Wei

from accord.ledger.chain.deploy import deploy_registry, ensure_contract
from accord.ledger.chain.values import (
    DEFAULT_FEE_POLICY,
    DEPLOY_TIMEOUT_S,
    RPC_TIMEOUT_S,
    Deployment,
    with_gas_margin,
)
from accord.ledger.chain.web3_chain import (
    ViewCalls,
    Web3Transactions,
    decode_custom_error,
    make_web3,
    mapped_chain_errors,
    nonce_at,
    revert_data,
    send_raw_transaction,
)
from accord.ledger.contracts import ContractArtifact, load_artifact
from accord.ledger.errors import ChainError
from accord.ledger.fees import FeePolicy, Fees, fees_for
from accord.market.escrow.values import (
    ESCROW_CONTRACT,
    EscrowEvent,
    EscrowEventName,
    EscrowIntent,
    EscrowRecord,
    EscrowRefusedError,
    EscrowState,
    EscrowTxRejectedError,
    EventPlace,
    SignedEscrowTx,
    task_id_hash,
    validate_intent,
)
from accord.market.money import Wei


class Web3EscrowChain(Web3Transactions):
    """EscrowChain over JSON-RPC. Constructing it does no I/O."""

    def __init__(
        self,
        rpc_url: str,
        escrow_address: str,
        *,
        timeout_s: float = RPC_TIMEOUT_S,
        artifact: ContractArtifact | None = None,
        fee_policy: FeePolicy | None = None,
    ) -> None:
        self._rpc_url = rpc_url
        self._fee_policy = fee_policy or FeePolicy()
        self._w3 = make_web3(rpc_url, timeout_s)
        self._artifact = artifact or load_artifact(ESCROW_CONTRACT)
        self._address = to_checksum_address(escrow_address)
        self._contract: Contract = self._w3.eth.contract(
            address=self._address, abi=self._artifact.abi
        )
        self._views = ViewCalls(self._w3, rpc_url, self._address, self._artifact.abi)
        self._chain_id: int | None = None

    def escrow_address(self) -> str:
        return self._address

    def operator(self) -> str:
        (operator,) = self._views.call("operator")
        return str(to_checksum_address(operator))

    def escrow(self, task_id: str) -> EscrowRecord | None:
        key = task_id_hash(task_id)
        requester, deposit, deadline, state = self._views.call("escrows", key)
        if int(state) == EscrowState.NONE:
            return None
        try:
            known = EscrowState(state)
        except ValueError:
            raise ChainError(
                f"escrows on {self._rpc_url}: task {task_id!r} is in state {state}, which "
                "TaskEscrow does not have"
            ) from None
        return EscrowRecord(
            key, to_checksum_address(requester), Wei(int(deposit)), int(deadline), known
        )

    def credit(self, address: str) -> Wei:
        (credit,) = self._views.call("credit", to_checksum_address(address))
        return Wei(int(credit))

    def held(self, task_id: str) -> Wei:
        (held,) = self._views.call("held", task_id_hash(task_id))
        return Wei(int(held))

    def bonded(self, task_id: str) -> Wei:
        (bonded,) = self._views.call("bonded", task_id_hash(task_id))
        return Wei(int(bonded))

    def answered(self, task_id: str, account: str) -> Wei:
        (answered,) = self._views.call(
            "answered", task_id_hash(task_id), to_checksum_address(account)
        )
        return Wei(int(answered))

    def answers(self, task_id: str) -> Wei:
        (answers,) = self._views.call("answers", task_id_hash(task_id))
        return Wei(int(answers))

    def balance(self) -> Wei:
        with mapped_chain_errors(self._rpc_url, "eth_getBalance"):
            return Wei(int(self._w3.eth.get_balance(self._address)))

    def build_tx(
        self,
        key_hex: str,
        intent: EscrowIntent,
        *,
        nonce: int | None = None,
        fees: Fees | None = None,
    ) -> SignedEscrowTx:
        """Sign `intent` with EIP-1559 fees (`fees`, or the market's under the ceiling) and an
        estimated gas limit.

        Raises ValueError, EscrowRefusedError (the contract's custom error decoded),
        FeesAboveCeilingError, ChainUnavailableError.
        """
        validate_intent(intent)
        account = Account.from_key(key_hex)
        functions = self._contract.functions
        key = task_id_hash(intent.task_id)
        value = 0
        if intent.kind == "open":
            call = functions.open(key, intent.deadline)
            value = intent.deposit
        elif intent.kind == "bond":
            call = functions.bond(key, intent.amounts[0])
            value = intent.deposit
        elif intent.kind == "answer":
            call = functions.answer(key, intent.amounts[0])
            value = intent.deposit
        elif intent.kind == "reclaim":
            call = functions.reclaim(key)
        elif intent.kind == "settle":
            call = functions.settle(key, list(intent.payees), list(intent.amounts))
        elif intent.kind == "release":
            call = functions.release(key, intent.payees[0], intent.amounts[0])
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
            fees = fees or fees_for(self.fee_market(), self._fee_policy)
            params: TxParams = {
                "from": account.address,
                "chainId": self.chain_id(),
                "nonce": Nonce(nonce),
                "gas": with_gas_margin(gas),
                "value": Web3Wei(value),
                "maxFeePerGas": Web3Wei(fees.max_fee),
                "maxPriorityFeePerGas": Web3Wei(fees.tip),
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

    def account_nonce(self, address: str, latest: bool) -> int:
        return nonce_at(self._w3, self._rpc_url, address, latest)

    def events(self, task_id: str | None = None, *, from_block: int = 0) -> list[EscrowEvent]:
        """One `eth_getLogs` for every event kind (topic 0 any of them; topic 1 the task's
        hash when `task_id` is given, which leaves out Withdrawn, a task-less event)."""
        names: list[EscrowEventName] = [
            "Opened",
            "Bonded",
            "Answered",
            "Settled",
            "Released",
            "Refunded",
            "Reclaimed",
        ]
        if task_id is None:
            names.append("Withdrawn")
        kinds = {
            bytes.fromhex(event.topic.removeprefix("0x")): event
            for event in (getattr(self._contract.events, name)() for name in names)
        }
        topics: list[Any] = [["0x" + topic.hex() for topic in kinds]]
        if task_id is not None:
            topics.append("0x" + task_id_hash(task_id).hex())
        with mapped_chain_errors(self._rpc_url, "eth_getLogs"):
            if from_block > 0 and from_block > int(self._w3.eth.block_number):
                return []  # nodes refuse a range that starts after the head
            logs = self._w3.eth.get_logs(
                {
                    "address": self._address,
                    "fromBlock": from_block,
                    "toBlock": "latest",
                    "topics": topics,
                }
            )
            decoded = [kinds[bytes(log["topics"][0])].process_log(log) for log in logs]
        decoded.sort(key=lambda log: (log["blockNumber"], log["logIndex"]))
        return [_decode_event(log) for log in decoded]


def _decode_event(log: Any) -> EscrowEvent:
    name: EscrowEventName = log["event"]
    args = log["args"]
    common = EventPlace(
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
    if name == "Bonded":
        return EscrowEvent(
            name,
            bytes(args["taskId"]),
            to_checksum_address(args["requester"]),
            Wei(int(args["amount"])),
            amounts=(Wei(int(args["total"])),),
            **common,
        )
    if name == "Answered":
        return EscrowEvent(
            name,
            bytes(args["taskId"]),
            to_checksum_address(args["account"]),
            Wei(int(args["amount"])),
            amounts=(Wei(int(args["total"])),),
            **common,
        )
    if name == "Reclaimed":
        return EscrowEvent(
            name,
            bytes(args["taskId"]),
            to_checksum_address(args["account"]),
            Wei(int(args["amount"])),
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
    if name == "Released":
        return EscrowEvent(
            name,
            bytes(args["taskId"]),
            to_checksum_address(args["payee"]),
            Wei(int(args["amount"])),
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
    rpc_url: str,
    operator_key_hex: str,
    artifact: ContractArtifact,
    timeout_s: float,
    fee_policy: FeePolicy = DEFAULT_FEE_POLICY,
) -> EscrowDeployment:
    deployed = deploy_registry(
        rpc_url, operator_key_hex, artifact=artifact, timeout_s=timeout_s, fee_policy=fee_policy
    )
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
    fee_policy: FeePolicy = DEFAULT_FEE_POLICY,
) -> EscrowDeployment:
    """The escrow recorded in `deployment_file`, checked on chain; deploys when needed
    (`accord.ledger.chain.ensure_contract`: "deployed", "redeployed" or "reused"), with fees under
    `fee_policy`.

    Raises DeploymentError when the record is malformed, names another chain, or the address
    holds other code or another operator's escrow; ChainUnavailableError,
    FeesAboveCeilingError.
    """
    artifact = artifact or load_artifact(ESCROW_CONTRACT)
    return ensure_contract(
        rpc_url,
        operator_key_hex,
        deployment_file,
        artifact,
        deploy=lambda: _deploy(rpc_url, operator_key_hex, artifact, DEPLOY_TIMEOUT_S, fee_policy),
        operator_of=lambda address: Web3EscrowChain(rpc_url, address, artifact=artifact).operator(),
    )
