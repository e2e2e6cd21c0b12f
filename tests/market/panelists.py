"""Panelists for the dispute tests: self-custody agents that commit and reveal their own
signed votes through `Market.panels` (`accord.market.disputes`)."""

from __future__ import annotations

import secrets
from typing import Any

from accord.ledger.events import Entry, make_entry
from accord.ledger.signing import Ed25519Signer
from accord.market.panel import PANEL_COMMITTED, PANEL_REVEALED, vote_commitment
from tests.audit.conftest import World
from tests.market.test_notices import self_custody_agent


def jurors(world: World, count: int) -> dict[str, Ed25519Signer]:
    """`count` self-custody agents credentialed like the reference team, by DID."""
    made = (
        self_custody_agent(world, f"juror{i}", f"https://juror{i}.invalid/run")
        for i in range(count)
    )
    return {signer.did: signer for signer in made}


def signed(
    world: World, signer: Ed25519Signer, kind: str, task_id: str, body: dict[str, Any]
) -> Entry:
    return make_entry(
        signer,
        kind=kind,
        seq=world.ledger.next_seq(signer.did),
        at=world.clock(),
        subject=task_id,
        body=body,
    )


def vote(
    world: World, signer: Ed25519Signer, task_id: str, verdict: str, check: str = "looks-right"
) -> tuple[str, str]:
    """The panelist commits to `verdict`; returns what it reveals later."""
    salt = secrets.token_hex(16)
    body = {"task_id": task_id, "check": check, "commitment": vote_commitment(verdict, salt)}
    world.market.panels.commit(signed(world, signer, PANEL_COMMITTED, task_id, body))
    return verdict, salt


def reveal(
    world: World,
    signer: Ed25519Signer,
    task_id: str,
    verdict: str,
    salt: str,
    check: str = "looks-right",
) -> None:
    body = {"task_id": task_id, "check": check, "verdict": verdict, "salt": salt}
    world.market.panels.reveal(signed(world, signer, PANEL_REVEALED, task_id, body))


def mine(world: World) -> None:
    """The chain moves on: a block after the one a rejection named."""
    world.escrow_chain.spend_nonce(world.escrow.operator_address())
