"""Read views: tables folded from the log for the queries users make. The log stays the source
of truth; the audit never reads a view.

A *projection* owns a few tables and folds log entries into them:

    name                         its key in `ledger_views`
    tables                       the tables it owns (created when it is attached)
    apply(connection, entries)   fold a run of entries, in index order, into its tables
    reset(connection)            empty its tables

`LogStore.attach(projection)` (`ViewHost` below, which the store composes) keeps it: every
append runs `apply` on the appended entries inside the append's own transaction, under the
head lock, so a view is never behind a commit of a process that attached it. `ledger_views`
records how many entries each projection has applied, so entries appended by a process that
had not attached it (an older version, a tool that only appends) are folded in at the next
append, or when a reader asks (`LogStore.refresh_view`). A view whose stored tables have other
columns than the attached projection's (kept by another version of accord) is made anew and
folded from the log when attached. `LogStore.reindex()` empties every attached view and folds
the whole log again, in one transaction: the log alone rebuilds them (`accord ledger reindex`).

A projection must never make a valid append fail: an entry it cannot fold (an invalid
transition in an old or hostile log) is recorded on its row, not raised. An entry whose bytes
do not parse (only a tampered store holds one) is skipped: the audit names it.

Paging, shared by every view: `limit` is 1..`MAX_LIMIT` (default `DEFAULT_LIMIT`), and a page
ends with a cursor that the next query passes back (`encode_cursor`/`decode_cursor`): keyset
pages, so a page costs the same however deep it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import BigInteger, Engine, Table, bindparam, insert, inspect, select, update
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError
from sqlmodel import Column, Field, SQLModel

from accord.ledger.database import (
    ENTRIES,
    as_bytes,
    db_reason,
    driver_mark,
    lock_head,
    read_connection,
    statement_connection,
)
from accord.ledger.errors import MalformedError, QueryError, StoreError
from accord.ledger.events import Event

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def micros(moment: datetime) -> int:
    """Microseconds since the Unix epoch as an integer: how views and tables store times they
    sort or compare with the clock (no float). Raises ValueError for a naive datetime."""
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise ValueError("times must be timezone-aware datetimes")
    return (moment - _EPOCH) // _MICROSECOND


def from_micros(count: int) -> datetime:
    """The moment `micros` stored (UTC)."""
    return _EPOCH + count * _MICROSECOND


@dataclass(frozen=True)
class ViewEntry:
    """A log entry as a projection folds it: its index and its (signed) event."""

    index: int
    event: Event


class Projection(Protocol):
    """A read view kept from the log (see the module docstring)."""

    name: str
    tables: Sequence[Table]

    def apply(self, connection: Any, entries: Sequence[ViewEntry]) -> None:
        """Fold `entries` (consecutive, in index order) into the view's tables. Raises only
        what the database raises: an entry it cannot fold is recorded, not raised."""
        ...

    def reset(self, connection: Any) -> None:
        """Delete every row of the view's tables."""
        ...


class AppliedView(SQLModel, table=True):
    """How many entries of the log a projection has folded into its tables."""

    __tablename__ = "ledger_views"

    name: str = Field(primary_key=True)
    applied: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


VIEWS_TABLE: Table = AppliedView.__table__  # type: ignore[attr-defined]
_APPLIED_OF = select(VIEWS_TABLE.c.name, VIEWS_TABLE.c.applied).where(
    VIEWS_TABLE.c.name.in_(bindparam("names", expanding=True))
)
_RECORD_APPLIED = (
    update(VIEWS_TABLE)
    .where(VIEWS_TABLE.c.name.in_(bindparam("names", expanding=True)))
    .values(applied=bindparam("count"))
)


def applied(connection: Any, name: str) -> int:
    """How many entries the projection `name` has applied (0, recorded, when it is new)."""
    found = connection.execute(
        select(VIEWS_TABLE.c.applied).where(VIEWS_TABLE.c.name == name)
    ).scalar_one_or_none()
    if found is None:
        connection.execute(insert(VIEWS_TABLE).values(name=name, applied=0))
        return 0
    return int(found)


