"""Skills over HTTP: a fresh did:key registers and declares a skill with its own signed entry;
the service lists it, shows it, refuses manifests that break a rule or a gate (problem+json
naming which), and the declarations replay from the log."""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from accord.api.routes.deps import ApiConfig
from accord.api.routes.skills import AgreementFeed
from accord.client import AccordClient, ApiError
from accord.identity.errors import SkillError
from accord.identity.http_auth import AccordAuth
from accord.identity.manifests import (
    builtin_manifests,
    code_sha256,
    parse_manifest,
    resolve_builtin,
    skill_id,
)
from accord.identity.presentations import create_presentation
from accord.identity.registration import REGISTERED_KIND
from accord.identity.skill_attempts import (
    ATTEMPT_ANSWERED,
    ATTEMPT_GRADED,
    ATTEMPT_NONCE,
    replay_attempts,
)
from accord.identity.skill_registry import SKILL_DECLARED_KIND, replay_declarations
from accord.ledger.events import Entry, Event, make_entry, parse_time
from accord.ledger.signing import Ed25519Signer, write_keyfile
from accord.market.agreement import ISSUED_EVENT_KIND
from accord.market.work import parse_parts
from tests.accord_cli import AccordCli
from tests.api.test_app import build_world
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
    exported = stranger.get(f"/skills/{declared_id}/export", {"format": "mcp"})
    assert exported["_meta"]["accord/skill_id"] == declared_id
    folder = stranger.get(f"/skills/{declared_id}/export", {"format": "folder"})
    assert set(folder) == {"SKILL.md", "skill.json", "generate.py"}
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
    assert len(known) == 8 + 3  # the shipped skills (summarise too, for the audit) and three

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


def test_a_declared_skill_is_examined_from_a_committed_seed_and_credentialed(
    world: dict[str, Any],
) -> None:
    """A fresh did:key declares a skill; another sits its exam: the service commits first,
    the candidate's nonce fixes the items, the grades come with the reveal and a credential
    naming the skill id; the log alone re-grades the attempt in the box."""
    author, candidate = client_of(world), client_of(world)
    register(author, "author")
    register(candidate, "candidate")
    declared = declare(author, manifest())
    assert candidate.get(f"/skills/{declared['id']}")["agreement"]["holders"] == []
    started = candidate.post(f"/skills/{declared['id']}/attempts")
    attempt_id = started["attempt_id"]
    assert started["attempt"] == 1 and started["items"] == 6 and len(started["commitment"]) == 64

    nonce = secrets.token_hex(16)
    body = {"attempt_id": attempt_id, "nonce": nonce}
    items = candidate.post(
        f"/skills/attempts/{attempt_id}/nonce",
        {"entry": candidate.entry(ATTEMPT_NONCE, attempt_id, body)},
    )["items"]
    assert len(items) == 6 and all("private" not in item for item in items)
    answers: list[Any] = [{"sum": i["payload"]["a"] + i["payload"]["b"]} for i in items]
    answers[-1] = {"sum": 0}
    graded = candidate.post(
        f"/skills/attempts/{attempt_id}/answers",
        {
            "entry": candidate.entry(
                ATTEMPT_ANSWERED, attempt_id, {"attempt_id": attempt_id, "answers": answers}
            )
        },
    )
    assert (graded["earned"], graded["possible"], graded["passed"]) == (5, 6, True)
    assert graded["grades"][-1]["reason"] == "$.sum is not within 0 of the expected number"
    subject = graded["credential"]["credentialSubject"]
    assert subject["id"] == candidate.signer.did  # type: ignore[union-attr]
    assert declared["id"] in json.dumps(subject)
    again = problem(
        lambda: candidate.post(
            f"/skills/attempts/{attempt_id}/answers",
            {
                "entry": candidate.entry(
                    ATTEMPT_ANSWERED, attempt_id, {"attempt_id": attempt_id, "answers": answers}
                )
            },
        )
    )
    assert again.status == 409
    assert candidate.post(f"/skills/{declared['id']}/attempts")["attempt"] == 2
    # The agreement read before the credential was issued sees it now (the feed folds on).
    holders = candidate.get(f"/skills/{declared['id']}")["agreement"]["holders"]
    assert holders == [{"agent": candidate.signer.did, "exam": "5/6", "parts": 0, "field": None}]  # type: ignore[union-attr]
    found = candidate.get("/agents", {"capability": declared["id"]})
    assert [agent["did"] for agent in found] == [candidate.signer.did]  # type: ignore[union-attr]
    card = candidate.get(f"/agents/{candidate.signer.did}/card")  # type: ignore[union-attr]
    assert [(s["id"], s["name"]) for s in card["skills"]] == [(declared["id"], "add-two")]
    old_way = problem(lambda: candidate.post("/exams", {"capability": declared["id"]}))
    assert old_way.status == 400 and "/attempts" in str(old_way)

    context = world["context"]
    operator = context.market.ledger.operator.did
    entries = [
        (s.index, Entry.from_bytes(s.data).event) for s in context.market.ledger.store.entries()
    ]
    registered_at = {e.actor: i for i, e in reversed(entries) if e.kind == REGISTERED_KIND}
    known = replay_declarations(entries, operator=operator, registered_at=registered_at)
    assert replay_attempts(entries, known, operator=operator) == 1

    def tampered(change: Any) -> list[tuple[int, Event]]:
        out = []
        for index, event in entries:
            if event.kind == ATTEMPT_GRADED:
                body = copy.deepcopy(dict(event.body))
                change(body)
                event = Event(event.kind, event.actor, event.seq, event.at, event.subject, body)
            out.append((index, event))
        return out

    def generous(body: dict[str, Any]) -> None:
        body["grades"][-1].update(earned=1, reason="correct")
        body["earned"] = 6

    def other_nonce(body: dict[str, Any]) -> None:
        body["service_nonce"] = "00" * 32

    with pytest.raises(SkillError, match="grades are not the re-grade's"):
        replay_attempts(tampered(generous), known, operator=operator)
    with pytest.raises(SkillError, match="does not match its commitment"):
        replay_attempts(tampered(other_nonce), known, operator=operator)


