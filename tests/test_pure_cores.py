"""The pure cores import no I/O library: each, imported alone in a fresh interpreter, leaves
web3, SQLAlchemy/SQLModel, httpx, openai and the web stack (FastAPI, Starlette, uvicorn) out
of `sys.modules`. A core that needs one of them gets it passed in, or the import belongs at
an edge (`python -X importtime -c "import MODULE"` shows who pulled it in).

The list: what DESIGN.md calls the pure cores (the Merkle tree, the reducers, the auction
rules, Shapley, the conversation state machine), every module whose docstring says it is pure
or does no I/O, and the formats they are built on (canonical JSON, events, signatures, wei,
the error roots)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

IO_LIBRARIES = (
    *("web3", "sqlalchemy", "sqlmodel", "httpx", "openai"),
    *("fastapi", "starlette", "uvicorn"),
)

PURE_CORES = (
    # ledger: the formats and the Merkle tree
    "accord.ledger.errors",
    "accord.ledger.lazy",
    "accord.ledger.canonical",
    "accord.ledger.events",
    "accord.ledger.fast_entries",
    "accord.ledger.signing",
    "accord.ledger.merkle",
    "accord.ledger.sealing",
    "accord.ledger.checkpoint",
    "accord.ledger.note",
    "accord.ledger.tiles",
    "accord.ledger.fees",
    # ledger.chain: its values, the AnchorChain seam and the in-memory chain (no web3)
    "accord.ledger.chain.values",
    "accord.ledger.chain.protocol",
    "accord.ledger.chain.memory_chain",
    # identity: Data Integrity proofs, RFC 9421 request signatures, the exams' items and grades
    "accord.identity.errors",
    "accord.identity.dataintegrity",
    "accord.identity.structured_fields",
    "accord.identity.http_signatures",
    "accord.identity.challenges.base",
    "accord.identity.challenges.names",
    "accord.identity.manifests",
    "accord.identity.skill_exports",
    # market: the task state machine, the work and its checks, sealed bids, the auction and
    # its replay from the log, reputation, Shapley, who reads the work
    "accord.market.errors",
    "accord.market.money",
    "accord.market.tasks",
    "accord.market.work",
    "accord.market.payouts",
    "accord.market.escrow.port",
    "accord.market.checks",
    "accord.market.states",
    "accord.market.sealed",
    "accord.market.auction",
    "accord.market.award",
    "accord.market.reputation",
    "accord.market.strategies",
    "accord.market.shapley",
    "accord.market.shapley_weights",
    "accord.market.shapley_int64",
    "accord.market.privacy",
    "accord.market.panel",
    "accord.market.deliverable",
    "accord.market.agreement",
    # market.escrow: its values and the EscrowChain seam (no web3, no SQL journal)
    "accord.market.escrow.values",
    "accord.market.escrow.chain",
    # coordinator: the conversation state machine and the rule policy
    "accord.coordinator.errors",
    "accord.coordinator.conversation",
    "accord.coordinator.policy",
    "accord.coordinator.repetition",
)

#: module -> why it still loads an I/O library (each an expected failure, strict)
KNOWN_IMPURE: dict[str, str] = {}

PROBE = """
import importlib, json, sys
for module in sys.argv[1:]:
    importlib.import_module(module)
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def io_loaded_by(*modules: str) -> list[str]:
    """The I/O libraries in `sys.modules` after importing `modules` (and nothing else) in a
    fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout))
    return [library for library in IO_LIBRARIES if library in loaded]


@pytest.fixture(scope="module")
def all_cores_clean() -> bool:
    """Whether all of PURE_CORES imported together, in one interpreter, load no I/O library.
    Imports only add modules, so then none of them loads one alone either, and one interpreter
    answers for all of them; otherwise each is probed alone to name the culprits."""
    return io_loaded_by(*PURE_CORES) == []


@pytest.mark.parametrize(
    "module",
    [
        *PURE_CORES,
        *(
            pytest.param(module, marks=pytest.mark.xfail(strict=True, reason=reason))
            for module, reason in KNOWN_IMPURE.items()
        ),
    ],
)
def test_a_pure_core_imports_no_io_library(module: str, all_cores_clean: bool) -> None:
    if all_cores_clean and module in PURE_CORES:
        return
    assert io_loaded_by(module) == [], f"import {module} loads them"


def test_the_probe_sees_an_io_library() -> None:
    assert io_loaded_by("accord.ledger.store") == ["sqlalchemy", "sqlmodel"]
    assert io_loaded_by(*PURE_CORES[:3], "accord.ledger.store", *PURE_CORES[3:]) == [
        "sqlalchemy",
        "sqlmodel",
    ]
