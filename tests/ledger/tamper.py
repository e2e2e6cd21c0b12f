"""The tampering lab: a pristine stored log, 1,150 seeded random mutations of it, and a `Lab`
that applies one to a fresh copy and verifies. The tests are test_tamper.py (mutations of the
entries' bytes and order, and targeted gaps) and test_tamper_rows.py (rows deleted and
inserted, tree nodes, checkpoints, the head): two files, so two pytest workers share the
work (`--dist loadfile`).

The requirement: "any byte changed, any entry deleted, inserted or reordered in the stored log
makes `ledger verify` fail at the right step and entry (at least 1,000 random mutations, all
caught)".

One SQLite log of 160 entries from 5 actors (random actor per entry, appended in random
batches), with operator checkpoints at sizes 50, 128 (a complete tree), 150 and 160 (the head),
is built once. Each mutation is applied with SQL (stdlib sqlite3, values bound as BLOBs) to a
fresh copy of that file, then `verify_log` runs offline (steps 5 and 6 need a chain and are
tested in test_verify.py). The mutations come from `random.Random(SEED)`, so every failure
names a reproducible case.

The log's size sets what each of the 1,150 verifications costs, not what they cover: a tree of
160 leaves has 8 levels, its left subtree complete and its right one not, and every class below
lands on every level. (The lab used 300 entries until the suite's time was cut: 83 s of CPU for
both files, 51 s at 160.)

Mutation classes, how many of each, and what the checklist must report (N = 160):

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
node_flip                        100  (3, first leaf of the hash): one byte of a stored
                                      tile row (a leaf hash or a subtree inside it) changed
node_delete                       40  (3, first leaf of the tile): a tile row deleted
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
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from accord.ledger.checkpoint import take_checkpoint
from accord.ledger.database import make_engine
from accord.ledger.events import Entry, make_entry
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from accord.ledger.tiles import key_tile, row_node
from accord.ledger.verify import VerificationReport, verify_log
from tests.ledger.conftest import LOG_ID, START, EntryMaker, signer_from

SEED = 20261129
N = 160
CHECKPOINT_SIZES = (50, 128, 150, 160)
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

Apply = Callable[[sqlite3.Connection], None]
Expected = tuple[int, int | None]


ENTRY_KINDS = ("entry_byte", "entry_swap")
"""The classes test_tamper.py runs: entries' bytes changed and entries exchanged."""
ROW_KINDS = tuple(kind for kind in COUNTS if kind not in ENTRY_KINDS)
"""The classes test_tamper_rows.py runs: rows deleted or inserted, nodes, checkpoints, head."""


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
    tiles: list[tuple[int, bytes]]  # stored tile rows: key, row
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


def build_pristine(directory: Path) -> Pristine:
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
    tiles = list(store.stored_tiles())
    checkpoints = {c.size: (c.root, c.data) for c in store.checkpoints()}
    assert verify_log(store, operator.did, None).ok
    engine.dispose()
    with closing(sqlite3.connect(path)) as db:  # one self-contained file, no WAL beside it
        db.execute("PRAGMA journal_mode=DELETE")
    foreign = [
        make_entry(signer_from(f"stranger-{i}"), kind="note.added", seq=i, at=START)
        for i in range(3)
    ]
    return Pristine(path, path.read_bytes(), operator, rows, tiles, checkpoints, foreign)


# -- mutations --------------------------------------------------------------------------------


def _hash_start(key: int, byte: int) -> int:
    """The first entry under the hash holding byte `byte` of the stored tile row `key`."""
    tile = key_tile(key)
    level, position = row_node(tile.level or 0, tile.index, tile.width, byte // 32)
    return position << level


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


def set_data(db: sqlite3.Connection, index: int, data: bytes) -> None:
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


def mutations(p: Pristine, rng: random.Random) -> Iterator[Mutation]:
    rows = p.rows
    for _ in range(COUNTS["entry_byte"]):
        k = rng.randrange(N)
        data, position, new = _flip(rng, rows[k].data)
        yield Mutation(
            "entry_byte",
            f"entry {k} byte {position} := {new:#04x}",
            lambda db, k=k, data=data: set_data(db, k, data),
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
        key, value = rng.choice(p.tiles)
        flipped, position, new = _flip(rng, value)
        yield Mutation(
            "node_flip",
            f"tile row {key:#x} byte {position} := {new:#04x}",
            lambda db, key=key, flipped=flipped: db.execute(
                "UPDATE ledger_tiles SET hashes = ? WHERE id = ?", (flipped, key)
            ),
            (3, _hash_start(key, position)),
        )
    for _ in range(COUNTS["node_delete"]):
        key, _value = rng.choice(p.tiles)
        yield Mutation(
            "node_delete",
            f"delete tile row {key:#x}",
            lambda db, key=key: db.execute("DELETE FROM ledger_tiles WHERE id = ?", (key,)),
            (3, _hash_start(key, 0)),
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
            db.execute("PRAGMA synchronous=OFF")  # a scratch copy: no fsync per mutation
            db.execute("BEGIN")
            apply(db)
            db.execute("COMMIT")
        # a fresh LogStore each time, as `ledger verify` would open: no cache from another run
        return verify_log(LogStore(self.engine, LOG_ID), self.pristine.operator.did, None)

    def close(self) -> None:
        self.engine.dispose()


class Corpus:
    """The 1,150 seeded mutations of `pristine`, run through `lab` one class at a time, when a
    test first asks for that class (so no single fixture runs them all)."""

    def __init__(self, pristine: Pristine, lab: Lab) -> None:
        assert lab.run(lambda _db: None).ok  # the restored copy itself verifies
        self.lab = lab
        # drawn from the one seeded generator every time: a class's mutations are the same
        # whichever file runs it
        self.mutations: dict[str, list[Mutation]] = {kind: [] for kind in COUNTS}
        for mutation in mutations(pristine, random.Random(SEED)):
            self.mutations[mutation.kind].append(mutation)
        self.done: dict[str, list[Outcome]] = {}

    def outcomes(self, kind: str) -> list[Outcome]:
        """Each mutation of class `kind` applied to a fresh copy and verified."""
        if kind not in self.done:
            self.done[kind] = [Outcome(m, self.lab.run(m.apply)) for m in self.mutations[kind]]
        return self.done[kind]


def assert_caught_where_expected(corpus: Corpus, kind: str) -> None:
    """Every mutation of class `kind` ran, verified as FAIL, and failed at its expected
    (step, entry)."""
    found = corpus.outcomes(kind)
    assert len(found) == COUNTS[kind]
    missed = [o.mutation.what for o in found if o.report.ok]
    assert not missed, f"{len(missed)} mutations verified as PASS: {missed[:10]}"
    wrong = [
        f"{o.mutation.what}: expected {o.mutation.expected}, got {o.got}"
        for o in found
        if o.got != o.mutation.expected
    ]
    assert not wrong, f"{len(wrong)} of {len(found)} misreported, e.g. {wrong[:5]}"