def applied_all(connection: Any, names: Sequence[str]) -> dict[str, int]:
    """`applied` of each projection of `names`, read in one query (the new ones recorded)."""
    if not names:
        return {}
    rows = connection.execute(_APPLIED_OF, {"names": list(names)}).all()
    found = {str(name): int(count) for name, count in rows}
    for name in names:
        if name not in found:
            found[name] = applied(connection, name)
    return found


def stored_columns(bind: Any, tables: Sequence[Table]) -> dict[str, set[str] | None]:
    """The columns the database holds for each of `tables` (None: it holds no such table).
    `bind` is an engine or a connection."""
    inspector = inspect(bind)
    return {
        table.name: (
            {column["name"] for column in inspector.get_columns(table.name)}
            if inspector.has_table(table.name)
            else None
        )
        for table in tables
    }


def outdated(stored: dict[str, set[str] | None], tables: Sequence[Table], applied: int) -> bool:
    """Whether a view must be made anew (pure): a table of it is stored with other columns
    than `tables` have (another version of accord kept it), or one is missing though the view
    has applied entries (its folds would be lost)."""
    for table in tables:
        columns = stored.get(table.name)
        if columns is None and applied > 0:
            return True
        if columns is not None and columns != set(table.columns.keys()):
            return True
    return False


def applied_count(bind: Any, name: str) -> int:
    """How many entries the view `name` has applied (0 when none is recorded); read only."""
    found = bind.execute(select(VIEWS_TABLE.c.applied).where(VIEWS_TABLE.c.name == name))
    return int(found.scalar_one_or_none() or 0)


def record_applied(connection: Any, name: str, count: int) -> None:
    record_applied_all(connection, [name], count)


def record_applied_all(connection: Any, names: Sequence[str], count: int) -> None:
    """Record that each projection of `names` has applied `count` entries (one statement)."""
    if names:
        connection.execute(_RECORD_APPLIED, {"names": list(names), "count": count})


class ViewReader(Protocol):
    """What `reading` needs of a log store: its engine and a way to bring views level."""

    @property
    def engine(self) -> Engine: ...

    def refresh_view(self, *names: str) -> None: ...


