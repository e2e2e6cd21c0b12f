"""Tampering with the stored log: every mutation is caught, at the right step and entry.

The requirement: "any byte changed, any entry deleted, inserted or reordered in the stored log
makes `ledger verify` fail at the right step and entry (at least 1,000 random mutations, all
caught)". The lab, the seeded mutations and the table of their classes are in
tests/ledger/tamper.py. This file runs the classes that change the entries themselves (a byte
of an entry's data, two entries exchanged) and the targeted gaps; test_tamper_rows.py runs
the others. Together: all 1,150, each reported at its exact (step, entry).
"""

from __future__ import annotations

import sqlite3
from collections import Counter

import pytest

from tests.ledger.tamper import (
    COUNTS,
    ENTRY_KINDS,
    ROW_KINDS,
    Corpus,
    Lab,
    N,
    Pristine,
    assert_caught_where_expected,
    set_data,
)

# The lab (`lab`, tests/ledger/conftest.py) resets one scratch copy in place, and signatures
# that verified once are remembered (tests/ledger/warm_lab.py): the same verifications,
# without their repeated costs.
pytestmark = pytest.mark.usefixtures("remembered_signatures")


# -- the random mutations ---------------------------------------------------------------------


def test_the_two_files_run_every_class_of_at_least_1000_mutations() -> None:
    assert set(ENTRY_KINDS).isdisjoint(ROW_KINDS)
    assert sorted(ENTRY_KINDS + ROW_KINDS) == sorted(COUNTS)
    assert sum(COUNTS.values()) >= 1000


@pytest.mark.parametrize("kind", ENTRY_KINDS)
def test_every_mutation_is_caught_at_the_right_step_and_entry(corpus: Corpus, kind: str) -> None:
    assert_caught_where_expected(corpus, kind)


def test_swaps_exercise_both_expectations(corpus: Corpus) -> None:
    """The seeded swaps include step-2 and step-3 cases, same-actor and two-actor ones."""
    steps = Counter(o.mutation.expected[0] for o in corpus.outcomes("entry_swap"))
    assert steps[2] >= 20 and steps[3] >= 20, steps


# -- targeted gaps ----------------------------------------------------------------------------


def _sig_aliases(data: bytes) -> list[tuple[int, int]]:
    """(position, byte) changes of an entry/checkpoint's base64url sig that decode the same."""
    start = data.rindex(b'"sig":"') + len(b'"sig":"')
    end = data.index(b'"', start)
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    changes = []
    last = end - 1  # 64 bytes -> 86 characters: the last one carries 4 unused bits
    value = alphabet.index(data[last])
    changes += [(last, alphabet[v]) for v in range(64) if v >> 4 == value >> 4 and v != value]
    for position in range(start, end):  # '-' and '+', '_' and '/' decode alike
        alias = {ord("-"): ord("+"), ord("_"): ord("/")}.get(data[position])
        if alias is not None:
            changes.append((position, alias))
    return changes


def test_sig_encoding_aliases_of_an_entry_fail_step_1(pristine: Pristine, lab: Lab) -> None:
    checked = 0
    for k in (0, N // 2, N - 1):
        data = pristine.rows[k].data
        for position, new in _sig_aliases(data):
            changed = data[:position] + bytes([new]) + data[position + 1 :]
            report = lab.run(lambda db, k=k, changed=changed: set_data(db, k, changed))
            failure = report.first_failure
            assert failure is not None
            assert (failure.number, failure.entry) == (1, k), (k, position, new)
            checked += 1
    assert checked >= 45


def test_sig_encoding_aliases_of_a_checkpoint_fail_step_4(pristine: Pristine, lab: Lab) -> None:
    data = pristine.checkpoints[128][1]
    aliases = _sig_aliases(data)
    assert aliases
    for position, new in aliases:
        changed = data[:position] + bytes([new]) + data[position + 1 :]
        report = lab.run(
            lambda db, changed=changed: db.execute(
                "UPDATE ledger_checkpoints SET data = ? WHERE size = 128", (changed,)
            )
        )
        assert not report.ok, (position, new)
        failure = report.first_failure
        assert failure is not None and (failure.number, failure.entry) == (4, None)


def test_sig_encoding_aliases_of_an_entry_are_caught(pristine: Pristine, lab: Lab) -> None:
    """Today they are caught by step 3 (the leaf hash), at the right entry."""
    data = pristine.rows[N // 2].data
    for position, new in _sig_aliases(data)[:8]:
        changed = data[:position] + bytes([new]) + data[position + 1 :]
        report = lab.run(lambda db, changed=changed: set_data(db, N // 2, changed))
        failure = report.first_failure
        assert failure is not None and failure.entry == N // 2


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("actor", "did:key:z6MkNotTheActorOfThisEntryAtAll"),
        ("seq", 10**9),
        ("kind", "task.forged"),
        ("subject", "another-task"),
        ("at", "2030-01-01T00:00:00.000Z"),
    ],
)
def test_changed_projection_column_of_an_entry_is_caught(
    lab: Lab, column: str, value: object
) -> None:
    report = lab.run(
        lambda db: db.execute(f"UPDATE ledger_entries SET {column} = ? WHERE idx = 77", (value,))
    )
    failure = report.first_failure
    assert failure is not None and (failure.number, failure.entry) == (1, 77)


def test_swapping_only_the_data_of_two_entries_fails_step_1(pristine: Pristine, lab: Lab) -> None:
    rows = pristine.rows

    def apply(db: sqlite3.Connection) -> None:
        set_data(db, 40, rows[N - 20].data)
        set_data(db, N - 20, rows[40].data)

    failure = lab.run(apply).first_failure
    assert failure is not None and (failure.number, failure.entry) == (1, 40)


def test_text_typed_entry_data_is_reported_not_raised(lab: Lab) -> None:
    report = lab.run(
        lambda db: db.execute("UPDATE ledger_entries SET data = 'not a blob' WHERE idx = 5")
    )
    failure = report.first_failure
    assert failure is not None and (failure.number, failure.entry) == (1, 5)
