"""The persistent Merkle log: SQLModel tables on SQLite (default) or PostgreSQL.

Tables
    ledger_head         one row: the log id and its size; every append locks it
    ledger_entries      index, actor, seq, kind, subject, time, leaf data (JCS of the entry)
    ledger_tiles        the Merkle tree as C2SP tlog-tiles (`accord.ledger.tiles`): one row per
                        tile, keyed by (tile level, index, width); a full tile's row never
                        changes, the rightmost tile of each level is one row at its latest width
    ledger_checkpoints  signed tree heads
    ledger_once         (kind, subject) -> index for the kinds logged at most once per subject,
                        and (kind, key) for entries appended with a once-key

Some event kinds happen at most once per subject (a task is awarded, settled... once). The
store enforces it for every writer, in every process and on every machine: an append holding
such an entry inserts its `(kind, subject)` into `ledger_once`, whose primary key refuses a
second one, in the same transaction as the entry, so a second append raises
AlreadyLoggedError and writes nothing. A log written before the table existed is indexed
into it when first opened (the first of any duplicates it holds is the one kept). A writer may
also give an entry a *once-key* of its own (`append_batch(..., once_keys=...)`): the market
keys a sealed bid by task and bidder, so one bidder's commitment sent to two processes at once
is admitted by one of them only.

An append computes its leaves and the perfect subtrees it completes from the log's
*frontier* (the at most log2(n) perfect subtrees that make up the current tree) and its
*partial tiles* (the rightmost tile of each tile level, kept in memory beside the frontier),
and writes each tile it touched as one row, with the entries, in one transaction: a batch of
1,000 entries writes about five tile rows, where a row per tree node cost more than the
entries themselves. A row holds the tile as served (its 256, or W, hashes of tree level 8*L)
and the perfect subtrees inside it (tree levels 8*L+1 to 8*L+7), so a proof or root reads one
row per tile level it crosses (about three at a million entries) and hashes nothing. A partial
tile's row is keyed by its width: the append that widens it inserts the wider row and deletes
the narrower one, in the same transaction; a reader asks for any row of the tile at least as
wide as it needs, and a partial tile is a prefix of every wider one, so no reader sees a hash
change. Full tiles of tile level 1 and up are kept in a small in-memory cache.
A batch is one transaction: durable or absent, never half there.

Leaf hashes stay stored, in the level-0 tiles, so `verify_log` compares every tile with the
one the entries make and names the very entry that was inserted, deleted or moved. A log an
earlier accord wrote with one row per tree node (`ledger_nodes`) is refused until
`migrate_to_tiles` (`accord ledger migrate`) converts it and proves its roots unchanged.

Group commit: the appends a process's threads make while one of them is writing wait for it,
then the first of them writes all that waited in one transaction (one head lock, one insert
per table). Each append is still checked on its own: one whose seq does not grow, or whose
once-key is taken, is refused alone, and the others are written.

Writers serialise on the head row (`BEGIN IMMEDIATE` on SQLite, `SELECT … FOR UPDATE` on
PostgreSQL), so several processes may append to one log safely.

Read views (`accord.ledger.views`: tasks, credentials...) attached to the store are folded from each
append in the same transaction, and can be rebuilt from the log alone (`reindex`).

The journal of the transactions that anchor checkpoints on chain is not the log's: it is
`accord.ledger.anchor_journal` (table `ledger_anchors`, in the same database).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
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
    bindparam,
    delete,
    event,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.exc import (
    DisconnectionError,
    IntegrityError,
    OperationalError,
    ProgrammingError,
    SQLAlchemyError,
)
from sqlmodel import Column, Field, SQLModel, create_engine

from accord.ledger import merkle, tiles, views
from accord.ledger.errors import AlreadyLoggedError, LedgerError, SequenceError, StoreError
from accord.ledger.events import Entry
from accord.ledger.merkle import NodeId
from accord.ledger.tiles import TILE_HEIGHT, TILE_WIDTH, EdgeTile, tile_key
from accord.ledger.views import Projection, ViewEntry

NODE_INDEX_BITS = 48
"""The key of a node row of the earlier layout (`LedgerNode`) is `level << 48 | position`."""

#: Event kinds logged at most once per subject (an agent's registration, the market's
#: lifecycle steps that move money or decide who is paid). A property of the log, so that
#: every writer enforces it.
ONCE_PER_SUBJECT: frozenset[str] = frozenset(
    {
        "agent.registered",
        "escrow.opened",
        "task.awarded",
        "task.expired",
        "escrow.refunded",
        "task.started",
        "task.delivered",
        "settlement.computed",
        "task.settled",
        "task.closed",
    }
)


def db_reason(exc: BaseException) -> str:
    """The driver's message without SQLAlchemy's statement and parameter dump: what a
    StoreError says of a database failure (the log store and the anchor journal)."""
    original = getattr(exc, "orig", None)
    return str(original if original is not None else exc).strip().splitlines()[0]


def node_key(node: NodeId) -> int:
    """The key of a perfect subtree's row in the earlier layout (`LedgerNode`)."""
    return (node.level << NODE_INDEX_BITS) | node.position


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


_ENTRIES = LedgerEntry.__table__  # type: ignore[attr-defined]
_NODES = LedgerNode.__table__  # type: ignore[attr-defined]
_HEAD = LedgerHead.__table__  # type: ignore[attr-defined]
_CHECKPOINTS = LedgerCheckpoint.__table__  # type: ignore[attr-defined]
_ONCE = LedgerOnce.__table__  # type: ignore[attr-defined]
_TILES = LedgerTile.__table__  # type: ignore[attr-defined]
# A tile row (up to 16 KiB of hashes) is stored out of line by PostgreSQL; hashes do not
# compress, so it is told not to try (the table is made so once, when it is created).
event.listen(
    _TILES,
    "after_create",
    DDL(  # type: ignore[no-untyped-call]
        "ALTER TABLE ledger_tiles ALTER COLUMN hashes SET STORAGE EXTERNAL"
    ).execute_if(dialect="postgresql"),
)
_LEDGER_TABLES = [_HEAD, _ENTRIES, _TILES, _CHECKPOINTS, _ONCE]


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


@dataclass(frozen=True)
class StoredEntry:
    """An entry as read back: its index in the log and its leaf data.

    `columns` are the indexed copies (actor, seq, kind, subject, at) that queries answer
    from, when they were read; verification checks them against the signed data.
    """

    index: int
    data: bytes
    columns: tuple[Any, ...] | None = None

    @property
    def leaf_hash(self) -> bytes:
        return merkle.leaf_hash(self.data)


@dataclass(frozen=True)
class StoredCheckpoint:
    size: int
    root: bytes
    at: str
    data: bytes


