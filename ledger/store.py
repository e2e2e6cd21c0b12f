"""The persistent Merkle log: SQLModel tables on SQLite (default) or PostgreSQL.

Tables
    ledger_head         one row: the log id and its size; every append locks it
    ledger_entries      index, actor, seq, kind, subject, time, leaf data (JCS of the entry)
    ledger_nodes        perfect-subtree hashes keyed by `level << 48 | index`: the leaves (level
                        0) and levels 2 and up; a pair of leaves (level 1) is not stored
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

An append computes its leaf and the interior nodes it completes from the log's *frontier* (the
at most log2(n) perfect subtrees that make up the current tree), inserts them with the entries
in one transaction, and so costs O(log n). Proofs read the O(log n) nodes they need in one query;
nodes never change once written, so the upper levels are also kept in a small in-memory cache.
A batch is one transaction: durable or absent, never half there.

The hash of a pair of leaves (level 1) is not stored: a proof or root that needs one reads the
two leaf hashes under it in the same query and hashes them, which costs about what reading it
did, while its row was a quarter of every append's node rows. Leaf hashes stay stored, keyed
by position, so `verify_log` names the very entry that was inserted, deleted or moved. A log
written before keeps its level-1 rows; they are never read, and verification still checks them.

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
    BigInteger,
    Connection,
    Engine,
    Index,
    Integer,
    LargeBinary,
    Table,
    bindparam,
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

from accord.ledger import merkle, views
from accord.ledger.errors import AlreadyLoggedError, LedgerError, SequenceError, StoreError
from accord.ledger.events import Entry
from accord.ledger.merkle import NodeId
from accord.ledger.views import Projection, ViewEntry

NODE_INDEX_BITS = 48
UNSTORED_LEVEL = 1
"""The tree level whose nodes (pairs of leaves) are computed from the two leaf hashes under
them instead of stored."""

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
    """The integer primary key of a perfect subtree."""
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
    __tablename__ = "ledger_nodes"

    id: int = Field(sa_column=Column(_ROW_KEY, primary_key=True, autoincrement=False))
    hash: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


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
_LEDGER_TABLES = [_HEAD, _ENTRIES, _NODES, _CHECKPOINTS, _ONCE]


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
        self._frontier_size = -1
        self._last_seq: dict[str, int] = {}
        # Appends of this process: the waiting ones, and the lock of the one writing them.
        self._appending = threading.Lock()
        self._waiting_lock = threading.Lock()
        self._waiting: list[_Append] = []
        self._postgres = engine.dialect.name == "postgresql"
        # Read path of proofs and roots (see `_read_nodes`): a size the log is known to have
        # reached (it only grows), and stored nodes of the upper levels (never rewritten).
        self._known_size = 0
        self._node_cache: dict[int, bytes] = {}
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
        self._index_actor_seqs()
        self._index_once_only()
        for projection in projections:
            self.attach(projection)

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
        nodes = self._read_nodes(pieces, size)
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
        nodes = self._read_keys([key for group in groups for key in group], size)
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
        nodes = self._read_nodes(needed, new_size)
        return merkle.consistency_proof_by(old_size, new_size, merkle.subtree_from_nodes(nodes))

    def level_hashes(self, level: int, start: int, count: int) -> list[bytes]:
        """The hashes of the perfect subtrees `NodeId(level, start)` up to
        `NodeId(level, start + count - 1)`, in order, read in one range query (a C2SP tile's
        hashes, `accord.ledger.tiles`; on SQLite through the raw cursor, as proofs read).
        Only complete subtrees are stored: ask within the size.

        Raises ValueError for the unstored level 1 or a negative level, start or count,
        StoreError when one of them is not stored or the database cannot be read.
        """
        if level < 0 or level == UNSTORED_LEVEL or start < 0 or count < 0:
            raise ValueError(f"no stored nodes at level {level} from {start}, {count} of them")
        if count == 0:
            return []
        low = node_key(NodeId(level, start))
        if self._raw_sqlite:
            rows = self._raw_select(_NODE_RANGE_QUERY, (low, low + count))
        else:
            try:
                with self._read() as connection:
                    rows = connection.execute(
                        select(_NODES.c.id, _NODES.c.hash)
                        .where(_NODES.c.id >= low, _NODES.c.id < low + count)
                        .order_by(_NODES.c.id)
                    ).all()
            except SQLAlchemyError as exc:
                raise StoreError(f"cannot read the log database: {db_reason(exc)}") from exc
        if len(rows) != count:
            found = {int(key) for key, _value in rows}
            missing = [key for key in range(low, low + count) if key not in found]
            raise StoreError(f"the log is missing stored tree nodes {_node_id(missing[0])}...")
        return [bytes(value) for _key, value in rows]

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

    def stored_nodes(self, start_key: int = 0, chunk: int = 20000) -> Iterator[tuple[int, bytes]]:
        """Every stored node as (key, hash), by key (for verification): none of
        `UNSTORED_LEVEL` but those a log written before holds."""
        position = start_key
        while True:
            with self._read() as connection:
                rows = connection.execute(
                    select(_NODES.c.id, _NODES.c.hash)
                    .where(_NODES.c.id >= position)
                    .order_by(_NODES.c.id)
                    .limit(chunk)
                ).all()
            if not rows:
                return
            for key, value in rows:
                yield int(key), bytes(value)
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
            frontier, completed = _extend_frontier(
                self._frontier, size, [entry.data for entry in entries]
            )
            new_size = size + len(entries)
            # Views level with the head before the append are level with it after: their
            # count is written with the rows (on PostgreSQL) when they are.
            level_views = list(self._projections) if views_level else []
            recorded = self._write_rows(
                connection, once_rows, entry_rows, completed, new_size, level_views
            )
            if self._projections:
                folded = [ViewEntry(size + k, entry.event) for k, entry in enumerate(entries)]
                self._project(connection, size, folded, level=views_level, recorded=recorded)
            # The caches are levelled while the head lock is still held, so writers in
            # other threads of this process, which touch them only under that lock too,
            # never see half of an update; only the COMMIT can fail after this (and then
            # `_write_group` forgets them).
            self._frontier, self._frontier_size = frontier, new_size
        for append, position, batch in taken:
            append.succeed(list(range(position, position + len(batch))))
        self._refuse(refused)

    def _write_rows(
        self,
        connection: Any,
        once_rows: list[dict[str, Any]],
        entry_rows: list[tuple[Any, ...]],
        node_rows: list[tuple[int, bytes]],
        new_size: int,
        level_views: list[str],
    ) -> bool:
        """Write an append's once-rows, entry rows (the columns of `_ENTRY_COLUMNS`) and node
        rows (key, hash), and move the head to `new_size`, under the head lock. The once-rows
        go first, or in the same statement, so a clash writes nothing (`_OnceClash`).

        PostgreSQL: one statement (data-modifying CTEs over arrays) that also records
        `new_size` as applied by `level_views`; returns True then. SQLite: the once-rows, then
        the entry and node rows as plain tuples through the driver's executemany (building
        and processing a parameter dict per row through SQLAlchemy cost three times the
        inserts), then the head; returns False. Raises _OnceClash, SQLAlchemyError."""
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
                "node_ids": [key for key, _value in node_rows],
                "node_hashes": [value for _key, value in node_rows],
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
        if self._raw_sqlite:
            connection.exec_driver_sql(_SQLITE_INSERT_ENTRIES, entry_rows)
            connection.exec_driver_sql(_SQLITE_INSERT_NODES, node_rows)
        else:
            connection.execute(
                _INSERT_ENTRIES, [dict(zip(_ENTRY_COLUMNS, row, strict=True)) for row in entry_rows]
            )
            connection.execute(
                _INSERT_NODES, [{"id": key, "hash": value} for key, value in node_rows]
            )
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
        """After a failed append: the next one reads the frontier and the seqs again (a
        frontier size that matches no head makes `_sync_caches` start over, under the lock)."""
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
            self._frontier, _ = _extend_frontier(
                self._frontier, behind, [_as_bytes(row.data) for row in rows]
            )
        else:
            pieces = merkle.perfect_subtrees(0, size)
            nodes = self._nodes(connection, pieces)
            self._frontier = [(piece, nodes[piece]) for piece in pieces]
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

    def _read_nodes(self, needed: Iterable[NodeId], size: int) -> dict[NodeId, bytes]:
        """`_read_keys` by NodeId."""
        wanted = {node_key(node): node for node in needed}
        found = self._read_keys(wanted, size)
        return {node: found[key] for key, node in wanted.items()}

    def _read_keys(self, keys: Iterable[int], size: int) -> dict[int, bytes]:
        """Stored nodes (by key) for a proof or root within the tree of `size`, outside writes.

        Nodes are immutable once written, so those of the upper levels (at most about
        2**(_CACHE_SPAN_LEVELS + 1) of them for any size) are kept in memory; the rest are
        read in one query, on SQLite through the raw driver cursor in autocommit (one
        statement, no BEGIN IMMEDIATE), on a memory-mapped connection.

        Raises StoreError when a node is missing or the database cannot be read.
        """
        asked = list(keys)
        pairs = [key for key in asked if _PAIR_LOW <= key < _PAIR_HIGH]
        cache = self._node_cache
        found: dict[int, bytes] = {}
        wanted: list[int] = []
        for key in _stored_keys(asked) if pairs else asked:
            value = cache.get(key)
            if value is None:
                wanted.append(key)
            else:
                found[key] = value
        if not wanted:
            return _add_pairs(pairs, found)
        wanted = list(dict.fromkeys(wanted))
        if self._raw_sqlite:
            query = _NODE_QUERIES.get(len(wanted))
            if query is None:
                query = _NODE_QUERIES.setdefault(len(wanted), _node_query(len(wanted)))
            rows = self._raw_select(query, wanted)
        else:
            with self._read() as connection:
                rows = connection.execute(
                    select(_NODES.c.id, _NODES.c.hash).where(_NODES.c.id.in_(wanted))
                ).all()
        cached_from = max(_CACHE_MIN_LEVEL, size.bit_length() - _CACHE_SPAN_LEVELS)
        cached_from <<= NODE_INDEX_BITS
        room = _CACHE_MAX_NODES - len(cache)
        for key, value in rows:
            key, hashed = int(key), bytes(value)
            found[key] = hashed
            if key >= cached_from and room > 0:
                cache[key] = hashed
                room -= 1
        if len(rows) != len(wanted):
            missing = sorted(_node_id(key) for key in set(wanted) - found.keys())
            raise StoreError(f"the log is missing stored tree nodes {missing[:3]}")
        return _add_pairs(pairs, found)

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

    def _nodes(self, connection: Any, needed: Iterable[NodeId]) -> dict[NodeId, bytes]:
        """The hashes of `needed`, read on `connection` (inside a write). Raises StoreError
        when the log lacks a node."""
        wanted = {node_key(node): node for node in needed}
        if not wanted:
            return {}
        stored = _stored_keys(wanted)
        rows = connection.execute(
            select(_NODES.c.id, _NODES.c.hash).where(_NODES.c.id.in_(stored))
        ).all()
        found = {int(key): bytes(value) for key, value in rows}
        if len(found) != len(stored):
            missing = sorted(_node_id(key) for key in set(stored) - found.keys())
            raise StoreError(f"the log is missing stored tree nodes {missing[:3]}")
        _add_pairs([key for key in wanted if _PAIR_LOW <= key < _PAIR_HIGH], found)
        return {node: found[key] for key, node in wanted.items()}


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
# more, and it reads the frontier's stored nodes instead.
_LEAF_CATCH_UP = 64
# The read path caches stored nodes of level >= 8 (subtrees of 256 leaves and more) that lie
# in the top 16 levels of the tree asked about: about 2**17 nodes at most, whatever the size.
_CACHE_MIN_LEVEL = 8
_CACHE_SPAN_LEVELS = 16
_CACHE_MAX_NODES = 1 << 18
# Proof reads memory-map the SQLite file (up to SQLite's own compile-time cap).
_SQLITE_MMAP_BYTES = 1 << 31
_MMAP_DONE = "accord_mmap"
_HEAD_QUERY = "SELECT size FROM ledger_head"
# A tile's hashes and a bundle's entries (`level_hashes`, `leaf_datas`): one range each.
_NODE_RANGE_QUERY = "SELECT id, hash FROM ledger_nodes WHERE id >= ? AND id < ? ORDER BY id"
_DATA_RANGE_QUERY = "SELECT data FROM ledger_entries WHERE idx >= ? AND idx < ? ORDER BY idx"
_NODE_QUERIES: dict[int, str] = {}


def _node_query(count: int) -> str:
    marks = ",".join("?" * count)
    return f"SELECT id, hash FROM ledger_nodes WHERE id IN ({marks})"


def _node_id(key: int) -> NodeId:
    return NodeId(key >> NODE_INDEX_BITS, key & ((1 << NODE_INDEX_BITS) - 1))


_PAIR_LOW = UNSTORED_LEVEL << NODE_INDEX_BITS
_PAIR_HIGH = (UNSTORED_LEVEL + 1) << NODE_INDEX_BITS


def _stored_keys(keys: Iterable[int]) -> list[int]:
    """The keys of the stored nodes that give the nodes `keys`: a pair of leaves (level 1) by
    its two leaves, any other node by itself (pure; no key twice, in first-seen order)."""
    stored: dict[int, None] = {}
    for key in keys:
        if _PAIR_LOW <= key < _PAIR_HIGH:
            left = (key - _PAIR_LOW) << 1
            stored[left] = stored[left + 1] = None
        else:
            stored[key] = None
    return list(stored)


def _add_pairs(pairs: Iterable[int], found: dict[int, bytes]) -> dict[int, bytes]:
    """`found` (stored nodes by key, the leaves under `pairs` among them) with the hash of
    each pair of leaves of `pairs` added, hashed from its two leaves; returns `found`."""
    for key in pairs:
        left = (key - _PAIR_LOW) << 1
        found[key] = merkle.node_hash(found[left], found[left + 1])
    return found


def _inclusion_groups(index: int, size: int) -> list[list[int]]:
    """The node keys behind each element of PATH(index, D[0:size]), leaf side first.

    The ranges `merkle.inclusion_proof_by` asks for, in its order, each split into perfect
    subtrees as `merkle.perfect_subtrees` does; an element is the right fold of its group.
    Raises ValueError as it does.
    """
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    groups: list[list[int]] = []
    start, end = 0, size
    while end - start > 1:
        k = 1 << ((end - start - 1).bit_length() - 1)
        if index < start + k:
            low, width = start + k, end - start - k
            if width & (width - 1):  # not a power of two: only on the tree's right edge
                groups.append([node_key(node) for node in merkle.perfect_subtrees(low, end)])
            else:  # one perfect subtree (low is a multiple of k, so of width)
                level = width.bit_length() - 1
                groups.append([(level << NODE_INDEX_BITS) | (low >> level)])
            end = low
        else:
            level = k.bit_length() - 1
            groups.append([(level << NODE_INDEX_BITS) | (start >> level)])
            start += k
    groups.reverse()
    return groups


def _as_bytes(value: Any) -> bytes:
    """A stored blob as bytes; SQLite's dynamic typing may hand back text, which is encoded
    (and then fails verification) rather than crashing the reader."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8", "surrogateescape")


