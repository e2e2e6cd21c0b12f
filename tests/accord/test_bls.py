"""The `accord` command and the service defer py_ecc's BLS code until a BLS keystore needs it
(accord/_bls.py, installed by accord._process). Each case runs in a fresh interpreter: what is
imported, and in which order, is the point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PREPARED = "from accord._process import prepare_process\nprepare_process()\n"
"""What the `accord` command and the service run first."""

KEY = "0x" + "11" * 32

# A v4 (EIP-2335, BLS) keystore: its public key is the one use eth_keyfile makes of py_ecc.bls.
KEYSTORE_V4 = f"""
import json, sys
from eth_keyfile import create_keyfile_json
keystore = create_keyfile_json(bytes.fromhex("{KEY[2:]}"), b"pw", version=4, iterations=2)
print(json.dumps({{"pubkey": keystore["pubkey"]}}))
"""


def _run(code: str, env: dict[str, str] | None = None) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    answer: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return answer


def test_signing_a_transaction_loads_no_bls_code() -> None:
    answer = _run(
        PREPARED
        + f"""
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
    deferred = _run(PREPARED + KEYSTORE_V4)
    eager = _run(KEYSTORE_V4)
    assert deferred == eager
    assert str(deferred["pubkey"]).startswith(("8", "9", "a", "b"))  # a compressed G1 point


@pytest.mark.parametrize(
    "first",
    [
        PREPARED + "import accord, web3",
        "import py_ecc.bls\n" + PREPARED + "import web3",
        "import accord, web3",  # a library's import: nothing is deferred
    ],
)
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


def test_an_eth_keyfile_needing_more_of_py_ecc_is_imported_plainly(tmp_path: Path) -> None:
    """The fallback: a keyfile module that reads a name the placeholders lack still imports,
    with the real modules, and the placeholders are gone afterwards."""
    package = tmp_path / "eth_keyfile"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "keyfile.py").write_text(
        "from py_ecc.bls import G2Basic, G2ProofOfPossession\n"
        "from py_ecc.bls12_381 import curve_order\n"
    )
    answer = _run(
        PREPARED
        + """
import json, sys
import eth_keyfile.keyfile as keyfile
import py_ecc.bls, py_ecc.bls12_381
print(json.dumps({
    "where": keyfile.__file__,
    "real": keyfile.G2Basic is py_ecc.bls.G2Basic
        and keyfile.G2ProofOfPossession is py_ecc.bls.G2ProofOfPossession,
    "pairing": hasattr(py_ecc.bls12_381, "pairing"),
}))
""",
        env={
            **os.environ,
            "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        },
    )
    assert answer == {
        "where": str(package / "keyfile.py"),
        "real": True,
        "pairing": True,
    }
