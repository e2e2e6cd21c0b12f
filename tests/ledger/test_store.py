"""LogStore on both backends (SQLite file, PostgreSQL schema): see tests/ledger/conftest.py.

* appends hand back their indices, and what is read back is what was appended;
* every root, inclusion proof and consistency proof the store serves from its stored nodes
  equals `accord.ledger.merkle` over the same leaves, and verifies (every size 0..300 for roots,
  every index / every old size for a spread of sizes up to 300);
* a batch is atomic: a seq that does not grow, or a database failure on its last rows, leaves
  size, root, entries and nodes exactly as they were, and the store keeps working;
* the seq check of one LogStore notices what another LogStore appended to the same database;
* checkpoints are stored idempotently, a different root for a stored size is refused;
* a database holding another log id is refused;
* two threads, each with its own LogStore on the same database, interleave appends safely.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, delete, insert, inspect, update

from accord.ledger import merkle
from accord.ledger.checkpoint import SignedCheckpoint, take_checkpoint
from accord.ledger.database import LedgerTile, driver_mark, make_engine, upsert_sql
from accord.ledger.errors import SequenceError, StoreError
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from accord.ledger.tile_migration import migrate_to_tiles
from accord.ledger.tiles import row_offset, tile_key
from accord.ledger.verify import verify_log
from tests.ledger.conftest import LOG_ID, START, EntryMaker, append_signed, postgres_schema_url
from tests.ledger.old_layout import write_old_log

LOG_SIZE = 300
# Sizes whose every inclusion proof / every consistency proof is compared with the reference:
# powers of two, their neighbours, and a few others, up to the log's size.
FULL_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129)
FULL_SIZES_LARGE = (255, 256, 257, 299, 300)

_TILES = LedgerTile.__table__  # type: ignore[attr-defined]


def leaves_of(store: LogStore) -> list[bytes]:
    return [stored.leaf_hash for stored in store.entries()]


def assert_serves_reference(store: LogStore, leaves: list[bytes]) -> None:
    """Root, every inclusion proof and every consistency proof at the current size."""
    assert store.size() == len(leaves)
    assert store.root() == merkle.root(leaves)
    for index in range(len(leaves)):
        assert store.inclusion_proof(index) == merkle.inclusion_proof(leaves, index)
    for old_size in range(1, len(leaves) + 1):
        assert store.consistency_proof(old_size) == merkle.consistency_proof(leaves, old_size)


def snapshot(store: LogStore, actors: list[Ed25519Signer]) -> dict[str, Any]:
    """Everything an append could change, read back from the database."""
    return {
        "size": store.size(),
        "root": store.root(),
        "entries": [(stored.index, stored.data) for stored in store.entries()],
        "tiles": list(store.stored_tiles()),
        "last_seq": {signer.did: store.last_seq(signer.did) for signer in actors},
    }


# -- appending and reading back ------------------------------------------------------------


def test_empty_log(store: LogStore) -> None:
    assert store.size() == 0
    assert store.root() == merkle.EMPTY_ROOT == store.root(0)
    assert list(store.entries()) == []
    assert list(store.stored_tiles()) == []
    assert store.latest_checkpoint() is None
    assert store.checkpoints() == []
    with pytest.raises(IndexError):
        store.entry(0)
    with pytest.raises(ValueError):
        store.root(1)


def test_append_and_append_batch_return_indices(
    store: LogStore, maker: EntryMaker, actors: list[Ed25519Signer]
) -> None:
    first = maker.one(actors[0])
    assert store.append(first) == 0
    batch = maker.many(3)
    assert store.append_batch(batch) == [1, 2, 3]
    assert store.append_batch([]) == []
    assert store.append(maker.one(actors[4])) == 4
    assert store.size() == 5
    appended = [first, *batch]
    for index, entry in enumerate(appended):
        assert store.entry(index).data == entry.data
    assert [stored.index for stored in store.entries()] == [0, 1, 2, 3, 4]
    assert [stored.data for stored in store.entries(1, 3)] == [e.data for e in batch[:2]]
    # chunked reading gives the same
    assert list(store.entries(chunk=2)) == list(store.entries())
    by_actor = store.find(actor=actors[0].did)
    assert [stored.data for stored in by_actor] == [
        e.data for e in appended if e.event.actor == actors[0].did
    ]
    newest = store.find(actor=actors[0].did, newest_first=True, limit=2)
    assert [stored.index for stored in newest] == [s.index for s in reversed(by_actor)][:2]
    assert store.last_seq(actors[0].did) == max(
        e.event.seq for e in appended if e.event.actor == actors[0].did
    )
    assert store.last_seq("did:key:z6MkNobodyHere") is None
    with pytest.raises(IndexError):
        store.entry(5)


def test_roots_and_proofs_equal_the_reference_and_verify(
    store: LogStore, maker: EntryMaker
) -> None:
    rng = random.Random(9162)
    leaves: list[bytes] = []
    while len(leaves) < LOG_SIZE:
        count = min(rng.choice((1, 1, 1, 2, 3, 5, 8, 13)), LOG_SIZE - len(leaves))
        entries = maker.many(count, lambda _i: rng.randrange(5))
        assert store.append_batch(entries) == list(range(len(leaves), len(leaves) + count))
        leaves.extend(merkle.leaf_hash(entry.data) for entry in entries)
        # the root served while growing, from the frontier just written
        assert store.root() == merkle.root(leaves)
    assert leaves_of(store) == leaves

    roots = [merkle.root(leaves[:size]) for size in range(LOG_SIZE + 1)]
    for size in range(LOG_SIZE + 1):
        assert store.root(size) == roots[size], size

    for size in FULL_SIZES + FULL_SIZES_LARGE:
        prefix = leaves[:size]
        for index in range(size):
            proof = store.inclusion_proof(index, size)
            assert proof == merkle.inclusion_proof(prefix, index), (index, size)
            merkle.verify_inclusion(leaves[index], index, size, proof, roots[size])
    # the default size is the current one
    assert store.inclusion_proof(7) == merkle.inclusion_proof(leaves, 7)

    for new_size in FULL_SIZES + FULL_SIZES_LARGE:
        prefix = leaves[:new_size]
        for old_size in range(1, new_size + 1):
            proof = store.consistency_proof(old_size, new_size)
            assert proof == merkle.consistency_proof(prefix, old_size), (old_size, new_size)
            merkle.verify_consistency(old_size, new_size, roots[old_size], roots[new_size], proof)
    assert store.consistency_proof(10) == merkle.consistency_proof(leaves, 10)

    with pytest.raises(ValueError):
        store.root(LOG_SIZE + 1)
    with pytest.raises(ValueError):
        store.inclusion_proof(LOG_SIZE, LOG_SIZE)
    with pytest.raises(ValueError):
        store.inclusion_proof(0, LOG_SIZE + 1)
    with pytest.raises(ValueError):
        store.consistency_proof(0, 10)
    with pytest.raises(ValueError):
        store.consistency_proof(11, 10)
    with pytest.raises(ValueError):
        store.consistency_proof(1, LOG_SIZE + 1)


# -- atomicity -------------------------------------------------------------------------------


def test_batch_whose_last_seq_does_not_grow_writes_nothing(
    store: LogStore, maker: EntryMaker, actors: list[Ed25519Signer]
) -> None:
    append_signed(store, maker, 10, batch=3)
    alice, bob = actors[0], actors[1]
    alice_last = store.last_seq(alice.did)
    assert alice_last is not None
    before = snapshot(store, actors)

    # the last entry repeats a seq already in the log
    bad = [maker.one(bob), maker.one(actors[2]), maker.one(alice, seq=alice_last)]
    with pytest.raises(SequenceError) as caught:
        store.append_batch(bad)
    assert (caught.value.actor, caught.value.seq, caught.value.last_seq) == (
        alice.did,
        alice_last,
        alice_last,
    )
    assert snapshot(store, actors) == before

    # the last entry repeats a seq taken earlier in the same batch
    first = maker.one(alice)
    bad = [first, maker.one(bob), maker.one(alice, seq=first.event.seq)]
    with pytest.raises(SequenceError):
        store.append_batch(bad)
    assert snapshot(store, actors) == before

    # a seq that goes backwards
    with pytest.raises(SequenceError):
        store.append(maker.one(bob, seq=0))
    assert snapshot(store, actors) == before

    # the store still works, and the refused batches left no trace in its seq cache
    good = [first, maker.one(bob)]
    assert store.append_batch(good) == [10, 11]
    leaves = leaves_of(store)
    assert store.root() == merkle.root(leaves)
    assert store.last_seq(alice.did) == first.event.seq


def test_seq_check_notices_appends_by_another_store(
    open_store: Callable[..., LogStore], maker: EntryMaker, actors: list[Ed25519Signer]
) -> None:
    one, two = open_store(), open_store()
    alice, bob = actors[0], actors[1]
    assert two.append(maker.one(alice, seq=1)) == 0  # `two` now caches alice's seq 1
    assert one.append_batch([maker.one(alice, seq=2), maker.one(bob, seq=1)]) == [1, 2]

    with pytest.raises(SequenceError) as caught:
        two.append(maker.one(alice, seq=2))
    assert caught.value.last_seq == 2
    with pytest.raises(SequenceError):
        two.append(maker.one(bob, seq=1))
    assert two.append(maker.one(alice, seq=3)) == 3
    with pytest.raises(SequenceError):
        one.append(maker.one(alice, seq=3))
    assert one.append(maker.one(bob, seq=2)) == 4

    # both stores' frontiers (and whatever they cache for reads) followed the other's writes
    leaves = leaves_of(one)
    assert len(leaves) == 5
    assert_serves_reference(one, leaves)
    assert_serves_reference(two, leaves)
    assert two.append(maker.one(alice, seq=4)) == 5
    assert one.append(maker.one(bob, seq=3)) == 6
    leaves = leaves_of(two)
    assert_serves_reference(one, leaves)
    assert_serves_reference(two, leaves)
    assert verify_log(one, "did:key:unused", None).ok


def test_seq_check_notices_many_appends_by_another_store(
    open_store: Callable[..., LogStore],
    maker: EntryMaker,
    actors: list[Ed25519Signer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More entries appended elsewhere than an append reads back: its cached seqs start over
    (read again from the log) instead of being brought level entry by entry."""
    import accord.ledger.log

    monkeypatch.setattr(accord.ledger.log, "_SEQ_CATCH_UP", 2)
    one, two = open_store(), open_store()
    alice, bob = actors[0], actors[1]
    assert two.append(maker.one(alice, seq=1)) == 0
    one.append_batch([maker.one(alice, seq=2), maker.one(bob, seq=1), maker.one(bob, seq=2)])
    with pytest.raises(SequenceError) as caught:
        two.append(maker.one(alice, seq=2))
    assert caught.value.last_seq == 2
    assert two.append(maker.one(alice, seq=3)) == 4
    assert one.append(maker.one(bob, seq=3)) == 5


