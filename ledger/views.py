"""Read views: tables folded from the log for the queries users make. The log stays the source
of truth; the audit never reads a view.

A *projection* owns a few tables and folds log entries into them:

    name                         its key in `ledger_views`
    tables                       the tables it owns (created when it is attached)
    apply(connection, entries)   fold a run of entries, in index order, into its tables
    reset(connection)            empty its tables

`LogStore.attach(projection)` keeps it: every append runs `apply` on the appended entries
inside the append's own transaction, under the head lock, so a view is never behind a commit
of a process that attached it. `ledger_views` records how many entries each projection has
applied, so entries appended by a process that had not attached it (an older version, a
tool that only appends) are folded in at the next append, or when a reader asks
(`LogStore.refresh_view`). A view whose stored tables have other columns than the attached
projection's (kept by another version of accord) is made anew and folded from the log when
attached. `LogStore.reindex()` empties every attached view and folds the
whole log again, in one transaction: the log alone rebuilds them (`accord ledger reindex`).

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
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import BigInteger, Table, bindparam, insert, inspect, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Column, Field, SQLModel

from accord.ledger.errors import MalformedError, QueryError, StoreError
from accord.ledger.events import Event

if TYPE_CHECKING:
    from accord.ledger.store import LogStore

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


@contextmanager
def reading(store: LogStore, name: str, *after: str) -> Iterator[Any]:
    """A connection to query the attached view `name` (and the views `after` it reads), all
    brought level with the log first: a `statement_connection`, whose reads never wait for a
    writer (each statement sees the views as they are when it runs).

    Raises StoreError when the database cannot be read.
    """
    from accord.ledger.store import statement_connection  # store imports this module

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
