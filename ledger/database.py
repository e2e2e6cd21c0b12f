"""The log's database: its tables, the engine and connections to SQLite (default) or
PostgreSQL, and the few statements every part of the log shares (the head row).

Tables
    ledger_head         one row: the log id and its size; every append locks it
    ledger_entries      index, actor, seq, kind, subject, time, leaf data (JCS of the entry)
    ledger_tiles        the Merkle tree as C2SP tlog-tiles (`accord.ledger.tiles`): one row per
                        tile, keyed by (tile level, index, width); a full tile's row never
                        changes, the rightmost tile of each level is one row at its latest width
    ledger_checkpoints  signed tree heads
    ledger_once         (kind, subject) -> index for the kinds logged at most once per subject,
                        and (kind, key) for entries appended with a once-key
    ledger_nodes        the tree as an earlier accord stored it (`accord.ledger.tile_migration`)

Writers serialise on the head row (`BEGIN IMMEDIATE` on SQLite, `SELECT … FOR UPDATE` on
PostgreSQL), so several processes may append to one log safely. The other modules of accord
that keep tables of their own (identity, the market, the service) open them with the same
engine and helpers (`create_tables`, `statement_connection`, `upsert`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    DDL,
    BigInteger,
    Connection,
    Engine,
    Index,
    Integer,
    LargeBinary,
    Table,
    event,
    insert,
    inspect,
    select,
)
from sqlalchemy.exc import (
    DisconnectionError,
    IntegrityError,
    OperationalError,
    ProgrammingError,
    SQLAlchemyError,
)
from sqlmodel import Column, Field, SQLModel, create_engine

from accord.ledger.errors import StoreError


def db_reason(exc: BaseException) -> str:
    """The driver's message without SQLAlchemy's statement and parameter dump: what a
    StoreError says of a database failure (the log store and the anchor journal)."""
    original = getattr(exc, "orig", None)
    return str(original if original is not None else exc).strip().splitlines()[0]


_ROW_KEY = BigInteger().with_variant(Integer, "sqlite")
"""The integer key of entries and nodes. On SQLite a primary key declared exactly `INTEGER`
is the table's rowid: rows are stored in key order with no second b-tree for the key, which
halves the b-tree writes of a node row (a log made before keeps its `BIGINT` keys and works
the same, a little slower). 64-bit either way."""


class LedgerHead(SQLModel, table=True):
    __tablename__ = "ledger_head"

    id: int = Field(default=1, primary_key=True)
    log_id: str
    size: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


class LedgerEntry(SQLModel, table=True):
    __tablename__ = "ledger_entries"

    idx: int = Field(sa_column=Column(_ROW_KEY, primary_key=True, autoincrement=False))
    # No index of its own: (actor, seq) serves every lookup by actor, and a second index of
    # the same did strings cost a tenth of an append (a log made before keeps its own).
    actor: str
    seq: int = Field(sa_column=Column(BigInteger, nullable=False))
    kind: str = Field(index=True)
    subject: str = Field(index=True)
    at: str
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))

    __table_args__ = (Index("ix_ledger_entries_actor_seq", "actor", "seq"),)


class LedgerOnce(SQLModel, table=True):
    __tablename__ = "ledger_once"

    kind: str = Field(primary_key=True)
    subject: str = Field(primary_key=True)
    idx: int = Field(sa_column=Column(BigInteger, nullable=False))


class LedgerNode(SQLModel, table=True):
    """The tree as accord stored it before tiles: one row per perfect subtree, keyed by
    `level << 48 | position`. Read only by `migrate_to_tiles`, which drops it."""

    __tablename__ = "ledger_nodes"

    id: int = Field(sa_column=Column(_ROW_KEY, primary_key=True, autoincrement=False))
    hash: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class LedgerTile(SQLModel, table=True):
    """A stored tile (`accord.ledger.tiles`): `id` is `tiles.tile_key(level, index, width)`,
    `hashes` the tile's hashes and the perfect subtrees inside it (`tiles.tile_row`)."""

    __tablename__ = "ledger_tiles"

    id: int = Field(sa_column=Column(_ROW_KEY, primary_key=True, autoincrement=False))
    hashes: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class LedgerCheckpoint(SQLModel, table=True):
    __tablename__ = "ledger_checkpoints"

    size: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    root: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    at: str
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


