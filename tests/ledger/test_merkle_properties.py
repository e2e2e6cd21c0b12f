"""Exhaustive and property tests of `accord.ledger.merkle` against an in-test RFC 9162 reference.

Coverage, and where it stops being exhaustive:

* Reference: `RefTree` below is a naive transcription of RFC 9162 §2.1 (MTH, PATH, PROOF /
  SUBPROOF) and of the verification algorithms of §2.1.3.2 and §2.1.4.2, using `hashlib`
  only. `root`, `inclusion_proof` and `consistency_proof` are compared with it for every tree
  size 0..130, every leaf index and every pair 1 <= m <= n <= 130 (~8.5k inclusion proofs and
  ~8.5k consistency proofs, generated once and shared through `functools.cache`).
* Round trip: every one of those generated proofs verifies (the verifier returns None).
* Mutations: exhaustive for tree sizes 1..64 (every index / every pair m <= n, every mutation
  listed in `_inclusion_mutations` / `_consistency_mutations`: other indices, sizes +-1, *2,
  /2 and 0, each element removed, an element inserted at each position, each element with one
  bit flipped, swapped / wrong / neighbouring roots, wrong leaf, empty proof where one is
  needed, each element truncated to 31 / extended to 33 / emptied, adjacent elements swapped,
  the proof reversed). For sizes 65..130 doing all of that for all ~6.4k proofs of each kind
  would cost well over the time budget, so hypothesis draws (size, index) and (m, n) there and
  runs the full mutation list on each drawn case.
* The expected outcome of a mutation is the reference verifier's. A mutation that changes the
  proof, a root or the leaf must be rejected (the test also checks the reference rejects it).
  A mutation of an index or size alone is *not* always detectable: the proof of leaf 0 in a
  tree of 3 leaves is also a valid proof for a tree of 4 leaves with the same root, since the
  verifier cannot tell the missing leaf apart. Those few cases must be handled exactly as the
  RFC 9162 algorithm does (accepted); every other size/index mutation must raise ProofError.
* Hypothesis, on random leaf data: the root changes whenever any leaf changes, a proof does
  not verify another leaf, random trees agree with the reference.

Verifiers must return None on success and raise ProofError (never another exception, never a
bool) on failure; generators raise ValueError for out-of-range index / sizes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from functools import cache

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from accord.ledger import merkle
from accord.ledger.errors import ProofError

MAX_SIZE = 130
EXHAUSTIVE_MUTATION_MAX = 64

EMPTY_ROOT = hashlib.sha256(b"").digest()
GARBAGE = hashlib.sha256(b"not a node of any tree here").digest()


def h_leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def h_node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


# ---------------------------------------------------------------------------------------------
# The reference: RFC 9162 §2.1, as written


def _k(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


class RefTree:
    """MTH / PATH / PROOF over a fixed list of leaf hashes, memoised by leaf range."""

    def __init__(self, leaf_hashes: Sequence[bytes]) -> None:
        self.leaves = tuple(leaf_hashes)
        self._mth: dict[tuple[int, int], bytes] = {}

    def mth(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi])."""
        key = (lo, hi)
        if key not in self._mth:
            n = hi - lo
            if n == 0:
                value = EMPTY_ROOT
            elif n == 1:
                value = self.leaves[lo]
            else:
                k = _k(n)
                value = h_node(self.mth(lo, lo + k), self.mth(lo + k, hi))
            self._mth[key] = value
        return self._mth[key]

    def path(self, m: int, lo: int, hi: int) -> list[bytes]:
        """PATH(m, D[lo:hi]), m relative to lo."""
        n = hi - lo
        if n == 1:
            return []
        k = _k(n)
        if m < k:
            return [*self.path(m, lo, lo + k), self.mth(lo + k, hi)]
        return [*self.path(m - k, lo + k, hi), self.mth(lo, lo + k)]

    def subproof(self, m: int, lo: int, hi: int, b: bool) -> list[bytes]:
        """SUBPROOF(m, D[lo:hi], b)."""
        n = hi - lo
        if m == n:
            return [] if b else [self.mth(lo, hi)]
        k = _k(n)
        if m <= k:
            return [*self.subproof(m, lo, lo + k, b), self.mth(lo + k, hi)]
        return [*self.subproof(m - k, lo + k, hi, False), self.mth(lo, lo + k)]

    def proof(self, m: int, n: int) -> list[bytes]:
        """PROOF(m, D[0:n])."""
        return self.subproof(m, 0, n, True)


