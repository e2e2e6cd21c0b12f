"""What the blob tests read of who holds what (`market_blob_holders`), and the sweep every
upload runs first, brought about by an upload of its own."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select

from accord.market.blobs import _HOLDERS, BlobStore

SWEEPER = "did:key:z6Mksweeper"
"""The holder of the uploads `swept_by_an_upload` makes to sweep."""


def holds(blobs: BlobStore) -> set[tuple[str, str]]:
    """(sha256, holder) of every hold, expired or not."""
    with blobs.engine.connect() as connection:
        rows = connection.execute(select(_HOLDERS.c.sha256, _HOLDERS.c.holder)).all()
    return {(row.sha256, row.holder) for row in rows}


def unnamed_uploads(blobs: BlobStore, holder: str | None, now: datetime) -> tuple[int, int]:
    """(files, bytes) of the uploads no task names yet that `holder` (everybody when None)
    holds at `now`: the holds with an expiry still ahead."""
    where = _HOLDERS.c.expires_at.is_not(None) & (_HOLDERS.c.expires_at > now.timestamp())
    if holder is not None:
        where = where & (_HOLDERS.c.holder == holder)
    with blobs.engine.connect() as connection:
        count, size = connection.execute(
            select(func.count(), func.coalesce(func.sum(_HOLDERS.c.size), 0)).where(where)
        ).one()
    return int(count), int(size)


def swept_by_an_upload(blobs: BlobStore, now: datetime) -> set[tuple[str, str]]:
    """The holds the next upload at `now` sweeps away (every upload sweeps the expired ones
    first): `SWEEPER` uploads a file of its own, whose new hold is not counted."""
    before = holds(blobs)
    blobs.upload(f"swept at {now.isoformat()}".encode(), holder=SWEEPER, now=now)
    return before - holds(blobs)