def test_database_failure_mid_batch_leaves_nothing_half_written(
    store: LogStore, maker: EntryMaker, actors: list[Ed25519Signer]
) -> None:
    appended = append_signed(store, maker, 4)
    # A row already holding the key of tile 0 seven hashes wide makes the tile insert of a
    # 3-entry batch (leaves 4, 5, 6) fail after its entries were inserted.
    conflict = tile_key(0, 0, 7)
    with store.engine.begin() as connection:
        connection.execute(insert(_TILES).values(id=conflict, hashes=b"\xee" * 32))
    before = snapshot(store, actors)

    batch = maker.many(3)
    with pytest.raises(StoreError):
        store.append_batch(batch)
    assert snapshot(store, actors) == before

    # an append that does not reach the bad row works, from a correctly rebuilt frontier
    assert store.append(batch[0]) == 4
    with store.engine.begin() as connection:
        connection.execute(delete(_TILES).where(_TILES.c.id == conflict))
    assert store.append_batch(batch[1:]) == [5, 6]
    leaves = leaves_of(store)
    assert leaves == [merkle.leaf_hash(e.data) for e in [*appended, *batch]]
    assert store.root() == merkle.root(leaves)
    assert store.inclusion_proof(5) == merkle.inclusion_proof(leaves, 5)
    assert verify_log(store, "did:key:unused", None).ok


