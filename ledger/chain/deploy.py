"""Deploying the AnchorRegistry and checking a recorded deployment on chain (the escrow's
`ensure_escrow` shares `ensure_contract`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from eth_account import Account
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from web3.exceptions import TimeExhausted

from accord.ledger.chain.values import (
    DEFAULT_FEE_POLICY,
    DEPLOY_TIMEOUT_S,
    RECEIPT_POLL_S,
    REGISTRY_CONTRACT,
    Deployment,
    with_gas_margin,
)
from accord.ledger.chain.web3_chain import (
    Web3AnchorChain,
    eip1559_fees,
    make_web3,
    mapped_chain_errors,
)
from accord.ledger.contracts import ContractArtifact, load_artifact
from accord.ledger.errors import DeploymentError
from accord.ledger.fees import FeePolicy


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
                signed.hash, timeout=timeout_s, poll_latency=RECEIPT_POLL_S
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
    if not artifact.deployed_code_matches(code):
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
    - recorded and on chain with the recorded code hash, the artifact's deployed code (up to
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
    if not artifact.deployed_code_matches(code):
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
