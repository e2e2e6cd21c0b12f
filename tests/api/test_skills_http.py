"""Skills over HTTP: a fresh did:key registers and declares a skill with its own signed entry;
the service lists it, shows it, refuses manifests that break a rule or a gate (problem+json
naming which), and the declarations replay from the log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accord.api.client import AccordClient, ApiError
from accord.identity.errors import SkillError
from accord.identity.manifests import (
    builtin_manifests,
    code_sha256,
    parse_manifest,
    resolve_builtin,
    skill_id,
)
from accord.identity.presentations import create_presentation
from accord.identity.registration import REGISTERED_KIND
from accord.identity.skill_registry import SKILL_DECLARED_KIND, replay_declarations
from accord.ledger.events import Entry, parse_time
from accord.ledger.signing import Ed25519Signer
from accord.market.work import parse_parts
from tests.identity.test_skill_manifests import manifest
from tests.served_world import open_world


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("ACCORD_ALLOW_PRIVATE_AGENTS", "1")
    with open_world(tmp_path, allow_private=True) as opened:
        opened["clients"] = []
        yield opened
        for client in opened["clients"]:
            client.close()


def client_of(world: dict[str, Any], signer: Ed25519Signer | None = None) -> AccordClient:
    """A client signing as `signer` (a fresh did:key when none), closed after the test."""
    client = AccordClient(world["url"], signer=signer or Ed25519Signer.generate())
    world["clients"].append(client)
    return client


def register(client: AccordClient, name: str) -> None:
    """DID-auth registration of the client's own key, as the agent kit does it."""
    signer = client.signer
    assert isinstance(signer, Ed25519Signer)
    challenge = client.post("/registration/challenge")
    now = parse_time(client.get(f"/agents/{signer.did}/next-seq")["server_time"])
    presentation = create_presentation(signer, [], challenge["challenge"], challenge["domain"], now)
    entry = client.entry(
        REGISTERED_KIND,
        signer.did,
        {
            "name": name,
            "domain": challenge["domain"],
            "challenge": challenge["challenge"],
            "proof": presentation["proof"],
            "custody": "self",
        },
    )
    client.post(
        "/remote/registration",
        {
            "name": name,
            "endpoint": "http://127.0.0.1:9/run",
            "challenge": challenge["challenge"],
            "presentation": presentation,
            "entry": entry,
        },
    )


def declare(client: AccordClient, document: dict[str, Any]) -> dict[str, Any]:
    named = skill_id(document)  # the hash alone: the service checks the rules
    entry = client.entry(SKILL_DECLARED_KIND, named, {"skill_id": named, "manifest": document})
    answer: dict[str, Any] = client.post("/skills", {"entry": entry})
    return answer


def problem(call: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    return caught.value


def test_a_fresh_did_key_declares_a_skill_that_the_service_then_serves(
    world: dict[str, Any],
) -> None:
    stranger = client_of(world)
    unregistered = problem(lambda: declare(stranger, manifest()))
    assert unregistered.status == 409 and "has not registered" in str(unregistered)

    register(stranger, "stranger")
    declared = declare(stranger, manifest())
    declared_id = parse_manifest(manifest()).skill_id
    assert declared["id"] == declared_id
    assert declared["declarer"] == stranger.signer.did  # type: ignore[union-attr]
    assert declared["gates"]["gates"][-1] == "constant-answer"

    listed = stranger.get("/skills")
    assert [s["name"] for s in listed[:7]] == [
        "arithmetic", "extraction", "python", "retrieval", "json-transform", "python-function",
        "sql",
    ]  # fmt: skip
    assert listed[-1]["id"] == declared_id and not listed[-1]["shipped"]
    shown = stranger.get(f"/skills/{declared_id}")
    assert shown["manifest"] == manifest()
    assert stranger.get("/skills/arithmetic")["id"] == builtin_manifests()[0].skill_id
    assert stranger.get("/skills", {"after": declared["index"]}) == []

    again = problem(lambda: declare(stranger, manifest()))
    assert again.status == 409 and "already declared" in str(again)
    missing = problem(lambda: stranger.get("/skills/" + "0" * 64))
    assert missing.status == 404


def test_refusals_name_the_rule_or_the_gate(world: dict[str, Any]) -> None:
    stranger = client_of(world)
    register(stranger, "stranger")
    broken = problem(lambda: declare(stranger, manifest(name="Bad Name")))
    assert broken.status == 422 and "$.name" in str(broken)

    lenient = "def grade(input, expected, answer):\n    return True\n"
    grader = {"kind": "python", "code": lenient, "sha256": code_sha256(lenient)}
    empty_passes = problem(lambda: declare(stranger, manifest(graders=[grader])))
    assert empty_passes.status == 422 and empty_passes.reason == "empty-answer"

    squatter = problem(lambda: declare(stranger, manifest(name="sql")))
    assert squatter.status == 409 and "shipped skill" in str(squatter)
    stranger_ids = {s["id"] for s in stranger.get("/skills") if not s["shipped"]}
    assert stranger_ids == set()


def test_only_the_declarer_supersedes_its_skill_and_the_log_replays(
    world: dict[str, Any],
) -> None:
    first = client_of(world)
    second = client_of(world)
    register(first, "first")
    register(second, "second")
    old = declare(first, manifest())
    newer = manifest(version="1.1.0", supersedes=old["id"])
    hijack = problem(lambda: declare(second, newer))
    assert hijack.status == 409 and "only its declarer supersedes it" in str(hijack)
    assert declare(first, newer)["supersedes"] == old["id"]

    # A hosted agent declares by manifest; the service signs with the key it holds.
    ada = client_of(world, world["ada"])
    hosted = ada.post("/skills", {"manifest": manifest(name="add-three")})
    assert hosted["declarer"] == world["ada"].did
    refused = problem(lambda: first.post("/skills", {"manifest": manifest(name="add-four")}))
    assert refused.status == 403

    store = world["context"].market.ledger.store
    entries = [(s.index, Entry.from_bytes(s.data).event) for s in store.entries()]
    registered_at: dict[str, int] = {}
    for index, event in entries:
        if event.kind == REGISTERED_KIND:
            registered_at.setdefault(event.actor, index)
    operator = world["context"].market.ledger.operator.did
    known = replay_declarations(entries, operator=operator, registered_at=registered_at)
    assert {old["id"], hosted["id"]} <= set(known)
    assert len(known) == 7 + 3

    # A declaration logged before its declarer registered does not replay.
    late = {did: index + 10_000 for did, index in registered_at.items()}
    with pytest.raises(SkillError, match="had not registered"):
        replay_declarations(entries, operator=operator, registered_at=late)


def test_a_built_in_skills_id_names_its_capability(world: dict[str, Any]) -> None:
    """Old names and the built-in skills' ids are one: in parts, exams and discovery."""
    arithmetic = resolve_builtin("arithmetic")
    assert arithmetic is not None
    reader = client_of(world)
    by_name = reader.get("/agents", {"capability": "arithmetic"})
    assert by_name and reader.get("/agents", {"capability": arithmetic.skill_id}) == by_name
    rows = {row["name"]: row for row in reader.get("/capabilities")}
    assert rows["arithmetic"]["skill_id"] == arithmetic.skill_id
    figures = {"kind": "figures", "figures": ["1.50", "2"], "operation": "sum"}
    (part,) = parse_parts([{"id": "net", "capability": arithmetic.skill_id, "input": figures}], {})
    assert part.capability == "arithmetic"
