"""Transactions are signed by libsecp256k1 (coincurve), not eth-keys' pure-Python fallback,
which is 8.4x slower to sign and 20x slower to derive an address (docs/development.md,
dependencies)."""

from __future__ import annotations

from eth_account import Account
from eth_keys.backends import CoinCurveECCBackend, get_backend

from accord.ledger.chain.values import DEVNET_OPERATOR_KEY


def test_eth_keys_signs_with_libsecp256k1() -> None:
    assert isinstance(get_backend(), CoinCurveECCBackend)


def test_a_signed_transaction_recovers_its_sender() -> None:
    account = Account.from_key(DEVNET_OPERATOR_KEY)
    tx = {
        "to": account.address,
        "value": 1,
        "gas": 21_000,
        "maxFeePerGas": 10**9,
        "maxPriorityFeePerGas": 1,
        "nonce": 0,
        "chainId": 31337,
    }
    signed = account.sign_transaction(tx)
    assert Account.recover_transaction(signed.raw_transaction) == account.address
