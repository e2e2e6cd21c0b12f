"""What a hostile operator who holds every key can do to a copy of the log, to show the audit
catches it: rewrite events, re-sign each changed one with its own actor's key, and anchor the
copy anew, so that signatures and anchors hold and only the semantic checks are left.

`change_output(body, part, commitment)` changes the commitment to one part's output
(`accord.ledger.sealing`) wherever a member's report or the delivered deliverable names it; the
forger seals its new output and hands it to the auditor with the others. `forge_copy` writes the
rewritten log into another database.
Used by `make demo` and the tests; nothing in the service calls it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from accord.ledger.anchoring import Anchorer
from accord.ledger.chain import MemoryAnchorChain
from accord.ledger.events import Entry, Event, sign_event
from accord.ledger.signing import Signer
from accord.ledger.store import LogStore

Rewrite = Callable[[int, Event], Mapping[str, Any]]
"""Given (index, event): the body the event should have in the copy."""


def change_output(value: Any, part_id: str, commitment: str) -> Any:
    """`value` with the commitment to the output of `part_id` replaced by `commitment`
    wherever a report's contribution or the assembled deliverable (`{part, output_sha256}`)
    names it."""
    if isinstance(value, Mapping):
        if value.get("part") == part_id and "output_sha256" in value:
            return {**value, "output_sha256": commitment}
        return {k: change_output(v, part_id, commitment) for k, v in value.items()}
    if isinstance(value, list):
        return [change_output(v, part_id, commitment) for v in value]
    return value


def forge_copy(
    source: LogStore,
    target: LogStore,
    keys: Mapping[str, Signer],
    rewrite: Rewrite,
    operator: Signer,
    clock: Callable[[], Any],
    *,
    start: int = 0,
) -> MemoryAnchorChain:
    """Copy `source` into the empty `target`, entries from `start` on rewritten by `rewrite`
    and re-signed with their actor's key from `keys` (an actor without a key keeps its entry);
    anchor the copy on a fresh in-memory chain and return it."""
    rebuilt = []
    for stored in source.entries(0, source.size()):
        entry = Entry.from_bytes(stored.data)
        event = entry.event
        body = dict(rewrite(stored.index, event)) if stored.index >= start else event.body
        if body == event.body or event.actor not in keys:
            rebuilt.append(entry)
            continue
        changed = Event(event.kind, event.actor, event.seq, event.at, event.subject, body)
        rebuilt.append(sign_event(keys[event.actor], changed))
    target.append_batch(rebuilt)
    anchors = MemoryAnchorChain()
    Anchorer(target, anchors, operator, clock, receipt_timeout=0).anchor_latest()
    return anchors
