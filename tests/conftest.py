"""Fixtures every test folder may use. Helpers that are not fixtures live in modules beside
this one (`tests.accord_cli`, `tests.serving`, `tests.stand_in`, `tests.specs`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.devnet import find_free_port
from tests.accord_cli import AccordCli


@pytest.fixture
def accord(tmp_path: Path) -> Iterator[AccordCli]:
    """`accord` in a subprocess with its own home and devnet port; the devnet, if the test
    started one, is stopped afterwards."""
    cli = AccordCli(tmp_path / "home", find_free_port())
    try:
        yield cli
    finally:
        cli.run("devnet", "down", check=None)