def ref_verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 §2.1.3.2, plus accord's rule that every element is 32 bytes."""
    if not 0 <= index < size or any(len(p) != 32 for p in proof):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = h_node(p, r)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn >>= 1
                    sn >>= 1
        else:
            r = h_node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def ref_verify_consistency(
    m: int, n: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2, plus accord's rules for m == 0, m == n and 32-byte elements."""
    if not 0 < m <= n or any(len(p) != 32 for p in proof):
        return False
    if m == n:
        return not proof and old_root == new_root
    if not proof:
        return False
    path = list(proof)
    if m & (m - 1) == 0:
        path.insert(0, old_root)
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = h_node(c, fr)
            sr = h_node(c, sr)
            while not (fn & 1 or fn == 0):
                fn >>= 1
                sn >>= 1
        else:
            sr = h_node(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


# ---------------------------------------------------------------------------------------------
# One tree of 130 distinct leaves, hashed once; implementation results cached


LEAVES: tuple[bytes, ...] = tuple(h_leaf(b"accord leaf %d" % i) for i in range(MAX_SIZE))
REF = RefTree(LEAVES)
SIZES = range(1, MAX_SIZE + 1)
SMALL_SIZES = range(1, EXHAUSTIVE_MUTATION_MAX + 1)


def ref_root(n: int) -> bytes:
    return REF.mth(0, n)


@cache
def impl_root(n: int) -> bytes:
    return merkle.root(list(LEAVES[:n]))


@cache
def impl_inclusion(n: int, index: int) -> tuple[bytes, ...]:
    return tuple(merkle.inclusion_proof(list(LEAVES[:n]), index))


@cache
def impl_consistency(m: int, n: int) -> tuple[bytes, ...]:
    return tuple(merkle.consistency_proof(list(LEAVES[:n]), m))


def _outcome(call: Callable[..., object], *args: object) -> str:
    try:
        result = call(*args)
    except ProofError:
        return "rejected"
    except Exception as error:
        return f"raised {type(error).__name__} instead of ProofError: {error}"
    if result is not None:
        return f"returned {result!r} instead of None"
    return "accepted"


def _report(failures: list[str], limit: int = 25) -> str:
    shown = "\n  ".join(failures[:limit])
    more = f"\n  ... and {len(failures) - limit} more" if len(failures) > limit else ""
    return f"{len(failures)} failure(s):\n  {shown}{more}"


def _flip(value: bytes, bit: int) -> bytes:
    bit %= len(value) * 8
    out = bytearray(value)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def _proof_mutations(proof: list[bytes], salt: int) -> Iterator[tuple[str, list[bytes]]]:
    """Changes of the proof list alone; each of them must make the proof fail."""
    length = len(proof)
    for k in range(length):
        yield f"element {k} removed", proof[:k] + proof[k + 1 :]
    for k in range(length + 1):
        yield f"garbage hash inserted at {k}", [*proof[:k], GARBAGE, *proof[k:]]
    for k in range(length):
        bit = (k * 67 + salt * 13) % 256
        yield (
            f"element {k} bit {bit} flipped",
            [
                *proof[:k],
                _flip(proof[k], bit),
                *proof[k + 1 :],
            ],
        )
    for k in range(length):
        yield f"element {k} truncated to 31 bytes", [*proof[:k], proof[k][:31], *proof[k + 1 :]]
        yield (
            f"element {k} extended to 33 bytes",
            [
                *proof[:k],
                proof[k] + b"\x00",
                *proof[k + 1 :],
            ],
        )
        yield f"element {k} emptied", [*proof[:k], b"", *proof[k + 1 :]]
    yield "empty element appended", [*proof, b""]
    yield "empty element prepended", [b"", *proof]
    yield "31-byte element appended", [*proof, GARBAGE[:31]]
    for k in range(length - 1):
        if proof[k] != proof[k + 1]:
            swapped = list(proof)
            swapped[k], swapped[k + 1] = swapped[k + 1], swapped[k]
            yield f"elements {k} and {k + 1} swapped", swapped
    if proof[::-1] != proof:
        yield "proof reversed", proof[::-1]
    if proof:
        yield "empty proof", []


InclusionArgs = tuple[bytes, int, int, list[bytes], bytes]


def _inclusion_mutations(
    n: int, index: int, proof: list[bytes], all_indices: bool
) -> Iterator[tuple[str, bool, InclusionArgs]]:
    """(description, content?, args). Content mutations must fail; shape ones follow the RFC."""
    leaf, root = LEAVES[index], ref_root(n)
    for desc, wrong in _proof_mutations(proof, salt=n + index):
        yield desc, True, (leaf, index, n, wrong, root)
    yield "proof extended by the root", True, (leaf, index, n, [*proof, root], root)
    yield "proof prefixed by the root", True, (leaf, index, n, [root, *proof], root)
    yield "proof extended by the leaf", True, (leaf, index, n, [*proof, leaf], root)
    # The leaf.
    yield "leaf bit flipped", True, (_flip(leaf, n + index), index, n, proof, root)
    other = LEAVES[(index + 1) % MAX_SIZE]
    yield "another leaf's hash", True, (other, index, n, proof, root)
    yield "empty-tree hash as leaf", True, (EMPTY_ROOT, index, n, proof, root)
    if n > 1:
        yield "root as leaf", True, (root, index, n, proof, root)
    # The root.
    yield "root bit flipped", True, (leaf, index, n, proof, _flip(root, 7 * n + index))
    yield "empty-tree root", True, (leaf, index, n, proof, EMPTY_ROOT)
    yield f"root of size {n - 1}", True, (leaf, index, n, proof, ref_root(n - 1))
    if n < MAX_SIZE:
        yield f"root of size {n + 1}", True, (leaf, index, n, proof, ref_root(n + 1))
    if n > 1:
        yield "leaf as root", True, (leaf, index, n, proof, leaf)
    # The index.
    if all_indices:
        others = [j for j in range(-1, n + 2) if j != index]
    else:
        others = [index - 1, index + 1, index ^ 1, index ^ 2, n, -1]
    others += [index + 2**64, -index - 1]
    for j in dict.fromkeys(others):
        if j != index:
            yield f"index {j}", False, (leaf, j, n, proof, root)
    # The size.
    for size in dict.fromkeys([n - 1, n + 1, n * 2, n // 2, 0, -1, n + 2**64]):
        if size != n:
            yield f"size {size}", False, (leaf, index, size, proof, root)


ConsistencyArgs = tuple[int, int, bytes, bytes, list[bytes]]


def _consistency_mutations(
    m: int, n: int, proof: list[bytes], all_sizes: bool
) -> Iterator[tuple[str, bool, ConsistencyArgs]]:
    old, new = ref_root(m), ref_root(n)
    for desc, wrong in _proof_mutations(proof, salt=m * 131 + n):
        yield desc, True, (m, n, old, new, wrong)
    yield "proof prefixed by the old root", True, (m, n, old, new, [old, *proof])
    yield "proof extended by the new root", True, (m, n, old, new, [*proof, new])
    yield "proof extended by the old root", True, (m, n, old, new, [*proof, old])
    if proof:
        yield "first element duplicated", True, (m, n, old, new, [proof[0], *proof])
        yield "last element duplicated", True, (m, n, old, new, [*proof, proof[-1]])
    # Roots.
    if old != new:
        yield "roots swapped", True, (m, n, new, old, proof)
        yield "new root given as old", True, (m, n, new, new, proof)
        yield "old root given as new", True, (m, n, old, old, proof)
    yield "old root bit flipped", True, (m, n, _flip(old, m + n), new, proof)
    yield "new root bit flipped", True, (m, n, old, _flip(new, m * n), proof)
    yield "old root is the empty-tree hash", True, (m, n, EMPTY_ROOT, new, proof)
    yield "new root is the empty-tree hash", True, (m, n, old, EMPTY_ROOT, proof)
    yield f"old root of size {m - 1}", True, (m, n, ref_root(m - 1), new, proof)
    if n < MAX_SIZE:
        yield f"new root of size {n + 1}", True, (m, n, old, ref_root(n + 1), proof)
    # Sizes.
    if all_sizes:
        old_sizes = [s for s in range(-1, n + 2)]
    else:
        old_sizes = [m - 1, m + 1, m ^ 1, m ^ 2, 0, -1, n, n + 1]
    for size in dict.fromkeys(old_sizes):
        if size != m:
            yield f"old size {size}", False, (size, n, old, new, proof)
    for size in dict.fromkeys([n - 1, n + 1, n * 2, n // 2, m - 1, 0]):
        if size != n:
            yield f"new size {size}", False, (m, size, old, new, proof)
    if m != n:
        yield "sizes swapped", False, (n, m, old, new, proof)
        yield "sizes swapped with roots", False, (n, m, new, old, proof)
    yield "both sizes + 1", False, (m + 1, n + 1, old, new, proof)
    yield "both sizes - 1", False, (m - 1, n - 1, old, new, proof)


def _check_mutations(
    where: str,
    verify: Callable[..., object],
    reference: Callable[..., bool],
    mutations: Iterator[tuple[str, bool, tuple[object, ...]]],
) -> list[str]:
    failures: list[str] = []
    for desc, content, args in mutations:
        expected = reference(*args)
        if content and expected:
            failures.append(f"{where}: TEST BUG, mutation '{desc}' is not a mutation")
            continue
        outcome = _outcome(verify, *args)
        want = "accepted" if expected else "rejected"
        if outcome != want:
            note = " (the RFC 9162 reference verifier accepts this)" if expected else ""
            failures.append(f"{where}: mutation '{desc}' {outcome}, want {want}{note}")
    return failures


def _inclusion_failures(n: int, index: int, all_indices: bool) -> list[str]:
    proof = list(impl_inclusion(n, index))
    return _check_mutations(
        f"size={n} index={index}",
        merkle.verify_inclusion,
        ref_verify_inclusion,
        _inclusion_mutations(n, index, proof, all_indices),
    )


def _consistency_failures(m: int, n: int, all_sizes: bool) -> list[str]:
    proof = list(impl_consistency(m, n))
    return _check_mutations(
        f"{m}->{n}",
        merkle.verify_consistency,
        ref_verify_consistency,
        _consistency_mutations(m, n, proof, all_sizes),
    )


def _ids(prefix: str) -> Callable[[int], str]:
    return lambda value: f"{prefix}{value}"


# ---------------------------------------------------------------------------------------------
# Reference comparison and round trips, every size up to 130


def test_reference_sanity() -> None:
    """The reference itself, on the RFC 9162 §2.1.5 shape facts it must satisfy."""
    assert ref_root(0) == EMPTY_ROOT
    assert ref_root(1) == LEAVES[0]
    assert ref_root(3) == h_node(h_node(LEAVES[0], LEAVES[1]), LEAVES[2])
    assert REF.path(0, 0, 3) == [LEAVES[1], LEAVES[2]]
    assert REF.path(2, 0, 3) == [h_node(LEAVES[0], LEAVES[1])]
    # RFC 9162 §2.1.5: the proof between 3 and 7 leaves is [c, d, g, l].
    g = h_node(LEAVES[0], LEAVES[1])
    i = h_node(LEAVES[4], LEAVES[5])
    assert REF.proof(3, 7) == [LEAVES[2], LEAVES[3], g, h_node(i, LEAVES[6])]
    assert REF.proof(4, 7) == [h_node(i, LEAVES[6])]
    assert REF.proof(6, 7) == [i, LEAVES[6], h_node(g, h_node(LEAVES[2], LEAVES[3]))]


@pytest.mark.parametrize("n", range(MAX_SIZE + 1), ids=_ids("n="))
def test_root_matches_reference(n: int) -> None:
    assert impl_root(n) == ref_root(n)


def test_hashes_match_reference() -> None:
    for data in [b"", b"\x00", b"\x01" * 64, bytes(range(256))]:
        assert merkle.leaf_hash(data) == h_leaf(data)
    for left, right in [(LEAVES[0], LEAVES[1]), (LEAVES[1], LEAVES[0]), (b"", b"")]:
        assert merkle.node_hash(left, right) == h_node(left, right)
    assert merkle.node_hash(LEAVES[0], LEAVES[1]) != merkle.node_hash(LEAVES[1], LEAVES[0])
    # Domain separation: an interior node is not the leaf of its concatenated children.
    assert merkle.node_hash(LEAVES[0], LEAVES[1]) != merkle.leaf_hash(LEAVES[0] + LEAVES[1])


@pytest.mark.parametrize("n", SIZES, ids=_ids("n="))
def test_inclusion_proofs_match_reference_and_verify(n: int) -> None:
    root = impl_root(n)
    failures = []
    for index in range(n):
        proof = list(impl_inclusion(n, index))
        expected = REF.path(index, 0, n)
        if proof != expected:
            failures.append(
                f"size={n} index={index}: proof of {len(proof)} elements differs from "
                f"PATH() ({len(expected)} elements)"
            )
            continue
        outcome = _outcome(merkle.verify_inclusion, LEAVES[index], index, n, proof, root)
        if outcome != "accepted":
            failures.append(f"size={n} index={index}: generated proof {outcome}")
    assert not failures, _report(failures)


@pytest.mark.parametrize("n", SIZES, ids=_ids("n="))
def test_consistency_proofs_match_reference_and_verify(n: int) -> None:
    failures = []
    for m in range(1, n + 1):
        proof = list(impl_consistency(m, n))
        expected = REF.proof(m, n)
        if proof != expected:
            failures.append(
                f"{m}->{n}: proof of {len(proof)} elements differs from PROOF() "
                f"({len(expected)} elements)"
            )
            continue
        outcome = _outcome(merkle.verify_consistency, m, n, impl_root(m), impl_root(n), proof)
        if outcome != "accepted":
            failures.append(f"{m}->{n}: generated proof {outcome}")
    assert impl_consistency(n, n) == ()
    assert not failures, _report(failures)


# ---------------------------------------------------------------------------------------------
# Mutations: exhaustive up to 64 leaves, hypothesis-drawn from 65 to 130


@pytest.mark.parametrize("n", SMALL_SIZES, ids=_ids("n="))
def test_inclusion_mutations_rejected(n: int) -> None:
    failures = [f for index in range(n) for f in _inclusion_failures(n, index, True)]
    assert not failures, _report(failures)


@pytest.mark.parametrize("n", SMALL_SIZES, ids=_ids("n="))
def test_consistency_mutations_rejected(n: int) -> None:
    failures = [f for m in range(1, n + 1) for f in _consistency_failures(m, n, True)]
    assert not failures, _report(failures)


LARGE = st.integers(EXHAUSTIVE_MUTATION_MAX + 1, MAX_SIZE)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), n=LARGE)
def test_inclusion_mutations_rejected_large(data: st.DataObject, n: int) -> None:
    index = data.draw(st.integers(0, n - 1), label="index")
    failures = _inclusion_failures(n, index, False)
    assert not failures, _report(failures)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), n=LARGE)
def test_consistency_mutations_rejected_large(data: st.DataObject, n: int) -> None:
    m = data.draw(st.integers(1, n), label="old_size")
    failures = _consistency_failures(m, n, False)
    assert not failures, _report(failures)


# ---------------------------------------------------------------------------------------------
# Range errors of the generators and verifiers


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 9, 64, 130], ids=_ids("n="))
def test_inclusion_generator_rejects_bad_index(n: int) -> None:
    for index in [n, n + 1, -1, -n - 1, 2**64]:
        with pytest.raises(ValueError):
            merkle.inclusion_proof(list(LEAVES[:n]), index)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 9, 64, 130], ids=_ids("n="))
