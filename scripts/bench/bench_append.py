"""append: signed events persisted per second, beside the signing limit and hash-only appends.

Side by side in each repetition, on the same canonical bytes:

- the signing limit: raw Ed25519 signatures per second (PyNaCl) over JCS(event);
- `make_entry` alone (build, validate, JCS, sign), nothing stored;
- signed append (the goal): `make_entry` + `LogStore.append_batch` of 1,000 per transaction,
  into a fresh SQLite log in a tmp dir (WAL, synchronous=FULL, as in production);
- hash-only append: the same leaf data, already signed, through `LogStore.append_batch`
  (leaf hash, the tile rows, entry rows, commit) against pymerkle's `SqliteTree.append_entries`
  with the same 1,000 per transaction;
- SQL alone: the same entry rows inserted by sqlite3 itself into the store's schema (with its
  three secondary indexes, and with them dropped), no accord code on the path: what bounds
  any hash-only append that keeps entries searchable;
- one entry per transaction: `LogStore.append` against pymerkle's `SqliteTree.append_entry`;
- the steps of an append alone, in microseconds per event (lower is better), on the same
  events: building and validating the `Event`, JCS(event), the Ed25519 signature
  (`Ed25519Signer.sign`), JCS(entry) from JCS(event), and the leaf and interior-node hashes
  the entries complete (the store's frontier, from an empty log); the rest of a hash-only
  append is its rows, their indexes and the commit.

The goals (issue 46, the log on C2SP tiles) are the two ratios in the same run: signed append
at least 0.6 times the signing limit, hash-only append at least pymerkle's batched append.

Run alone: `.venv/bin/python scripts/bench/bench_append.py [--quick] [--reps N]`.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nacl.signing
from _common import (
    BATCH,
    TIMES,
    EventMaker,
    Goal,
    Measure,
    Section,
    chunks,
    new_store,
    progress,
    run_alone,
    side_by_side,
    temp_root,
    timed,
)
from pymerkle import SqliteTree

from accord.ledger import log as log_module
from accord.ledger.events import Event, entry_bytes

GOAL_EVENTS_PER_S = 10_000
GOAL_SIGNED_RATIO = 0.6
GOAL_HASH_ONLY_RATIO = 1.0


def run(quick: bool, reps: int) -> Section:
    started = time.perf_counter()
    events = 5_000 if quick else 20_000
    singles = 50 if quick else 200
    section = Section(
        key="append",
        title=f"append: {events:,} events per repetition, {BATCH:,} per transaction",
        method=__doc__ or "",
    )
    maker = EventMaker()
    presigned = maker.batch(events)
    payloads = [entry.event_bytes for entry in presigned]
    leaf_data = [entry.data for entry in presigned]
    key = nacl.signing.SigningKey(bytes(range(32)))
    work = Path(tempfile.mkdtemp(prefix="accord-bench-append-", dir=temp_root()))
    counter = iter(range(1_000_000))

    def fresh() -> Path:
        folder = work / f"run{next(counter)}"
        folder.mkdir()
        return folder

    def sign_limit() -> float:
        sign = key.sign
        return timed(len(payloads), lambda: [sign(p) for p in payloads])

    def entries_only() -> float:
        fresh_maker = EventMaker(seed=2)
        return timed(events, lambda: fresh_maker.batch(events))

    def signed_append() -> float:
        store = new_store(fresh())
        fresh_maker = EventMaker(seed=3)

        def go() -> None:
            for _ in range(0, events, BATCH):
                store.append_batch(fresh_maker.batch(BATCH))

        rate = timed(events, go)
        store.engine.dispose()
        return rate

    def ours_hash_only() -> float:
        store = new_store(fresh())
        rate = timed(
            events,
            lambda: [store.append_batch(presigned[i : i + BATCH]) for i in range(0, events, BATCH)],
        )
        store.engine.dispose()
        return rate

    def pymerkle_hash_only() -> float:
        tree = SqliteTree(str(fresh() / "pymerkle.db"))
        rate = timed(events, lambda: [tree.append_entries(c) for c in chunks(leaf_data, BATCH)])
        tree.close()
        return rate

    def ours_single() -> float:
        store = new_store(fresh())
        rate = timed(singles, lambda: [store.append(e) for e in presigned[:singles]])
        store.engine.dispose()
        return rate

    entry_rows = [
        (i, e.event.actor, e.event.seq, e.event.kind, e.event.subject, e.event.at, e.data)
        for i, e in enumerate(presigned)
    ]

    def sql_alone(indexed: bool) -> float:
        """accord's entry rows written straight through sqlite3 into the store's own schema
        (made by a LogStore, then closed): no accord Python, no tree; `indexed` False drops
        the entry table's secondary indexes first."""
        folder = fresh()
        new_store(folder).engine.dispose()
        connection = sqlite3.connect(folder / "log.db", isolation_level=None)
        connection.execute("PRAGMA synchronous=FULL")
        if not indexed:
            for row in connection.execute("PRAGMA index_list(ledger_entries)").fetchall():
                if row[3] == "c":  # made by CREATE INDEX, not a key's own
                    connection.execute(f'DROP INDEX "{row[1]}"')
        columns = "idx, actor, seq, kind, subject, at, data"
        insert = f"INSERT INTO ledger_entries ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?)"

        def go() -> None:
            for start in range(0, events, BATCH):
                connection.execute("BEGIN IMMEDIATE")
                connection.executemany(insert, entry_rows[start : start + BATCH])
                connection.execute("COMMIT")

        rate = timed(events, go)
        connection.close()
        return rate

    def pymerkle_single() -> float:
        tree = SqliteTree(str(fresh() / "pymerkle.db"))
        rate = timed(singles, lambda: [tree.append_entry(d) for d in leaf_data[:singles]])
        tree.close()
        return rate

    signer_of = {signer.did: signer for signer in maker.signers}
    events_only = [entry.event for entry in presigned]
    fields = [(e.kind, e.actor, e.seq, e.at, e.subject, dict(e.body)) for e in events_only]

    def micros(work: Callable[[], object]) -> float:
        return 1e6 / timed(events, work)

    def step_event() -> float:
        return micros(
            lambda: [
                Event(kind=k, actor=a, seq=q, at=t, subject=u, body=b)
                for k, a, q, t, u, b in fields
            ]
        )

    def step_jcs() -> float:
        return micros(lambda: [event.canonical() for event in events_only])

    def step_sign() -> float:
        pairs = [(signer_of[entry.event.actor].sign, entry.event_bytes) for entry in presigned]
        return micros(lambda: [sign(data) for sign, data in pairs])

    def step_entry_bytes() -> float:
        return micros(lambda: [entry_bytes(e.event_bytes, e.kid, e.sig) for e in presigned])

    def step_hashes() -> float:
        return micros(lambda: log_module.extend_tree([], {}, 0, leaf_data))

    limit = Measure("Ed25519 sign, raw PyNaCl (signing limit)", "signs/s")
    made = Measure("make_entry only (build+JCS+sign)", "events/s", baseline=limit.name)
    signed = Measure("signed append: make_entry + append_batch", "events/s", baseline=limit.name)
    pm_bulk = Measure(f"hash-only append, pymerkle SqliteTree ({BATCH:,}/txn)", "leaves/s")
    ours_bulk = Measure(
        f"hash-only append, accord LogStore ({BATCH:,}/txn)", "leaves/s", baseline=pm_bulk.name
    )
    floor_indexed = Measure(
        "SQL alone: accord's entry rows, its schema", "rows/s", baseline=pm_bulk.name
    )
    floor_bare = Measure(
        "SQL alone: accord's entry rows, secondary indexes dropped",
        "rows/s",
        baseline=pm_bulk.name,
    )
    pm_one = Measure("single append, pymerkle append_entry (1/txn)", "leaves/s")
    ours_one = Measure(
        "single append, accord LogStore.append (1/txn)", "leaves/s", baseline=pm_one.name
    )
    steps = [
        (Measure("step: Event built and validated", "µs/event"), step_event),
        (Measure("step: JCS(event)", "µs/event"), step_jcs),
        (Measure("step: Ed25519 signature (Ed25519Signer.sign)", "µs/event"), step_sign),
        (Measure("step: JCS(entry) from JCS(event)", "µs/event"), step_entry_bytes),
        (Measure("step: leaf and node hashes and tile rows", "µs/event"), step_hashes),
    ]
    section.measures = [limit, made, signed, pm_bulk, ours_bulk, floor_indexed, floor_bare]
    section.measures += [pm_one, ours_one]
    section.measures += [measure for measure, _ in steps]
    try:
        side_by_side(
            reps,
            [
                (limit, sign_limit),
                (made, entries_only),
                (signed, signed_append),
                (pm_bulk, pymerkle_hash_only),
                (ours_bulk, ours_hash_only),
                (floor_indexed, lambda: sql_alone(indexed=True)),
                (floor_bare, lambda: sql_alone(indexed=False)),
                (pm_one, pymerkle_single),
                (ours_one, ours_single),
                *steps,
            ],
            label="append: ",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress("append: done")
    section.goals.append(
        Goal("signed events persisted (batched)", GOAL_EVENTS_PER_S, signed.median, "events/s")
    )
    section.goals.append(
        Goal(
            "signed append / raw PyNaCl signing (same events, same run)",
            GOAL_SIGNED_RATIO,
            signed.median / limit.median,
            TIMES,
        )
    )
    section.goals.append(
        Goal(
            f"hash-only append / pymerkle SqliteTree ({BATCH:,}/txn, same leaves, same run)",
            GOAL_HASH_ONLY_RATIO,
            ours_bulk.median / pm_bulk.median,
            TIMES,
        )
    )
    section.notes += [
        f"{events:,} events from {len(maker.signers)} actors per repetition; leaf data "
        f"≈ {sum(map(len, leaf_data)) // len(leaf_data)} bytes (JCS of the signed entry).",
        "Hash-only rows append exactly the same leaf bytes to both stores; accord also writes "
        "the tile rows (each tile touched, once), the indexed entry columns and the head row, "
        "pymerkle one leaf row.",
        "SQL alone: the same entry rows inserted by sqlite3 itself into the store's schema, "
        f"{BATCH:,} per transaction, no accord code on the path: the most any accord Python "
        "could reach with these rows (its schema: the three secondary indexes on kind, subject "
        "and actor+seq that `LogStore.find` and the seq checks read; dropped: the row alone, "
        "as pymerkle writes one, though in accord's WAL journal where pymerkle keeps a "
        "rollback journal and also stores each leaf's hash).",
        "Both on SQLite with their defaults: accord WAL + synchronous=FULL, pymerkle rollback "
        f"journal + synchronous=FULL; single appends: {singles} per repetition, one fsync'd "
        "transaction each.",
    ]
    section.seconds = time.perf_counter() - started
    return section


if __name__ == "__main__":
    run_alone(run, "append throughput: signed, hash-only, against pymerkle")