def _extend_frontier(
    frontier: Sequence[tuple[NodeId, bytes]], start: int, datas: Sequence[bytes]
) -> tuple[list[tuple[NodeId, bytes]], list[tuple[int, bytes]]]:
    """The frontier of a log of `start` entries after the entries `datas` follow them, and
    the stored tree nodes (none of `UNSTORED_LEVEL`) those entries complete as (node key,
    hash) rows (pure; each leaf hashed once, each node once, O(1) amortised per entry)."""
    hashes, made = merkle.extend_frontier([value for _node, value in frontier], start, datas)
    pieces = merkle.perfect_subtrees(0, start + len(datas))
    rows = [
        ((level << NODE_INDEX_BITS) | position, value)
        for level, position, value in made
        if level != UNSTORED_LEVEL
    ]
    return list(zip(pieces, hashes, strict=True)), rows


# The append's statements, built once (building one costs about as much as running it).
_READ_HEAD = select(_HEAD.c.size).where(_HEAD.c.id == 1)
_LOCK_HEAD = _READ_HEAD.with_for_update()
_SET_HEAD = update(_HEAD).values(size=bindparam("new_size"))
_INSERT_ENTRIES = insert(_ENTRIES)
_INSERT_NODES = insert(_NODES)
_INSERT_ONCE = insert(_ONCE)
_ENTRY_COLUMNS = ("idx", "actor", "seq", "kind", "subject", "at", "data")
_SQLITE_INSERT_ENTRIES = (
    f"INSERT INTO ledger_entries ({', '.join(_ENTRY_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_ENTRY_COLUMNS))})"
)
_SQLITE_INSERT_NODES = "INSERT INTO ledger_nodes (id, hash) VALUES (?, ?)"
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
), node_rows AS (
    INSERT INTO ledger_nodes (id, hash)
    SELECT * FROM unnest(%(node_ids)s::bigint[], %(node_hashes)s::bytea[])
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