def test_consistency_generator_rejects_bad_old_size(n: int) -> None:
    for old_size in [0, -1, n + 1, 2**64]:
        with pytest.raises(ValueError):
            merkle.consistency_proof(list(LEAVES[:n]), old_size)


@pytest.mark.parametrize("n", [0, 1, 2, 5, 8, 130], ids=_ids("n="))
def test_consistency_verifier_rejects_old_size_zero(n: int) -> None:
    for proof in ([], [EMPTY_ROOT], list(impl_consistency(1, max(n, 1)))):
        for old_root in (EMPTY_ROOT, ref_root(n)):
            outcome = _outcome(merkle.verify_consistency, 0, n, old_root, ref_root(n), proof)
            assert outcome == "rejected", f"0->{n} with {len(proof)} elements: {outcome}"


def test_verifiers_reject_short_and_long_elements_everywhere() -> None:
    """A proof element of any length but 32 is refused, even where it would hash correctly."""
    n, index = 8, 3
    proof = list(impl_inclusion(n, index))
    for bad in (b"", b"\x00", proof[0][:16], proof[0] * 2):
        wrong = [bad, *proof[1:]]
        outcome = _outcome(merkle.verify_inclusion, LEAVES[index], index, n, wrong, ref_root(n))
        assert outcome == "rejected", f"{len(bad)}-byte element: {outcome}"
        outcome = _outcome(
            merkle.verify_consistency, 3, 8, ref_root(3), ref_root(8), [bad, *proof[1:]]
        )
        assert outcome == "rejected", f"{len(bad)}-byte element: {outcome}"


