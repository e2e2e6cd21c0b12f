"""The log as C2SP `tlog-tiles`, read-only and cacheable, beside the `/ledger/...` routes: the
latest checkpoint at `/checkpoint`, the Merkle tree's hashes at `/tile/<L>/<N>[.p/<W>]` and
the entries at `/tile/entries/<N>[.p/<W>]` (`accord.ledger.tiles` names the paths and bytes).

The log stores its tree as these tiles (`accord.ledger.store`): a tile is served from its
stored row (`LogStore.tile`, one read; a partial tile is a prefix of the row stored at the
tile's latest width), and a bundle from its entries' rows. A tile's bytes never change once
its hashes exist (each is a completed perfect subtree; a partial tile is a prefix of the full
one), so tiles and bundles, full or partial, are served as immutable, as the spec says; the
checkpoint is revalidated on each use. A tile beyond the current tree, or a path that is no
tile (404 both), is a problem+json that no cache keeps.
"""

from __future__ import annotations

import gzip
from dataclasses import replace

from fastapi import APIRouter, Depends, Request, Response

from accord.api.problems import ProblemError
from accord.api.routes.deps import Context, throttle_reads
from accord.api.routes.records import ledger_checkpoint_note
from accord.ledger.errors import MalformedError
from accord.ledger.note import NOTE_MEDIA_TYPE
from accord.ledger.tiles import (
    entry_bundle,
    parse_tile_path,
    tile_path,
    width_in_tree,
)

reads = APIRouter(dependencies=[Depends(throttle_reads)])

TILE_MEDIA_TYPE = "application/octet-stream"
IMMUTABLE = "public, max-age=31536000, immutable"
"""Tiles and entry bundles: their bytes never change (c2sp.org/tlog-tiles: long-lived)."""
NOT_STORED = {"Cache-Control": "no-store"}
"""A missing tile may exist soon: no cache keeps the problem."""
SPEC = "https://c2sp.org/tlog-tiles"
BUNDLE_GZIP_LEVEL = 1
"""Entry bundles go gzip-compressed to a client that accepts it (the spec: they SHOULD be).
Level 1: on bundles of signed entries it compresses within a few points of level 6 (30% of
the size against 28%) for a third of the time (about 1.6 ms against 4.5 ms a full bundle)."""


@reads.get(
    "/checkpoint",
    tags=["ledger"],
    summary="The latest checkpoint (C2SP tlog-tiles)",
    response_class=Response,
    responses={
        200: {
            "description": "The same signed note as `/ledger/checkpoint`: the origin, the tree "
            "size, the base64 root hash, a blank line and the operator's Ed25519 signature",
            "content": {NOTE_MEDIA_TYPE: {"schema": {"type": "string"}}},
        }
    },
)
def checkpoint(context: Context) -> Response:
    """Raises ProblemError 404 when the log has no checkpoint yet."""
    return ledger_checkpoint_note(context)


@reads.get(
    "/tile/{path:path}",
    tags=["ledger"],
    summary="A tile of hashes or an entry bundle (C2SP tlog-tiles)",
    response_class=Response,
    responses={
        200: {
            "description": "`/tile/<L>/<N>[.p/<W>]`: the 32-byte hashes of tree level 8*L, "
            "concatenated (256 in a full tile, W in a partial one); `/tile/entries/<N>[.p/<W>]`:"
            " the entries' leaf data, each after its big-endian uint16 length",
            "content": {TILE_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
def tile(path: str, context: Context, request: Request) -> Response:
    """Raises ProblemError 404 for a path that is no tile path (as a static tiled log does;
    the detail names the rule it breaks) or a tile the tree does not hold (yet), 500 for an
    entry too long for a bundle."""
    try:
        wanted = parse_tile_path(path)
    except MalformedError as exc:
        raise ProblemError(404, f"no such tile: {exc} (see {SPEC})", headers=NOT_STORED) from exc
    store = context.market.ledger.store
    size = store.size()
    if wanted.entries_needed() > size:
        have = width_in_tree(wanted.level or 0, wanted.index, size)
        hint = f": ask /{tile_path(replace(wanted, width=have))}" if have else ""
        raise ProblemError(
            404,
            f"/{tile_path(wanted)} is not in the tree of {size} entries, which holds "
            f"{have} of that tile's {'entries' if wanted.level is None else 'hashes'}{hint}",
            headers=NOT_STORED,
        )
    first = wanted.first
    headers = {"Cache-Control": IMMUTABLE}
    if wanted.level is not None:
        body = store.tile(wanted.level, wanted.index, wanted.width)
        return Response(body, media_type=TILE_MEDIA_TYPE, headers=headers)
    try:
        body = entry_bundle(first, store.leaf_datas(first, first + wanted.width))
    except MalformedError as exc:
        raise ProblemError(
            500, f"{exc}: read it at /ledger/entries instead", headers=NOT_STORED
        ) from exc
    headers["Vary"] = "Accept-Encoding"
    if accepts_gzip(request.headers.get("accept-encoding", "")):
        body = gzip.compress(body, BUNDLE_GZIP_LEVEL, mtime=0)
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type=TILE_MEDIA_TYPE, headers=headers)


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an Accept-Encoding header (RFC 9110 §12.5.3) takes gzip: named, or `*`, with a
    weight above zero (a gzip of weight 0 refuses it even when `*` is there)."""
    weights: dict[str, float] = {}
    for item in accept_encoding.split(","):
        coding, _, params = item.strip().partition(";")
        weight = 1.0
        name, _, value = params.strip().partition("=")
        if name.strip().lower() == "q":
            try:
                weight = float(value)
            except ValueError:
                weight = 0.0
        weights[coding.strip().lower()] = weight
    if "gzip" in weights:
        return weights["gzip"] > 0
    return weights.get("*", 0.0) > 0
