"""Compiled contract artifacts, as committed under `ledger/artifacts/`.

`scripts/compile_contracts.py` writes them from `contracts/*.sol`; they are package data of
`ledger`, so an installed wheel carries them. This module reads them through
`importlib.resources` (never relative to the repository) and only when asked (nothing at import).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

from accord.ledger.errors import DeploymentError

ARTIFACTS_DIR: Traversable = files("accord.ledger") / "artifacts"
"""The artifacts shipped with the `ledger` package: `<Name>.json` per contract."""


@dataclass(frozen=True)
class ContractArtifact:
    """One compiled contract.

    deployed_bytecode holds zeros where the constructor patches immutables in;
    immutable_ranges lists those `(start, length)` byte ranges of the deployed code.
    """

    name: str
    abi: list[dict[str, Any]]
    bytecode: bytes
    deployed_bytecode: bytes
    immutable_ranges: tuple[tuple[int, int], ...] = ()

    def deployed_code_matches(self, code: bytes) -> bool:
        """True when deployed `code` on chain is this artifact's, whatever its immutables hold."""
        return len(code) == len(self.deployed_bytecode) and mask_ranges(
            code, self.immutable_ranges
        ) == mask_ranges(self.deployed_bytecode, self.immutable_ranges)


def mask_ranges(code: bytes, ranges: tuple[tuple[int, int], ...]) -> bytes:
    """`code` with every `(start, length)` range zeroed (pure)."""
    masked = bytearray(code)
    for start, length in ranges:
        masked[start : start + length] = bytes(min(length, max(0, len(code) - start)))
    return bytes(masked)


def parse_artifact(name: str, data: dict[str, Any]) -> ContractArtifact:
    """Build a ContractArtifact from the artifact JSON; raises DeploymentError if malformed."""
    try:
        return ContractArtifact(
            name=str(data["contractName"]),
            abi=list(data["abi"]),
            bytecode=bytes.fromhex(_strip_0x(data["bytecode"])),
            deployed_bytecode=bytes.fromhex(_strip_0x(data["deployedBytecode"])),
            immutable_ranges=tuple(
                (int(start), int(length)) for start, length in data.get("immutableReferences", [])
            ),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DeploymentError(f"artifact {name} is malformed: {exc!r}") from exc


def load_artifact(name: str, artifacts_dir: Traversable = ARTIFACTS_DIR) -> ContractArtifact:
    """Read `<artifacts_dir>/<name>.json` (by default the package's own artifacts).

    Raises DeploymentError when the file is missing, unreadable or malformed
    (in a checkout, run `python scripts/compile_contracts.py` to produce it; in an
    installed package, the wheel was built without its artifacts).
    """
    path = artifacts_dir / f"{name}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DeploymentError(
            f"no compiled artifact for {name} at {path}: in a checkout run "
            "`python scripts/compile_contracts.py`; an installed accord lacks its package data"
        ) from None
    except (OSError, ValueError) as exc:
        raise DeploymentError(f"cannot read artifact {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise DeploymentError(f"artifact {path} is not a JSON object")
    return parse_artifact(name, data)


def _strip_0x(value: str) -> str:
    return value[2:] if value.startswith("0x") else value