def test_verifiers_reject_elements_that_are_not_bytes() -> None:
    """Hex strings (a decoded-JSON proof passed as is) or None are a ProofError, not a crash.

    A wrong-length `bytes` element can never hash to the right root, so the 32-byte rule is
    only observable through the exception type; this is where it shows.
    """
    n, index = 8, 3
    proof = list(impl_inclusion(n, index))
    for bad in (proof[0].hex(), None):
        wrong = [bad, *proof[1:]]
        outcome = _outcome(merkle.verify_inclusion, LEAVES[index], index, n, wrong, ref_root(n))
        assert outcome == "rejected", f"{type(bad).__name__} element: {outcome}"
        consistency = list(impl_consistency(3, 8))
        wrong = [bad, *consistency[1:]]
        outcome = _outcome(merkle.verify_consistency, 3, 8, ref_root(3), ref_root(8), wrong)
        assert outcome == "rejected", f"{type(bad).__name__} element: {outcome}"


# ---------------------------------------------------------------------------------------------
# Hypothesis on random leaf data

LEAF_DATA = st.lists(st.binary(max_size=48), min_size=1, max_size=80)


@settings(max_examples=200, deadline=None)
@given(leaves=LEAF_DATA, data=st.data())
def test_root_changes_when_any_leaf_changes(leaves: list[bytes], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(leaves) - 1), label="index")
    replacement = data.draw(st.binary(max_size=48), label="replacement")
    assume(replacement != leaves[index])
    before = merkle.root([merkle.leaf_hash(d) for d in leaves])
    changed = [*leaves[:index], replacement, *leaves[index + 1 :]]
    after = merkle.root([merkle.leaf_hash(d) for d in changed])
    assert before != after
    # Growing or shrinking the log changes the root too.
    assert merkle.root([merkle.leaf_hash(d) for d in [*leaves, replacement]]) != before
    assert merkle.root([merkle.leaf_hash(d) for d in leaves[:-1]]) != before


