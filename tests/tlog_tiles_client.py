"""A client of a C2SP tiled transparency log, written from the specs alone (c2sp.org/tlog-tiles,
c2sp.org/tlog-checkpoint, c2sp.org/signed-note, RFC 6962 §2.1): it imports no accord code, only
the standard library, httpx and `cryptography` (`tests/api/test_tlog_tiles.py` holds it to that).

It fetches `<prefix>/checkpoint`, checks the log's Ed25519 note signature, then fetches the tiles
a tree of the checkpoint's size is made of to recompute the root, inclusion proofs and entries.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

TILE_WIDTH = 256
HASH_BYTES = 32


class LogMisbehaves(Exception):
    """What the log served does not hold up against the specs."""


@dataclass(frozen=True)
class SignedTreeHead:
    origin: str
    size: int
    root: bytes


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def index_path(n: int) -> str:
    """tlog-tiles' <N>: zero-padded 3-digit elements, all but the last prefixed with 'x'."""
    elements = [f"{n % 1000:03d}"]
    n //= 1000
    while n > 0:
        elements.insert(0, f"x{n % 1000:03d}")
        n //= 1000
    return "/".join(elements)


def open_checkpoint(note: bytes, origin: str, public_key: bytes) -> SignedTreeHead:
    """The tree head of a checkpoint note whose Ed25519 signature by the key named `origin`
    verifies (signed-note: key ID = SHA-256(name || 0x0A || 0x01 || key)[:4])."""
    text, separator, signatures = note.partition(b"\n\n")
    if not separator:
        raise LogMisbehaves("the note has no blank line before its signatures")
    text += b"\n"
    key_id = hashlib.sha256(origin.encode() + b"\n\x01" + public_key).digest()[:4]
    verified = False
    for line in signatures.decode().splitlines():
        dash_name, _, encoded = line.rpartition(" ")
        if dash_name != f"\u2014 {origin}":
            continue
        blob = base64.b64decode(encoded, validate=True)
        if blob[:4] != key_id:
            continue
        try:
            Ed25519PublicKey.from_public_bytes(public_key).verify(blob[4:], text)
        except InvalidSignature as exc:
            raise LogMisbehaves("the checkpoint's signature does not verify") from exc
        verified = True
    if not verified:
        raise LogMisbehaves(f"the checkpoint carries no signature by {origin}")
    lines = text.decode().split("\n")
    if lines[0] != origin:
        raise LogMisbehaves(f"the checkpoint is of {lines[0]!r}, not {origin!r}")
    root = base64.b64decode(lines[2], validate=True)
    if len(root) != HASH_BYTES or not lines[1].isdigit():
        raise LogMisbehaves("the checkpoint's size or root is malformed")
    return SignedTreeHead(origin, int(lines[1]), root)


class TiledLogClient:
    """Reads one tiled log at `prefix` through `http`, for the tree of a verified checkpoint."""

    def __init__(self, http: httpx.Client, prefix: str, origin: str, public_key: bytes) -> None:
        self.http = http
        self.prefix = prefix.rstrip("/")
        self.origin = origin
        self.public_key = public_key
        self.fetched: dict[str, httpx.Response] = {}

    def get(self, path: str) -> httpx.Response:
        """GET `<prefix>/<path>`; a tile is fetched once (tiles never change)."""
        response = self.fetched.get(path)
        if response is None:
            response = self.http.get(f"{self.prefix}/{path}")
            if response.status_code != 200:
                raise LogMisbehaves(f"GET /{path}: {response.status_code} {response.text}")
            if path.startswith("tile/"):
                self.fetched[path] = response
        return response

    def checkpoint(self) -> SignedTreeHead:
        response = self.get("checkpoint")
        if response.headers["content-type"] != "text/plain; charset=utf-8":
            raise LogMisbehaves("a checkpoint is text/plain; charset=utf-8")
        return open_checkpoint(response.content, self.origin, self.public_key)

    # -- tiles ---------------------------------------------------------------------------------

    def _width(self, level: int, n: int, size: int) -> int:
        """How wide tile n of level `level` is in a tree of `size` (256: full)."""
        return min(TILE_WIDTH, (size // TILE_WIDTH**level) - n * TILE_WIDTH)

    def _suffix(self, width: int) -> str:
        return "" if width == TILE_WIDTH else f".p/{width}"

    def tile(self, level: int, n: int, size: int) -> list[bytes]:
        width = self._width(level, n, size)
        if width <= 0:
            raise ValueError(f"a tree of {size} has no tile {level}/{n}")
        body = self.get(f"tile/{level}/{index_path(n)}{self._suffix(width)}").content
        if len(body) != width * HASH_BYTES:
            raise LogMisbehaves(f"tile {level}/{n} has {len(body)} bytes, not {width * 32}")
        return [body[i : i + HASH_BYTES] for i in range(0, len(body), HASH_BYTES)]

    def entries(self, n: int, size: int) -> list[bytes]:
        """Entry bundle n of the tree of `size`, each entry checked against its level-0 tile."""
        width = self._width(0, n, size)
        body = self.get(f"tile/entries/{index_path(n)}{self._suffix(width)}").content
        entries, at = [], 0
        while at < len(body):
            length = int.from_bytes(body[at : at + 2], "big")
            entries.append(body[at + 2 : at + 2 + length])
            at += 2 + length
        if at != len(body) or len(entries) != width:
            raise LogMisbehaves(f"entry bundle {n} does not hold {width} entries")
        if [leaf_hash(entry) for entry in entries] != self.tile(0, n, size):
            raise LogMisbehaves(f"entry bundle {n} does not hash to level-0 tile {n}")
        return entries

    # -- RFC 6962 over the tiles ---------------------------------------------------------------

    def perfect_subtree(self, start: int, end: int, size: int) -> bytes:
        """MTH(D[start:end]) of a complete subtree of 2**k leaves starting at a multiple of
        2**k: 2**(k mod 8) hashes of a tile at level k // 8, hashed up pairwise."""
        count = end - start
        k = count.bit_length() - 1
        level = k // 8
        span = TILE_WIDTH**level
        first = start // span
        hashes = []
        for position in range(first, first + count // span):
            n, offset = divmod(position, TILE_WIDTH)
            hashes.append(self.tile(level, n, size)[offset])
        while len(hashes) > 1:
            hashes = [node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
        return hashes[0]

    def tree_hash(self, start: int, end: int, size: int) -> bytes:
        """MTH(D[start:end]) (RFC 6962 §2.1) of an aligned range of the tree of `size`."""
        count = end - start
        if count == 0:
            return hashlib.sha256(b"").digest()
        if count & (count - 1) == 0 and start % count == 0:
            return self.perfect_subtree(start, end, size)
        k = 1 << ((count - 1).bit_length() - 1)
        return node_hash(
            self.tree_hash(start, start + k, size), self.tree_hash(start + k, end, size)
        )

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """PATH(index, D[0:size]) of RFC 6962 §2.1.1, computed from tiles."""

        def path(m: int, start: int, end: int) -> list[bytes]:
            count = end - start
            if count == 1:
                return []
            k = 1 << ((count - 1).bit_length() - 1)
            if m < k:
                return [*path(m, start, start + k), self.tree_hash(start + k, end, size)]
            return [*path(m - k, start + k, end), self.tree_hash(start, start + k, size)]

        return path(index, 0, size)


def inclusion_holds(leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2: does `proof` lead from `leaf` at `index` to `root`?"""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and hmac.compare_digest(r, root)
