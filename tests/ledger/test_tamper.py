"""Tampering with the stored log: every mutation is caught, at the right step and entry.

The requirement: "any byte changed, any entry deleted, inserted or reordered in the stored log
makes `ledger verify` fail at the right step and entry (at least 1,000 random mutations, all
caught)".

One SQLite log of 300 entries from 5 actors (random actor per entry, appended in random
batches), with operator checkpoints at sizes 50, 128, 200 and 300, is built once. Each mutation
is applied with SQL (stdlib sqlite3, values bound as BLOBs) to a fresh copy of that file, then
`verify_log` runs offline (steps 5 and 6 need a chain and are tested in test_verify.py). The
mutations come from `random.Random(SEED)`, so every failure names a reproducible case.

Mutation classes, how many of each, and what the checklist must report (N = 300):

=============================  =====  ==================================================
class                          count  expected (step, entry)
=============================  =====  ==================================================
entry_byte                       400  (1, k): one byte of entry k's data, any position,
                                      any other value; it no longer parses or verifies
entry_delete                      80  (3, k): row k deleted, the rest left where they are
entry_delete_renumber             60  (3, k): row k deleted, later rows moved down one,
                                      the head still counts N
entry_delete_renumber_head        80  (3, k): the same with the head set to N - 1 (k < N-1;
                                      k = N - 1 is a clean cut, see test_verify.py)
entry_insert                      60  (3, k): a validly signed entry of a fresh actor
                                      inserted at k, later rows moved up, the head still
                                      counts N
entry_insert_head                 80  (3, k): the same with the head set to N + 1 (0<=k<=N)
entry_swap                       140  rows i < j exchanged (half of them neighbours):
                                      (2, p) at the first index p whose actor's seq does
                                      not grow, else (3, i); see `_swap_expectation`
node_flip                        100  (3, first leaf of the node): one byte of a stored
                                      tree node (leaf hash or interior) xor-ed
node_delete                       40  (3, first leaf of the node): a node row deleted
checkpoint_data_byte              60  (4, None): one byte of a checkpoint's signed data
checkpoint_root_column            20  (3, size - 1): one byte of a checkpoint's root column
checkpoint_size_column            20  (3, s - 1), or (3, N) for s > N: its size column set
                                      to another size s
head_size                         10  (3, min(s, N)): the head's count set to s != N
=============================  =====  ==================================================
total                           1150

Why the swap expectation is not simply "step 2 at j if same actor, else step 3 at i": after
exchanging entries i < j, entry i carries the later seq of its actor, so the first violation is
at the first index after i where that actor appears again, which can be before j; with two
different actors, the actor now at i fails at its next appearance inside (i, j), and the actor
now at j fails at j if it appeared inside (i, j). Only when neither actor appears strictly
between i and j do the seqs still grow, and then step 3 finds entry i's leaf hash disagreeing
with the stored tree. `_swap_expectation` replays exactly that over the (actor, seq) columns.

Besides "all caught" (every one of the 1150 yields verdict FAIL) each class asserts the exact
(step, entry) of every mutation: the stored leaf hashes are compared before the entry count,
so renumbered rows are named at entry k, not at the end of the log. Targeted tests below cover
base64url aliases in signatures (one text form per signature), the projection columns, and a
TEXT-typed data cell (reported, not raised).
"""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from ledger.checkpoint import take_checkpoint
from ledger.events import Entry, make_entry
from ledger.signing import Ed25519Signer
from ledger.store import NODE_INDEX_BITS, LogStore, make_engine
from ledger.verify import VerificationReport, verify_log
from tests.ledger.conftest import LOG_ID, START, EntryMaker, signer_from

SEED = 20261129
N = 300
CHECKPOINT_SIZES = (50, 128, 200, 300)
COUNTS = {
    "entry_byte": 400,
    "entry_delete": 80,
    "entry_delete_renumber": 60,
    "entry_delete_renumber_head": 80,
    "entry_insert": 60,
    "entry_insert_head": 80,
    "entry_swap": 140,
    "node_flip": 100,
    "node_delete": 40,
    "checkpoint_data_byte": 60,
    "checkpoint_root_column": 20,
    "checkpoint_size_column": 20,
    "head_size": 10,
}
NODE_MASK = (1 << NODE_INDEX_BITS) - 1

Apply = Callable[[sqlite3.Connection], None]
Expected = tuple[int, int | None]


@dataclass(frozen=True)
class Row:
    """One stored entry of the pristine log."""

    index: int
    actor: str
    seq: int
    data: bytes


@dataclass(frozen=True)
class Pristine:
    path: Path
    image: bytes
    operator: Ed25519Signer
    rows: list[Row]
    nodes: list[tuple[int, bytes]]
    checkpoints: dict[int, tuple[bytes, bytes]]  # size -> (root, data)
    foreign: list[Entry]