@settings(max_examples=200, deadline=None)
@given(leaves=LEAF_DATA, data=st.data())
def test_inclusion_proof_does_not_verify_another_leaf(
    leaves: list[bytes], data: st.DataObject
) -> None:
    hashes = [merkle.leaf_hash(d) for d in leaves]
    n = len(hashes)
    index = data.draw(st.integers(0, n - 1), label="index")
    other = data.draw(st.binary(max_size=48), label="other leaf")
    assume(other != leaves[index])
    root = merkle.root(hashes)
    proof = merkle.inclusion_proof(hashes, index)
    assert merkle.verify_inclusion(hashes[index], index, n, proof, root) is None
    outcome = _outcome(merkle.verify_inclusion, merkle.leaf_hash(other), index, n, proof, root)
    assert outcome == "rejected"
    # Raw data instead of its leaf hash is not the leaf either.
    outcome = _outcome(merkle.verify_inclusion, leaves[index], index, n, proof, root)
    assert outcome == "rejected"
    # Another position's leaf, where its data differs.
    j = data.draw(st.integers(0, n - 1), label="other index")
    if leaves[j] != leaves[index]:
        outcome = _outcome(merkle.verify_inclusion, hashes[j], index, n, proof, root)
        assert outcome == "rejected"


@settings(max_examples=100, deadline=None)
@given(leaves=LEAF_DATA, data=st.data())
def test_random_trees_match_reference(leaves: list[bytes], data: st.DataObject) -> None:
    hashes = [merkle.leaf_hash(d) for d in leaves]
    ref = RefTree([h_leaf(d) for d in leaves])
    n = len(hashes)
    assert merkle.root(hashes) == ref.mth(0, n)
    index = data.draw(st.integers(0, n - 1), label="index")
    assert merkle.inclusion_proof(hashes, index) == ref.path(index, 0, n)
    m = data.draw(st.integers(1, n), label="old_size")
    proof = merkle.consistency_proof(hashes, m)
    assert proof == ref.proof(m, n)
    assert merkle.verify_consistency(m, n, ref.mth(0, m), ref.mth(0, n), proof) is None


