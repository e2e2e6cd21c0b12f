"""The persistent Merkle log: one log in one database (SQLite by default, or PostgreSQL),
composed of its parts, each in a module of its own:

    accord.ledger.database        the tables, the engine and connections (`make_engine`)
    accord.ledger.log             the entries and checkpoints: append (group commit,
                                  once-per-subject kinds), entry, entries, find
    accord.ledger.proofs          roots, inclusion and consistency proofs, tiles, read
                                  from the C2SP tlog-tiles the appends write
    accord.ledger.views           the read views folded from each append (`ViewHost`)
    accord.ledger.tile_migration  `accord ledger migrate`: a log of node rows to tiles

`LogStore` is the one object the rest of accord holds: the log (it is one), its proofs and
its views. Leaf hashes stay stored, in the level-0 tiles, so `verify_log` compares every tile
with the one the entries make and names the very entry that was inserted, deleted or moved.

The journal of the transactions that anchor checkpoints on chain is not the log's: it is
`accord.ledger.anchor_journal` (table `ledger_anchors`, in the same database).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import Engine

from accord.ledger.database import prepare_log
from accord.ledger.log import ONCE_PER_SUBJECT, AppendOnlyLog
from accord.ledger.proofs import TileProofs
from accord.ledger.views import Projection, ViewHost


class LogStore(AppendOnlyLog):
    """One Merkle log in one database: its entries and checkpoints (`AppendOnlyLog`), its
    proofs (`TileProofs`) and its read views (`ViewHost`, each attached view folded from
    every append in the append's transaction).

    Raises StoreError for database failures (also when the database holds another log, or
    one whose tree is still stored as node rows), SequenceError when an actor's seq would
    not grow and AlreadyLoggedError when a kind of `once_per_subject` is logged again for a
    subject; either way nothing of the failed batch is written.
    """

    def __init__(
        self,
        engine: Engine,
        log_id: str,
        *,
        once_per_subject: Collection[str] = ONCE_PER_SUBJECT,
        projections: Sequence[Projection] = (),
    ) -> None:
        self._view_host = ViewHost(engine)
        self._proofs = TileProofs(engine)
        super().__init__(engine, log_id, once_per_subject=once_per_subject, views=self._view_host)
        prepare_log(engine, log_id)
        self._index_once_only()
        for projection in projections:
            self.attach(projection)

    # -- proofs (`accord.ledger.proofs`) ------------------------------------------------------

    def root(self, size: int | None = None) -> bytes:
        """The tree hash at `size` (default: now). Raises ValueError beyond the log's size."""
        return self._proofs.root(size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The RFC 9162 inclusion proof of entry `index` in the tree of `size` (default: now).
        Raises ValueError when index or size are out of range."""
        return self._proofs.inclusion_proof(index, size)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """The RFC 9162 consistency proof between two sizes. Raises ValueError out of range."""
        return self._proofs.consistency_proof(old_size, new_size)

    def level_hashes(self, level: int, start: int, count: int) -> list[bytes]:
        """The hashes of the perfect subtrees `NodeId(level, start)` up to
        `NodeId(level, start + count - 1)`, in order (`TileProofs.level_hashes`). Raises
        ValueError for a negative argument, StoreError when one is not stored."""
        return self._proofs.level_hashes(level, start, count)

    def tile(self, level: int, index: int, width: int) -> bytes:
        """The bytes of tile `index` of tile level `level`, `width` hashes wide (C2SP
        tlog-tiles). Raises StoreError when the log holds no such tile (yet), ValueError for
        a tile that cannot exist."""
        return self._proofs.tile(level, index, width)

    # -- read views (`accord.ledger.views`) ---------------------------------------------------

    def attach(self, projection: Projection) -> None:
        """Keep `projection` from now on (`ViewHost.attach`). Raises StoreError."""
        self._view_host.attach(projection)

    def refresh_view(self, *names: str) -> None:
        """Fold into the attached views `names` the entries they have not applied yet
        (`ViewHost.refresh_view`). Raises StoreError."""
        self._view_host.refresh_view(*names)

    def reindex(self) -> dict[str, int]:
        """Empty every attached view and fold the whole log into it again; returns how many
        entries each one applied (`ViewHost.reindex`). Raises StoreError."""
        return self._view_host.reindex()
