"""Fixtures every test folder may use. Helpers that are not fixtures live in modules beside
this one (`tests.accord_cli`, `tests.serving`, `tests.stand_in`, `tests.specs`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accord._process import prepare_process
from accord.ledger.devnet import find_free_port
from tests.accord_cli import AccordCli

# A test clock (ACCORD_TEST_CLOCK) is refused outside a test: this says the tests are one, for
# them and for every process they start with this environment (accord.ledger.settings).
os.environ["ACCORD_ALLOW_TEST_CLOCK"] = "1"
prepare_process()  # the tests' process is prepared as the command's and the service's are
# (the recursion limit kept: a hostile deep JSON answer is a RecursionError, not a SIGSEGV)

# shap, the tests' cross-check of exact Shapley values, runs its explainers through numba, whose
# first call in a process compiled them for 12.5 s; run as plain Python they take milliseconds
# at the sizes the tests use (n <= 10) and compute the same values. Read when numba is imported,
# which only shap does. The benchmarks leave it unset: they time shap compiled.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")

REPOSITORY = Path(__file__).resolve().parent.parent
PACKAGES = ("accord", "api", "audit", "coordinator", "identity", "ledger", "market")


def pytest_configure(config: pytest.Config) -> None:
    """Compile accord's packages to bytecode once, in the controller before any xdist worker
    starts. With PYTHONDONTWRITEBYTECODE set Python never caches them itself, and every
    `accord` a test runs as a subprocess (hundreds per run) would compile some 80 modules
    from source again. Up-to-date files are skipped; a folder it cannot write is no error."""
    if hasattr(config, "workerinput"):
        return
    import compileall

    for package in PACKAGES:
        compileall.compile_dir(REPOSITORY / package, quiet=2)


# -- how xdist spreads the suite (`make test` runs `-n 3 --dist loadfile`) ----------------------

SPREAD_PER_TEST = (
    "tests/api/test_cli.py::",
    "tests/api/test_market_cli.py::",
    "tests/ledger/test_devnet_record.py::",
    "tests/market/test_settlement.py::",
    "tests/integration/test_escrow_chain.py::test_state_machine_with_crashes[",
)
"""Tests that are each a unit of work of their own rather than their file's: every one builds
its own home and devnet (no module-scoped fixture), and a file of them is minutes of work that
would hold one worker while the others finish."""

SLOWEST_FIRST = (
    "tests/api/test_market_cli.py::test_post_bid_reveal_award_and_bad_input",
    "tests/api/test_coordinator_cli.py::",
    "tests/integration/test_escrow_chain.py::test_state_machine_with_crashes[",
    "tests/market/test_settlement.py::test_a_transaction_still_unmined_after_a_restart",
    "tests/api/test_cli.py::test_show_proof_and_bad_input",
    "tests/ledger/test_devnet_record.py::",
    "tests/market/test_settlement.py::",
    "tests/api/test_cli.py::",
    "tests/api/test_market_cli.py::",
)
"""The slowest tests (from `--durations`), handed out first so that none of them starts last
and runs alone at the end. Only the order changes: a test missing here runs all the same."""


def _rank(nodeid: str) -> int:
    return next(
        (rank for rank, prefix in enumerate(SLOWEST_FIRST) if nodeid.startswith(prefix)),
        len(SLOWEST_FIRST),
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The SLOWEST_FIRST tests first, the rest in their usual order (a stable sort, so a file's
    tests stay together and share their module fixtures)."""
    items.sort(key=lambda item: _rank(item.nodeid))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With `--dist loadfile`: a file per worker, except SPREAD_PER_TEST (one test per unit),
    units handed out in collection order (slowest first) rather than largest file first."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SpreadSlowTests(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(SPREAD_PER_TEST):
                return nodeid
            return str(super()._split_scope(nodeid))

    config.option.loadscopereorder = False
    return SpreadSlowTests(config, log)


@pytest.fixture(scope="module")
def remembered_signatures() -> Iterator[None]:
    """Within the test module that asks for it, a signature that verified once is not sent to
    libsodium again (tests/ledger/warm_lab.py): for the tampering labs, which verify the same
    log hundreds of times. Mark a module `pytest.mark.usefixtures("remembered_signatures")`."""
    from tests.ledger.warm_lab import remembered_signature_checks

    with remembered_signature_checks():
        yield


@pytest.fixture
def accord(tmp_path: Path) -> Iterator[AccordCli]:
    """`accord` in a subprocess with its own home and devnet port; the devnet, if the test
    started one, is stopped afterwards."""
    cli = AccordCli(tmp_path / "home", find_free_port())
    try:
        yield cli
    finally:
        cli.run("devnet", "down", check=None)