class LogStore:
    """One Merkle log in one database.

    Raises StoreError for database failures, SequenceError when an actor's seq would not grow
    and AlreadyLoggedError when a kind of `once_per_subject` is logged again for a subject;
    either way nothing of the failed batch is written.
    """

    def __init__(
        self,
        engine: Engine,
        log_id: str,
        *,
        once_per_subject: Collection[str] = ONCE_PER_SUBJECT,
        projections: Sequence[Projection] = (),
    ) -> None:
        self.engine = engine
        self._projections: dict[str, Projection] = {}
        self.log_id = log_id
        self.once_per_subject = frozenset(once_per_subject)
        self._frontier: list[tuple[NodeId, bytes]] = []
        self._edges: dict[int, EdgeTile] = {}
        self._frontier_size = -1
        self._last_seq: dict[str, int] = {}
        # Appends of this process: the waiting ones, and the lock of the one writing them.
        self._appending = threading.Lock()
        self._waiting_lock = threading.Lock()
        self._waiting: list[_Append] = []
        self._postgres = engine.dialect.name == "postgresql"
        # Read path of proofs and roots (see `_read_tiles`): a size the log is known to have
        # reached (it only grows), and full tiles of tile level 1 and up (never rewritten).
        self._known_size = 0
        self._tile_cache: dict[tuple[int, int], bytes] = {}
        self._raw_sqlite = engine.dialect.name == "sqlite"
        self._find_texts: dict[tuple[bool, int, bool, bool, bool], str] = {}
        self._level_texts: dict[tuple[int, bool], str] = {}
        self._dbapi_error: type[Exception] = getattr(engine.dialect.dbapi, "Error", Exception)
        try:
            create_tables(engine, _LEDGER_TABLES)
            with engine.begin() as connection:
                head = connection.execute(select(_HEAD.c.log_id)).scalar_one_or_none()
                if head is None:
                    connection.execute(insert(_HEAD).values(id=1, log_id=log_id, size=0))
                elif head != log_id:
                    raise StoreError(
                        f"this database holds log {head!r}, not {log_id!r} (check ACCORD_LOG_ID)"
                    )
        except IntegrityError:
            pass  # another process created the head row first
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot prepare the log tables: {db_reason(exc)}") from exc
        self._refuse_untiled()
        self._index_actor_seqs()
        self._index_once_only()
        for projection in projections:
            self.attach(projection)

    def _refuse_untiled(self) -> None:
        """Raise StoreError when the log holds entries, no tiles, and node rows: an earlier
        accord wrote its tree as node rows (`ledger_nodes`), which `accord ledger migrate`
        converts. (Entries with neither are a damaged log, which `verify_log` reports.)"""
        try:
            with self._read() as connection:
                size = int(connection.execute(_READ_HEAD).scalar_one())
                tiled = connection.execute(select(_TILES.c.id).limit(1)).first() is not None
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read the log database: {db_reason(exc)}") from exc
        if size and not tiled and inspect(self.engine).has_table("ledger_nodes"):
            raise StoreError(
                f"the log {self.log_id!r} holds {size} entries but no tiles: an earlier accord "
                "stored its tree as node rows; run `accord ledger migrate` to convert it"
            )

    def _index_actor_seqs(self) -> None:
        """The (actor, seq) index answers an actor's highest seq at once, however many entries
        it signed (the operator signs most of them); created on a log made before it existed."""
        for index in _ENTRIES.indexes:
            if index.name == "ix_ledger_entries_actor_seq":
                try:
                    index.create(self.engine, checkfirst=True)
                except SQLAlchemyError:
                    # another process created it between the check and the create
                    if not inspect(self.engine).has_index("ledger_entries", index.name):
                        raise StoreError("cannot index the log by actor and seq") from None

    def _index_once_only(self) -> None:
        """Fill `ledger_once` from the entries of a log written before it existed (the first
        of each (kind, subject) is kept). Does nothing once the table holds a row."""
        if not self.once_per_subject:
            return
        try:
            with self.engine.begin() as connection:
                self._lock_head(connection)
                if connection.execute(select(_ONCE.c.kind).limit(1)).first() is not None:
                    return
                first = (
                    select(_ENTRIES.c.kind, _ENTRIES.c.subject, func.min(_ENTRIES.c.idx))
                    .where(_ENTRIES.c.kind.in_(sorted(self.once_per_subject)))
                    .group_by(_ENTRIES.c.kind, _ENTRIES.c.subject)
                )
                connection.execute(insert(_ONCE).from_select(["kind", "subject", "idx"], first))
        except IntegrityError:
            pass  # another process indexed it first
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot index the once-only events: {db_reason(exc)}") from exc

    # -- reading -----------------------------------------------------------------------------

    def size(self) -> int:
        with self._read() as connection:
            return int(connection.execute(select(_HEAD.c.size)).scalar_one())

    def root(self, size: int | None = None) -> bytes:
        """The tree hash at `size` (default: now). Raises ValueError beyond the log's size."""
        if size is None or not 0 <= size <= self._known_size:
            current = self._head_size()
            size = current if size is None else size
            if not 0 <= size <= current:
                raise ValueError(f"the log has {current} entries, not {size}")
        pieces = merkle.perfect_subtrees(0, size)
        nodes = self._read_nodes(pieces)
        return merkle.fold_right([nodes[piece] for piece in pieces])

    def entry(self, index: int) -> StoredEntry:
        """Raises IndexError when there is no entry `index`."""
        with self._read() as connection:
            data = connection.execute(
                select(_ENTRIES.c.data).where(_ENTRIES.c.idx == index)
            ).scalar_one_or_none()
        if data is None:
            raise IndexError(f"the log has no entry {index}")
        return StoredEntry(index, bytes(data))

    def entries(
        self, start: int = 0, end: int | None = None, *, chunk: int = 5000
    ) -> Iterator[StoredEntry]:
        """Entries with start <= index < end, in index order, read in chunks."""
        position = start
        while end is None or position < end:
            stop = position + chunk if end is None else min(end, position + chunk)
            with self._read() as connection:
                rows = connection.execute(
                    select(
                        _ENTRIES.c.idx,
                        _ENTRIES.c.data,
                        _ENTRIES.c.actor,
                        _ENTRIES.c.seq,
                        _ENTRIES.c.kind,
                        _ENTRIES.c.subject,
                        _ENTRIES.c.at,
                    )
                    .where(_ENTRIES.c.idx >= position, _ENTRIES.c.idx < stop)
                    .order_by(_ENTRIES.c.idx)
                ).all()
            if not rows:
                return
            for idx, data, *columns in rows:
                yield StoredEntry(int(idx), _as_bytes(data), tuple(columns))
            position = int(rows[-1][0]) + 1

    def find(
        self,
        *,
        kind: str | None = None,
        kinds: Collection[str] | None = None,
        subject: str | None = None,
        actor: str | None = None,
        limit: int = 100,
        after: int = -1,
        newest_first: bool = False,
    ) -> list[StoredEntry]:
        """Entries matching every given field (`kinds`: any of them) after index `after`,
        oldest first (`newest_first`: the latest `limit` of them, newest first).

        One SQL text per shape of the question, built once and sent to the driver as it is:
        building and compiling the select through SQLAlchemy on every call cost more than the
        database's answer (a bid's read of its task's new entries spent a fifth of its time
        there). Raises StoreError when the database cannot be read."""
        kind_list = [] if kinds is None else sorted(set(kinds))
        shape = (kind is not None, len(kind_list) if kinds is not None else -1)
        text = self._find_sql((*shape, subject is not None, actor is not None, newest_first))
        params: list[Any] = [after]
        if kind is not None:
            params.append(kind)
        params += kind_list
        params += [value for value in (subject, actor) if value is not None]
        params.append(limit)
        with self._read() as connection:
            try:
                rows = connection.exec_driver_sql(text, tuple(params)).all()
            except SQLAlchemyError as exc:
                raise StoreError(f"cannot read the log database: {db_reason(exc)}") from exc
        return [StoredEntry(int(idx), _as_bytes(data)) for idx, data in rows]

    def _find_sql(self, shape: tuple[bool, int, bool, bool, bool]) -> str:
        """The SQL text of `find` for a shape (kind given, how many kinds or -1, subject
        given, actor given, newest first), in the driver's parameter style."""
        text = self._find_texts.get(shape)
        if text is None:
            has_kind, kind_count, has_subject, has_actor, newest_first = shape
            mark = driver_mark(self.engine)
            where = [f"idx > {mark}"]
            if has_kind:
                where.append(f"kind = {mark}")
            if kind_count == 0:
                where.append("1 = 0")
            elif kind_count > 0:
                where.append(f"kind IN ({', '.join([mark] * kind_count)})")
            if has_subject:
                where.append(f"subject = {mark}")
            if has_actor:
                where.append(f"actor = {mark}")
            order = "idx DESC" if newest_first else "idx"
            text = (
                f"SELECT idx, data FROM ledger_entries WHERE {' AND '.join(where)} "
                f"ORDER BY {order} LIMIT {mark}"
            )
            self._find_texts[shape] = text
        return text

    def last_seq(self, actor: str) -> int | None:
        """The highest seq `actor` has logged, or None."""
        with self._read() as connection:
            value = connection.execute(
                select(func.max(_ENTRIES.c.seq)).where(_ENTRIES.c.actor == actor)
            ).scalar_one()
        return None if value is None else int(value)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The RFC 9162 inclusion proof of entry `index` in the tree of `size` (default: now).

        Raises ValueError when index or size are out of range.
        """
        if size is None or not 0 <= size <= self._known_size:
            current = self._head_size()
            size = current if size is None else size
            if size > current:
                raise ValueError(f"the log has {current} entries, not {size}")
        groups = _inclusion_groups(index, size)
        nodes = self._read_nodes([node for group in groups for node in group])
        return [
            nodes[group[0]] if len(group) == 1 else merkle.fold_right([nodes[k] for k in group])
            for group in groups
        ]

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """The RFC 9162 consistency proof between two sizes. Raises ValueError out of range."""
        if new_size is None or not 0 <= new_size <= self._known_size:
            current = self._head_size()
            new_size = current if new_size is None else new_size
            if new_size > current:
                raise ValueError(f"the log has {current} entries, not {new_size}")
        needed = merkle.nodes_for_consistency(old_size, new_size)
        nodes = self._read_nodes(needed)
        return merkle.consistency_proof_by(old_size, new_size, merkle.subtree_from_nodes(nodes))

    def level_hashes(self, level: int, start: int, count: int) -> list[bytes]:
        """The hashes of the perfect subtrees `NodeId(level, start)` up to
        `NodeId(level, start + count - 1)`, in order, read from the tiles that hold them.
        Only complete subtrees are stored: ask within the size.

        Raises ValueError for a negative level, start or count, StoreError when one of them
        is not stored or the database cannot be read.
        """
        if level < 0 or start < 0 or count < 0:
            raise ValueError(f"no stored nodes at level {level} from {start}, {count} of them")
        nodes = [NodeId(level, position) for position in range(start, start + count)]
        found = self._read_nodes(nodes)
        return [found[node] for node in nodes]

    def tile(self, level: int, index: int, width: int) -> bytes:
        """The bytes of tile `index` of tile level `level`, `width` hashes wide (C2SP
        tlog-tiles: 32 bytes a hash), read from its stored row. Raises StoreError when the
        log holds no such tile (yet) or the database cannot be read, ValueError for a tile
        that cannot exist."""
        wanted = {(level, index): width}
        _stored_width, row = self._read_tiles(wanted)[(level, index)]
        return row[: merkle.HASH_SIZE * width]

    def leaf_datas(self, start: int, end: int) -> list[bytes]:
        """The leaf data of the entries `start <= index < end`, in index order, in one query
        (no indexed columns: what an entry bundle carries). Raises StoreError when one of them
        is not in the log or the database cannot be read."""
        if self._raw_sqlite:
            rows = self._raw_select(_DATA_RANGE_QUERY, (start, end))
        else:
            try:
                with self._read() as connection:
                    rows = connection.execute(
                        select(_ENTRIES.c.data)
                        .where(_ENTRIES.c.idx >= start, _ENTRIES.c.idx < end)
                        .order_by(_ENTRIES.c.idx)
                    ).all()
            except SQLAlchemyError as exc:
                raise StoreError(f"cannot read the log database: {db_reason(exc)}") from exc
        if len(rows) != max(0, end - start):
            raise StoreError(f"the log lacks some of the entries {start} to {end - 1}")
        return [_as_bytes(data) for (data,) in rows]

    def stored_tiles(self, chunk: int = 2000) -> Iterator[tuple[int, bytes]]:
        """Every stored tile row as (key, row), by key (`tiles.tile_key`: tile level, then
        index, then width), for verification."""
        position = 0
        while True:
            with self._read() as connection:
                rows = connection.execute(
                    select(_TILES.c.id, _TILES.c.hashes)
                    .where(_TILES.c.id >= position)
                    .order_by(_TILES.c.id)
                    .limit(chunk)
                ).all()
            if not rows:
                return
            for key, value in rows:
                yield int(key), _as_bytes(value)
            position = int(rows[-1][0]) + 1

    # -- appending ---------------------------------------------------------------------------

    def append(self, entry: Entry) -> int:
        """Append one signed entry; returns its index."""
        return self.append_batch([entry])[0]

    def append_batch(
        self, entries: Sequence[Entry], *, once_keys: Sequence[str | None] = ()
    ) -> list[int]:
        """Append entries in one transaction; returns their indices.

        `once_keys` (one per entry, None for none) makes an entry once per key of its kind:
        a second entry of that kind under the same key, from any writer, is refused as a
        once-per-subject kind is (the market keys a sealed bid by its task and bidder).

        Raises SequenceError (nothing written) when an actor's seq does not grow,
        AlreadyLoggedError (nothing written) when a once-per-subject kind is logged again for
        its subject, or a keyed kind again under its key, StoreError when the database fails
        (nothing written), ValueError when `once_keys` is given but not one per entry.
        """
        if not entries:
            return []
        if once_keys and len(once_keys) != len(entries):
            raise ValueError(f"{len(once_keys)} once-keys for {len(entries)} entries")
        return self._append_locked(lambda _connection: entries, once_keys)

    def append_next(
        self, actor: str, make: Callable[[int], Entry], *, once_key: str | None = None
    ) -> tuple[int, Entry]:
        """Append one entry signed by `actor` with its next seq: `make(seq)` signs it under
        the head lock, where the actor's highest seq is known (kept level with other writers'
        appends), so no other writer can take that seq first and no seq is read beforehand.
        Returns (index, entry). Raises what `append_batch` raises, and SequenceError when
        `make` returns an entry of another actor or seq.
        """
        made: list[Entry] = []

        def sign(connection: Any) -> Sequence[Entry]:
            last = self._known_seqs(connection, {actor})[actor]
            entry = make(max(last, 0) + 1)
            if entry.event.actor != actor or entry.event.seq != max(last, 0) + 1:
                raise SequenceError(entry.event.actor, entry.event.seq, last)
            made[:] = [entry]  # a group that starts over signs again
            return made

        (index,) = self._append_locked(sign, [once_key])
        return index, made[0]

    def _append_locked(
        self,
        entries_for: Callable[[Any], Sequence[Entry]],
        once_keys: Sequence[str | None],
    ) -> list[int]:
        """Append what `entries_for(connection)` gives, under the head lock; returns the
        indices. Raises as `append_batch` says.

        Group commit: the appends that arrive while this process is writing wait, then the
        first of them writes all of them in one transaction (one head lock, one statement per
        table), each still checked, keyed and failed on its own (`_write_group`). The group
        is every append waiting once the head is locked, not when the writer started: the
        appends that arrive while it waits for another process's transaction join it."""
        mine = _Append(entries_for, once_keys)
        with self._waiting_lock:
            self._waiting.append(mine)
        with self._appending:
            if not mine.done:
                group: list[_Append] = []
                try:
                    self._write_group(group)
                finally:
                    if not group:  # the head was never locked: those waiting fail with it
                        group += self._take_waiting()
                    for append in group:
                        if not append.done:  # the writer itself was interrupted
                            append.fail(StoreError("the append was interrupted"))
        return mine.outcome()

    def _take_waiting(self) -> list[_Append]:
        """The appends waiting to be written, taken (so the next writer does not)."""
        with self._waiting_lock:
            taken, self._waiting = self._waiting, []
        return taken

    def _write_group(self, group: list[_Append]) -> None:
        """Write the waiting appends in one transaction, into `group` (empty: `_write` fills
        it once the head is locked); an append whose once-only entry is already logged makes
        the group start over, checking each append's keys first."""
        try:
            try:
                self._write(group, careful=False)
            except _OnceClash:
                self._forget_caches()
                for append in group:
                    append.reset()
                self._write(group, careful=True)
        except _OnceClash as clash:  # the careful pass found none, yet the key refused one
            self._forget_caches()
            self._fail_open(group, self._already_logged(clash.rows))
        except IntegrityError as exc:
            self._forget_caches()
            self._fail_open(
                group,
                StoreError(f"the log refused the batch (a concurrent writer?): {db_reason(exc)}"),
            )
        except SQLAlchemyError as exc:
            self._forget_caches()
            self._fail_open(
                group, StoreError(f"the log database failed during an append: {db_reason(exc)}")
            )
        except LedgerError as exc:  # the log itself is not as the caches say
            self._forget_caches()
            self._fail_open(group, exc)
        except BaseException:
            self._forget_caches()  # the seqs taken for the group were never written
            raise

    def _fail_open(self, group: list[_Append], error: LedgerError) -> None:
        """Fail every append of a group whose transaction failed with `error` (the appends
        waiting, when it failed before the head was locked), but those refused for a reason
        of their own, which still holds."""
        if not group:
            group += self._take_waiting()
        for append in group:
            if not append.done:
                own = None if append.refused_by_group else append.refused
                append.fail(own or error)

    def _write(self, group: list[_Append], *, careful: bool) -> None:
        """One append transaction for `group`: lock the head, take the waiting appends into
        `group` when it is empty, bring the caches level, take each append's entries and
        check them (an append that fails is left out, with its error), then insert the rest
        with their nodes, once-rows and view folds. `careful`: read each append's once-rows
        before taking it, so no insert can clash. Raises _OnceClash, SQLAlchemyError."""
        with self.engine.begin() as connection:
            size, views_level = self._lock_head_and_views(connection)
            if not views_level and self._postgres:
                # A writer that waited for the head lock on PostgreSQL reads the head row as the
                # writer before it left it, but the views' counts as they were when its own
                # statement began (READ COMMITTED re-reads only the row it locks): asked again
                # now the lock is held, the views of that writer's append are level after all.
                _size, views_level = self._head_and_level(connection, tuple(self._projections))
            if not group:
                group += self._take_waiting()
            self._sync_caches(connection, size)
            taken: list[tuple[_Append, int, Sequence[Entry]]] = []
            refused: list[_Append] = []
            entries: list[Entry] = []
            once_rows: list[dict[str, Any]] = []
            keys: dict[tuple[str, str], int] = {}
            tentative: set[str] = set()  # actors whose seq an earlier append of the group took
            for append in group:
                position = size + len(entries)
                try:
                    batch = append.entries_for(connection)
                    self._check_sequences(connection, batch)
                    rows = self._once_rows(batch, position, append.once_keys)
                    for row in rows:
                        earlier = keys.get((row["kind"], row["subject"]))
                        if earlier is not None:  # another append of this group has it
                            append.refused_by_group = True
                            raise AlreadyLoggedError(row["kind"], row["subject"], earlier)
                    if careful and rows:
                        self._refuse_logged(connection, rows)
                except SQLAlchemyError:
                    raise
                except Exception as exc:  # its own signing or checks: it alone is refused
                    if isinstance(exc, SequenceError) and exc.actor in tentative:
                        append.refused_by_group = True
                    append.refused = exc
                    refused.append(append)
                    continue
                for entry in batch:  # the next append's seqs follow this one's
                    self._last_seq[entry.event.actor] = entry.event.seq
                    tentative.add(entry.event.actor)
                for row in rows:
                    keys[(row["kind"], row["subject"])] = row["idx"]
                taken.append((append, position, batch))
                entries += batch
                once_rows += rows
            if not entries:
                self._refuse(refused)
                return
            entry_rows = [
                (size + offset, e.actor, e.seq, e.kind, e.subject, e.at, entry.data)
                for offset, entry in enumerate(entries)
                for e in [entry.event]
            ]
            frontier, edges, tile_rows, replaced = _extend_tree(
                self._frontier, self._edges, size, [entry.data for entry in entries]
            )
            new_size = size + len(entries)
            # Views level with the head before the append are level with it after: their
            # count is written with the rows (on PostgreSQL) when they are.
            level_views = list(self._projections) if views_level else []
            recorded = self._write_rows(
                connection, once_rows, entry_rows, (tile_rows, replaced), new_size, level_views
            )
            if self._projections:
                folded = [ViewEntry(size + k, entry.event) for k, entry in enumerate(entries)]
                self._project(connection, size, folded, level=views_level, recorded=recorded)
            # The caches are levelled while the head lock is still held, so writers in
            # other threads of this process, which touch them only under that lock too,
            # never see half of an update; only the COMMIT can fail after this (and then
            # `_write_group` forgets them).
            self._frontier, self._edges, self._frontier_size = frontier, edges, new_size
        for append, position, batch in taken:
            append.succeed(list(range(position, position + len(batch))))
        self._refuse(refused)

    def _write_rows(
        self,
        connection: Any,
        once_rows: list[dict[str, Any]],
        entry_rows: list[tuple[Any, ...]],
        tile_rows: tuple[list[tuple[int, bytes]], list[int]],
        new_size: int,
        level_views: list[str],
    ) -> bool:
        """Write an append's once-rows, entry rows (the columns of `_ENTRY_COLUMNS`) and tile
        rows (key, row), delete the partial tile rows those replace (keys), and move the head
        to `new_size`, under the head lock. The once-rows go first, or in the same statement,
        so a clash writes nothing (`_OnceClash`).

        PostgreSQL: one statement (data-modifying CTEs over arrays) that also records
        `new_size` as applied by `level_views`; returns True then. SQLite: the once-rows, then
        the entry and node rows as plain tuples through the driver's executemany (building
        and processing a parameter dict per row through SQLAlchemy cost three times the
        inserts), then the head; returns False. Raises _OnceClash, SQLAlchemyError."""
        rows, replaced = tile_rows
        if self._postgres:
            columns = list(zip(*entry_rows, strict=True))
            params = {
                "once_kinds": [row["kind"] for row in once_rows],
                "once_subjects": [row["subject"] for row in once_rows],
                "once_idxs": [row["idx"] for row in once_rows],
                **{
                    f"entry_{name}": list(column)
                    for name, column in zip(_ENTRY_COLUMNS, columns, strict=True)
                },
                "tile_ids": [key for key, _value in rows],
                "tile_rows": [value for _key, value in rows],
                "replaced": replaced,
                "views": level_views,
                "new_size": new_size,
            }
            try:
                statement = _POSTGRES_APPEND_LEVEL_VIEWS if level_views else _POSTGRES_APPEND
                connection.exec_driver_sql(statement, params)
            except IntegrityError as exc:
                if getattr(getattr(exc.orig, "diag", None), "table_name", None) == "ledger_once":
                    raise _OnceClash(once_rows) from exc
                raise
            return bool(level_views)
        if once_rows:
            try:
                connection.execute(_INSERT_ONCE, once_rows)
            except IntegrityError as exc:
                raise _OnceClash(once_rows) from exc
        connection.exec_driver_sql(_SQLITE_INSERT_ENTRIES, entry_rows)
        _write_tiles(connection, rows, replaced)
        connection.execute(_SET_HEAD, {"new_size": new_size})
        return False

    @staticmethod
    def _refuse(refused: Sequence[_Append]) -> None:
        """Fail the appends a committed (or empty) group left out, each with its own error
        (refused only now: an error naming another append of the group holds once that one
        is written)."""
        for append in refused:
            assert append.refused is not None
            append.fail(append.refused)

    def _refuse_logged(self, connection: Any, rows: Sequence[dict[str, Any]]) -> None:
        """Raise AlreadyLoggedError for the first of `rows` the log already holds (under the
        head lock, so no other writer can add one meanwhile)."""
        for row in rows:
            found = _once_index(connection, row["kind"], row["subject"])
            if found is not None:
                raise AlreadyLoggedError(row["kind"], row["subject"], found)

    def _forget_caches(self) -> None:
        """After a failed append: the next one reads the frontier, the partial tiles and the
        seqs again (a frontier size that matches no head makes `_sync_caches` start over,
        under the lock)."""
        self._frontier_size = -1

    # -- read views (`accord.ledger.views`) ---

    def attach(self, projection: Projection) -> None:
        """Keep `projection` from now on: create its tables, fold in what it has not applied,
        and apply it to every append, in the append's transaction. Tables stored with other
        columns than its own (another version's) are made anew and folded from the log.
        Attaching one of the same name again does nothing. Raises StoreError."""
        if projection.name in self._projections:
            return
        tables = [views.VIEWS_TABLE, *projection.tables]
        try:
            stored = views.stored_columns(self.engine, projection.tables)
            try:
                SQLModel.metadata.create_all(self.engine, tables=tables)
            except (IntegrityError, OperationalError, ProgrammingError):
                # another process created them meanwhile (PostgreSQL's catalog refuses a
                # second CREATE): they are there now, which a second pass checks
                SQLModel.metadata.create_all(self.engine, tables=tables)
            with self._read() as connection:
                done = views.applied_count(connection, projection.name)
            if views.outdated(stored, projection.tables, done):
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
            self._lock_head(connection)
            for table in reversed(projection.tables):
                table.drop(connection, checkfirst=True)
            for table in projection.tables:
                table.create(connection)
            views.applied(connection, projection.name)
            views.record_applied(connection, projection.name, 0)

    def refresh_view(self, *names: str) -> None:
        """Fold into the attached views `names` the entries they have not applied yet
        (appended by a process that did not keep them), in the order they were attached; one
        read when they are level: one statement, sent to the driver as it is (every read of
        a view asks it first). Raises StoreError."""
        wanted = [p for name, p in self._projections.items() if name in names]
        if not wanted:
            return
        try:
            with self._read() as connection:
                _size, level = self._head_and_level(connection, tuple(p.name for p in wanted))
            if level:
                return
            with self.engine.begin() as connection:
                size = self._lock_head(connection)
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
                size = self._lock_head(connection)
                for name, projection in self._projections.items():
                    projection.reset(connection)
                    views.applied(connection, name)
                    views.record_applied(connection, name, 0)
                self._catch_up(connection, list(self._projections.values()), size)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot rebuild the read views: {db_reason(exc)}") from exc
        return dict.fromkeys(self._projections, size)

    def _project(
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
            views.record_applied_all(connection, list(self._projections), start + len(batch))

    def _catch_up(
        self, connection: Any, projections: Sequence[Projection], size: int, chunk: int = 5000
    ) -> None:
        """Fold into each view the stored entries it has not applied, up to `size`, under the
        head lock; each chunk of the log is read and parsed once for all of them."""
        done = views.applied_all(connection, [p.name for p in projections])
        position = min(done.values(), default=size)
        while position < size:
            stop = min(size, position + chunk)
            rows = connection.execute(
                select(_ENTRIES.c.idx, _ENTRIES.c.data)
                .where(_ENTRIES.c.idx >= position, _ENTRIES.c.idx < stop)
                .order_by(_ENTRIES.c.idx)
            ).all()
            parsed = views.parse_stored((int(i), _as_bytes(d)) for i, d in rows)
            for projection in projections:
                since = done[projection.name]
                if since < stop:
                    projection.apply(connection, [e for e in parsed if e.index >= since])
            position = stop
        behind = [projection.name for projection in projections if done[projection.name] < size]
        if behind:
            views.record_applied_all(connection, behind, size)

    # -- checkpoints -------------------------------------------------------------------------

    def save_checkpoint(self, size: int, root: bytes, at: str, data: bytes) -> None:
        """Store a signed checkpoint (idempotent for the same size and root, also when
        another process stores one of that size at the same moment: the first stored is
        kept).

        Raises StoreError when another root is stored for that size.
        """
        existing = self.checkpoint(size)
        if existing is None:
            try:
                with self.engine.begin() as connection:
                    connection.execute(
                        insert(_CHECKPOINTS).values(size=size, root=root, at=at, data=data)
                    )
                return
            except IntegrityError as exc:  # another process stored this size since the read
                existing = self.checkpoint(size)
                if existing is None:
                    raise StoreError(f"cannot store checkpoint {size}: {db_reason(exc)}") from exc
            except SQLAlchemyError as exc:
                raise StoreError(f"cannot store checkpoint {size}: {db_reason(exc)}") from exc
        if existing.root != root:
            raise StoreError(f"a different checkpoint is stored for size {size}")

    def checkpoint(self, size: int) -> StoredCheckpoint | None:
        with self._read() as connection:
            row = connection.execute(
                select(_CHECKPOINTS).where(_CHECKPOINTS.c.size == size)
            ).one_or_none()
        return None if row is None else _checkpoint(row)

    def checkpoints(self) -> list[StoredCheckpoint]:
        with self._read() as connection:
            rows = connection.execute(select(_CHECKPOINTS).order_by(_CHECKPOINTS.c.size)).all()
        return [_checkpoint(row) for row in rows]

    def latest_checkpoint(self) -> StoredCheckpoint | None:
        with self._read() as connection:
            row = connection.execute(
                select(_CHECKPOINTS).order_by(_CHECKPOINTS.c.size.desc()).limit(1)
            ).one_or_none()
        return None if row is None else _checkpoint(row)

    # -- internals ---------------------------------------------------------------------------

    def _read(self) -> Any:
        try:
            return statement_connection(self.engine)
        except OperationalError as exc:
            raise StoreError(f"cannot reach the log database: {db_reason(exc)}") from exc

    def _lock_head(self, connection: Any) -> int:
        """The log's size, its head row locked until the transaction ends (on SQLite the
        transaction's BEGIN IMMEDIATE holds the database's write lock already)."""
        query = _LOCK_HEAD if self._postgres else _READ_HEAD
        return int(connection.execute(query).scalar_one())

    def _lock_head_and_views(self, connection: Any) -> tuple[int, bool]:
        """`_lock_head`'s size, and whether every attached view has applied exactly that
        many entries (then an append need not read each view's count), in one statement."""
        if not self._projections:
            return self._lock_head(connection), True
        return self._head_and_level(connection, tuple(self._projections), lock=True)

    def _head_and_level(
        self, connection: Any, names: tuple[str, ...], *, lock: bool = False
    ) -> tuple[int, bool]:
        """The log's size, and whether every view of `names` (at least one) has applied
        exactly that many entries: one driver statement (`_level_sql`)."""
        size, level = connection.exec_driver_sql(
            self._level_sql(len(names), lock=lock), names
        ).one()
        return int(size), int(level) == len(names)

    def _sync_caches(self, connection: Any, size: int) -> None:
        """Bring the frontier and the actors' last seqs level with a log of `size` (under the
        head lock): other writers, maybe in other processes, appended since this one did.
        Their entries' seqs are read (when few) rather than every cached seq forgotten, so
        writers taking turns do not re-query each actor's highest seq on every append."""
        if size == self._frontier_size:
            return
        behind = self._frontier_size
        if 0 <= behind < size and size - behind <= _LEAF_CATCH_UP:
            # A few entries: the frontier grows by their leaves, as their writer's did, and
            # their seqs come in the same read.
            rows = connection.execute(_ENTRIES_BETWEEN, {"start": behind, "stop": size}).all()
            if [int(row.idx) for row in rows] != list(range(behind, size)):
                raise StoreError(f"the log is missing entries between {behind} and {size}")
            self._frontier, self._edges, _rows, _replaced = _extend_tree(
                self._frontier, self._edges, behind, [_as_bytes(row.data) for row in rows]
            )
        else:
            self._edges = _edges_at(connection, size)
            self._frontier = _frontier_of(self._edges, size)
            if not 0 <= behind < size or size - behind > _SEQ_CATCH_UP:
                self._frontier_size = size
                self._last_seq.clear()
                return
            rows = connection.execute(_SEQS_BETWEEN, {"start": behind, "stop": size}).all()
        self._frontier_size = size
        for row in rows:
            if row.actor in self._last_seq:
                self._last_seq[row.actor] = max(self._last_seq[row.actor], int(row.seq))

    def _known_seqs(self, connection: Any, actors: set[str]) -> dict[str, int]:
        """The highest seq of each of `actors` (0 for none), from the cache kept level under
        the head lock, reading the ones it lacks in one query; -1 for an actor with none."""
        missing = actors - self._last_seq.keys()
        if missing:
            rows = connection.execute(
                select(_ENTRIES.c.actor, func.max(_ENTRIES.c.seq))
                .where(_ENTRIES.c.actor.in_(missing))
                .group_by(_ENTRIES.c.actor)
            ).all()
            found = {actor: int(seq) for actor, seq in rows}
            for actor in missing:
                self._last_seq[actor] = found.get(actor, -1)
        return {actor: self._last_seq[actor] for actor in actors}

    def _check_sequences(self, connection: Any, entries: Sequence[Entry]) -> None:
        last = self._known_seqs(connection, {entry.event.actor for entry in entries})
        for entry in entries:
            actor, seq = entry.event.actor, entry.event.seq
            if seq <= last[actor]:
                raise SequenceError(actor, seq, last[actor])
            last[actor] = seq

    def _once_rows(
        self, entries: Sequence[Entry], size: int, once_keys: Sequence[str | None] = ()
    ) -> list[dict[str, Any]]:
        """The `ledger_once` rows of the batch (an entry's subject when its kind is once per
        subject, else its key in `once_keys`); raises AlreadyLoggedError (index None) when the
        batch itself holds one twice."""
        rows: list[dict[str, Any]] = []
        keys: set[tuple[str, str]] = set()
        for offset, entry in enumerate(entries):
            kind = entry.event.kind
            if kind in self.once_per_subject:
                subject = entry.event.subject
            elif once_keys and once_keys[offset] is not None:
                subject = str(once_keys[offset])
            else:
                continue
            if (kind, subject) in keys:
                raise AlreadyLoggedError(kind, subject, None)
            keys.add((kind, subject))
            rows.append({"kind": kind, "subject": subject, "idx": size + offset})
        return rows

    def _already_logged(self, rows: Sequence[dict[str, Any]]) -> LedgerError:
        """The AlreadyLoggedError of a batch whose once-rows the primary key refused (the
        append is rolled back): the first row already logged, with its index; a StoreError
        when none is found (it cannot be read, or was never there)."""
        for row in rows:
            try:
                found = self.once_logged(row["kind"], row["subject"])
            except (StoreError, SQLAlchemyError) as exc:
                return StoreError(f"the log refused the batch: {db_reason(exc)}")
            if found is not None:
                return AlreadyLoggedError(row["kind"], row["subject"], found)
        return StoreError("the log refused the batch's once-only entries, yet holds none of them")

    def once_logged(self, kind: str, subject: str) -> int | None:
        """The index of the `kind` entry logged for `subject` when `kind` is once per subject
        (None when none is logged yet)."""
        with self._read() as connection:
            return _once_index(connection, kind, subject)

    def _head_size(self) -> int:
        """The log's size now (read path); remembers it as reached."""
        if self._raw_sqlite:
            rows = self._raw_select(_HEAD_QUERY, ())
            current = int(rows[0][0])
        else:
            current = self.size()
        if current > self._known_size:
            self._known_size = current
        return current

    def _read_nodes(self, needed: Iterable[NodeId]) -> dict[NodeId, bytes]:
        """The hashes of the perfect subtrees `needed` (complete ones: ask within the size),
        each read from the tile row that holds it (`_place`, inlined: this is every proof's
        path). Raises StoreError when one is not stored or the database cannot be read."""
        wanted: dict[tuple[int, int], int] = {}
        places: list[tuple[NodeId, tuple[int, int], int, int]] = []
        for node in needed:
            level, position = node
            height = level & 7
            span = TILE_HEIGHT - height
            tile = (level >> 3, position >> span)
            within = position & ((1 << span) - 1)
            width = (within + 1) << height
            if wanted.get(tile, 0) < width:
                wanted[tile] = width
            places.append((node, tile, height, within))
        rows = self._read_tiles(wanted)
        found: dict[NodeId, bytes] = {}
        offsets = _ROW_OFFSETS
        for node, tile, height, within in places:
            width, row = rows[tile]
            start = (offsets[width][height] + within) << 5
            found[node] = row[start : start + 32]
        return found

    def _read_tiles(
        self, wanted: dict[tuple[int, int], int]
    ) -> dict[tuple[int, int], tuple[int, bytes]]:
        """The stored rows of the tiles `wanted` ((tile level, index) -> the width at least
        needed) as (width, row), outside writes: any row of the tile at least that wide
        serves (a partial tile is a prefix of every wider one). Full tiles of tile level 1
        and up never change and are few, so they are kept in memory; the rest are read in one
        statement, on SQLite through the raw driver cursor in autocommit (no BEGIN
        IMMEDIATE), on a memory-mapped connection.

        Raises StoreError when a tile is not stored that wide or the database cannot be read.
        """
        cache = self._tile_cache
        found: dict[tuple[int, int], tuple[int, bytes]] = {}
        asked: list[tuple[int, int]] = []
        for tile in wanted:
            row = cache.get(tile)
            if row is None:
                asked.append(tile)
            else:
                found[tile] = (TILE_WIDTH, row)
        if not asked:
            return found
        params: list[int] = []
        for level, index in asked:
            params += [
                tile_key(level, index, wanted[(level, index)]),
                tile_key(level, index, TILE_WIDTH),
            ]
        if self._raw_sqlite:
            rows = self._raw_select(_tile_query(len(asked), "?"), params)
        else:
            try:
                with self._read() as connection:
                    rows = connection.exec_driver_sql(
                        _tile_query(len(asked), driver_mark(self.engine)), tuple(params)
                    ).all()
            except SQLAlchemyError as exc:
                raise StoreError(f"cannot read the log database: {db_reason(exc)}") from exc
        for key, value in rows:
            stored = tiles.key_tile(int(key))
            place = (stored.level or 0, stored.index)
            row = _as_bytes(value)
            if place not in found or stored.width > found[place][0]:
                found[place] = (stored.width, row)
            if stored.full and place[0] >= 1 and len(cache) < _CACHE_MAX_TILES:
                cache[place] = row
        missing = [tile for tile in asked if tile not in found]
        if missing:
            level, index = missing[0]
            raise StoreError(
                f"the log is missing tile {level}/{index} ({wanted[missing[0]]} hashes wide)"
            )
        return found

    def _raw_select(self, query: str, params: Sequence[Any]) -> list[Any]:
        """Run one SELECT on a pooled SQLite connection's driver cursor (autocommit)."""
        try:
            raw = self.engine.raw_connection()
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
        except self._dbapi_error as exc:
            raise StoreError(f"cannot read the log database: {db_reason(exc)}") from exc
        finally:
            raw.close()


def _once_index(connection: Any, kind: str, subject: str) -> int | None:
    """The index `ledger_once` holds for (kind, subject), or None."""
    found = connection.execute(
        select(_ONCE.c.idx).where(_ONCE.c.kind == kind, _ONCE.c.subject == subject)
    ).scalar_one_or_none()
    return None if found is None else int(found)


@dataclass(eq=False)
class _Append:
    """One caller's append, waiting to be written with the others of its group."""

    entries_for: Callable[[Any], Sequence[Entry]]
    once_keys: Sequence[str | None]
    indices: list[int] | None = None
    error: BaseException | None = None
    # Left out of its group's transaction, and why; `refused_by_group`: the reason is another
    # append of the group (which must then be written for the reason to hold).
    refused: Exception | None = None
    refused_by_group: bool = False

    @property
    def done(self) -> bool:
        """Written (it has indices) or failed (it has an error)."""
        return self.indices is not None or self.error is not None

    def succeed(self, indices: list[int]) -> None:
        self.indices, self.error = indices, None

    def fail(self, error: BaseException) -> None:
        self.indices, self.error = None, error

    def reset(self) -> None:
        self.indices, self.error = None, None
        self.refused, self.refused_by_group = None, False

    def outcome(self) -> list[int]:
        """The indices it was written at; raises its error."""
        if self.error is not None:
            raise self.error
        assert self.indices is not None, "an append left without an outcome"
        return self.indices


class _OnceClash(Exception):
    """(inside an append) The primary key of `ledger_once` refused one of `rows`."""

    def __init__(self, rows: Sequence[dict[str, Any]]) -> None:
        super().__init__("a once-only entry is already logged")
        self.rows = rows


# An append that finds at most this many entries appended by other writers since its own last
# one reads their seqs into the cache; more, and the cache starts over.
_SEQ_CATCH_UP = 1000
# Up to this many, it reads the entries themselves and hashes their leaves into the frontier;
# more, and it reads the partial tiles (the frontier is among their hashes) instead.
_LEAF_CATCH_UP = 64
# The read path keeps full tiles of tile level >= 1 in memory (one for each 65,536 entries,
# 16 KiB each), up to this many.
_CACHE_MAX_TILES = 4096
# Proof reads memory-map the SQLite file (up to SQLite's own compile-time cap).
_SQLITE_MMAP_BYTES = 1 << 31
_MMAP_DONE = "accord_mmap"
_HEAD_QUERY = "SELECT size FROM ledger_head"
# A bundle's entries (`leaf_datas`): one range.
_DATA_RANGE_QUERY = "SELECT data FROM ledger_entries WHERE idx >= ? AND idx < ? ORDER BY idx"
_TILE_QUERIES: dict[tuple[int, str], str] = {}
# Where each height starts in a stored row of each width, in hashes (`tiles.row_offset`).
_ROW_OFFSETS = [
    [tiles.row_offset(width, height) for height in range(TILE_HEIGHT)]
    for width in range(TILE_WIDTH + 1)
]


def _tile_query(count: int, mark: str) -> str:
    """One statement reading the rows of `count` tiles, each asked as a key range (from the
    narrowest width that serves to the full tile), in the driver's parameter style."""
    query = _TILE_QUERIES.get((count, mark))
    if query is None:
        one = f"SELECT id, hashes FROM ledger_tiles WHERE id >= {mark} AND id <= {mark}"
        query = _TILE_QUERIES.setdefault((count, mark), " UNION ALL ".join([one] * count))
    return query


def _place(node: NodeId) -> tuple[tuple[int, int], int, int, int]:
    """Where a perfect subtree is stored: its tile (tile level, index), its height within
    the tile, its position among that height's hashes of the tile, and the tile width that
    holds it (pure)."""
    level, height = node.level // TILE_HEIGHT, node.level % TILE_HEIGHT
    span = TILE_HEIGHT - height
    index = node.position >> span
    position = node.position & ((1 << span) - 1)
    return (level, index), height, position, (position + 1) << height


def _inclusion_groups(index: int, size: int) -> list[list[NodeId]]:
    """The perfect subtrees behind each element of PATH(index, D[0:size]), leaf side first.

    The ranges `merkle.inclusion_proof_by` asks for, in its order, each split into perfect
    subtrees as `merkle.perfect_subtrees` does; an element is the right fold of its group.
    Raises ValueError as it does.
    """
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    groups: list[list[NodeId]] = []
    start, end = 0, size
    while end - start > 1:
        k = 1 << ((end - start - 1).bit_length() - 1)
        if index < start + k:
            low, width = start + k, end - start - k
            if width & (width - 1):  # not a power of two: only on the tree's right edge
                groups.append(merkle.perfect_subtrees(low, end))
            else:  # one perfect subtree (low is a multiple of k, so of width)
                level = width.bit_length() - 1
                groups.append([NodeId(level, low >> level)])
            end = low
        else:
            level = k.bit_length() - 1
            groups.append([NodeId(level, start >> level)])
            start += k
    groups.reverse()
    return groups


def _as_bytes(value: Any) -> bytes:
    """A stored blob as bytes; SQLite's dynamic typing may hand back text, which is encoded
    (and then fails verification) rather than crashing the reader."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8", "surrogateescape")


def _extend_tree(
    frontier: Sequence[tuple[NodeId, bytes]],
    edges: dict[int, EdgeTile],
    start: int,
    datas: Sequence[bytes],
) -> tuple[list[tuple[NodeId, bytes]], dict[int, EdgeTile], list[tuple[int, bytes]], list[int]]:
    """The frontier and partial tiles of a log of `start` entries after the entries `datas`
    follow them, the tile rows those entries write (key, row) and the keys of the partial
    rows they replace (pure; each leaf hashed once, each node once, O(1) amortised per
    entry, and each tile touched written once)."""
    hashes, runs = merkle.extend_levels([value for _node, value in frontier], start, datas)
    pieces = merkle.perfect_subtrees(0, start + len(datas))
    after, rows, replaced = tiles.grow_tiles(edges, runs)
    return list(zip(pieces, hashes, strict=True)), after, rows, replaced


def _edges_at(connection: Any, size: int) -> dict[int, EdgeTile]:
    """The partial tiles of the log at `size` (by tile level), read on `connection` (under
    the head lock, so each is stored exactly as wide as `size` makes it). Raises StoreError
    when one is missing or malformed."""
    wanted: dict[int, int] = {}
    level, count = 0, size
    while count:
        if count % TILE_WIDTH:
            wanted[level] = tile_key(level, count // TILE_WIDTH, count % TILE_WIDTH)
        level, count = level + 1, count // TILE_WIDTH
    if not wanted:
        return {}
    rows = connection.execute(
        select(_TILES.c.id, _TILES.c.hashes).where(_TILES.c.id.in_(list(wanted.values())))
    ).all()
    stored = {int(key): _as_bytes(value) for key, value in rows}
    edges: dict[int, EdgeTile] = {}
    for level, key in wanted.items():
        tile = tiles.key_tile(key)
        row = stored.get(key)
        if row is None:
            raise StoreError(f"the log is missing its partial tile {level}/{tile.index}")
        try:
            edges[level] = EdgeTile(level, tile.index, tuple(tiles.row_levels(row, tile.width)))
        except LedgerError as exc:
            raise StoreError(f"the log's tile {level}/{tile.index} is damaged: {exc}") from exc
    return edges


def _frontier_of(edges: dict[int, EdgeTile], size: int) -> list[tuple[NodeId, bytes]]:
    """The frontier of a log of `size` entries from its partial tiles: each perfect subtree
    of `merkle.perfect_subtrees(0, size)` is the last hash of its height in the partial tile
    of its tile level (pure)."""
    frontier: list[tuple[NodeId, bytes]] = []
    for node in merkle.perfect_subtrees(0, size):
        (level, _index), height, position, _width = _place(node)
        frontier.append((node, edges[level].levels[height][position]))
    return frontier


def _write_tiles(connection: Any, rows: list[tuple[int, bytes]], replaced: list[int]) -> None:
    """Insert tile rows and delete the partial rows they replace (SQLite, through the
    driver's executemany)."""
    if rows:
        connection.exec_driver_sql(_SQLITE_INSERT_TILES, rows)
    if replaced:
        connection.exec_driver_sql(_SQLITE_DELETE_TILES, [(key,) for key in replaced])


# The append's statements, built once (building one costs about as much as running it).
_READ_HEAD = select(_HEAD.c.size).where(_HEAD.c.id == 1)
_LOCK_HEAD = _READ_HEAD.with_for_update()
_SET_HEAD = update(_HEAD).values(size=bindparam("new_size"))
_INSERT_ONCE = insert(_ONCE)
_ENTRY_COLUMNS = ("idx", "actor", "seq", "kind", "subject", "at", "data")
_SQLITE_INSERT_ENTRIES = (
    f"INSERT INTO ledger_entries ({', '.join(_ENTRY_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_ENTRY_COLUMNS))})"
)
_SQLITE_INSERT_TILES = "INSERT INTO ledger_tiles (id, hashes) VALUES (?, ?)"
_SQLITE_DELETE_TILES = "DELETE FROM ledger_tiles WHERE id = ?"
# An append on PostgreSQL in one round trip: each table's rows as arrays, unnested. The
# statements of a WITH see one snapshot and all run, so it is all or nothing: the once-rows'
# primary key refusing one (a clash) writes none of the rest.
_POSTGRES_ROWS = """
WITH once_rows AS (
    INSERT INTO ledger_once (kind, subject, idx)
    SELECT * FROM unnest(
        %(once_kinds)s::varchar[], %(once_subjects)s::varchar[], %(once_idxs)s::bigint[])
), entry_rows AS (
    INSERT INTO ledger_entries (idx, actor, seq, kind, subject, at, data)
    SELECT * FROM unnest(
        %(entry_idx)s::bigint[], %(entry_actor)s::varchar[], %(entry_seq)s::bigint[],
        %(entry_kind)s::varchar[], %(entry_subject)s::varchar[], %(entry_at)s::varchar[],
        %(entry_data)s::bytea[])
), tile_rows AS (
    INSERT INTO ledger_tiles (id, hashes)
    SELECT * FROM unnest(%(tile_ids)s::bigint[], %(tile_rows)s::bytea[])
), replaced_tiles AS (
    DELETE FROM ledger_tiles WHERE id = ANY(%(replaced)s::bigint[])
)"""
_POSTGRES_HEAD = "\nUPDATE ledger_head SET size = %(new_size)s WHERE id = 1"
_POSTGRES_APPEND = _POSTGRES_ROWS + _POSTGRES_HEAD
_POSTGRES_APPEND_LEVEL_VIEWS = (
    _POSTGRES_ROWS
    + """, level_views AS (
    UPDATE ledger_views SET applied = %(new_size)s WHERE name = ANY(%(views)s::varchar[])
)"""
    + _POSTGRES_HEAD
)
_BETWEEN = (_ENTRIES.c.idx >= bindparam("start"), _ENTRIES.c.idx < bindparam("stop"))
_ENTRIES_BETWEEN = (
    select(_ENTRIES.c.idx, _ENTRIES.c.actor, _ENTRIES.c.seq, _ENTRIES.c.data)
    .where(*_BETWEEN)
    .order_by(_ENTRIES.c.idx)
)
_SEQS_BETWEEN = select(_ENTRIES.c.actor, _ENTRIES.c.seq).where(*_BETWEEN)


def _checkpoint(row: Any) -> StoredCheckpoint:
    return StoredCheckpoint(int(row.size), bytes(row.root), row.at, bytes(row.data))


# -- migration from node rows -------------------------------------------------------------------


@dataclass(frozen=True)
class TileMigration:
    """What `migrate_to_tiles` did: the log's size, the tile rows it wrote, the roots it
    proved equal (size -> root) and the node rows it dropped; `already`: the log was on
    tiles, nothing was done."""

    log_id: str
    size: int
    tile_rows: int
    roots: dict[int, bytes]
    node_rows: int
    already: bool = False


MIGRATION_CHUNK = 4096
"""Entries read and hashed at a time by a migration (a multiple of a tile's 256)."""


def migrate_to_tiles(engine: Engine, log_id: str, *, sizes: Iterable[int] = ()) -> TileMigration:
    """Convert a log whose tree is stored as node rows (`ledger_nodes`, an earlier accord)
    into tiles, in one transaction under the head lock (appends wait): hash every entry's
    leaf data into tile rows, then prove that the tiles give the same root as the node rows
    and as each stored checkpoint at every checkpoint's size, the current size, seven sizes
    spread over the log and the `sizes` asked, and only then drop the node rows. A log
    already on tiles is left as it is.

    Raises StoreError, with nothing changed, when the database holds no log or another log
    than `log_id`, an entry is missing, a root differs, or the database fails; ValueError for
    an asked size beyond the log.
    """
    try:
        with engine.connect() as probe:
            if not inspect(probe).has_table("ledger_head"):
                raise StoreError("this database holds no log to migrate")
        create_tables(engine, [_TILES])
        with engine.begin() as connection:
            head = connection.execute(select(_HEAD.c.log_id)).scalar_one_or_none()
            if head != log_id:
                raise StoreError(
                    f"this database holds log {head!r}, not {log_id!r} (check ACCORD_LOG_ID)"
                )
            size = int(
                connection.execute(
                    _LOCK_HEAD if engine.dialect.name == "postgresql" else _READ_HEAD
                ).scalar_one()
            )
            asked = sorted(set(sizes))
            if asked and not 1 <= asked[0] <= asked[-1] <= size:
                raise ValueError(f"the log has {size} entries: no root at sizes {asked}")
            if connection.execute(select(_TILES.c.id).limit(1)).first() is not None:
                return TileMigration(log_id, size, 0, {}, 0, already=True)
            written = _write_all_tiles(connection, size)
            has_nodes = inspect(connection).has_table("ledger_nodes")
            checkpoints = {
                int(row.size): bytes(row.root)
                for row in connection.execute(select(_CHECKPOINTS.c.size, _CHECKPOINTS.c.root))
            }
            proved = {*asked, *checkpoints, *(size * k // 8 for k in range(1, 8)), size} - {0}
            roots: dict[int, bytes] = {}
            for at in sorted(proved):
                root = _root_on(connection, at)
                if has_nodes and (old := _node_rows_root(connection, at)) != root:
                    raise StoreError(
                        f"the tiles give root {root.hex()} at size {at}, the node rows "
                        f"{old.hex()}: nothing was migrated"
                    )
                if at in checkpoints and checkpoints[at] != root:
                    raise StoreError(
                        f"the tiles give root {root.hex()} at size {at}, its checkpoint "
                        f"{checkpoints[at].hex()}: nothing was migrated"
                    )
                roots[at] = root
            dropped = 0
            if has_nodes:
                dropped = int(
                    connection.execute(select(func.count()).select_from(_NODES)).scalar_one()
                )
                _NODES.drop(connection)
        return TileMigration(log_id, size, written, roots, dropped)
    except SQLAlchemyError as exc:
        raise StoreError(
            f"the migration to tiles failed, nothing was changed: {db_reason(exc)}"
        ) from exc


def _write_all_tiles(connection: Any, size: int) -> int:
    """Hash the log's `size` entries into tile rows on `connection`; returns how many rows
    it left stored. Raises StoreError when an entry is missing."""
    frontier: list[tuple[NodeId, bytes]] = []
    edges: dict[int, EdgeTile] = {}
    kept: set[int] = set()
    for start in range(0, size, MIGRATION_CHUNK):
        stop = min(size, start + MIGRATION_CHUNK)
        rows = connection.execute(
            select(_ENTRIES.c.idx, _ENTRIES.c.data)
            .where(_ENTRIES.c.idx >= start, _ENTRIES.c.idx < stop)
            .order_by(_ENTRIES.c.idx)
        ).all()
        if [int(row.idx) for row in rows] != list(range(start, stop)):
            raise StoreError(f"the log is missing entries between {start} and {stop}: not migrated")
        frontier, edges, tile_rows, replaced = _extend_tree(
            frontier, edges, start, [_as_bytes(row.data) for row in rows]
        )
        connection.execute(insert(_TILES), [{"id": key, "hashes": row} for key, row in tile_rows])
        if replaced:
            connection.execute(delete(_TILES).where(_TILES.c.id.in_(replaced)))
        kept |= {key for key, _row in tile_rows}
        kept -= set(replaced)
    return len(kept)


def _root_on(connection: Any, size: int) -> bytes:
    """The root at `size` read from the tiles on `connection` (inside a transaction)."""
    pieces = merkle.perfect_subtrees(0, size)
    wanted: dict[tuple[int, int], int] = {}
    for piece in pieces:
        tile, _height, _position, width = _place(piece)
        wanted[tile] = max(wanted.get(tile, 0), width)
    mark = driver_mark(connection)
    params: list[int] = []
    for (level, index), width in wanted.items():
        params += [tile_key(level, index, width), tile_key(level, index, TILE_WIDTH)]
    stored: dict[tuple[int, int], tuple[int, bytes]] = {}
    for key, value in connection.exec_driver_sql(_tile_query(len(wanted), mark), tuple(params)):
        found = tiles.key_tile(int(key))
        place = (found.level or 0, found.index)
        if place not in stored or found.width > stored[place][0]:
            stored[place] = (found.width, _as_bytes(value))
    hashes = []
    for piece in pieces:
        tile, height, position, _width = _place(piece)
        if tile not in stored:
            raise StoreError(f"the migration left no tile {tile[0]}/{tile[1]}")
        width, row = stored[tile]
        hashes.append(tiles.row_hash(row, width, height, position))
    return merkle.fold_right(hashes)


def _node_rows_root(connection: Any, size: int) -> bytes:
    """The root at `size` from the node rows of an earlier accord (a pair of leaves, level 1,
    from the two leaf rows under it when its own row is not there). Raises StoreError when a
    node it needs is missing."""
    pieces = merkle.perfect_subtrees(0, size)
    keys = {node_key(piece) for piece in pieces}
    keys |= {
        node_key(NodeId(0, 2 * p.position + side))
        for p in pieces
        if p.level == 1
        for side in (0, 1)
    }
    found = {
        int(key): bytes(value)
        for key, value in connection.execute(
            select(_NODES.c.id, _NODES.c.hash).where(_NODES.c.id.in_(sorted(keys)))
        )
    }
    hashes = []
    for piece in pieces:
        value = found.get(node_key(piece))
        if value is None and piece.level == 1:
            left, right = (found.get(node_key(NodeId(0, 2 * piece.position + s))) for s in (0, 1))
            value = None if left is None or right is None else merkle.node_hash(left, right)
        if value is None:
            raise StoreError(f"the node rows lack tree node {tuple(piece)}: nothing was migrated")
        hashes.append(value)
    return merkle.fold_right(hashes)