# -- checkpoints and log identity ------------------------------------------------------------


def test_checkpoints_are_idempotent_and_a_different_root_is_refused(
    store: LogStore, maker: EntryMaker, operator: Ed25519Signer
) -> None:
    append_signed(store, maker, 5)
    signed = take_checkpoint(store, operator, START)
    stored = store.checkpoint(5)
    assert stored is not None
    assert (stored.size, stored.root, stored.data) == (5, store.root(5), signed.data)
    assert stored.at == signed.checkpoint.at
    SignedCheckpoint.from_bytes(stored.data).verify(operator.did)

    # taking it again reuses it; saving the same again is a no-op
    assert take_checkpoint(store, operator, START.replace(year=2030)).data == signed.data
    store.save_checkpoint(5, stored.root, stored.at, stored.data)
    assert store.checkpoints() == [stored]

    with pytest.raises(StoreError, match="different checkpoint"):
        store.save_checkpoint(5, b"\x01" * 32, stored.at, stored.data)
    assert store.checkpoints() == [stored]

    append_signed(store, maker, 3)
    later = take_checkpoint(store, operator, START)
    assert later.checkpoint.size == 8
    assert [c.size for c in store.checkpoints()] == [5, 8]
    latest = store.latest_checkpoint()
    assert latest is not None and latest.data == later.data
    assert store.checkpoint(6) is None


