"""A bank skill's exposures, folded from the log as it grows: each read folds only what was
appended since, and counts only the skill's reveals logged before the asked entry."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from accord.identity.skill_attempts import ATTEMPT_EXPIRED, ATTEMPT_GRADED, _Exposures
from accord.ledger.database import make_engine
from accord.ledger.events import make_entry
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore

OPERATOR = Ed25519Signer.generate()


def test_each_read_folds_only_the_new_entries_and_counts_only_those_before(
    tmp_path: Path,
) -> None:
    store = LogStore(make_engine(f"sqlite:///{tmp_path / 'log.db'}"), "exposures")
    read: list[int] = []
    find = store.find

    def counting_find(**query: Any) -> Any:
        found = find(**query)
        read.extend(s.index for s in found)
        return found

    store.find = counting_find  # type: ignore[method-assign]

    def log(kind: str, body: dict[str, Any]) -> int:
        index, _entry = store.append_next(
            OPERATOR.did,
            lambda seq: make_entry(
                OPERATOR, kind=kind, seq=seq, at=datetime.now(UTC), subject="a", body=body
            ),
        )
        return index

    def reveal(*indices: int) -> list[dict[str, int]]:
        return [{"index": i} for i in indices]

    first = log(ATTEMPT_GRADED, {"skill_id": "bank-1", "bank": reveal(0, 1)})
    log(ATTEMPT_GRADED, {"skill_id": "other", "bank": reveal(5)})
    log(ATTEMPT_GRADED, {"skill_id": "fixed"})  # not a bank skill: nothing kept
    later = log(ATTEMPT_EXPIRED, {"skill_id": "bank-1", "bank": reveal(2)})

    feed = _Exposures()
    assert feed.before(store, "bank-1", later) == [reveal(0, 1)]
    assert feed.before(store, "bank-1", later + 1) == [reveal(0, 1), reveal(2)]
    assert feed.before(store, "bank-1", first) == []
    assert read == [0, 1, 2, 3]  # the log once, for all three reads
    newest = log(ATTEMPT_GRADED, {"skill_id": "bank-1", "bank": reveal(3)})
    assert feed.before(store, "bank-1", newest + 1)[-1] == reveal(3)
    assert feed.before(store, "other", newest + 1) == [reveal(5)]
    assert read == [0, 1, 2, 3, newest]
