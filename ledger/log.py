"""The log itself: its entries, appended in order and read back (by index, by range, by
kind, subject or actor), and its signed checkpoints, in the tables of `accord.ledger.database`.
The proofs over it are `accord.ledger.proofs`; the read views folded from it
`accord.ledger.views`; `accord.ledger.store.LogStore` composes the three.

Some event kinds happen at most once per subject (a task is awarded, settled... once). The
log enforces it for every writer, in every process and on every machine: an append holding
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
entries themselves. A partial tile's row is keyed by its width: the append that widens it
inserts the wider row and deletes the narrower one, in the same transaction.
A batch is one transaction: durable or absent, never half there.

Group commit: the appends a process's threads make while one of them is writing wait for it,
then the first of them writes all that waited in one transaction (one head lock, one insert
per table). Each append is still checked on its own: one whose seq does not grow, or whose
once-key is taken, is refused alone, and the others are written.

The read views attached to the log (`accord.ledger.views.ViewHost`) are folded from each
append in the same transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from accord.ledger import merkle, tiles
from accord.ledger.database import (
    CHECKPOINTS,
    ENTRIES,
    HEAD,
    LOCK_HEAD,
    ONCE,
    READ_HEAD,
    TILES,
    as_bytes,
    db_reason,
    driver_mark,
    raw_select,
    read_connection,
)
from accord.ledger.errors import AlreadyLoggedError, LedgerError, SequenceError, StoreError
from accord.ledger.events import Entry
from accord.ledger.merkle import NodeId
from accord.ledger.proofs import tile_place
from accord.ledger.tiles import TILE_WIDTH, EdgeTile, tile_key
from accord.ledger.views import ViewEntry, ViewHost

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


class AppendOnlyLog:
    """The entries and checkpoints of one Merkle log in one database, whose tables are
    prepared (`accord.ledger.database.prepare_log`); each append is folded into the read
    views `views` holds.

    Raises StoreError for database failures, SequenceError when an actor's seq would not grow
    and AlreadyLoggedError when a kind of `once_per_subject` is logged again for a subject;
    either way nothing of the failed batch is written.
    """

    def __init__(
        self,
        engine: Engine,
        log_id: str,
        *,
        once_per_subject: Collection[str],
        views: ViewHost,
    ) -> None:
        self.engine = engine
        self.log_id = log_id
        self.once_per_subject = frozenset(once_per_subject)
        self._views = views
        self._frontier: list[tuple[NodeId, bytes]] = []
        self._edges: dict[int, EdgeTile] = {}
        self._frontier_size = -1
        self._last_seq: dict[str, int] = {}
        # Appends of this process: the waiting ones, and the lock of the one writing them.
        self._appending = threading.Lock()
        self._waiting_lock = threading.Lock()
        self._waiting: list[_Append] = []
        self._postgres = engine.dialect.name == "postgresql"
        self._raw_sqlite = engine.dialect.name == "sqlite"
        self._find_texts: dict[tuple[bool, int, bool, bool, bool], str] = {}

    def _index_once_only(self) -> None:
        """Fill `ledger_once` from the entries of a log written before it existed (the first
        of each (kind, subject) is kept). Does nothing once the table holds a row."""
        if not self.once_per_subject:
            return
        try:
            with self.engine.begin() as connection:
                self._lock_head(connection)
                if connection.execute(select(ONCE.c.kind).limit(1)).first() is not None:
                    return
                first = (
                    select(ENTRIES.c.kind, ENTRIES.c.subject, func.min(ENTRIES.c.idx))
                    .where(ENTRIES.c.kind.in_(sorted(self.once_per_subject)))
                    .group_by(ENTRIES.c.kind, ENTRIES.c.subject)
                )
                connection.execute(insert(ONCE).from_select(["kind", "subject", "idx"], first))
        except IntegrityError:
            pass  # another process indexed it first
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot index the once-only events: {db_reason(exc)}") from exc

    # -- reading -----------------------------------------------------------------------------

    def size(self) -> int:
        with read_connection(self.engine) as connection:
            return int(connection.execute(select(HEAD.c.size)).scalar_one())

    def entry(self, index: int) -> StoredEntry:
        """Raises IndexError when there is no entry `index`."""
        with read_connection(self.engine) as connection:
            data = connection.execute(
                select(ENTRIES.c.data).where(ENTRIES.c.idx == index)
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
            with read_connection(self.engine) as connection:
                rows = connection.execute(
                    select(
                        ENTRIES.c.idx,
                        ENTRIES.c.data,
                        ENTRIES.c.actor,
                        ENTRIES.c.seq,
                        ENTRIES.c.kind,
                        ENTRIES.c.subject,
                        ENTRIES.c.at,
                    )
                    .where(ENTRIES.c.idx >= position, ENTRIES.c.idx < stop)
                    .order_by(ENTRIES.c.idx)
                ).all()
            if not rows:
                return
            for idx, data, *columns in rows:
                yield StoredEntry(int(idx), as_bytes(data), tuple(columns))
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
        with read_connection(self.engine) as connection:
            try:
                rows = connection.exec_driver_sql(text, tuple(params)).all()
            except SQLAlchemyError as exc:
                raise StoreError(f"cannot read the log database: {db_reason(exc)}") from exc
        return [StoredEntry(int(idx), as_bytes(data)) for idx, data in rows]

    def find_each(
        self,
        *,
        kind: str | None = None,
        kinds: Collection[str] | None = None,
        after: int = -1,
        chunk: int = 500,
    ) -> Iterator[StoredEntry]:
        """Every entry of `kind` (or any of `kinds`) after index `after`, oldest first, read
        `chunk` at a time through `find`: what a reader folding the log as it grows reads
        since its last index. Raises StoreError when the database cannot be read."""
        while True:
            found = self.find(kind=kind, kinds=kinds, after=after, limit=chunk)
            yield from found
            if len(found) < chunk:
                return
            after = found[-1].index

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
        with read_connection(self.engine) as connection:
            value = connection.execute(
                select(func.max(ENTRIES.c.seq)).where(ENTRIES.c.actor == actor)
            ).scalar_one()
        return None if value is None else int(value)

    def leaf_datas(self, start: int, end: int) -> list[bytes]:
        """The leaf data of the entries `start <= index < end`, in index order, in one query
        (no indexed columns: what an entry bundle carries). Raises StoreError when one of them
        is not in the log or the database cannot be read."""
        if self._raw_sqlite:
            rows = raw_select(self.engine, _DATA_RANGE_QUERY, (start, end))
        else:
            try:
                with read_connection(self.engine) as connection:
                    rows = connection.execute(
                        select(ENTRIES.c.data)
                        .where(ENTRIES.c.idx >= start, ENTRIES.c.idx < end)
                        .order_by(ENTRIES.c.idx)
                    ).all()
            except SQLAlchemyError as exc:
                raise StoreError(f"cannot read the log database: {db_reason(exc)}") from exc
        if len(rows) != max(0, end - start):
            raise StoreError(f"the log lacks some of the entries {start} to {end - 1}")
        return [as_bytes(data) for (data,) in rows]

    def stored_tiles(self, chunk: int = 2000) -> Iterator[tuple[int, bytes]]:
        """Every stored tile row as (key, row), by key (`tiles.tile_key`: tile level, then
        index, then width), for verification."""
        position = 0
        while True:
            with read_connection(self.engine) as connection:
                rows = connection.execute(
                    select(TILES.c.id, TILES.c.hashes)
                    .where(TILES.c.id >= position)
                    .order_by(TILES.c.id)
                    .limit(chunk)
                ).all()
            if not rows:
                return
            for key, value in rows:
                yield int(key), as_bytes(value)
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
            size, views_level = self._views.lock_head_and_level(connection)
            if not views_level and self._postgres:
                # A writer that waited for the head lock on PostgreSQL reads the head row as the
                # writer before it left it, but the views' counts as they were when its own
                # statement began (READ COMMITTED re-reads only the row it locks): asked again
                # now the lock is held, the views of that writer's append are level after all.
                _size, views_level = self._views.head_and_level(connection, self._views.names)
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
            frontier, edges, tile_rows, replaced = extend_tree(
                self._frontier, self._edges, size, [entry.data for entry in entries]
            )
            new_size = size + len(entries)
            # Views level with the head before the append are level with it after: their
            # count is written with the rows (on PostgreSQL) when they are.
            level_views = list(self._views.names) if views_level else []
            recorded = self._write_rows(
                connection, once_rows, entry_rows, (tile_rows, replaced), new_size, level_views
            )
            if self._views.names:
                folded = [ViewEntry(size + k, entry.event) for k, entry in enumerate(entries)]
                self._views.project(connection, size, folded, level=views_level, recorded=recorded)
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
                        insert(CHECKPOINTS).values(size=size, root=root, at=at, data=data)
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
        with read_connection(self.engine) as connection:
            row = connection.execute(
                select(CHECKPOINTS).where(CHECKPOINTS.c.size == size)
            ).one_or_none()
        return None if row is None else _checkpoint(row)

    def checkpoints(self) -> list[StoredCheckpoint]:
        with read_connection(self.engine) as connection:
            rows = connection.execute(select(CHECKPOINTS).order_by(CHECKPOINTS.c.size)).all()
        return [_checkpoint(row) for row in rows]

    def latest_checkpoint(self) -> StoredCheckpoint | None:
        with read_connection(self.engine) as connection:
            row = connection.execute(
                select(CHECKPOINTS).order_by(CHECKPOINTS.c.size.desc()).limit(1)
            ).one_or_none()
        return None if row is None else _checkpoint(row)

    # -- internals ---------------------------------------------------------------------------

    def _lock_head(self, connection: Any) -> int:
        """The log's size, its head row locked until the transaction ends (on SQLite the
        transaction's BEGIN IMMEDIATE holds the database's write lock already)."""
        query = LOCK_HEAD if self._postgres else READ_HEAD
        return int(connection.execute(query).scalar_one())

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
            self._frontier, self._edges, _rows, _replaced = extend_tree(
                self._frontier, self._edges, behind, [as_bytes(row.data) for row in rows]
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
                select(ENTRIES.c.actor, func.max(ENTRIES.c.seq))
                .where(ENTRIES.c.actor.in_(missing))
                .group_by(ENTRIES.c.actor)
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
        with read_connection(self.engine) as connection:
            return _once_index(connection, kind, subject)


def _once_index(connection: Any, kind: str, subject: str) -> int | None:
    """The index `ledger_once` holds for (kind, subject), or None."""
    found = connection.execute(
        select(ONCE.c.idx).where(ONCE.c.kind == kind, ONCE.c.subject == subject)
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
# A bundle's entries (`leaf_datas`): one range.
_DATA_RANGE_QUERY = "SELECT data FROM ledger_entries WHERE idx >= ? AND idx < ? ORDER BY idx"


def extend_tree(
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
        select(TILES.c.id, TILES.c.hashes).where(TILES.c.id.in_(list(wanted.values())))
    ).all()
    stored = {int(key): as_bytes(value) for key, value in rows}
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
        (level, _index), height, position, _width = tile_place(node)
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
_SET_HEAD = update(HEAD).values(size=bindparam("new_size"))
_INSERT_ONCE = insert(ONCE)
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
_BETWEEN = (ENTRIES.c.idx >= bindparam("start"), ENTRIES.c.idx < bindparam("stop"))
_ENTRIES_BETWEEN = (
    select(ENTRIES.c.idx, ENTRIES.c.actor, ENTRIES.c.seq, ENTRIES.c.data)
    .where(*_BETWEEN)
    .order_by(ENTRIES.c.idx)
)
_SEQS_BETWEEN = select(ENTRIES.c.actor, ENTRIES.c.seq).where(*_BETWEEN)


def _checkpoint(row: Any) -> StoredCheckpoint:
    return StoredCheckpoint(int(row.size), bytes(row.root), row.at, bytes(row.data))
