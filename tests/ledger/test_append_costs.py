"""What an append costs when several writers share one log: the seq is taken under the head
lock (no read before it, no retry), a once-key clash is found by the primary key, the
anchorer's due check reads nothing while its remembered anchor is recent, and PostgreSQL
connections are pinged only after sitting idle, yet a dead one is replaced."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import OperationalError

from accord.ledger import database, merkle
from accord.ledger.anchoring import Anchorer
from accord.ledger.chain import MemoryAnchorChain
from accord.ledger.database import make_engine
from accord.ledger.errors import AlreadyLoggedError, SequenceError
from accord.ledger.events import Entry, make_entry
from accord.ledger.service import Ledger
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from tests.ledger.conftest import LOG_ID, START, postgres_schema_url
from tests.ledger.test_anchoring import Clock


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements run on `engine` inside the block."""
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def seqs(store: LogStore) -> list[int]:
    return [Entry.from_bytes(stored.data).event.seq for stored in store.entries()]


def test_writers_in_turn_take_the_next_seq_under_the_lock(
    open_store: Callable[..., LogStore], operator: Ed25519Signer
) -> None:
    clock = Clock()
    first, second = open_store(), open_store()  # two processes on one database
    ledgers = [Ledger(first, operator, clock), Ledger(second, operator, clock)]
    ledgers[0].append(operator, "note.added", body={"n": 0})
    ledgers[1].append(operator, "note.added", body={"n": 1})
    for n in range(2, 8):
        with statements(ledgers[n % 2].store.engine) as seen:
            index, entry = ledgers[n % 2].append(operator, "note.added", body={"n": n})
        assert (index, entry.event.seq) == (n, n + 1)
        # the other writer's entries are read under the lock; no max(seq) query is needed
        assert not [s for s in seen if "max(ledger_entries.seq)" in s], seen
    assert seqs(first) == list(range(1, 9))


def test_an_entry_of_the_wrong_seq_is_refused_and_nothing_is_written(
    store: LogStore, operator: Ed25519Signer
) -> None:
    def stale(seq: int) -> Entry:
        return make_entry(operator, kind="note.added", seq=seq - 1, at=START)

    store.append_next(operator.did, lambda seq: note(operator, seq))
    with pytest.raises(SequenceError):
        store.append_next(operator.did, stale)
    with pytest.raises(SequenceError):  # signed by someone else than the actor named
        store.append_next("did:key:z6Mkother", lambda seq: note(operator, seq))
    assert store.size() == 1 and seqs(store) == [1]


def test_a_once_key_taken_by_another_writer_names_its_entry_and_writes_nothing(
    open_store: Callable[..., LogStore], operator: Ed25519Signer
) -> None:
    first, second = open_store(), open_store()
    one = make_entry(operator, kind="bid.committed", seq=1, at=START, subject="task-1")
    first.append_batch([one], once_keys=["task-1 alice"])
    again = make_entry(operator, kind="bid.committed", seq=2, at=START, subject="task-1")
    with pytest.raises(AlreadyLoggedError) as raised:
        second.append_batch([again], once_keys=["task-1 alice"])
    assert raised.value.index == 0 and raised.value.subject == "task-1 alice"
    assert second.size() == 1
    # the refused append left the writer able to append the next entry
    assert second.append_batch([again], once_keys=["task-1 bob"]) == [1]
    assert seqs(first) == [1, 2]


def note(signer: Ed25519Signer, seq: int) -> Entry:
    return make_entry(signer, kind="note.added", seq=seq, at=START)


def _anchorer(store: LogStore, chain: MemoryAnchorChain, operator: Ed25519Signer, clock: Clock):
    return Anchorer(
        store, chain, operator, clock, every_entries=10, every_seconds=60, receipt_timeout=0.05
    )


def _append(store: LogStore, operator: Ed25519Signer, count: int) -> None:
    for _ in range(count):
        store.append_next(operator.did, lambda seq: note(operator, seq))


