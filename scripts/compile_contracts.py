"""Compile every `contracts/*.sol` into `ledger/artifacts/<Name>.json` (package data of `ledger`,
so the wheel carries them).

    python scripts/compile_contracts.py           write (or rewrite) the artifacts
    python scripts/compile_contracts.py --check   recompile; exit 1 if any artifact differs

The compiler is solc 0.8.28 through py-solc-x's `compile_standard`: the native `solc` on PATH
when it is that exact version, otherwise `scripts/solc`, a wrapper around solc-js from
node_modules (same release, same bytecode). Settings are pinned (cancun, optimizer 200 runs,
no metadata hash) so the output depends only on the sources and the compiler version.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import solcx
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parent.parent
CONTRACTS_DIR = REPO_ROOT / "contracts"
ARTIFACTS_DIR = REPO_ROOT / "ledger" / "artifacts"
SOLC_WRAPPER = REPO_ROOT / "scripts" / "solc"

SOLC_VERSION = Version("0.8.28")
EVM_VERSION = "cancun"
OPTIMIZER = {"enabled": True, "runs": 200}


def find_solc_binary() -> Path:
    """The native `solc` on PATH if it is exactly 0.8.28, else the solc-js wrapper."""
    native = shutil.which("solc")
    if native is not None and Path(native).resolve() != SOLC_WRAPPER.resolve():
        try:
            if solcx.wrapper.get_solc_version(native) == SOLC_VERSION:
                return Path(native)
        except (OSError, subprocess.CalledProcessError, solcx.exceptions.SolcError):
            pass  # not a working solc: use the wrapper
    return SOLC_WRAPPER


def source_unit_name(path: Path) -> str:
    """The repo-relative POSIX path, used as the standard-JSON source unit name."""
    return path.relative_to(REPO_ROOT).as_posix()


def standard_json_input(sources: dict[str, str]) -> dict[str, Any]:
    """Standard JSON input for `sources` (unit name -> text) with the pinned settings."""
    return {
        "language": "Solidity",
        "sources": {name: {"content": text} for name, text in sorted(sources.items())},
        "settings": {
            "evmVersion": EVM_VERSION,
            "optimizer": dict(OPTIMIZER),
            "metadata": {"bytecodeHash": "none"},
            "outputSelection": {
                "*": {
                    "*": [
                        "abi",
                        "evm.bytecode.object",
                        "evm.deployedBytecode.object",
                        "evm.deployedBytecode.immutableReferences",
                    ]
                }
            },
        },
    }


def immutable_ranges(references: dict[str, list[dict[str, int]]]) -> list[list[int]]:
    """Sorted `[start, length]` byte ranges of immutables in the deployed code."""
    return sorted([ref["start"], ref["length"]] for refs in references.values() for ref in refs)


def build_artifact(
    name: str,
    compiled: dict[str, Any],
    source_text: str,
    compiler_version: str,
) -> dict[str, Any]:
    """The artifact dictionary written for one contract (pure)."""
    deployed = compiled["evm"]["deployedBytecode"]
    return {
        "contractName": name,
        "abi": compiled["abi"],
        "bytecode": "0x" + compiled["evm"]["bytecode"]["object"],
        "deployedBytecode": "0x" + deployed["object"],
        "immutableReferences": immutable_ranges(deployed.get("immutableReferences", {})),
        "compiler": {
            "version": compiler_version,
            "evmVersion": EVM_VERSION,
            "optimizer": dict(OPTIMIZER),
        },
        "sourceSha256": hashlib.sha256(source_text.encode("utf-8")).hexdigest(),
    }


def render_artifact(artifact: dict[str, Any]) -> str:
    """Pretty JSON with sorted keys and a trailing newline (the bytes that are committed)."""
    return json.dumps(artifact, indent=2, sort_keys=True) + "\n"


def compile_contracts(
    contracts_dir: Path = CONTRACTS_DIR, solc_binary: Path | None = None
) -> dict[str, dict[str, Any]]:
    """Compile every `*.sol` in `contracts_dir`; returns contract name -> artifact dictionary.

    Raises FileNotFoundError when there is no source, solcx.exceptions.SolcError when the
    compiler fails, and ValueError when two sources define a contract with the same name.
    """
    paths = sorted(contracts_dir.glob("*.sol"))
    if not paths:
        raise FileNotFoundError(f"no Solidity sources in {contracts_dir}")
    texts = {source_unit_name(path): path.read_text(encoding="utf-8") for path in paths}
    binary = solc_binary or find_solc_binary()
    version = solcx.wrapper.get_version_str_from_solc_binary(binary)
    output = solcx.compile_standard(standard_json_input(texts), solc_binary=binary)
    artifacts: dict[str, dict[str, Any]] = {}
    for unit, contracts in sorted(output["contracts"].items()):
        for name, compiled in sorted(contracts.items()):
            if name in artifacts:
                raise ValueError(f"contract {name} is defined twice (again in {unit})")
            artifacts[name] = build_artifact(name, compiled, texts[unit], version)
    return artifacts


def write_artifacts(artifacts: dict[str, dict[str, Any]], out_dir: Path = ARTIFACTS_DIR) -> None:
    """Write one `<Name>.json` per contract into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, artifact in artifacts.items():
        (out_dir / f"{name}.json").write_text(render_artifact(artifact), encoding="utf-8")


def differing_artifacts(
    artifacts: dict[str, dict[str, Any]], out_dir: Path = ARTIFACTS_DIR
) -> list[str]:
    """Names whose committed file is missing, differs, or has no source any more."""
    differing = [
        name
        for name, artifact in artifacts.items()
        if not (out_dir / f"{name}.json").is_file()
        or (out_dir / f"{name}.json").read_text(encoding="utf-8") != render_artifact(artifact)
    ]
    stale = [p.stem for p in out_dir.glob("*.json") if p.stem not in artifacts]
    return sorted(differing + stale)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the committed artifacts are stale"
    )
    args = parser.parse_args(argv)
    artifacts = compile_contracts()
    if args.check:
        differing = differing_artifacts(artifacts)
        if differing:
            print(f"stale artifacts: {', '.join(differing)}", file=sys.stderr)
            print("run: python scripts/compile_contracts.py", file=sys.stderr)
            return 1
        print(f"artifacts up to date: {', '.join(sorted(artifacts))}")
        return 0
    write_artifacts(artifacts)
    for name in sorted(artifacts):
        print(f"wrote {(ARTIFACTS_DIR / f'{name}.json').relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