def test_a_database_holding_another_log_is_refused(
    store: LogStore, open_store: Callable[..., LogStore], maker: EntryMaker
) -> None:
    append_signed(store, maker, 2)
    with pytest.raises(StoreError, match="test-log"):
        open_store("another-log")
    again = open_store(LOG_ID)
    assert again.size() == 2 and again.root() == store.root()


# -- concurrency -----------------------------------------------------------------------------


def test_concurrent_appends_from_two_stores_all_land(
    open_store: Callable[..., LogStore], maker: EntryMaker, actors: list[Ed25519Signer]
) -> None:
    rng = random.Random(2)
    # thread t signs as actors[2t] and actors[2t + 1]: no seq conflicts between threads
    plans: list[list[list[Any]]] = []
    for thread in range(2):
        batches = []
        for _ in range(40):
            count = rng.choice((1, 1, 2, 3))
            batches.append(maker.many(count, lambda _i, t=thread: 2 * t + rng.randrange(2)))
        plans.append(batches)
    stores = [open_store(), open_store()]
    results: list[list[list[int]]] = [[], []]
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(thread: int) -> None:
        try:
            barrier.wait()
            for batch in plans[thread]:
                results[thread].append(stores[thread].append_batch(batch))
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not errors, errors
    assert not any(worker.is_alive() for worker in workers)

    total = sum(len(batch) for plan in plans for batch in plan)
    indices = [index for result in results for got in result for index in got]
    assert sorted(indices) == list(range(total))
    check = open_store()
    assert check.size() == total
    for thread in range(2):
        for batch, got in zip(plans[thread], results[thread], strict=True):
            assert got == list(range(got[0], got[0] + len(batch)))  # contiguous per batch
            assert [check.entry(index).data for index in got] == [e.data for e in batch]
    leaves = leaves_of(check)
    for each in (check, *stores):
        assert_serves_reference(each, leaves)
    assert verify_log(check, "did:key:unused", None).ok


@pytest.mark.parametrize("gap", [1, 3, 64, 65, 1001])
def test_a_writer_completes_the_right_nodes_after_another_writers_entries(
    open_store: Callable[..., LogStore], maker: EntryMaker, gap: int
) -> None:
    """After another writer appended `gap` entries, a store's next append completes the tree
    nodes a single writer would have: its frontier grows by their leaves when they are few
    (<= 64), or is read from the stored nodes when they are more (past 1000 its seq cache
    starts over too)."""
    first, other = open_store(), open_store()
    append_signed(first, maker, 5)
    append_signed(other, maker, gap, batch=min(gap, 500))
    append_signed(first, maker, 3)
    check = open_store()
    leaves = leaves_of(check)
    assert len(leaves) == 8 + gap
    assert check.root() == first.root() == merkle.root(leaves)
    for index in range(len(leaves) - 4, len(leaves)):
        assert check.inclusion_proof(index) == merkle.inclusion_proof(leaves, index)
    for old_size in (5, 5 + gap, 6 + gap):
        assert check.consistency_proof(old_size) == merkle.consistency_proof(leaves, old_size)
    assert verify_log(check, "did:key:unused", None).ok


def test_stores_opened_at_once_on_a_fresh_database_all_open(
    open_store: Callable[..., LogStore], maker: EntryMaker
) -> None:
    """Service processes starting together each create the log's tables: a CREATE that
    races another one's (PostgreSQL's catalog refuses the second) is not an error."""
    barrier = threading.Barrier(6)
    opened: list[LogStore] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            barrier.wait(timeout=30)
            opened.append(open_store())
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=open_one) for _ in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert not errors, errors
    assert len(opened) == 6
    assert opened[0].append(maker.many(1)[0]) == 0
    assert all(store.size() == 1 for store in opened)