def test_due_reads_nothing_while_the_remembered_anchor_is_recent(
    tmp_path: Path, operator: Ed25519Signer
) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    ours, theirs = LogStore(make_engine(url), LOG_ID), LogStore(make_engine(url), LOG_ID)
    chain, clock = MemoryAnchorChain(), Clock()
    anchorer, other = (
        _anchorer(ours, chain, operator, clock),
        _anchorer(theirs, chain, operator, clock),
    )
    _append(ours, operator, 3)
    clock.now = START + timedelta(seconds=61)
    assert anchorer.due(clock(), 3)
    assert anchorer.anchor_latest().status == "confirmed"  # at size 3
    _append(ours, operator, 2)
    assert not anchorer.due(clock(), 5)  # reads the latest anchor once...
    with statements(ours.engine) as seen:
        assert not anchorer.due(clock(), 12)  # ...then asks nothing while it is recent
    assert seen == []
    # another process anchors at 12; ours still remembers 3, so at 13 it looks due, reads
    # again, and finds it is not
    _append(theirs, operator, 7)
    clock.now += timedelta(seconds=61)
    assert other.anchor_latest().size == 12
    clock.now += timedelta(seconds=1)
    _append(ours, operator, 1)
    with statements(ours.engine) as seen:
        assert not anchorer.due(clock(), 13)
    assert [s for s in seen if "ledger_" in s] == [seen[-1]] and "ledger_anchors" in seen[-1]
    # time passes: due again (by seconds since the anchor sent at 12)
    clock.now += timedelta(seconds=60)
    assert anchorer.due(clock(), 13)


def _kill_the_connection_of(store: LogStore, url: str) -> None:
    """Terminate the server connection the store's pool holds (as a server restart would)."""
    with store.engine.connect() as connection:
        pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        admin.dispose()


@pytest.mark.postgres
def test_postgres_connections_killed_under_a_store_are_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with postgres_schema_url() as db_url:
        _kill_connections_under_a_store(db_url, monkeypatch)


def _kill_connections_under_a_store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LogStore(make_engine(db_url), LOG_ID)
    try:
        assert store.size() == 0
        # A connection used just now is handed out without a ping (a busy service pays no
        # round trip for it): killed under it, the next read fails once, and SQLAlchemy,
        # seeing the disconnect, invalidates the pool...
        _kill_the_connection_of(store, db_url)
        with pytest.raises(OperationalError):
            store.size()
        assert store.size() == 0  # ...so the next read connects anew
        # One that sat idle (here: any, with the threshold at 0) is pinged first, found
        # dead, and replaced before the read uses it: no failure at all.
        monkeypatch.setattr(database, "IDLE_PING_S", 0.0)
        _kill_the_connection_of(store, db_url)
        assert store.size() == 0
    finally:
        store.engine.dispose()


def test_threads_of_one_process_append_through_one_store_at_once(
    store: LogStore, operator: Ed25519Signer
) -> None:
    """The store's caches (frontier, seqs) change only under the head lock, so threads
    appending at once, with no lock of their own, leave a log whose tree is the right one."""
    ledger = Ledger(store, operator, Clock())

    def write(n: int) -> None:
        for k in range(12):
            ledger.append(operator, "note.added", body={"thread": n, "k": k})

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = list(store.entries())
    assert seqs(store) == list(range(1, 49))
    assert store.root() == merkle.root([merkle.leaf_hash(e.data) for e in entries])
    # the caches it kept are the log's: the next append extends the same tree
    ledger.append(operator, "note.added", body={"last": True})
    entries = list(store.entries())
    assert store.root() == merkle.root([merkle.leaf_hash(e.data) for e in entries])


class SlowRemoteSigner:
    """A signer that is not a local key (as a remote agent's endpoint is): while it signs,
    `meanwhile` runs in another thread, which must be able to append."""

    def __init__(self, key: Ed25519Signer, meanwhile: Callable[[], object]) -> None:
        self.key = key
        self.did = key.did
        self.kid = key.kid
        self.meanwhile = meanwhile
        self.appended_meanwhile = False

    def sign(self, message: bytes) -> bytes:
        worker = threading.Thread(target=self.meanwhile)
        worker.start()
        worker.join(timeout=5)
        self.appended_meanwhile = not worker.is_alive()
        return self.key.sign(message)


def test_a_remote_signer_signs_outside_the_head_lock(
    open_store: Callable[..., LogStore], operator: Ed25519Signer, actors: list[Ed25519Signer]
) -> None:
    first, second = open_store(), open_store()
    other = Ledger(second, operator, Clock())
    remote = SlowRemoteSigner(actors[0], lambda: other.append(operator, "note.added"))
    ledger = Ledger(first, operator, Clock())
    index, entry = ledger.append(remote, "note.added", body={"signed": "remotely"})  # type: ignore[arg-type]
    assert remote.appended_meanwhile  # nobody waited for the remote signature
    assert (index, entry.event.actor, entry.event.seq) == (1, actors[0].did, 1)
    assert first.size() == 2