@settings(max_examples=200, deadline=None)
@given(leaves=LEAF_DATA, data=st.data())
def test_extending_a_frontier_completes_the_reference_subtrees(
    leaves: list[bytes], data: st.DataObject
) -> None:
    """The store's append path: from the frontier of any prefix, `extend_frontier` yields the
    reference hash of every perfect subtree the remaining leaves complete, each once, and the
    frontier whose fold is the reference root."""
    ref = RefTree([h_leaf(d) for d in leaves])
    n = len(leaves)
    start = data.draw(st.integers(0, n), label="start")
    frontier = [ref.mth(node.start, node.end) for node in merkle.perfect_subtrees(0, start)]
    after, made = merkle.extend_frontier(frontier, start, leaves[start:])
    expected = [
        (level, position)
        for index in range(start, n)
        for level in range(((index + 1) & -(index + 1)).bit_length())
        for position in [index >> level]
    ]
    assert [(level, position) for level, position, _ in made] == expected
    for level, position, value in made:
        assert value == ref.mth(position << level, (position + 1) << level)
    assert after == [ref.mth(node.start, node.end) for node in merkle.perfect_subtrees(0, n)]
    assert merkle.fold_right(after) == ref.mth(0, n)
    with pytest.raises(ValueError):
        merkle.extend_frontier([*frontier, b"x" * 32], start, leaves[start:])


@settings(max_examples=200, deadline=None)
@given(leaves=LEAF_DATA, data=st.data())
def test_extending_by_levels_gives_what_extending_by_leaves_gives(
    leaves: list[bytes], data: st.DataObject
) -> None:
    """`extend_levels` (the store's append path, a level at a time) yields the same frontier
    and the same new perfect subtrees as `extend_frontier`, one contiguous run per level."""
    ref = RefTree([h_leaf(d) for d in leaves])
    start = data.draw(st.integers(0, len(leaves)), label="start")
    frontier = [ref.mth(node.start, node.end) for node in merkle.perfect_subtrees(0, start)]
    after, made = merkle.extend_frontier(frontier, start, leaves[start:])
    levels_after, runs = merkle.extend_levels(frontier, start, leaves[start:])
    assert levels_after == after
    flattened = sorted(
        (level, first + offset, value)
        for level, (first, values) in runs.items()
        for offset, value in enumerate(values)
    )
    assert flattened == sorted(made)
    assert all(first == start >> level for level, (first, _values) in runs.items())
    with pytest.raises(ValueError):
        merkle.extend_levels([*frontier, b"x" * 32], start, leaves[start:])
