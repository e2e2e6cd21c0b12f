"""`accord.ledger.merkle` against the published RFC 6962 test vectors of Certificate Transparency.

The data lives in `vectors/rfc6962.json`, copied verbatim from transparency-dev/merkle
(`testonly/constants.go`, `proof/verify_test.go`, `testonly/reference_test.go`,
`rfc6962/rfc6962_test.go`, `proof/proof_test.go`) and cross-checked against
google/certificate-transparency-go `merkletree/merkle_verifier_test.go`; the file names the
commits. Nothing expected here is computed with `accord.ledger.merkle`: the only hashing done by the
tests themselves is plain `hashlib` in `test_vector_file_is_self_consistent` (which guards the
transcription) and the `rehash` fold of the `proof_test.go` node-id vectors.

Both directions are checked: the generators must produce the published proofs, and the
verifiers must accept them and reject every probe the published suites derive from them
(`corruptInclusionProof` / `corruptConsistencyProof` of `verify_test.go`, plus the
"replace one element by the empty-tree hash" probes of certificate-transparency-go).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from accord.ledger import merkle
from accord.ledger.errors import LedgerError, ProofError

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "vectors" / "rfc6962.json").read_text(encoding="utf-8")
)


def _hexes(values: Sequence[str]) -> list[bytes]:
    return [bytes.fromhex(value) for value in values]


LEAF_INPUTS = _hexes(VECTORS["leaf_inputs_hex"])
NODE_HASHES = [_hexes(level) for level in VECTORS["node_hashes"]]
LEAF_HASHES = NODE_HASHES[0]
ROOTS = _hexes(VECTORS["roots"])  # ROOTS[size], size 0..8
SOME_HASH = bytes.fromhex(VECTORS["sha256_some_hash"])
EMPTY_TREE_HASH = bytes.fromhex(VECTORS["sha256_empty_tree_hash"])

INCLUSION = VECTORS["inclusion"]
CONSISTENCY = VECTORS["consistency"]
NODE_ID = VECTORS["node_id_vectors"]


def _inclusion_id(vector: dict[str, Any]) -> str:
    return f"index={vector['index']},size={vector['size']}"


def _consistency_id(vector: dict[str, Any]) -> str:
    return f"{vector['old_size']}->{vector['new_size']}"


def _outcome(call: Callable[..., object], *args: object) -> str:
    """'accepted', 'rejected' (ProofError), or what else happened."""
    try:
        result = call(*args)
    except ProofError:
        return "rejected"
    except Exception as error:
        return f"raised {type(error).__name__} instead of ProofError: {error}"
    if result is not None:
        return f"returned {result!r} instead of None"
    return "accepted"


# ---------------------------------------------------------------------------------------------
# The vector file itself


def test_vector_file_is_self_consistent() -> None:
    """Guard the transcription with plain hashlib: leaves, interior nodes and roots agree."""

    def h_leaf(data: bytes) -> bytes:
        return hashlib.sha256(b"\x00" + data).digest()

    def h_node(left: bytes, right: bytes) -> bytes:
        return hashlib.sha256(b"\x01" + left + right).digest()

    assert len(LEAF_INPUTS) == 8
    assert [h_leaf(data) for data in LEAF_INPUTS] == LEAF_HASHES
    for level in range(1, len(NODE_HASHES)):
        below = NODE_HASHES[level - 1]
        assert NODE_HASHES[level] == [
            h_node(below[2 * i], below[2 * i + 1]) for i in range(len(below) // 2)
        ]
    assert ROOTS[0] == hashlib.sha256(b"").digest() == EMPTY_TREE_HASH
    assert ROOTS[1] == LEAF_HASHES[0]
    assert ROOTS[2] == NODE_HASHES[1][0]
    assert ROOTS[4] == NODE_HASHES[2][0]
    assert ROOTS[8] == NODE_HASHES[3][0]
    assert len(ROOTS) == 9
    for vector in INCLUSION + CONSISTENCY:
        assert all(len(element) == 32 for element in _hexes(vector["proof"]))


# ---------------------------------------------------------------------------------------------
# Hashing


def test_hasher_vectors() -> None:
    hasher = VECTORS["hasher"]
    assert merkle.root([]) == bytes.fromhex(hasher["empty_root"])
    assert merkle.leaf_hash(b"") == bytes.fromhex(hasher["empty_leaf"])
    assert merkle.leaf_hash(hasher["leaf"]["data_ascii"].encode()) == bytes.fromhex(
        hasher["leaf"]["hash"]
    )
    node = hasher["node"]
    assert merkle.node_hash(node["left_ascii"].encode(), node["right_ascii"].encode()) == (
        bytes.fromhex(node["hash"])
    )
    # The empty tree is not the empty leaf.
    assert merkle.root([]) != merkle.leaf_hash(b"")


@pytest.mark.parametrize("index", range(8))
def test_leaf_hashes(index: int) -> None:
    assert merkle.leaf_hash(LEAF_INPUTS[index]) == LEAF_HASHES[index]


def test_interior_node_hashes() -> None:
    for level in range(1, len(NODE_HASHES)):
        below = NODE_HASHES[level - 1]
        for i, expected in enumerate(NODE_HASHES[level]):
            got = merkle.node_hash(below[2 * i], below[2 * i + 1])
            assert got == expected, f"node_hash for level {level} index {i}"


@pytest.mark.parametrize("size", range(9))
def test_roots(size: int) -> None:
    assert merkle.root(LEAF_HASHES[:size]) == ROOTS[size]
    hashed_here = [merkle.leaf_hash(data) for data in LEAF_INPUTS[:size]]
    assert merkle.root(hashed_here) == ROOTS[size]


def test_root_accepts_any_sequence() -> None:
    assert merkle.root(tuple(LEAF_HASHES)) == ROOTS[8]


# ---------------------------------------------------------------------------------------------
# Inclusion proofs


@pytest.mark.parametrize("vector", INCLUSION, ids=_inclusion_id)
def test_inclusion_proof_generator(vector: dict[str, Any]) -> None:
    got = merkle.inclusion_proof(LEAF_HASHES[: vector["size"]], vector["index"])
    assert [element.hex() for element in got] == vector["proof"]


@pytest.mark.parametrize("vector", INCLUSION, ids=_inclusion_id)
def test_inclusion_proof_verifier_accepts(vector: dict[str, Any]) -> None:
    index, size = vector["index"], vector["size"]
    result = merkle.verify_inclusion(
        LEAF_HASHES[index], index, size, _hexes(vector["proof"]), ROOTS[size]
    )
    assert result is None


def _corrupt_inclusion(
    leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes
) -> Iterator[tuple[str, tuple[bytes, int, int, list[bytes], bytes]]]:
    """corruptInclusionProof of verify_test.go, plus certificate-transparency-go's probes."""
    yield "leafIndex - 1", (leaf, index - 1, size, proof, root)
    yield "leafIndex + 1", (leaf, index + 1, size, proof, root)
    yield "leafIndex ^ 2", (leaf, index ^ 2, size, proof, root)
    yield "treeSize * 2", (leaf, index, size * 2, proof, root)
    yield "treeSize / 2", (leaf, index, size // 2, proof, root)
    yield "leafIndex / 2, treeSize / 2", (leaf, index // 2, size // 2, proof, root)
    yield "wrong leaf", (b"WrongLeaf", index, size, proof, root)
    yield "empty root", (leaf, index, size, proof, EMPTY_TREE_HASH)
    yield "random root", (leaf, index, size, proof, SOME_HASH)
    yield "trailing garbage", (leaf, index, size, [*proof, b""], root)
    yield "trailing root", (leaf, index, size, [*proof, root], root)
    yield "preceding garbage", (leaf, index, size, [b"", *proof], root)
    yield "preceding root", (leaf, index, size, [root, *proof], root)
    for i in range(len(proof)):
        flipped = bytearray(proof[i])
        flipped[0] ^= 8
        wrong = list(proof)
        wrong[i] = bytes(flipped)
        yield f"modified proof[{i}] bit 3", (leaf, index, size, wrong, root)
        wrong = list(proof)
        wrong[i] = EMPTY_TREE_HASH
        yield f"proof[{i}] replaced by the empty tree hash", (leaf, index, size, wrong, root)
    if proof:
        yield "removed component", (leaf, index, size, proof[:-1], root)
    if len(proof) > 1:
        yield "inserted component", (leaf, index, size, [proof[0], SOME_HASH, *proof[1:]], root)


@pytest.mark.parametrize("vector", INCLUSION, ids=_inclusion_id)
def test_inclusion_proof_verifier_rejects_published_probes(vector: dict[str, Any]) -> None:
    index, size = vector["index"], vector["size"]
    probes = _corrupt_inclusion(
        LEAF_HASHES[index], index, size, _hexes(vector["proof"]), ROOTS[size]
    )
    wrong = [
        f"{desc}: {outcome}"
        for desc, args in probes
        if (outcome := _outcome(merkle.verify_inclusion, *args)) != "rejected"
    ]
    assert not wrong, f"index={index} size={size}: " + "; ".join(wrong)


def test_inclusion_verifier_single_entry() -> None:
    """TestVerifyInclusionSingleEntry: in a 1-leaf tree the root is the leaf hash."""
    data_hash = merkle.leaf_hash(b"data")
    assert merkle.verify_inclusion(data_hash, 0, 1, [], data_hash) is None
    cases = [
        ("empty leaf hash", b"", data_hash),
        ("empty root", data_hash, b""),
        ("empty leaf hash and empty root (wrong hash size)", b"", b""),
    ]
    wrong = [
        f"{desc}: {outcome}"
        for desc, leaf, root in cases
        if (outcome := _outcome(merkle.verify_inclusion, leaf, 0, 1, [], root)) != "rejected"
    ]
    assert not wrong, "; ".join(wrong)


@pytest.mark.parametrize(("index", "size"), [(0, 0), (0, 1), (1, 0), (2, 1)])
def test_inclusion_verifier_edge_probes(index: int, size: int) -> None:
    """TestVerifyInclusion's invalid index/size/root/leaf combinations, with an empty proof."""
    cases = [
        ("some leaf, empty root", SOME_HASH, b""),
        ("empty leaf, empty-tree root", b"", EMPTY_TREE_HASH),
        ("some leaf, empty-tree root", SOME_HASH, EMPTY_TREE_HASH),
    ]
    wrong = [
        f"{desc}: {outcome}"
        for desc, leaf, root in cases
        if (outcome := _outcome(merkle.verify_inclusion, leaf, index, size, [], root)) != "rejected"
    ]
    assert not wrong, f"index={index} size={size}: " + "; ".join(wrong)


# ---------------------------------------------------------------------------------------------
# Consistency proofs


@pytest.mark.parametrize("vector", CONSISTENCY, ids=_consistency_id)
def test_consistency_proof_generator(vector: dict[str, Any]) -> None:
    got = merkle.consistency_proof(LEAF_HASHES[: vector["new_size"]], vector["old_size"])
    assert [element.hex() for element in got] == vector["proof"]


@pytest.mark.parametrize("vector", CONSISTENCY, ids=_consistency_id)
def test_consistency_proof_verifier_accepts(vector: dict[str, Any]) -> None:
    old, new = vector["old_size"], vector["new_size"]
    result = merkle.verify_consistency(old, new, ROOTS[old], ROOTS[new], _hexes(vector["proof"]))
    assert result is None


def _corrupt_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: list[bytes]
) -> Iterator[tuple[str, tuple[int, int, bytes, bytes, list[bytes]]]]:
    """corruptConsistencyProof of verify_test.go, plus certificate-transparency-go's probes."""
    yield "size1 - 1", (old - 1, new, old_root, new_root, proof)
    yield "size1 + 1", (old + 1, new, old_root, new_root, proof)
    yield "size1 ^ 2", (old ^ 2, new, old_root, new_root, proof)
    yield "size2 * 2", (old, new * 2, old_root, new_root, proof)
    yield "size2 / 2", (old, new // 2, old_root, new_root, proof)
    yield "wrong root1", (old, new, b"WrongRoot", new_root, proof)
    yield "wrong root2", (old, new, old_root, b"WrongRoot", proof)
    yield "swapped roots", (old, new, new_root, old_root, proof)
    yield "empty proof", (old, new, old_root, new_root, [])
    yield "trailing garbage", (old, new, old_root, new_root, [*proof, b""])
    yield "trailing root1", (old, new, old_root, new_root, [*proof, old_root])
    yield "trailing root2", (old, new, old_root, new_root, [*proof, new_root])
    yield "last node duplicated", (old, new, old_root, new_root, [*proof, proof[-1]])
    yield "preceding garbage", (old, new, old_root, new_root, [b"", *proof])
    yield "preceding root1", (old, new, old_root, new_root, [old_root, *proof])
    yield "preceding root2", (old, new, old_root, new_root, [new_root, *proof])
    yield "preceding proof[0]", (old, new, old_root, new_root, [proof[0], *proof])
    yield "truncated proof", (old, new, old_root, new_root, proof[:-1])
    for i in range(len(proof)):
        flipped = bytearray(proof[i])
        flipped[0] ^= 16
        wrong = list(proof)
        wrong[i] = bytes(flipped)
        yield f"modified proof[{i}] bit 4", (old, new, old_root, new_root, wrong)
        wrong = list(proof)
        wrong[i] = EMPTY_TREE_HASH
        yield f"proof[{i}] replaced by the empty tree hash", (old, new, old_root, new_root, wrong)


@pytest.mark.parametrize("vector", [v for v in CONSISTENCY if v["proof"]], ids=_consistency_id)
def test_consistency_proof_verifier_rejects_published_probes(vector: dict[str, Any]) -> None:
    old, new = vector["old_size"], vector["new_size"]
    probes = _corrupt_consistency(old, new, ROOTS[old], ROOTS[new], _hexes(vector["proof"]))
    wrong = [
        f"{desc}: {outcome}"
        for desc, args in probes
        if (outcome := _outcome(merkle.verify_consistency, *args)) != "rejected"
    ]
    assert not wrong, f"{old}->{new}: " + "; ".join(wrong)


ROOT_1 = ROOTS[1]


CONSISTENCY_EDGE_CASES = [
    # TestVerifyConsistency of verify_test.go. Its "don't care" roots are replaced by real
    # 32-byte roots where the case is meant to pass; the cases that start from size 0 are
    # replaced by the RFC 9162 rule (no proof from size 0 is defined: always rejected).
    ("1->1, different roots", 1, 1, ROOT_1, ROOTS[2], [], "rejected"),
    ("1->1, same root, empty proof", 1, 1, ROOT_1, ROOT_1, [], "accepted"),
    ("8->8, same root, empty proof", 8, 8, ROOTS[8], ROOTS[8], [], "accepted"),
    ("time travel 1->0", 1, 0, ROOT_1, ROOTS[0], [], "rejected"),
    ("time travel 2->1", 2, 1, ROOTS[2], ROOT_1, [], "rejected"),
    ("empty proof 1->2", 1, 2, ROOT_1, ROOTS[2], [], "rejected"),
    ("1->1, empty-tree root vs another", 1, 1, EMPTY_TREE_HASH, ROOT_1, [], "rejected"),
    (
        "1->1, matching roots, non-empty proof",
        1,
        1,
        EMPTY_TREE_HASH,
        EMPTY_TREE_HASH,
        [EMPTY_TREE_HASH],
        "rejected",
    ),
    ("0->0, matching roots (RFC 9162: undefined)", 0, 0, ROOTS[0], ROOTS[0], [], "rejected"),
    ("0->1, empty proof (RFC 9162: undefined)", 0, 1, ROOTS[0], ROOT_1, [], "rejected"),
    ("0->8, empty proof (RFC 9162: undefined)", 0, 8, ROOTS[0], ROOTS[8], [], "rejected"),
    (
        "0->1, non-empty proof",
        0,
        1,
        EMPTY_TREE_HASH,
        EMPTY_TREE_HASH,
        [EMPTY_TREE_HASH],
        "rejected",
    ),
]


@pytest.mark.parametrize(
    ("desc", "old", "new", "old_root", "new_root", "proof", "expected"),
    [pytest.param(*case, id=case[0]) for case in CONSISTENCY_EDGE_CASES],
)
def test_consistency_verifier_edge_cases(
    desc: str,
    old: int,
    new: int,
    old_root: bytes,
    new_root: bytes,
    proof: list[bytes],
    expected: str,
) -> None:
    outcome = _outcome(merkle.verify_consistency, old, new, old_root, new_root, proof)
    assert outcome == expected, desc


# ---------------------------------------------------------------------------------------------
# proof_test.go node-id vectors, resolved against the published node hashes


def _resolve(vector: dict[str, Any]) -> list[bytes]:
    hashes = [NODE_HASHES[level][index] for level, index in vector["nodes"]]
    if "rehash" in vector:
        begin, end = vector["rehash"]
        acc = hashes[begin]
        for element in hashes[begin + 1 : end]:
            acc = hashlib.sha256(b"\x01" + element + acc).digest()
        hashes = [*hashes[:begin], acc, *hashes[end:]]
    return hashes


@pytest.mark.parametrize(
    "vector", NODE_ID["inclusion"], ids=lambda v: f"index={v['index']},size={v['size']}"
)
def test_inclusion_node_id_vectors(vector: dict[str, Any]) -> None:
    index, size = vector["index"], vector["size"]
    expected = _resolve(vector)
    assert merkle.inclusion_proof(LEAF_HASHES[:size], index) == expected
    assert merkle.verify_inclusion(LEAF_HASHES[index], index, size, expected, ROOTS[size]) is None


@pytest.mark.parametrize(
    "vector", NODE_ID["consistency"], ids=lambda v: f"{v['old_size']}->{v['new_size']}"
)
def test_consistency_node_id_vectors(vector: dict[str, Any]) -> None:
    old, new = vector["old_size"], vector["new_size"]
    expected = _resolve(vector)
    assert merkle.consistency_proof(LEAF_HASHES[:new], old) == expected
    assert merkle.verify_consistency(old, new, ROOTS[old], ROOTS[new], expected) is None


@pytest.mark.parametrize(
    "vector", NODE_ID["inclusion_errors"], ids=lambda v: f"index={v['index']},size={v['size']}"
)
def test_inclusion_generator_rejects_published_bad_params(vector: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        merkle.inclusion_proof(LEAF_HASHES[: vector["size"]], vector["index"])


@pytest.mark.parametrize(
    "vector",
    NODE_ID["consistency_errors"],
    ids=lambda v: f"{v['old_size']}->{v['new_size']}",
)
def test_consistency_generator_rejects_published_bad_params(vector: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        merkle.consistency_proof(LEAF_HASHES[: vector["new_size"]], vector["old_size"])


@pytest.mark.parametrize("size", range(1, 9))
def test_consistency_generator_rejects_old_size_zero(size: int) -> None:
    with pytest.raises(ValueError):
        merkle.consistency_proof(LEAF_HASHES[:size], 0)


def test_proof_error_is_a_ledger_error() -> None:
    assert issubclass(ProofError, LedgerError)
