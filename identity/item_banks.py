"""Item banks: an exam whose items are written, not generated, committed as a Merkle root.

A manifest's exam `{"kind": "bank", "root", "size", "items", "threshold", "retire_after"}`
names its bank by the root of an RFC 6962 Merkle tree (`accord.ledger.merkle`) over its
`size` items; leaf `i` is the canonical JSON of `{"index": i, "input", "answer"}`. The
declarer sends the items with the declaration; the service checks them against the root and
keeps them off the log (`accord.identity.item_bank_store`), so the manifest publishes the
commitment and not the answers.

Each attempt draws `items` of them from its seed (`draw`: a seeded sample of the indices still
available, in index order). An item retires once `retire_after` graded attempts drew it,
counted from the log: the `skill.attempt.graded` entries of the skill logged before the
attempt's own `skill.attempt.committed` (so concurrent attempts may expose an item a few times
more; never fewer). The graded entry reveals the drawn items with their inclusion proofs
(`reveal`), and the audit checks each proof against the root, recomputes the draw from the
revealed seed and the log's exposure counts, and re-grades (`check_reveal`).

Pure.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from accord.identity.challenges.base import JSON, JSONObject
from accord.identity.errors import ExamError, SkillError
from accord.ledger.canonical import canonical_json
from accord.ledger.errors import ProofError
from accord.ledger.merkle import inclusion_proof, leaf_hash, root, verify_inclusion

MAX_BANK_ITEMS = 10_000
DRAW_DOMAIN = b"accord/skill/bank-draw/v1"

BankItem = Mapping[str, JSON]
"""One written item: `{"input": {...}, "answer": ...}`."""


def _leaf(index: int, item: BankItem) -> bytes:
    return leaf_hash(
        canonical_json({"index": index, "input": item.get("input"), "answer": item.get("answer")})
    )


def bank_root(items: Sequence[BankItem]) -> str:
    """The hex Merkle root of `items` (leaf i: `{"index": i, "input", "answer"}`).

    Raises SkillError for an empty bank or one over MAX_BANK_ITEMS items."""
    if not 1 <= len(items) <= MAX_BANK_ITEMS:
        raise SkillError(f"a bank holds 1 to {MAX_BANK_ITEMS} items")
    return root([_leaf(i, item) for i, item in enumerate(items)]).hex()


def check_bank(exam: Mapping[str, Any], items: object) -> list[BankItem]:
    """`items` as the bank the exam spec commits to. Raises SkillError when they are not a
    list of `{"input": object, "answer": ...}` of the spec's size and root."""
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and set(i) == {"input", "answer"} and isinstance(i["input"], dict)
        for i in items
    ):
        raise SkillError('a bank is a list of {"input": {...}, "answer": ...} items')
    if len(items) != exam["size"]:
        raise SkillError(f"the bank has {len(items)} items; the exam commits to {exam['size']}")
    if bank_root(items) != exam["root"]:
        raise SkillError("the bank's Merkle root is not the one the exam commits to")
    return list(items)


def exposures(revealed: Iterable[object]) -> Counter[int]:
    """How often each index was drawn, over graded entries' `bank` reveals."""
    counts: Counter[int] = Counter()
    for reveal_list in revealed:
        if isinstance(reveal_list, list):
            counts.update(
                int(r["index"]) for r in reveal_list if isinstance(r, dict) and "index" in r
            )
    return counts


def available(size: int, exposed: Mapping[int, int], retire_after: int) -> list[int]:
    """The indices drawn fewer than `retire_after` times."""
    return [i for i in range(size) if exposed.get(i, 0) < retire_after]


def draw(seed: bytes, open_indices: Sequence[int], n: int) -> list[int]:
    """`n` of `open_indices`, a sample seeded by `seed`, in index order.

    Raises ExamError when fewer than `n` remain (the bank is spent)."""
    if len(open_indices) < n:
        raise ExamError(
            f"the bank is spent: {len(open_indices)} items are not retired and an exam "
            f"draws {n}; its declarer declares a new version with more items"
        )
    rng = random.Random(DRAW_DOMAIN + seed)
    return sorted(rng.sample(sorted(open_indices), n))


def reveal(items: Sequence[BankItem], drawn: Sequence[int]) -> list[JSONObject]:
    """The drawn items with their inclusion proofs (hex), as a graded entry logs them."""
    leaves = [_leaf(i, item) for i, item in enumerate(items)]
    return [
        {
            "index": index,
            "input": items[index]["input"],
            "answer": items[index]["answer"],
            "proof": [node.hex() for node in inclusion_proof(leaves, index)],
        }
        for index in drawn
    ]


def check_reveal(exam: Mapping[str, Any], revealed: object) -> list[tuple[int, BankItem]]:
    """The revealed items, each proven a leaf of the exam's committed bank.

    Raises SkillError for a reveal that is not a list of `{index, input, answer, proof}` or
    whose proof does not lead to the root."""
    if not isinstance(revealed, list):
        raise SkillError("a bank attempt's grades reveal no items")
    out: list[tuple[int, BankItem]] = []
    committed = bytes.fromhex(str(exam["root"]))
    for entry in revealed:
        if not isinstance(entry, dict) or set(entry) != {"index", "input", "answer", "proof"}:
            raise SkillError("a revealed item is {index, input, answer, proof}")
        index, proof = entry["index"], entry["proof"]
        if isinstance(index, bool) or not isinstance(index, int) or not isinstance(proof, list):
            raise SkillError("a revealed item has an integer index and a list of hashes")
        item = {"input": entry["input"], "answer": entry["answer"]}
        try:
            nodes = [bytes.fromhex(str(node)) for node in proof]
            verify_inclusion(_leaf(index, item), index, int(exam["size"]), nodes, committed)
        except (ValueError, ProofError) as exc:
            raise SkillError(f"revealed item {index} is not in the committed bank: {exc}") from exc
        out.append((index, item))
    return out