class ViewHost:
    """The read views attached to the log in `engine`'s database: attaching them, folding
    each append into them in the append's own transaction (`project`, called by the log
    under its head lock), bringing them level with entries other processes appended
    (`refresh_view`), and rebuilding them from the log alone (`reindex`). Raises StoreError
    for database failures."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._projections: dict[str, Projection] = {}
        self._postgres = engine.dialect.name == "postgresql"
        self._level_texts: dict[tuple[int, bool], str] = {}

    @property
    def names(self) -> tuple[str, ...]:
        """The attached views' names, in the order they were attached."""
        return tuple(self._projections)

    def attach(self, projection: Projection) -> None:
        """Keep `projection` from now on: create its tables, fold in what it has not applied,
        and apply it to every append, in the append's transaction. Tables stored with other
        columns than its own (another version's) are made anew and folded from the log.
        Attaching one of the same name again does nothing. Raises StoreError."""
        if projection.name in self._projections:
            return
        tables = [VIEWS_TABLE, *projection.tables]
        try:
            stored = stored_columns(self.engine, projection.tables)
            try:
                SQLModel.metadata.create_all(self.engine, tables=tables)
            except (IntegrityError, OperationalError, ProgrammingError):
                # another process created them meanwhile (PostgreSQL's catalog refuses a
                # second CREATE): they are there now, which a second pass checks
                SQLModel.metadata.create_all(self.engine, tables=tables)
            with read_connection(self.engine) as connection:
                done = applied_count(connection, projection.name)
            if outdated(stored, projection.tables, done):
                self._rebuild_view(projection)
        except SQLAlchemyError as exc:
            reason = db_reason(exc)
            raise StoreError(f"cannot prepare the {projection.name} view: {reason}") from exc
        self._projections[projection.name] = projection
        self.refresh_view(projection.name)

    def _rebuild_view(self, projection: Projection) -> None:
        """Drop and create the view's tables and fold the log into them from the start (by
        `refresh_view`, right after), under the head lock: appends wait. Two processes that
        start together may both do it; the second rebuild gives the same rows."""
        with self.engine.begin() as connection:
            lock_head(connection)
            for table in reversed(projection.tables):
                table.drop(connection, checkfirst=True)
            for table in projection.tables:
                table.create(connection)
            applied(connection, projection.name)
            record_applied(connection, projection.name, 0)

    def refresh_view(self, *names: str) -> None:
        """Fold into the attached views `names` the entries they have not applied yet
        (appended by a process that did not keep them), in the order they were attached; one
        read when they are level: one statement, sent to the driver as it is (every read of
        a view asks it first). Raises StoreError."""
        wanted = [p for name, p in self._projections.items() if name in names]
        if not wanted:
            return
        try:
            with read_connection(self.engine) as connection:
                _size, level = self.head_and_level(connection, tuple(p.name for p in wanted))
            if level:
                return
            with self.engine.begin() as connection:
                size = lock_head(connection)
                self._catch_up(connection, wanted, size)
        except SQLAlchemyError as exc:
            raise StoreError(
                f"cannot bring the {', '.join(names)} view up to date: {db_reason(exc)}"
            ) from exc

    def _level_sql(self, count: int, *, lock: bool = False) -> str:
        """The SQL text of the log's size and how many of `count` named views have applied
        exactly that many entries, in the driver's parameter style; `lock`: the head row is
        locked too (FOR UPDATE on PostgreSQL; SQLite's writer already holds the database)."""
        key = (count, lock and self._postgres)
        text = self._level_texts.get(key)
        if text is None:
            mark = driver_mark(self.engine)
            text = (
                "SELECT size, (SELECT count(*) FROM ledger_views WHERE name IN "
                f"({', '.join([mark] * count)}) AND applied = ledger_head.size) "
                "FROM ledger_head WHERE id = 1"
            )
            if key[1]:
                text += " FOR UPDATE OF ledger_head"
            self._level_texts[key] = text
        return text

    def reindex(self) -> dict[str, int]:
        """Empty every attached view and fold the whole log into it again, in one transaction
        (writers wait); returns how many entries each one applied. Raises StoreError."""
        try:
            with self.engine.begin() as connection:
                size = lock_head(connection)
                for name, projection in self._projections.items():
                    projection.reset(connection)
                    applied(connection, name)
                    record_applied(connection, name, 0)
                self._catch_up(connection, list(self._projections.values()), size)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot rebuild the read views: {db_reason(exc)}") from exc
        return dict.fromkeys(self._projections, size)

    def project(
        self,
        connection: Any,
        start: int,
        batch: list[ViewEntry],
        *,
        level: bool = False,
        recorded: bool = False,
    ) -> None:
        """Apply every attached view to an append's entries (they start at index `start`);
        `level`: every view is known to have applied the `start` entries before them, so
        none needs catching up; `recorded`: their new count is written already."""
        projections = list(self._projections.values())
        if not level:
            self._catch_up(connection, projections, start)
        for projection in projections:
            projection.apply(connection, batch)
        if not recorded:
            record_applied_all(connection, list(self._projections), start + len(batch))

    def _catch_up(
        self, connection: Any, projections: Sequence[Projection], size: int, chunk: int = 5000
    ) -> None:
        """Fold into each view the stored entries it has not applied, up to `size`, under the
        head lock; each chunk of the log is read and parsed once for all of them."""
        done = applied_all(connection, [p.name for p in projections])
        position = min(done.values(), default=size)
        while position < size:
            stop = min(size, position + chunk)
            rows = connection.execute(
                select(ENTRIES.c.idx, ENTRIES.c.data)
                .where(ENTRIES.c.idx >= position, ENTRIES.c.idx < stop)
                .order_by(ENTRIES.c.idx)
            ).all()
            parsed = parse_stored((int(i), as_bytes(d)) for i, d in rows)
            for projection in projections:
                since = done[projection.name]
                if since < stop:
                    projection.apply(connection, [e for e in parsed if e.index >= since])
            position = stop
        behind = [projection.name for projection in projections if done[projection.name] < size]
        if behind:
            record_applied_all(connection, behind, size)

    def lock_head_and_level(self, connection: Any) -> tuple[int, bool]:
        """`_lock_head`'s size, and whether every attached view has applied exactly that
        many entries (then an append need not read each view's count), in one statement."""
        if not self._projections:
            return lock_head(connection), True
        return self.head_and_level(connection, tuple(self._projections), lock=True)

    def head_and_level(
        self, connection: Any, names: tuple[str, ...], *, lock: bool = False
    ) -> tuple[int, bool]:
        """The log's size, and whether every view of `names` (at least one) has applied
        exactly that many entries: one driver statement (`_level_sql`)."""
        size, level = connection.exec_driver_sql(
            self._level_sql(len(names), lock=lock), names
        ).one()
        return int(size), int(level) == len(names)