ENTRIES = LedgerEntry.__table__  # type: ignore[attr-defined]
NODES = LedgerNode.__table__  # type: ignore[attr-defined]
HEAD = LedgerHead.__table__  # type: ignore[attr-defined]
CHECKPOINTS = LedgerCheckpoint.__table__  # type: ignore[attr-defined]
ONCE = LedgerOnce.__table__  # type: ignore[attr-defined]
TILES = LedgerTile.__table__  # type: ignore[attr-defined]
# A tile row (up to 16 KiB of hashes) is stored out of line by PostgreSQL; hashes do not
# compress, so it is told not to try (the table is made so once, when it is created).
event.listen(
    TILES,
    "after_create",
    DDL(  # type: ignore[no-untyped-call]
        "ALTER TABLE ledger_tiles ALTER COLUMN hashes SET STORAGE EXTERNAL"
    ).execute_if(dialect="postgresql"),
)
LEDGER_TABLES = [HEAD, ENTRIES, TILES, CHECKPOINTS, ONCE]


def make_engine(db_url: str) -> Engine:
    """An engine for `db_url`; SQLite gets WAL, full sync and writer-serialising BEGIN IMMEDIATE.

    Raises StoreError when the URL names no database accord can open.
    """
    try:
        if db_url.startswith("sqlite"):
            engine = create_engine(db_url, connect_args={"timeout": 30})

            @event.listens_for(engine, "connect")
            def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
                dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
                cursor = dbapi_connection.cursor()
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute("PRAGMA synchronous=FULL")
                cursor.execute("PRAGMA busy_timeout=30000")
                cursor.close()

            @event.listens_for(engine, "begin")
            def _sqlite_begin(connection: Any) -> None:
                if connection.get_execution_options().get(_STATEMENTS_ALONE):
                    return  # `statement_connection`: each statement its own transaction
                connection.exec_driver_sql("BEGIN IMMEDIATE")

            return engine
        engine = create_engine(db_url, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)
        _ping_after_idle(engine)
        return engine
    except (SQLAlchemyError, ValueError, ModuleNotFoundError) as exc:
        raise StoreError(f"cannot open the log database {db_url!r}: {db_reason(exc)}") from exc


POOL_SIZE = 20
POOL_OVERFLOW = 20
"""Server connections a process keeps open, and how many more it opens (and closes again) at
a peak. A service runs up to 40 requests at once in worker threads, each taking a connection
for its statements: with SQLAlchemy's default of 5 kept, a service under load opened and
closed a connection (a server process on PostgreSQL) every few requests."""

IDLE_PING_S = 2.0
"""A pooled server connection unused for this long is pinged before it is handed out."""
_LAST_USED = "accord_last_used"


def _ping_after_idle(engine: Engine) -> None:
    """Check out connections the way `pool_pre_ping` does, but ping only those that sat idle
    in the pool for `IDLE_PING_S` or more: a busy service pays no extra round trip per
    checkout, and one that sat quiet while the database restarted finds its dead connections
    out before using them. A connection that breaks while busy fails its statement; SQLAlchemy
    then sees the disconnect and invalidates the pool, so the next checkout connects anew."""

    @event.listens_for(engine, "connect")
    def _connected(_dbapi_connection: Any, record: Any) -> None:
        record.info[_LAST_USED] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info[_LAST_USED] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if time.monotonic() - record.info.get(_LAST_USED, 0.0) < IDLE_PING_S:
            return
        try:
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute("SELECT 1")
            finally:
                cursor.close()
            dbapi_connection.rollback()  # hand it out idle, as the pool keeps it
        except Exception as exc:  # any failure: the pool discards it and connects again
            raise DisconnectionError(f"the pooled connection is gone: {exc}") from exc


_STATEMENTS_ALONE = "accord_statements_alone"
"""The execution option that marks a `statement_connection` on SQLite: no BEGIN is sent."""