def test_a_log_stored_as_node_rows_is_refused_until_migrated_then_serves_the_reference(
    open_engine: Callable[[], Engine], maker: EntryMaker
) -> None:
    """A log an earlier accord wrote (its tree as node rows) is refused with the command that
    converts it; once migrated its roots are proved equal, the node rows are gone, and it
    appends and serves the reference."""
    engine = open_engine()
    entries = maker.many(40)
    write_old_log(engine, LOG_ID, entries)
    with pytest.raises(StoreError, match="accord ledger migrate"):
        LogStore(engine, LOG_ID)
    with pytest.raises(StoreError, match="holds log 'test-log', not 'other'"):
        migrate_to_tiles(engine, "other")
    done = migrate_to_tiles(engine, LOG_ID, sizes=[1, 3, 17])
    leaves = [merkle.leaf_hash(entry.data) for entry in entries]
    assert not done.already and done.size == 40 and done.node_rows > 40
    assert {1, 3, 17, 40} <= done.roots.keys()
    assert all(root == merkle.root(leaves[:at]) for at, root in done.roots.items())
    assert not inspect(engine).has_table("ledger_nodes")
    assert migrate_to_tiles(engine, LOG_ID).already
    store = LogStore(engine, LOG_ID)
    append_signed(store, maker, 300, batch=7)
    assert_serves_reference(store, leaves_of(store))
    assert verify_log(store, "did:key:unused", None).ok


def test_a_migration_whose_node_rows_disagree_changes_nothing(
    open_engine: Callable[[], Engine], maker: EntryMaker
) -> None:
    engine = open_engine()
    write_old_log(engine, LOG_ID, maker.many(20))
    with engine.begin() as connection:  # node (3, 0), the root at size 8
        connection.exec_driver_sql(
            f"UPDATE ledger_nodes SET hash = {driver_mark(engine)} WHERE id = {3 << 48}",
            (b"\x00" * 32,),
        )
    with pytest.raises(StoreError, match="the node rows"):
        migrate_to_tiles(engine, LOG_ID, sizes=[8])
    assert inspect(engine).has_table("ledger_nodes")
    with engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM ledger_tiles").scalar_one() == 0


def test_each_tile_is_one_row_and_a_partial_tile_is_kept_at_its_latest_width(
    store: LogStore, maker: EntryMaker
) -> None:
    """Full tiles are rows of 256 hashes (and the subtrees inside them); the rightmost tile of
    each level is one row keyed by its width, the narrower one it replaced deleted."""
    append_signed(store, maker, 37, batch=5)
    assert [key for key, _row in store.stored_tiles()] == [tile_key(0, 0, 37)]
    append_signed(store, maker, 563, batch=100)
    keys = [key for key, _row in store.stored_tiles()]
    assert keys == [tile_key(0, 0, 256), tile_key(0, 1, 256), tile_key(0, 2, 88), tile_key(1, 0, 2)]
    leaves = leaves_of(store)
    assert store.tile(0, 1, 256) == b"".join(leaves[256:512])
    assert store.tile(0, 2, 40) == b"".join(leaves[512:552])
    assert store.tile(1, 0, 2) == merkle.root(leaves[:256]) + merkle.root(leaves[256:512])
    assert_serves_reference(store, leaves)


def test_an_inner_subtree_altered_in_a_tile_row_is_found_at_its_first_entry(
    store: LogStore, maker: EntryMaker
) -> None:
    append_signed(store, maker, 19, batch=4)
    ((key, row),) = list(store.stored_tiles())
    at = 32 * (row_offset(19, 1) + 3)  # tree node (1, 3): entries 6 and 7
    tile_t = LedgerTile.__table__  # type: ignore[attr-defined]
    with store.engine.begin() as connection:
        connection.execute(
            update(tile_t)
            .where(tile_t.c.id == key)
            .values(hashes=row[:at] + b"\x00" * 32 + row[at + 32 :])
        )
    failure = verify_log(store, "did:key:unused", None).first_failure
    assert failure is not None
    assert (failure.number, failure.entry) == (3, 6)


