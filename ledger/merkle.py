"""Merkle tree hashing and proofs of RFC 9162 §2.1: bytes in, bytes out, no I/O.

Leaf hash `SHA-256(0x00 || d)`, node hash `SHA-256(0x01 || left || right)`, the root of the
empty tree is `SHA-256("")`. Generators (`root`, `inclusion_proof`, `consistency_proof`) work on
a list of leaf hashes; the same algorithms run against stored interior nodes through
`inclusion_proof_by`, `consistency_proof_by` and `nodes_for_*`, which is how the persistent log
serves proofs in O(log n) without rebuilding the tree.

A *perfect subtree* is addressed by `NodeId(level, position)`: it covers the leaves
`[position * 2**level, (position + 1) * 2**level)`. Every range the RFC recursion needs splits into
at most log2(n) perfect subtrees, folded from the right.

Verifiers return `None` and raise `ProofError`; they never return a bool.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from accord.ledger.errors import ProofError

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

_sha256 = hashlib.sha256


class NodeId(NamedTuple):
    """A perfect subtree: `2**level` leaves starting at leaf `position * 2**level`."""

    level: int
    position: int

    @property
    def start(self) -> int:
        return self.position << self.level

    @property
    def end(self) -> int:
        return (self.position + 1) << self.level


SubtreeHash = Callable[[int, int], bytes]
"""The Merkle tree hash of the leaves in `[start, end)`."""


def leaf_hash(data: bytes) -> bytes:
    """RFC 9162 leaf hash: SHA-256(0x00 || data)."""
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 interior node hash: SHA-256(0x01 || left || right)."""
    return _sha256(b"\x01" + left + right).digest()


def split_point(size: int) -> int:
    """The largest power of two strictly below `size` (the RFC's k); `size` must be >= 2."""
    return 1 << ((size - 1).bit_length() - 1)


# ---------------------------------------------------------------------------------------------
# Perfect-subtree decomposition (what the store keeps and looks up)


def perfect_subtrees(start: int, end: int) -> list[NodeId]:
    """Split `[start, end)` into perfect subtrees, largest first.

    `start` must be aligned as in the RFC recursion (a multiple of the range's first piece),
    which holds for every range `root`, the proofs and the store ask for.
    """
    pieces: list[NodeId] = []
    while start < end:
        level = (end - start).bit_length() - 1
        while start % (1 << level):
            level -= 1
        pieces.append(NodeId(level, start >> level))
        start += 1 << level
    return pieces


def fold_right(hashes: Sequence[bytes]) -> bytes:
    """Hash perfect-subtree roots, largest first, into the tree hash of their union."""
    if not hashes:
        return EMPTY_ROOT
    acc = hashes[-1]
    for left in reversed(hashes[:-1]):
        acc = node_hash(left, acc)
    return acc


def extend_frontier(
    frontier: Sequence[bytes], size: int, datas: Iterable[bytes]
) -> tuple[list[bytes], list[tuple[int, int, bytes]]]:
    """Append the leaves `datas` to a tree of `size` leaves known by its frontier.

    The frontier is the hashes of `perfect_subtrees(0, size)`, largest first: one per set bit
    of `size`. Appending leaf number `i` merges it with the smallest ones, one per trailing
    set bit of `i` (each the left sibling of what it is merged with). Returns the frontier
    after the last leaf and every perfect subtree completed on the way as
    `(level, position, hash)`, each leaf (level 0) before the nodes above it.

    Raises ValueError when the frontier does not have one hash per set bit of `size`.
    """
    if len(frontier) != size.bit_count():
        raise ValueError(f"a tree of {size} leaves has {size.bit_count()} frontier hashes")
    stack = list(frontier)
    made: list[tuple[int, int, bytes]] = []
    sha256 = _sha256  # `leaf_hash` and `node_hash` inline: the call costs as much as the hash
    for index, data in enumerate(datas, size):
        acc = sha256(b"\x00" + data).digest()
        made.append((0, index, acc))
        level, position = 0, index
        while position & 1:
            acc = sha256(b"\x01" + stack.pop() + acc).digest()
            level, position = level + 1, position >> 1
            made.append((level, position, acc))
        stack.append(acc)
    return stack, made


