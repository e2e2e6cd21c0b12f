"""accord defers py_ecc's BLS code until a BLS keystore needs it (accord/_bls.py). Each case runs
in a fresh interpreter: what is imported, and in which order, is the point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

KEY = "0x" + "11" * 32

# A v4 (EIP-2335, BLS) keystore: its public key is the one use eth_keyfile makes of py_ecc.bls.
KEYSTORE_V4 = f"""
import json, sys
from eth_keyfile import create_keyfile_json
keystore = create_keyfile_json(bytes.fromhex("{KEY[2:]}"), b"pw", version=4, iterations=2)
print(json.dumps({{"pubkey": keystore["pubkey"]}}))
"""


def _run(code: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    answer: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return answer


def test_signing_a_transaction_loads_no_bls_code() -> None:
    answer = _run(
        f"""
import json, sys
import accord, web3
from eth_account import Account
signed = Account.sign_transaction(
    {{"to": "0x" + "22" * 20, "value": 1, "gas": 21000, "gasPrice": 1, "nonce": 0,
      "chainId": 31337}}, "{KEY}")
print(json.dumps({{"tx": signed.raw_transaction.hex(),
                   "loaded": sorted(m for m in sys.modules if m.startswith("py_ecc.bls"))}}))
"""
    )
    assert answer["loaded"] == []
    eager = _run(
        f"""
import json
from eth_account import Account
signed = Account.sign_transaction(
    {{"to": "0x" + "22" * 20, "value": 1, "gas": 21000, "gasPrice": 1, "nonce": 0,
      "chainId": 31337}}, "{KEY}")
print(json.dumps({{"tx": signed.raw_transaction.hex()}}))
"""
    )
    assert answer["tx"] == eager["tx"]


def test_a_bls_keystore_gets_the_real_public_key_and_constants() -> None:
    deferred = _run("import accord\n" + KEYSTORE_V4)
    eager = _run(KEYSTORE_V4)
    assert deferred == eager
    assert str(deferred["pubkey"]).startswith(("8", "9", "a", "b"))  # a compressed G1 point


@pytest.mark.parametrize("first", ["import accord, web3", "import py_ecc.bls, accord, web3"])
def test_everyone_else_gets_the_real_modules(first: str) -> None:
    answer = _run(
        f"""
{first}
import json, sys
import py_ecc.bls, py_ecc.bls12_381, eth_keyfile.keyfile as keyfile
print(json.dumps({{
    "real_bls": isinstance(py_ecc.bls.G2ProofOfPossession, type),
    "order": keyfile.MAX_V4_PRIVATE_KEY == py_ecc.bls12_381.curve_order - 1,
    "pairing": hasattr(py_ecc.bls12_381, "pairing"),
}}))
"""
    )
    assert answer == {"real_bls": True, "order": True, "pairing": True}