@dataclass(frozen=True)
class Mutation:
    kind: str
    what: str
    apply: Apply
    expected: Expected


@dataclass(frozen=True)
class Outcome:
    mutation: Mutation
    report: VerificationReport

    @property
    def got(self) -> Expected | None:
        failure = self.report.first_failure
        return None if failure is None else (failure.number, failure.entry)


# -- the pristine log -------------------------------------------------------------------------


def _build(directory: Path) -> Pristine:
    operator = signer_from("operator")
    actors = [signer_from(f"actor-{i}") for i in range(5)]
    maker = EntryMaker(actors)
    rng = random.Random(SEED)
    path = directory / "pristine.db"
    engine = make_engine(f"sqlite:///{path}")
    store = LogStore(engine, LOG_ID)
    marks = list(CHECKPOINT_SIZES)
    while store.size() < N:
        room = min(rng.choice((1, 2, 3, 7)), N - store.size(), marks[0] - store.size())
        store.append_batch(maker.many(room, lambda _i: rng.randrange(len(actors))))
        if store.size() == marks[0]:
            take_checkpoint(store, operator, START + timedelta(hours=len(marks)))
            marks.pop(0)
    rows = []
    for stored in store.entries():
        entry = Entry.from_bytes(stored.data)
        rows.append(Row(stored.index, entry.event.actor, entry.event.seq, stored.data))
    nodes = list(store.stored_nodes())
    checkpoints = {c.size: (c.root, c.data) for c in store.checkpoints()}
    assert verify_log(store, operator.did, None).ok
    engine.dispose()
    with closing(sqlite3.connect(path)) as db:  # one self-contained file, no WAL beside it
        db.execute("PRAGMA journal_mode=DELETE")
    foreign = [
        make_entry(signer_from(f"stranger-{i}"), kind="note.added", seq=i, at=START)
        for i in range(3)
    ]
    return Pristine(path, path.read_bytes(), operator, rows, nodes, checkpoints, foreign)


# -- mutations --------------------------------------------------------------------------------


def _node_start(key: int) -> int:
    return (key & NODE_MASK) << (key >> NODE_INDEX_BITS)


def _swap_expectation(rows: list[Row], i: int, j: int) -> Expected:
    """Replays step 2 over the log with rows i and j exchanged; step 3 at i if seqs still grow."""
    order = list(range(len(rows)))
    order[i], order[j] = order[j], order[i]
    last: dict[str, int] = {}
    for position, source in enumerate(order):
        actor, seq = rows[source].actor, rows[source].seq
        if seq <= last.get(actor, -1):
            return (2, position)
        last[actor] = seq
    return (3, i)


def _set_data(db: sqlite3.Connection, index: int, data: bytes) -> None:
    db.execute("UPDATE ledger_entries SET data = ? WHERE idx = ?", (data, index))


def _shift_down_after(db: sqlite3.Connection, index: int) -> None:
    """Rows above `index` move down by one (in two steps: the primary key stays unique)."""
    db.execute("UPDATE ledger_entries SET idx = -idx WHERE idx > ?", (index,))
    db.execute("UPDATE ledger_entries SET idx = -idx - 1 WHERE idx < 0")


def _shift_up_from(db: sqlite3.Connection, index: int) -> None:
    db.execute("UPDATE ledger_entries SET idx = -idx - 2 WHERE idx >= ?", (index,))
    db.execute("UPDATE ledger_entries SET idx = -idx - 1 WHERE idx < 0")


def _insert_entry(db: sqlite3.Connection, index: int, entry: Entry) -> None:
    event = entry.event
    db.execute(
        "INSERT INTO ledger_entries (idx, actor, seq, kind, subject, at, data) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (index, event.actor, event.seq, event.kind, event.subject, event.at, entry.data),
    )


def _set_head(db: sqlite3.Connection, size: int) -> None:
    db.execute("UPDATE ledger_head SET size = ?", (size,))


def _other_byte(rng: random.Random, old: int) -> int:
    return (old + rng.randrange(1, 256)) % 256


def _flip(rng: random.Random, value: bytes) -> tuple[bytes, int, int]:
    """`value` with one byte changed to any other value; also the position and new byte."""
    position = rng.randrange(len(value))
    new = _other_byte(rng, value[position])
    return value[:position] + bytes([new]) + value[position + 1 :], position, new


