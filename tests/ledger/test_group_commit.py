"""Group commit in LogStore, on both backends (tests/ledger/conftest.py).

The appends that arrive while a thread of the process is writing wait; the first of them to
get the write lock writes all of them in one transaction. These tests hold that lock, let a
group gather, and release it:

* the group is one transaction; each append gets its own contiguous indices, an actor's seqs
  follow each other across the group, and the log verifies;
* an append refused for a reason of its own (a seq that does not grow, a once-key another
  append of the group holds) is refused alone; the rest are written;
* a once-key already in the log makes the group start over, checked append by append: only
  that append is refused, naming the logged entry, and no seq is skipped;
* a group whose transaction fails fails every append and writes nothing; the next appends
  take the seqs the failed group would have taken.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import delete, event, insert, select

from accord.ledger.database import LedgerEntry, LedgerHead, LedgerTile
from accord.ledger.errors import AlreadyLoggedError, SequenceError, StoreError
from accord.ledger.events import Entry, make_entry
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from accord.ledger.tiles import tile_key
from accord.ledger.verify import verify_log
from tests.ledger.conftest import START

_ENTRIES = LedgerEntry.__table__  # type: ignore[attr-defined]
_TILES = LedgerTile.__table__  # type: ignore[attr-defined]
_HEAD = LedgerHead.__table__  # type: ignore[attr-defined]

Outcome = list[int] | BaseException


def note(signer: Ed25519Signer, seq: int) -> Entry:
    return make_entry(signer, kind="bid.committed", seq=seq, at=START, subject="task-1")


def seqs(store: LogStore, actor: str) -> list[int]:
    with store.engine.connect() as connection:
        rows = connection.execute(
            select(_ENTRIES.c.seq).where(_ENTRIES.c.actor == actor).order_by(_ENTRIES.c.idx)
        )
        return [int(seq) for (seq,) in rows]


@contextmanager
def transactions(store: LogStore) -> Iterator[dict[str, int]]:
    """Counts of the store engine's commits and rollbacks while the block runs."""
    counts = {"commit": 0, "rollback": 0}

    def on_commit(_connection: Any) -> None:
        counts["commit"] += 1

    def on_rollback(_connection: Any) -> None:
        counts["rollback"] += 1

    event.listen(store.engine, "commit", on_commit)
    event.listen(store.engine, "rollback", on_rollback)
    try:
        yield counts
    finally:
        event.remove(store.engine, "commit", on_commit)
        event.remove(store.engine, "rollback", on_rollback)


def in_one_group(store: LogStore, appends: list[Callable[[], list[int]]]) -> list[Outcome]:
    """Run `appends` in threads while this thread holds the store's write lock, so that all of
    them wait as one group; then release it. Returns each one's indices or error."""
    outcomes: list[Outcome | None] = [None] * len(appends)

    def run(k: int) -> None:
        try:
            outcomes[k] = appends[k]()
        except BaseException as exc:  # returned to the test
            outcomes[k] = exc

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(appends))]
    with store._appending:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while len(store._waiting) < len(appends):
            assert time.monotonic() < deadline, "the appends never all waited"
            time.sleep(0.005)
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert all(outcome is not None for outcome in outcomes)
    return [outcome for outcome in outcomes if outcome is not None]


def next_of(
    store: LogStore, signer: Ed25519Signer, once_key: str | None = None
) -> Callable[[], list[int]]:
    def append() -> list[int]:
        index, _ = store.append_next(signer.did, lambda seq: note(signer, seq), once_key=once_key)
        return [index]

    return append


