"""The projection seam of the store (`accord.ledger.views`), on SQLite and PostgreSQL, with a small
real projection (entries per kind): attaching folds what is logged, every append folds its
entries in its own transaction, a refused append folds nothing, entries appended by a store
without the view are folded when it is next read, `reindex` rebuilds from the log alone; and
the paging helpers refuse what they did not hand out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    String,
    Table,
    delete,
    event,
    insert,
    select,
    text,
    update,
)
from sqlmodel import Field, SQLModel

from accord.ledger.database import make_engine
from accord.ledger.errors import QueryError, SequenceError
from accord.ledger.store import LogStore
from accord.ledger.views import (
    MAX_LIMIT,
    ViewEntry,
    check_limit,
    decode_cursor,
    encode_cursor,
    int_key,
    reading,
)
from tests.ledger.conftest import LOG_ID, EntryMaker, append_signed, postgres_schema_url
from tests.view_rows import view_rows


class KindCount(SQLModel, table=True):
    __tablename__ = "test_view_kind_counts"

    kind: str = Field(primary_key=True)
    entries: int
    last_index: int


KINDS_TABLE: Table = KindCount.__table__  # type: ignore[attr-defined]


class KindCounts:
    """Entries per kind, and the index of the last of each (and of the first, when `table`
    has a `first_index` column)."""

    name = "kind-counts"

    def __init__(self, table: Table = KINDS_TABLE) -> None:
        self.table = table
        self.tables: Sequence[Table] = (table,)

    def apply(self, connection: Any, entries: Sequence[ViewEntry]) -> None:
        table = self.table
        for entry in entries:
            kind = entry.event.kind
            found = connection.execute(
                select(table.c.entries).where(table.c.kind == kind)
            ).scalar_one_or_none()
            if found is None:
                row = {"kind": kind, "entries": 1, "last_index": entry.index}
                if "first_index" in table.c:
                    row["first_index"] = entry.index
                connection.execute(insert(table).values(**row))
            else:
                connection.execute(
                    update(table)
                    .where(table.c.kind == kind)
                    .values(entries=found + 1, last_index=entry.index)
                )

    def reset(self, connection: Any) -> None:
        connection.execute(delete(self.table))


def counted(store: LogStore) -> dict[str, tuple[int, int]]:
    with reading(store, KindCounts.name) as connection:
        rows = connection.execute(select(KINDS_TABLE)).all()
    return {row.kind: (row.entries, row.last_index) for row in rows}


def expected(store: LogStore) -> dict[str, tuple[int, int]]:
    """The same fold, straight from the log."""
    out: dict[str, tuple[int, int]] = {}
    for stored in store.entries():
        kind = stored.columns[2] if stored.columns else ""
        out[kind] = (out.get(kind, (0, 0))[0] + 1, stored.index)
    return out


def test_a_view_follows_every_append_and_rebuilds_from_the_log(
    open_store: Callable[..., LogStore], maker: EntryMaker
) -> None:
    writer = open_store()
    append_signed(writer, maker, 7, batch=3)
    viewed = open_store()
    viewed.attach(KindCounts())  # folds the 7 already logged
    assert counted(viewed) == expected(viewed)
    append_signed(viewed, maker, 9, batch=4)
    assert counted(viewed) == expected(viewed) and viewed.size() == 16
    # a writer without the view appends: the view folds those in when next read
    append_signed(writer, maker, 5)
    assert counted(viewed) == expected(viewed)
    with viewed.engine.connect() as connection:
        before = list(view_rows(connection, [KindCounts()]))
    with viewed.engine.begin() as connection:
        connection.execute(update(KINDS_TABLE).values(entries=999))
    assert viewed.reindex() == {"kind-counts": 21}
    with viewed.engine.connect() as connection:
        assert list(view_rows(connection, [KindCounts()])) == before


def test_a_refused_append_folds_nothing(
    open_store: Callable[..., LogStore], maker: EntryMaker
) -> None:
    store = open_store()
    store.attach(KindCounts())
    entries = append_signed(store, maker, 4)
    before = counted(store)
    replayed = maker.one(maker.signers[0], seq=1)  # a seq that does not grow
    with pytest.raises(SequenceError):
        store.append_batch([maker.one(maker.signers[1]), replayed])
    assert counted(store) == before == expected(store) and store.size() == len(entries)


class HeldKindCounts(KindCounts):
    """KindCounts that, once `hold` is set, waits in `apply` (inside its writer's append, the
    head lock held) until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.hold, self.holding, self.release = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )

    def apply(self, connection: Any, entries: Sequence[ViewEntry]) -> None:
        super().apply(connection, entries)
        if self.hold.is_set():
            self.holding.set()
            assert self.release.wait(60), "the test never released the append"