def statement_connection(engine: Engine) -> Connection:
    """A connection for work that needs no transaction of its own: one statement, or reads
    that need not see one snapshot. Every statement is a transaction of its own: on PostgreSQL
    it runs in autocommit, sparing the BEGIN and COMMIT round trips (at PostgreSQL's READ
    COMMITTED every statement sees a snapshot of its own either way; a single INSERT is atomic
    by itself). On SQLite no BEGIN is sent either, so a read takes a WAL snapshot and never
    waits for a writer: the `BEGIN IMMEDIATE` of other connections, which keeps writers in
    line, would make every read queue behind every write and its fsync. Raises
    SQLAlchemyError."""
    connection = engine.connect()
    if engine.dialect.name == "postgresql":
        return connection.execution_options(isolation_level="AUTOCOMMIT")
    return connection.execution_options(**{_STATEMENTS_ALONE: True})


def driver_mark(bind: Engine | Connection) -> str:
    """The positional parameter marker of `bind`'s driver, for SQL text sent to it with
    `exec_driver_sql`: "?" for sqlite3 (qmark), "%s" for psycopg (format)."""
    return "?" if bind.dialect.paramstyle == "qmark" else "%s"


def upsert_sql(
    mark: str, table: Table, columns: Sequence[str], keys: Sequence[str], updated: Sequence[str]
) -> str:
    """`upsert` as SQL text for the driver itself (`exec_driver_sql`, parameter marker
    `mark`), each row a tuple of `columns` in that order: for statements run at every append,
    where SQLAlchemy's compiled-statement machinery costs more CPU than the database's insert.
    Raises ValueError for a name that is not a column of `table`."""
    unknown = sorted({*columns, *keys, *updated} - {column.name for column in table.columns})
    if unknown:
        raise ValueError(f"{table.name} has no column {', '.join(unknown)}")
    return (
        f"INSERT INTO {table.name} ({', '.join(columns)}) "
        f"VALUES ({', '.join([mark] * len(columns))}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
        + ", ".join(f"{name} = excluded.{name}" for name in updated)
    )


def upsert(table: Any, dialect: str, keys: Sequence[Any], updated: Sequence[str]) -> Any:
    """One statement that INSERTs a row into `table` or, where a row with the same `keys`
    (its primary key or a unique index) is already there, sets only its `updated` columns to
    the new row's values: ON CONFLICT DO UPDATE, which both of accord's databases speak
    (`dialect` is "postgresql" or "sqlite"). Rows go in as the statement's parameters. Unlike a
    read, then an INSERT or an UPDATE, it cannot fail on the key when two processes write the
    same row at once. Raises ValueError for another dialect."""
    from sqlalchemy.dialects import postgresql, sqlite  # the CLI's start-up needs neither

    if dialect not in ("postgresql", "sqlite"):
        raise ValueError(
            f"no upsert for the {dialect} dialect: accord stores in SQLite or PostgreSQL"
        )
    insert_into = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert_into(table)
    return statement.on_conflict_do_update(
        index_elements=list(keys), set_={name: statement.excluded[name] for name in updated}
    )


def create_tables(engine: Engine, tables: Sequence[Any]) -> None:
    """Create the missing `tables` (and their indexes). Several processes may start at once on
    one PostgreSQL: a CREATE racing another one's for the same table fails on the catalog's
    unique keys, and is then checked again (the table is there). Raises SQLAlchemyError."""
    try:
        SQLModel.metadata.create_all(engine, tables=list(tables))
    except (IntegrityError, OperationalError, ProgrammingError):
        SQLModel.metadata.create_all(engine, tables=list(tables))