Runs = dict[int, tuple[int, list[bytes]]]
"""New perfect subtrees by level: `runs[level] = (first position, hashes)`, contiguous."""


def extend_levels(
    frontier: Sequence[bytes], size: int, datas: Sequence[bytes]
) -> tuple[list[bytes], Runs]:
    """`extend_frontier`, level by level: the leaves are hashed in one pass, then each level's
    new nodes from the pairs of the level below (the first one's left sibling, when it lies
    before the new leaves, is the frontier's node of that level). Returns the frontier after
    the leaves and every perfect subtree they complete, as one run per level; the same hashes
    as `extend_frontier`, with no Python loop per node.

    Raises ValueError when the frontier does not have one hash per set bit of `size`.
    """
    if len(frontier) != size.bit_count():
        raise ValueError(f"a tree of {size} leaves has {size.bit_count()} frontier hashes")
    sha256 = _sha256
    old = dict(zip((node.level for node in perfect_subtrees(0, size)), frontier, strict=True))
    run = [sha256(b"\x00" + data).digest() for data in datas]
    runs: Runs = {}
    level, first = 0, size
    while run:
        runs[level] = (first, run)
        below = [old[level], *run] if first & 1 else run
        run = [
            sha256(b"\x01" + below[i] + below[i + 1]).digest() for i in range(0, len(below) - 1, 2)
        ]
        level, first = level + 1, first >> 1
    end = size + len(datas)
    after: list[bytes] = []
    for node in perfect_subtrees(0, end):
        start, hashes = runs.get(node.level, (end, []))
        after.append(hashes[node.position - start] if node.position >= start else old[node.level])
    return after, runs


# ---------------------------------------------------------------------------------------------
# The RFC 9162 algorithms over any source of subtree hashes


def inclusion_proof_by(index: int, size: int, subtree: SubtreeHash) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 9162 §2.1.3.1, leaf side first.

    Raises ValueError when `index` is not below `size`.
    """
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    path: list[bytes] = []
    start, end = 0, size
    while end - start > 1:
        k = split_point(end - start)
        if index < start + k:
            path.append(subtree(start + k, end))
            end = start + k
        else:
            path.append(subtree(start, start + k))
            start += k
    path.reverse()
    return path


def consistency_proof_by(old_size: int, new_size: int, subtree: SubtreeHash) -> list[bytes]:
    """PROOF(old_size, D[0:new_size]) of RFC 9162 §2.1.4.1.

    Raises ValueError unless 0 < old_size <= new_size.
    """
    if not 0 < old_size <= new_size:
        raise ValueError(
            f"no consistency proof from size {old_size} to size {new_size}: "
            "need 0 < old size <= new size"
        )
    proof: list[bytes] = []
    start, end, m, complete_subtree = 0, new_size, old_size, True
    while True:
        n = end - start
        if m == n:
            if not complete_subtree:
                proof.append(subtree(start, end))
            break
        k = split_point(n)
        if m <= k:
            proof.append(subtree(start + k, end))
            end = start + k
        else:
            proof.append(subtree(start, start + k))
            start += k
            m -= k
            complete_subtree = False
    proof.reverse()
    return proof


def _recording(ids: list[NodeId]) -> SubtreeHash:
    def record(start: int, end: int) -> bytes:
        ids.extend(perfect_subtrees(start, end))
        return b""

    return record


def nodes_for_inclusion(index: int, size: int) -> list[NodeId]:
    """Every perfect subtree `inclusion_proof_by` will ask for (at most ~2 log2 n)."""
    ids: list[NodeId] = []
    inclusion_proof_by(index, size, _recording(ids))
    return ids


def nodes_for_consistency(old_size: int, new_size: int) -> list[NodeId]:
    """Every perfect subtree `consistency_proof_by` will ask for."""
    ids: list[NodeId] = []
    consistency_proof_by(old_size, new_size, _recording(ids))
    return ids


def subtree_from_nodes(nodes: Mapping[NodeId, bytes]) -> SubtreeHash:
    """A `SubtreeHash` answering from looked-up perfect subtree hashes.

    Raises KeyError naming the node when one was not looked up (a bug, not bad input).
    """

    def subtree(start: int, end: int) -> bytes:
        return fold_right([nodes[node] for node in perfect_subtrees(start, end)])

    return subtree


# ---------------------------------------------------------------------------------------------
# The same over a plain list of leaf hashes


def _subtree_of(leaf_hashes: Sequence[bytes]) -> SubtreeHash:
    def subtree(start: int, end: int) -> bytes:
        return _mth(leaf_hashes, start, end)

    return subtree


def _mth(leaf_hashes: Sequence[bytes], start: int, end: int) -> bytes:
    n = end - start
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaf_hashes[start]
    k = split_point(n)
    return node_hash(_mth(leaf_hashes, start, start + k), _mth(leaf_hashes, start + k, end))


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH(D[0:n]) of RFC 9162 over leaf hashes; the empty tree hashes to SHA-256("")."""
    return _mth(leaf_hashes, 0, len(leaf_hashes))