def test_find_answers_every_shape_of_question_as_a_filter_of_the_log_would(
    store: LogStore, maker: EntryMaker, actors: list[Ed25519Signer]
) -> None:
    """`find` sends one SQL text per shape (kind, kinds, subject, actor, order): each shape
    answers what filtering every entry in order gives, with `after` and `limit` applied."""
    appended = maker.many(30)
    store.append_batch(appended)
    events = [entry.event for entry in appended]
    kinds = sorted({event.kind for event in events})
    subjects = sorted({event.subject for event in events})
    rng = random.Random(7)
    for _ in range(60):
        ask: dict[str, Any] = {}
        if rng.random() < 0.4:
            ask["kind"] = rng.choice([*kinds, "no.such-kind"])
        if rng.random() < 0.4:
            ask["kinds"] = rng.sample([*kinds, "no.such-kind"], rng.randint(0, len(kinds)))
        if rng.random() < 0.4:
            ask["subject"] = rng.choice([*subjects, "no-such-subject"])
        if rng.random() < 0.4:
            ask["actor"] = rng.choice(actors).did
        after, limit, newest_first = rng.randint(-1, 29), rng.randint(1, 40), rng.random() < 0.5

        def matches(event: Any, ask: dict[str, Any] = ask) -> bool:
            return (
                ask.get("kind", event.kind) == event.kind
                and event.kind in ask.get("kinds", [event.kind])
                and ask.get("subject", event.subject) == event.subject
                and ask.get("actor", event.actor) == event.actor
            )

        expected = [i for i, event in enumerate(events) if i > after and matches(event)]
        expected = (expected[::-1] if newest_first else expected)[:limit]
        found = store.find(after=after, limit=limit, newest_first=newest_first, **ask)
        assert [stored.index for stored in found] == expected, ask
        assert [stored.data for stored in found] == [appended[i].data for i in expected]


def test_find_each_reads_every_match_after_an_index_a_chunk_at_a_time(
    store: LogStore, maker: EntryMaker
) -> None:
    """`find_each` gives what one unbounded `find` would, whatever the chunk (one that
    divides the matches exactly ends with one empty read), and nothing past the log's end."""
    appended = maker.many(30)
    store.append_batch(appended)
    kinds = sorted({entry.event.kind for entry in appended})
    for kind in kinds:
        for after in (-1, 7, 29):
            expected = [s.index for s in store.find(kind=kind, after=after, limit=100)]
            for chunk in (1, 2, 3, 5, 100):
                found = [s.index for s in store.find_each(kind=kind, after=after, chunk=chunk)]
                assert found == expected, (kind, after, chunk)
    everything = [s.index for s in store.find_each(kinds=kinds, chunk=4)]
    assert everything == list(range(30))


def test_find_on_a_database_that_fails_raises_store_error(
    store: LogStore, maker: EntryMaker
) -> None:
    """`find` sends its SQL text to the driver itself: a failing database is a StoreError
    naming the read, not the driver's exception."""
    store.append_batch(maker.many(3))
    with store.engine.begin() as connection:
        connection.exec_driver_sql("ALTER TABLE ledger_entries RENAME TO ledger_entries_gone")
    with pytest.raises(StoreError, match="cannot read the log database"):
        store.find(subject="task-1", kinds=["note.added"], after=-1)


def test_upsert_sql_writes_rows_in_the_order_it_names(tmp_path: Path) -> None:
    # The driver's SQL text inserts a row, then on a clash sets only the columns it updates;
    # the tuple follows the column order the caller names, not the table's.
    from sqlalchemy import Column, Integer, MetaData, String, Table

    table = Table(
        "pairs",
        MetaData(),
        Column("key", String, primary_key=True),
        Column("kept", Integer),
        Column("value", Integer),
    )
    engine = make_engine(f"sqlite:///{tmp_path / 'pairs.db'}")
    table.create(engine)
    text = upsert_sql(driver_mark(engine), table, ["value", "kept", "key"], ["key"], ["value"])
    with engine.begin() as connection:
        connection.exec_driver_sql(text, [(1, 10, "a"), (2, 20, "b")])
        connection.exec_driver_sql(text, [(3, 99, "a")])
        rows = connection.exec_driver_sql("SELECT key, kept, value FROM pairs ORDER BY key")
        assert rows.all() == [("a", 10, 3), ("b", 20, 2)]
    with pytest.raises(ValueError, match="pairs has no column other"):
        upsert_sql("?", table, ["key", "other"], ["key"], ["other"])


@pytest.mark.postgres
def test_tile_rows_are_stored_uncompressed_on_postgresql() -> None:
    """Hashes do not compress: PostgreSQL keeps a tile row out of line without trying (a
    PostgreSQL storage setting: there is no SQLite case)."""
    with postgres_schema_url() as url:
        store = LogStore(make_engine(url), LOG_ID)
        try:
            with store.engine.connect() as connection:
                storage = connection.exec_driver_sql(
                    "SELECT attstorage FROM pg_attribute WHERE attrelid = "
                    "'ledger_tiles'::regclass AND attname = 'hashes'"
                ).scalar_one()
        finally:
            store.engine.dispose()
    assert storage == "e"
