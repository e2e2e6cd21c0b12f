"""The audit replays every skill declaration of the log (step 3): one by a DID that never
registered fails there, at that entry, though it is signed and anchored."""

from __future__ import annotations

from pathlib import Path

from accord.audit.checks import audit_task
from accord.identity.manifests import parse_manifest
from accord.identity.skill_registry import SKILL_DECLARED_KIND, declaration_body
from accord.ledger.anchoring import Anchorer
from accord.ledger.checkpoint import take_checkpoint
from accord.ledger.events import make_entry
from tests.audit.conftest import World, rebuild_log
from tests.identity.test_skill_manifests import manifest


def test_a_declaration_by_an_unregistered_did_fails_step_3_at_that_entry(
    world: World, scratch: Path
) -> None:
    honest = audit_task(
        world.ledger.store, world.task_id, anchors=world.anchors, escrow=world.escrow_chain
    )
    assert "0 skill declarations replay" in honest.steps[2].detail

    store, chain = rebuild_log(world, scratch / "declared.db", lambda index, event: event)
    requester = world.requester  # it posts tasks, but never registered
    skill = parse_manifest(manifest())
    entry = make_entry(
        requester,
        kind=SKILL_DECLARED_KIND,
        seq=(store.last_seq(requester.did) or 0) + 1,
        at=world.clock(),
        subject=skill.skill_id,
        body=declaration_body(skill),
    )
    (index,) = store.append_batch([entry])
    Anchorer(store, chain, world.ledger.operator, world.clock, receipt_timeout=0).anchor_latest()
    take_checkpoint(store, world.ledger.operator, world.clock())

    report = audit_task(store, world.task_id, anchors=chain, escrow=world.escrow_chain)
    failed = report.first_failure
    assert failed is not None and (failed.number, failed.entry) == (3, index)
    assert "had not registered before declaring" in failed.detail