def inclusion_proof(leaf_hashes: Sequence[bytes], index: int) -> list[bytes]:
    """The inclusion proof of leaf `index`; raises ValueError when the index is out of range."""
    return inclusion_proof_by(index, len(leaf_hashes), _subtree_of(leaf_hashes))


def consistency_proof(leaf_hashes: Sequence[bytes], old_size: int) -> list[bytes]:
    """The proof that the first `old_size` leaves are a prefix of all of them.

    Raises ValueError unless 0 < old_size <= len(leaf_hashes).
    """
    return consistency_proof_by(old_size, len(leaf_hashes), _subtree_of(leaf_hashes))


# ---------------------------------------------------------------------------------------------
# Verification (RFC 9162 §2.1.3.2 and §2.1.4.2)


def _check_hashes(proof: Sequence[bytes], *named: tuple[str, bytes]) -> None:
    for position, element in enumerate(proof):
        if not isinstance(element, bytes) or len(element) != HASH_SIZE:
            raise ProofError(f"proof element {position} is not a {HASH_SIZE}-byte hash")
    for name, value in named:
        if not isinstance(value, bytes) or len(value) != HASH_SIZE:
            raise ProofError(f"{name} is not a {HASH_SIZE}-byte hash")


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that `leaf_hash` is leaf `index` of the tree of `size` leaves with `root`.

    Raises ProofError when it is not (bad index, wrong length, wrong hashes).
    """
    _check_hashes(proof, ("leaf hash", leaf_hash), ("root", root))
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    fn, sn, acc = index, size - 1, leaf_hash
    for element in proof:
        if sn == 0:
            raise ProofError("inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            acc = node_hash(element, acc)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            acc = node_hash(acc, element)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is shorter than the tree is deep")
    if not hmac.compare_digest(acc, root):
        raise ProofError("inclusion proof does not lead to the root")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of `old_size` with `old_root` is a prefix of the one of `new_size`.

    Raises ProofError when it is not, or when the sizes admit no proof.
    """
    _check_hashes(proof, ("old root", old_root), ("new root", new_root))
    if old_size <= 0 or old_size > new_size:
        raise ProofError(
            f"no consistency proof from size {old_size} to size {new_size}: "
            "need 0 < old size <= new size"
        )
    if old_size == new_size:
        if proof:
            raise ProofError("a tree is consistent with itself by an empty proof")
        if not hmac.compare_digest(old_root, new_root):
            raise ProofError("equal sizes with different roots")
        return
    if not proof:
        raise ProofError("empty consistency proof between different sizes")
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    old_acc = new_acc = path[0]
    for element in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is longer than needed")
        if fn & 1 or fn == sn:
            old_acc = node_hash(element, old_acc)
            new_acc = node_hash(element, new_acc)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            new_acc = node_hash(new_acc, element)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof is shorter than needed")
    if not hmac.compare_digest(old_acc, old_root):
        raise ProofError("consistency proof does not lead to the old root")
    if not hmac.compare_digest(new_acc, new_root):
        raise ProofError("consistency proof does not lead to the new root")