@pytest.mark.postgres
def test_a_writer_that_waited_for_the_head_lock_finds_the_views_level(
    maker: EntryMaker,
) -> None:
    """On PostgreSQL, a writer blocked on the head lock reads the head row as the writer
    before it left it, but the views' counts from before that writer's commit (READ COMMITTED
    re-reads only the locked row). Its append must still see that the views are level: no
    catching up, no separate statement recording their new count."""
    with postgres_schema_url() as url:
        first_engine, second_engine = make_engine(url), make_engine(url)
        try:
            first, second = LogStore(first_engine, LOG_ID), LogStore(second_engine, LOG_ID)
            held = HeldKindCounts()
            first.attach(held)
            second.attach(KindCounts())
            append_signed(first, maker, 3)
            statements: list[str] = []
            locking = threading.Event()

            def seen(_c: Any, _cur: Any, statement: str, *_rest: Any) -> None:
                statements.append(statement)
                if "FOR UPDATE OF ledger_head" in statement:
                    locking.set()

            event.listen(second_engine, "before_cursor_execute", seen)
            held.hold.set()
            held_entries, waiting_entries = maker.many(1), maker.many(1)
            holder = threading.Thread(target=first.append_batch, args=(held_entries,))
            waiter = threading.Thread(target=second.append_batch, args=(waiting_entries,))
            try:
                holder.start()
                assert held.holding.wait(60)
                waiter.start()
                assert locking.wait(60), "the second append never asked for the head lock"
                _until_waiting_on_a_lock(first_engine)
            finally:
                held.release.set()
                holder.join(60)
                waiter.join(60)
            assert second.size() == 5
            assert counted(second) == expected(second)
            recorded_apart = [s for s in statements if s.lstrip().startswith("UPDATE ledger_views")]
            assert recorded_apart == [], "the waiting writer caught its views up"
        finally:
            first_engine.dispose()
            second_engine.dispose()


def _until_waiting_on_a_lock(engine: Any, polls: int = 1000) -> None:
    """Poll (up to `polls` times, 10 ms apart) until a session waits on a lock to run the
    head's FOR UPDATE; the append it belongs to has sent it, so this is normally at once."""
    with engine.connect() as probe:
        for _ in range(polls):
            waiting = probe.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%FOR UPDATE OF ledger_head%'"
                )
            ).scalar_one()
            if waiting:
                return
            time.sleep(0.01)


def test_paging_helpers_refuse_what_they_did_not_hand_out() -> None:
    assert check_limit(None) == 50 and check_limit(MAX_LIMIT) == MAX_LIMIT
    for bad in (0, MAX_LIMIT + 1, -3, True, "5"):
        with pytest.raises(QueryError) as caught:
            check_limit(bad)  # type: ignore[arg-type]
        assert caught.value.parameter == "limit"
    cursor = encode_cursor("tasks", "42")
    assert decode_cursor("tasks", cursor) == "42" and int_key("tasks", cursor) == 42
    assert decode_cursor("tasks", None) is None and decode_cursor("tasks", "") is None
    for bad in ("!!", "x" * 500, encode_cursor("agents", "42"), "dGFza3M"):
        with pytest.raises(QueryError) as caught:
            decode_cursor("tasks", bad)
        assert caught.value.parameter == "cursor"
    with pytest.raises(QueryError):
        int_key("tasks", encode_cursor("tasks", "-1"))


NEXT_METADATA = MetaData()
NEXT_KINDS_TABLE = Table(  # the same view as another version of accord would keep it
    "test_view_kind_counts",
    NEXT_METADATA,
    Column("kind", String, primary_key=True),
    Column("entries", Integer, nullable=False),
    Column("last_index", Integer, nullable=False),
    Column("first_index", Integer, nullable=False),
)


def test_a_view_stored_by_another_version_is_made_anew_from_the_log(
    open_store: Callable[..., LogStore], maker: EntryMaker
) -> None:
    """Tables with other columns than the attached projection's (an upgrade changed the
    view) are dropped, created and folded from the log; so are tables lost from a view that
    had applied entries. A fresh database makes nothing anew."""
    old = open_store()
    old.attach(KindCounts())
    append_signed(old, maker, 6, batch=2)
    new = open_store()
    new.attach(KindCounts(NEXT_KINDS_TABLE))
    with reading(new, KindCounts.name) as connection:
        rows = connection.execute(select(NEXT_KINDS_TABLE)).all()
    assert {row.kind: (row.entries, row.last_index) for row in rows} == expected(new)
    assert all(row.first_index <= row.last_index for row in rows)
    append_signed(new, maker, 3)
    with new.engine.begin() as connection:
        NEXT_KINDS_TABLE.drop(connection)
    again = open_store()
    again.attach(KindCounts(NEXT_KINDS_TABLE))
    with reading(again, KindCounts.name) as connection:
        rows = connection.execute(select(NEXT_KINDS_TABLE)).all()
    assert {row.kind: (row.entries, row.last_index) for row in rows} == expected(again)
    assert sum(row.entries for row in rows) == 9


def test_reads_never_wait_for_a_writer_that_holds_the_database(
    open_store: Callable[..., LogStore], maker: EntryMaker
) -> None:
    """A writer holds its transaction open (on SQLite: BEGIN IMMEDIATE, the database's write
    lock, held for as long as an append and its fsync take); the store's reads and a view's
    read answer meanwhile, from what was committed, instead of queueing behind it (they did,
    on SQLite: every read sent BEGIN IMMEDIATE too, so reads waited for each write in turn).
    The bound is the writer's hold, not the wall clock: the writer lets go only once the
    reads have answered, or after 60 s, when the test fails."""
    store = open_store()
    store.attach(KindCounts())
    append_signed(store, maker, 5)
    answered = threading.Event()
    seen: list[Any] = []

    def read() -> None:
        seen.append(
            (
                store.size(),
                store.entry(4).index,
                len(store.find(limit=10)),
                store.last_seq(maker.signers[0].did) is not None,
                counted(store) == expected(store),
            )
        )
        answered.set()

    with store.engine.begin() as writer:  # the writer's transaction: it holds the database
        writer.execute(update(KINDS_TABLE).values(entries=999))  # uncommitted, never seen
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        waited = answered.wait(60)
        writer.rollback()
    reader.join(60)
    assert waited, "a read waited for the writer's transaction"
    assert seen == [(5, 4, 5, True, True)]
