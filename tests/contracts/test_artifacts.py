"""The committed contract artifacts are exactly what the pinned compiler makes of the sources."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import solcx
from packaging.version import Version

from accord.ledger.contracts import ARTIFACTS_DIR, load_artifact, mask_ranges
from accord.ledger.errors import DeploymentError

REPO_ROOT = Path(__file__).resolve().parents[2]
WRAPPER = REPO_ROOT / "scripts" / "solc"


def _load_compile_script() -> ModuleType:
    path = REPO_ROOT / "scripts" / "compile_contracts.py"
    spec = importlib.util.spec_from_file_location("compile_contracts", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compile_script() -> ModuleType:
    return _load_compile_script()


@pytest.fixture(scope="module")
def recompiled(compile_script: ModuleType) -> dict[str, dict[str, object]]:
    result: dict[str, dict[str, object]] = compile_script.compile_contracts()
    return result


def test_every_source_has_a_committed_artifact(recompiled: dict[str, dict[str, object]]) -> None:
    committed = {
        p.name.removesuffix(".json") for p in ARTIFACTS_DIR.iterdir() if p.name.endswith(".json")
    }
    assert set(recompiled) == committed
    assert "AnchorRegistry" in committed


def test_recompiling_gives_the_committed_bytecode_and_abi(
    recompiled: dict[str, dict[str, object]],
) -> None:
    for name, artifact in recompiled.items():
        committed = json.loads((ARTIFACTS_DIR / f"{name}.json").read_text())
        assert artifact["bytecode"] == committed["bytecode"], name
        assert artifact["deployedBytecode"] == committed["deployedBytecode"], name
        assert artifact["abi"] == committed["abi"], name


def test_recompiling_gives_the_committed_bytes(
    compile_script: ModuleType, recompiled: dict[str, dict[str, object]]
) -> None:
    assert compile_script.differing_artifacts(recompiled) == []


def test_artifact_records_the_pinned_compiler(recompiled: dict[str, dict[str, object]]) -> None:
    compiler = recompiled["AnchorRegistry"]["compiler"]
    assert compiler == {
        "version": "0.8.28+commit.7893614a",
        "evmVersion": "cancun",
        "optimizer": {"enabled": True, "runs": 200},
    }


def test_wrapper_answers_version_like_native_solc() -> None:
    out = subprocess.run(
        [str(WRAPPER), "--version"], check=True, capture_output=True, text=True
    ).stdout
    assert out == (
        "solc, the solidity compiler commandline interface\n"
        "Version: 0.8.28+commit.7893614a.Linux.g++\n"
    )
    assert solcx.wrapper.get_solc_version(WRAPPER, with_commit_hash=True) == Version(
        "0.8.28+commit.7893614a"
    )


def test_wrapper_refuses_unknown_options_like_solc() -> None:
    done = subprocess.run([str(WRAPPER), "--no-such-flag"], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith("unrecognised option '--no-such-flag'")


def test_wrapper_reports_compile_errors_through_solcx() -> None:
    broken = {
        "language": "Solidity",
        "sources": {"Broken.sol": {"content": "pragma solidity 0.8.28; contract B { x }"}},
        "settings": {"outputSelection": {"*": {"*": ["abi"]}}},
    }
    with pytest.raises(solcx.exceptions.SolcError, match=re.escape("Broken.sol")):
        solcx.compile_standard(broken, solc_binary=WRAPPER, allow_paths=[str(REPO_ROOT)])


def test_load_artifact_reads_bytes_and_immutables() -> None:
    artifact = load_artifact("AnchorRegistry")
    assert artifact.name == "AnchorRegistry"
    # The creation code carries the deployed code it returns.
    assert artifact.deployed_bytecode[:64] in artifact.bytecode
    assert len(artifact.bytecode) > len(artifact.deployed_bytecode)
    assert {entry.get("name") for entry in artifact.abi} >= {
        "anchor",
        "latestSize",
        "rootAt",
        "operator",
        "Anchored",
        "NotOperator",
        "SizeNotGrowing",
    }
    # `operator` is immutable: its slots in the deployed code are zero in the artifact.
    assert artifact.immutable_ranges
    for start, length in artifact.immutable_ranges:
        assert artifact.deployed_bytecode[start : start + length] == bytes(length)


def test_runtime_code_matches_ignores_only_immutables() -> None:
    artifact = load_artifact("AnchorRegistry")
    code = bytearray(artifact.deployed_bytecode)
    start, length = artifact.immutable_ranges[0]
    code[start + length - 20 : start + length] = bytes.fromhex(
        "f39fd6e51aad88f6f4ce6ab8827279cfffb92266"
    )
    assert artifact.deployed_code_matches(bytes(code))
    assert mask_ranges(bytes(code), artifact.immutable_ranges) == artifact.deployed_bytecode
    code[0] ^= 0xFF
    assert not artifact.deployed_code_matches(bytes(code))
    assert not artifact.deployed_code_matches(artifact.deployed_bytecode + b"\x00")


def test_missing_artifact_is_a_deployment_error(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError, match="compile_contracts"):
        load_artifact("AnchorRegistry", artifacts_dir=tmp_path)


def _fake_solc(bin_dir: Path, version: str) -> Path:
    bin_dir.mkdir()
    fake = bin_dir / "solc"
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'solc, the solidity compiler commandline interface'\n"
        f"echo 'Version: {version}+commit.00000000.Linux.g++'\n"
    )
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize(("version", "native_wins"), [("0.8.28", True), ("0.8.27", False)])
def test_native_solc_is_used_only_at_the_pinned_version(
    compile_script: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: str,
    native_wins: bool,
) -> None:
    fake = _fake_solc(tmp_path / "bin", version)
    monkeypatch.setenv("PATH", str(fake.parent))
    chosen = compile_script.find_solc_binary()
    assert chosen == (fake if native_wins else WRAPPER)


def test_the_compile_script_writes_where_the_package_reads(compile_script: ModuleType) -> None:
    # The artifacts are package data of `ledger` (read through importlib.resources), so the
    # script must write them there and nowhere the wheel leaves behind.
    assert Path(str(ARTIFACTS_DIR)).resolve() == compile_script.ARTIFACTS_DIR.resolve()
    assert compile_script.ARTIFACTS_DIR.parent == REPO_ROOT / "ledger"