def _mutations(p: Pristine, rng: random.Random) -> Iterator[Mutation]:
    rows = p.rows
    for _ in range(COUNTS["entry_byte"]):
        k = rng.randrange(N)
        data, position, new = _flip(rng, rows[k].data)
        yield Mutation(
            "entry_byte",
            f"entry {k} byte {position} := {new:#04x}",
            lambda db, k=k, data=data: _set_data(db, k, data),
            (1, k),
        )
    for _ in range(COUNTS["entry_delete"]):
        k = rng.randrange(N)
        yield Mutation(
            "entry_delete",
            f"delete entry {k}",
            lambda db, k=k: db.execute("DELETE FROM ledger_entries WHERE idx = ?", (k,)),
            (3, k),
        )
    for kind, head, top in (
        ("entry_delete_renumber", False, N),
        ("entry_delete_renumber_head", True, N - 1),
    ):
        for _ in range(COUNTS[kind]):
            k = rng.randrange(top)

            def apply(db: sqlite3.Connection, k: int = k, head: bool = head) -> None:
                db.execute("DELETE FROM ledger_entries WHERE idx = ?", (k,))
                _shift_down_after(db, k)
                if head:
                    _set_head(db, N - 1)

            yield Mutation(kind, f"delete entry {k} and renumber (head: {head})", apply, (3, k))
    for kind, head in (("entry_insert", False), ("entry_insert_head", True)):
        for _ in range(COUNTS[kind]):
            k = rng.randrange(N + 1)
            foreign = rng.choice(p.foreign)

            def apply(
                db: sqlite3.Connection, k: int = k, foreign: Entry = foreign, head: bool = head
            ) -> None:
                _shift_up_from(db, k)
                _insert_entry(db, k, foreign)
                if head:
                    _set_head(db, N + 1)

            yield Mutation(kind, f"insert a foreign entry at {k} (head: {head})", apply, (3, k))
    for number in range(COUNTS["entry_swap"]):
        i = rng.randrange(N - 1)
        j = i + 1 if number % 2 else rng.randrange(i + 1, N)

        def apply(db: sqlite3.Connection, i: int = i, j: int = j) -> None:
            # Whole rows, indexed columns included (swapping only the data is caught at
            # step 1 already: the columns then disagree with the signed entry).
            db.execute("UPDATE ledger_entries SET idx = -1 WHERE idx = ?", (i,))
            db.execute("UPDATE ledger_entries SET idx = ? WHERE idx = ?", (i, j))
            db.execute("UPDATE ledger_entries SET idx = ? WHERE idx = -1", (j,))

        yield Mutation(
            "entry_swap", f"swap entries {i} and {j}", apply, _swap_expectation(rows, i, j)
        )
    for _ in range(COUNTS["node_flip"]):
        key, value = rng.choice(p.nodes)
        flipped, position, new = _flip(rng, value)
        yield Mutation(
            "node_flip",
            f"node {key:#x} byte {position} := {new:#04x}",
            lambda db, key=key, flipped=flipped: db.execute(
                "UPDATE ledger_nodes SET hash = ? WHERE id = ?", (flipped, key)
            ),
            (3, _node_start(key)),
        )
    for _ in range(COUNTS["node_delete"]):
        key, _value = rng.choice(p.nodes)
        yield Mutation(
            "node_delete",
            f"delete node {key:#x}",
            lambda db, key=key: db.execute("DELETE FROM ledger_nodes WHERE id = ?", (key,)),
            (3, _node_start(key)),
        )
    for _ in range(COUNTS["checkpoint_data_byte"]):
        size = rng.choice(CHECKPOINT_SIZES)
        data, position, new = _flip(rng, p.checkpoints[size][1])
        yield Mutation(
            "checkpoint_data_byte",
            f"checkpoint {size} data byte {position} := {new:#04x}",
            lambda db, size=size, data=data: db.execute(
                "UPDATE ledger_checkpoints SET data = ? WHERE size = ?", (data, size)
            ),
            (4, None),
        )
    for _ in range(COUNTS["checkpoint_root_column"]):
        size = rng.choice(CHECKPOINT_SIZES)
        root, position, new = _flip(rng, p.checkpoints[size][0])
        yield Mutation(
            "checkpoint_root_column",
            f"checkpoint {size} root byte {position} := {new:#04x}",
            lambda db, size=size, root=root: db.execute(
                "UPDATE ledger_checkpoints SET root = ? WHERE size = ?", (root, size)
            ),
            (3, size - 1),
        )
    for _ in range(COUNTS["checkpoint_size_column"]):
        size = rng.choice(CHECKPOINT_SIZES)
        other = rng.choice([s for s in range(N + 20) if s not in CHECKPOINT_SIZES])
        yield Mutation(
            "checkpoint_size_column",
            f"checkpoint {size} moved to size {other}",
            lambda db, size=size, other=other: db.execute(
                "UPDATE ledger_checkpoints SET size = ? WHERE size = ?", (other, size)
            ),
            (3, N) if other > N else (3, max(other - 1, 0)),
        )
    for _ in range(COUNTS["head_size"]):
        size = rng.choice([s for s in range(N + 20) if s != N])
        yield Mutation(
            "head_size",
            f"head size := {size}",
            lambda db, size=size: _set_head(db, size),
            (3, min(size, N)),
        )


