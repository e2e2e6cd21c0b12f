"""Tampering with the stored log, continued (see test_tamper.py and tamper.py): rows deleted,
renumbered or inserted, tree nodes changed or deleted, checkpoints and the head altered. Every
one of these seeded mutations is caught, at its exact (step, entry).
"""

from __future__ import annotations

import sqlite3

import pytest

from tests.ledger.tamper import (
    ROW_KINDS,
    Corpus,
    N,
    Pristine,
    assert_caught_where_expected,
    set_data,
)
from tests.ledger.warm_lab import WarmLab

# The lab (`lab`, tests/ledger/conftest.py) resets one scratch copy in place, and signatures
# that verified once are remembered (tests/ledger/warm_lab.py): the same verifications,
# without their repeated costs.
pytestmark = pytest.mark.usefixtures("remembered_signatures")


def test_each_run_starts_from_the_pristine_log(pristine: Pristine, lab: WarmLab) -> None:
    """The scratch copy is reset page for page: no mutation leaks into the next case."""
    assert lab.scratch.pristine.serialize() == pristine.image
    clean = lab.scratch.pristine_dump()

    def wreck(db: sqlite3.Connection) -> None:
        db.execute("DELETE FROM ledger_entries WHERE idx = 3")
        db.execute("UPDATE ledger_tiles SET hashes = x'00'")
        db.execute("DELETE FROM ledger_checkpoints WHERE size = 50")
        db.execute("UPDATE ledger_head SET size = 7")
        set_data(db, N - 1, b"junk")

    assert not lab.run(wreck).ok
    assert lab.scratch.dump() != clean
    assert lab.run(lambda _db: None).ok
    assert lab.scratch.dump() == clean


@pytest.mark.parametrize("kind", ROW_KINDS)
def test_every_mutation_is_caught_at_the_right_step_and_entry(corpus: Corpus, kind: str) -> None:
    assert_caught_where_expected(corpus, kind)