def as_bytes(value: Any) -> bytes:
    """A stored blob as bytes; SQLite's dynamic typing may hand back text, which is encoded
    (and then fails verification) rather than crashing the reader."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8", "surrogateescape")


READ_HEAD = select(HEAD.c.size).where(HEAD.c.id == 1)
LOCK_HEAD = READ_HEAD.with_for_update()


def read_connection(engine: Engine) -> Any:
    """A `statement_connection` for a read of the log. Raises StoreError when the database
    cannot be reached."""
    try:
        return statement_connection(engine)
    except OperationalError as exc:
        raise StoreError(f"cannot reach the log database: {db_reason(exc)}") from exc


def lock_head(connection: Any) -> int:
    """The log's size, its head row locked until the transaction ends (on SQLite the
    transaction's BEGIN IMMEDIATE holds the database's write lock already)."""
    query = LOCK_HEAD if connection.dialect.name == "postgresql" else READ_HEAD
    return int(connection.execute(query).scalar_one())


def prepare_log(engine: Engine, log_id: str) -> None:
    """Create the log's missing tables and its head row, refuse a database of another log or
    one whose tree is still stored as node rows, and index the entries by actor and seq.
    Several processes may do it at once. Raises StoreError."""
    try:
        create_tables(engine, LEDGER_TABLES)
        with engine.begin() as connection:
            head = connection.execute(select(HEAD.c.log_id)).scalar_one_or_none()
            if head is None:
                connection.execute(insert(HEAD).values(id=1, log_id=log_id, size=0))
            elif head != log_id:
                raise StoreError(
                    f"this database holds log {head!r}, not {log_id!r} (check ACCORD_LOG_ID)"
                )
    except IntegrityError:
        pass  # another process created the head row first
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot prepare the log tables: {db_reason(exc)}") from exc
    _refuse_untiled(engine, log_id)
    _index_actor_seqs(engine)


def _refuse_untiled(engine: Engine, log_id: str) -> None:
    """Raise StoreError when the log holds entries, no tiles, and node rows: an earlier
    accord wrote its tree as node rows (`ledger_nodes`), which `accord ledger migrate`
    converts. (Entries with neither are a damaged log, which `verify_log` reports.)"""
    try:
        with read_connection(engine) as connection:
            size = int(connection.execute(READ_HEAD).scalar_one())
            tiled = connection.execute(select(TILES.c.id).limit(1)).first() is not None
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot read the log database: {db_reason(exc)}") from exc
    if size and not tiled and inspect(engine).has_table("ledger_nodes"):
        raise StoreError(
            f"the log {log_id!r} holds {size} entries but no tiles: an earlier accord "
            "stored its tree as node rows; run `accord ledger migrate` to convert it"
        )


def _index_actor_seqs(engine: Engine) -> None:
    """The (actor, seq) index answers an actor's highest seq at once, however many entries
    it signed (the operator signs most of them); created on a log made before it existed."""
    for index in ENTRIES.indexes:
        if index.name == "ix_ledger_entries_actor_seq":
            try:
                index.create(engine, checkfirst=True)
            except SQLAlchemyError:
                # another process created it between the check and the create
                if not inspect(engine).has_index("ledger_entries", index.name):
                    raise StoreError("cannot index the log by actor and seq") from None


_MMAP_DONE = "accord_mmap"
_SQLITE_MMAP_BYTES = 1 << 31
"""Reads through `raw_select` memory-map the SQLite file (up to SQLite's own cap)."""


def raw_select(engine: Engine, query: str, params: Sequence[Any]) -> list[Any]:
    """Run one SELECT on a pooled SQLite connection's driver cursor (autocommit): no BEGIN,
    no SQLAlchemy statement machinery, on a memory-mapped connection (the proofs' path).
    Raises StoreError when the database cannot be read."""
    dbapi_error: type[Exception] = getattr(engine.dialect.dbapi, "Error", Exception)
    try:
        raw = engine.raw_connection()
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot reach the log database: {db_reason(exc)}") from exc
    try:
        if not raw.info.get(_MMAP_DONE):
            setup = raw.cursor()
            try:
                setup.execute(f"PRAGMA mmap_size={_SQLITE_MMAP_BYTES}")
            finally:
                setup.close()
            raw.info[_MMAP_DONE] = True
        cursor = raw.cursor()
        try:
            cursor.execute(query, params)
            return list(cursor.fetchall())
        finally:
            cursor.close()
    except dbapi_error as exc:
        raise StoreError(f"cannot read the log database: {db_reason(exc)}") from exc
    finally:
        raw.close()