class Lab:
    """Restores the pristine file, applies one mutation, verifies; one engine, re-pooled."""

    def __init__(self, pristine: Pristine, directory: Path) -> None:
        self.pristine = pristine
        self.path = directory / "work.db"
        self.path.write_bytes(pristine.image)
        self.engine = make_engine(f"sqlite:///{self.path}")

    def run(self, apply: Apply) -> VerificationReport:
        self.engine.dispose()  # no connection may outlive the file it opened
        for suffix in ("-wal", "-shm", "-journal"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self.path.write_bytes(self.pristine.image)
        with closing(sqlite3.connect(self.path, isolation_level=None)) as db:
            db.execute("BEGIN")
            apply(db)
            db.execute("COMMIT")
        # a fresh LogStore each time, as `ledger verify` would open: no cache from another run
        return verify_log(LogStore(self.engine, LOG_ID), self.pristine.operator.did, None)

    def close(self) -> None:
        self.engine.dispose()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    return _build(tmp_path_factory.mktemp("tamper"))


@pytest.fixture(scope="module")
def lab(pristine: Pristine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(pristine, tmp_path_factory.mktemp("lab"))
    yield lab
    lab.close()


@pytest.fixture(scope="module")
def outcomes(pristine: Pristine, lab: Lab) -> dict[str, list[Outcome]]:
    assert lab.run(lambda _db: None).ok  # the restored copy itself verifies
    by_kind: dict[str, list[Outcome]] = {kind: [] for kind in COUNTS}
    for mutation in _mutations(pristine, random.Random(SEED)):
        by_kind[mutation.kind].append(Outcome(mutation, lab.run(mutation.apply)))
    return by_kind


# -- the random mutations ---------------------------------------------------------------------


def test_at_least_1000_random_mutations_all_caught(outcomes: dict[str, list[Outcome]]) -> None:
    assert {kind: len(found) for kind, found in outcomes.items()} == COUNTS
    assert sum(COUNTS.values()) >= 1000
    missed = [o.mutation.what for found in outcomes.values() for o in found if o.report.ok]
    assert not missed, f"{len(missed)} mutations verified as PASS: {missed[:10]}"
    # a failing report always names a failed step
    assert all(o.got is not None for found in outcomes.values() for o in found)


def test_swaps_exercise_both_expectations(outcomes: dict[str, list[Outcome]]) -> None:
    """The seeded swaps include step-2 and step-3 cases, same-actor and two-actor ones."""
    steps = Counter(o.mutation.expected[0] for o in outcomes["entry_swap"])
    assert steps[2] >= 20 and steps[3] >= 20, steps


@pytest.mark.parametrize("kind", list(COUNTS))
def test_each_mutation_fails_at_the_right_step_and_entry(
    outcomes: dict[str, list[Outcome]], kind: str
) -> None:
    wrong = [
        f"{o.mutation.what}: expected {o.mutation.expected}, got {o.got}"
        for o in outcomes[kind]
        if o.got != o.mutation.expected
    ]
    assert not wrong, f"{len(wrong)} of {len(outcomes[kind])} misreported, e.g. {wrong[:5]}"


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
    for k in (0, 150, 299):
        data = pristine.rows[k].data
        for position, new in _sig_aliases(data):
            changed = data[:position] + bytes([new]) + data[position + 1 :]
            report = lab.run(lambda db, k=k, changed=changed: _set_data(db, k, changed))
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
    data = pristine.rows[150].data
    for position, new in _sig_aliases(data)[:8]:
        changed = data[:position] + bytes([new]) + data[position + 1 :]
        report = lab.run(lambda db, changed=changed: _set_data(db, 150, changed))
        failure = report.first_failure
        assert failure is not None and failure.entry == 150


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
        _set_data(db, 40, rows[200].data)
        _set_data(db, 200, rows[40].data)

    failure = lab.run(apply).first_failure
    assert failure is not None and (failure.number, failure.entry) == (1, 40)


def test_text_typed_entry_data_is_reported_not_raised(lab: Lab) -> None:
    report = lab.run(
        lambda db: db.execute("UPDATE ledger_entries SET data = 'not a blob' WHERE idx = 5")
    )
    failure = report.first_failure
    assert failure is not None and (failure.number, failure.entry) == (1, 5)