@contextmanager
def reading(store: ViewReader, name: str, *after: str) -> Iterator[Any]:
    """A connection to query the attached view `name` (and the views `after` it reads), all
    brought level with the log first: a `statement_connection`, whose reads never wait for a
    writer (each statement sees the views as they are when it runs).

    Raises StoreError when the database cannot be read.
    """
    store.refresh_view(name, *after)
    try:
        with statement_connection(store.engine) as connection:
            yield connection
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot read the {name} view: {exc}") from exc


def parse_stored(rows: Iterable[tuple[int, bytes]]) -> list[ViewEntry]:
    """Stored (index, leaf data) rows as view entries; one that does not parse is skipped.

    The events are read, not verified: a view is a convenience whose rows the audit never
    trusts (it verifies every signature and canonical form itself), so folding the log skips
    the canonical-form check that costs more than the rest of a fold."""
    parsed = []
    for index, data in rows:
        try:
            value = json.loads(data)
            parsed.append(ViewEntry(index, Event.from_json(value["event"])))
        except (MalformedError, ValueError, KeyError, TypeError):
            continue
    return parsed


# -- paging ----------------------------------------------------------------------------------


def check_limit(limit: int | None) -> int:
    """The page size asked for (None: the default). Raises QueryError outside 1..MAX_LIMIT."""
    if limit is None:
        return DEFAULT_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise QueryError(
            "limit", f"limit must be a whole number from 1 to {MAX_LIMIT}, not {limit!r}"
        )
    return limit


def encode_cursor(view: str, key: str) -> str:
    """A cursor of `view` that resumes after `key`: `<view>.<key>` (clients pass it back as
    they got it; its form is declared in the OpenAPI so a malformed one is refused there)."""
    return f"{view}.{key}"


def decode_cursor(view: str, cursor: str | None) -> str | None:
    """The key a cursor of `view` resumes after (None for no cursor).

    Raises QueryError for a cursor this view did not hand out.
    """
    if cursor is None or cursor == "":
        return None
    prefix, _, key = cursor.partition(".")
    if prefix != view or not key or len(cursor) > 400:
        raise QueryError(
            "cursor",
            f"{cursor[:80]!r} is not a cursor of the {view} list: pass back the next_cursor "
            "of a previous page, or none for the first page",
        )
    return key


def int_key(view: str, cursor: str | None) -> int | None:
    """A cursor whose key is a log index. Raises QueryError for anything else."""
    key = decode_cursor(view, cursor)
    if key is None:
        return None
    if not key.isdigit() or len(key) > 18:
        raise QueryError("cursor", f"the cursor of the {view} list does not hold a position")
    return int(key)