def test_waiting_appends_are_written_in_one_transaction_each_with_its_own_indices(
    store: LogStore, operator: Ed25519Signer, actors: list[Ed25519Signer]
) -> None:
    store.append_next(operator.did, lambda seq: note(operator, seq))
    batch = [note(actors[0], 1), note(actors[0], 2), note(actors[1], 1)]
    appends = [next_of(store, operator, f"task-1 bidder-{k}") for k in range(5)]
    appends.append(lambda: store.append_batch(batch))
    with transactions(store) as counts:
        outcomes = in_one_group(store, appends)
    assert counts["commit"] == 1, counts
    assert all(isinstance(outcome, list) for outcome in outcomes), outcomes
    written = sorted(index for outcome in outcomes for index in outcome)  # type: ignore[union-attr]
    assert written == list(range(1, 9))
    batch_indices = outcomes[-1]
    assert isinstance(batch_indices, list)
    assert batch_indices == list(range(batch_indices[0], batch_indices[0] + 3))
    assert [store.entry(i).data for i in batch_indices] == [e.data for e in batch]
    assert seqs(store, operator.did) == [1, 2, 3, 4, 5, 6]
    assert verify_log(store, "did:key:unused", None).ok


def test_an_append_refused_for_its_own_reason_is_refused_alone(
    store: LogStore, operator: Ed25519Signer
) -> None:
    def stale() -> list[int]:
        index, _ = store.append_next(
            operator.did, lambda seq: make_entry(operator, kind="note.added", seq=seq - 1, at=START)
        )
        return [index]

    appends = [
        next_of(store, operator, "task-1 alice"),
        stale,
        next_of(store, operator, "task-1 alice"),  # the same key as the first
        next_of(store, operator, "task-1 bob"),
    ]
    with transactions(store) as counts:
        outcomes = in_one_group(store, appends)
    assert counts["commit"] == 1, counts
    assert isinstance(outcomes[1], SequenceError)
    assert isinstance(outcomes[3], list)
    # one of the two appends keyed "task-1 alice" is written, the other names its entry
    alice = [outcomes[0], outcomes[2]]
    written = [o for o in alice if isinstance(o, list)]
    refused = [o for o in alice if isinstance(o, AlreadyLoggedError)]
    assert len(written) == 1 and len(refused) == 1, alice
    assert refused[0].index == written[0][0] and refused[0].subject == "task-1 alice"
    assert store.size() == 2
    assert seqs(store, operator.did) == [1, 2]  # no seq skipped for the refused ones
    assert verify_log(store, "did:key:unused", None).ok


def test_a_key_already_logged_makes_the_group_start_over_and_refuses_only_that_append(
    open_store: Callable[..., LogStore], operator: Ed25519Signer
) -> None:
    store, other = open_store(), open_store()
    other.append_next(operator.did, lambda seq: note(operator, seq), once_key="task-1 carol")
    appends = [
        next_of(store, operator, "task-1 alice"),
        next_of(store, operator, "task-1 carol"),
        next_of(store, operator, "task-1 bob"),
    ]
    with transactions(store) as counts:
        outcomes = in_one_group(store, appends)
    assert counts["commit"] == 1 and counts["rollback"] >= 1, counts
    carol = outcomes[1]
    assert isinstance(carol, AlreadyLoggedError) and carol.index == 0, carol
    assert sorted([*outcomes[0], *outcomes[2]]) == [1, 2]  # type: ignore[misc]
    assert seqs(store, operator.did) == [1, 2, 3]  # the first attempt's seqs were not kept
    assert verify_log(store, "did:key:unused", None).ok


def test_a_group_whose_transaction_fails_fails_every_append_and_writes_nothing(
    store: LogStore, operator: Ed25519Signer
) -> None:
    for _ in range(4):
        store.append_next(operator.did, lambda seq: note(operator, seq))
    # A row already holding the key of tile 0 seven hashes wide makes the group's tile
    # insert fail after its entries were inserted.
    conflict = tile_key(0, 0, 7)
    with store.engine.begin() as connection:
        connection.execute(insert(_TILES).values(id=conflict, hashes=b"\xee" * 32))
    appends = [next_of(store, operator, f"task-1 bidder-{k}") for k in range(3)]
    outcomes = in_one_group(store, appends)
    assert all(isinstance(outcome, StoreError) for outcome in outcomes), outcomes
    assert store.size() == 4

    with store.engine.begin() as connection:
        connection.execute(delete(_TILES).where(_TILES.c.id == conflict))
    outcomes = in_one_group(store, appends)
    assert sorted(i for o in outcomes for i in o) == [4, 5, 6]  # type: ignore[union-attr]
    assert seqs(store, operator.did) == [1, 2, 3, 4, 5, 6, 7]
    assert verify_log(store, "did:key:unused", None).ok