def test_declarations_are_limited_per_did_at_the_posting_rate(tmp_path: Path) -> None:
    """Each declaration runs its gates in the box: a DID declares at the posting rate."""
    built = build_world(tmp_path / "home", bidders=("ada",))
    client = TestClient(built.app(ApiConfig(rate=1000, burst=1000, post_burst=2, posts_per_hour=2)))
    ada = AccordAuth(built.signers["ada"])
    answers = [
        client.post("/skills", json={"manifest": manifest(name=f"add-{n}")}, auth=ada)
        for n in ("one", "two", "three")
    ]
    assert [a.status_code for a in answers] == [201, 201, 429], answers[-1].text
    assert "declares skills at the posting rate" in answers[-1].json()["detail"]
    assert int(answers[-1].headers["Retry-After"]) > 1000


def test_a_did_key_declares_with_the_cli_at_a_service(
    world: dict[str, Any], tmp_path: Path
) -> None:
    """`accord skill declare FILE --server URL --key FILE`: the entry signed by your own key."""
    signer = Ed25519Signer.generate()
    key = tmp_path / "me.json"
    write_keyfile(key, signer)
    register(client_of(world, signer), "me")
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest(name="add-by-cli")))
    cli = AccordCli(tmp_path / "cli-home")
    declared = cli.json("skill", "declare", str(path), "--server", world["url"], "--key", str(key))
    assert declared["declarer"] == signer.did and declared["name"] == "add-by-cli"
    listed = cli.json("skill", "list", "--server", world["url"])
    assert listed[-1]["id"] == declared["id"]
    shown = cli.json("skill", "show", declared["id"], "--server", world["url"])
    assert shown["manifest"] == manifest(name="add-by-cli") and shown["agreement"]["holders"] == []
    unsigned = cli.run("skill", "declare", str(path), "--server", world["url"], check=2)
    assert "--key" in unsigned.stderr


def test_the_agreement_feed_reads_only_what_was_appended_since(world: dict[str, Any]) -> None:
    """Each read of a skill's agreement folds the entries appended since the one before,
    not the whole log again (an unsigned read must not cost the log's size)."""
    store = world["context"].market.ledger.store
    operator = world["context"].market.ledger.operator
    read: list[int] = []
    find = store.find

    def counting_find(**query: Any) -> Any:
        found = find(**query)
        read.extend(s.index for s in found)
        return found

    store.find = counting_find
    feed = AgreementFeed()

    def issue(agent: str, earned: int) -> None:
        score = {"earned": earned, "possible": 8}
        body = {
            "agent": agent,
            "capability": "sql",
            "credential": {"credentialSubject": {"score": score}},
        }
        store.append_next(
            operator.did,
            lambda seq: make_entry(
                operator, kind=ISSUED_EVENT_KIND, seq=seq, at=datetime.now(UTC), body=body
            ),
        )

    issue("did:key:a", 6)
    issue("did:key:b", 7)
    first = feed.agreement(store, "sql")
    assert [h.agent for h in first.holders] == ["did:key:a", "did:key:b"]
    assert read[-2:] == [store.size() - 2, store.size() - 1]  # the whole log, the first time
    issue("did:key:a", 8)
    first_reads = len(read)
    second = feed.agreement(store, "sql")
    assert read[first_reads:] == [store.size() - 1]  # the one new entry, not the whole log
    assert [(h.agent, str(h.exam)) for h in second.holders] == [
        ("did:key:a", "1"),
        ("did:key:b", "7/8"),
    ]
    assert feed.agreement(store, "sql") == second and len(read) == first_reads + 1
