"""Fixtures every test folder may use. Helpers that are not fixtures live in modules beside
this one (`tests.accord_cli`, `tests.serving`, `tests.stand_in`, `tests.specs`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.devnet import find_free_port
from tests.accord_cli import AccordCli

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


@pytest.fixture
def accord(tmp_path: Path) -> Iterator[AccordCli]:
    """`accord` in a subprocess with its own home and devnet port; the devnet, if the test
    started one, is stopped afterwards."""
    cli = AccordCli(tmp_path / "home", find_free_port())
    try:
        yield cli
    finally:
        cli.run("devnet", "down", check=None)