def test_appends_arriving_while_the_writer_waits_for_the_head_join_its_group(
    store: LogStore, operator: Ed25519Signer
) -> None:
    """Another writer (another process) holds the head: the writer of this process waits for
    it with the head unlocked, and the appends that arrive meanwhile are written with its own,
    in one transaction, once the head is free."""
    outcomes: list[Outcome | None] = [None] * 3

    def run(k: int) -> None:
        try:
            outcomes[k] = next_of(store, operator, f"task-1 bidder-{k}")()
        except BaseException as exc:  # returned to the test
            outcomes[k] = exc

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    deadline = time.monotonic() + 30
    with transactions(store) as counts:
        with store.engine.begin() as other:  # SQLite: BEGIN IMMEDIATE; PostgreSQL: the row
            other.execute(select(_HEAD.c.size).with_for_update())
            threads[0].start()
            while not store._appending.locked():  # the first one writes, and waits
                assert time.monotonic() < deadline, "the first append never started writing"
                time.sleep(0.005)
            for thread in threads[1:]:
                thread.start()
            while len(store._waiting) < 3:
                assert time.monotonic() < deadline, "the appends never all waited"
                time.sleep(0.005)
        for thread in threads:
            thread.join(timeout=60)
        assert counts["commit"] == 2, counts  # the other writer's, then one for all three
    assert sorted(i for o in outcomes for i in o) == [0, 1, 2]  # type: ignore[union-attr]
    assert seqs(store, operator.did) == [1, 2, 3]
    assert verify_log(store, "did:key:unused", None).ok


def test_many_threads_appending_at_once_each_land_once(
    store: LogStore, operator: Ed25519Signer
) -> None:
    """Without holding the lock: threads append freely, so groups of every size form."""
    threads, per_thread = 8, 25
    results: list[list[int]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads)

    def run(t: int) -> None:
        barrier.wait()
        for k in range(per_thread):
            results[t] += next_of(store, operator, f"task-1 t{t}-{k}")()

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    total = threads * per_thread
    assert sorted(i for got in results for i in got) == list(range(total))
    assert seqs(store, operator.did) == list(range(1, total + 1))
    assert verify_log(store, "did:key:unused", None).ok


class Interrupt(BaseException):
    """Stands for KeyboardInterrupt or SystemExit raised while a group is being written."""


def test_a_writer_interrupted_mid_group_writes_nothing_and_fails_the_rest(
    store: LogStore, operator: Ed25519Signer
) -> None:
    store.append_next(operator.did, lambda seq: note(operator, seq))

    def interrupted(seq: int) -> Entry:
        raise Interrupt

    def interrupting() -> list[int]:
        index, _ = store.append_next(operator.did, interrupted)
        return [index]

    appends = [next_of(store, operator, f"task-1 bidder-{k}") for k in range(3)]
    outcomes = in_one_group(store, [*appends, interrupting])
    # the thread writing the group raises the interruption; every other append fails typed
    assert sum(isinstance(o, Interrupt) for o in outcomes) == 1, outcomes
    assert sum(isinstance(o, StoreError) for o in outcomes) == 3, outcomes
    assert store.size() == 1

    # the seqs the group took were forgotten: the next appends follow the last one written
    outcomes = in_one_group(store, appends)
    assert sorted(i for o in outcomes for i in o) == [1, 2, 3]  # type: ignore[union-attr]
    assert seqs(store, operator.did) == [1, 2, 3, 4]
    assert verify_log(store, "did:key:unused", None).ok
