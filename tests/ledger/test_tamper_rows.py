"""Tampering with the stored log, continued (see test_tamper.py and tamper.py): rows deleted,
renumbered or inserted, tree nodes changed or deleted, checkpoints and the head altered. Every
one of these seeded mutations is caught, at its exact (step, entry).
"""

from __future__ import annotations

import pytest

from tests.ledger.tamper import ROW_KINDS, Corpus, assert_caught_where_expected


@pytest.mark.parametrize("kind", ROW_KINDS)
def test_every_mutation_is_caught_at_the_right_step_and_entry(corpus: Corpus, kind: str) -> None:
    assert_caught_where_expected(corpus, kind)
