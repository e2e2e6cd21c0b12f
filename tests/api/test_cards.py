"""The service's and each agent's A2A v1.0 card, read by the a2a-sdk (a test dependency).

Every card parses strictly into the SDK's v1.0 `AgentCard` (no unknown field), is fetched by
the SDK's own card resolver from a real server on 127.0.0.1, and its signature verifies with
the SDK's verifier and with ours; a card altered after signing is refused by both. The JWS
itself (identity/jws.py) is also read by PyJWT.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import AgentCard
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from fastapi.testclient import TestClient
from google.protobuf.json_format import ParseDict

from accord.api.app import create_app
from accord.api.cards import A2A_PATH, SECURITY_SCHEME
from accord.api.routes.deps import ApiConfig
from accord.identity.agent_cards import (
    DID_EXTENSION,
    SKILL_SCHEMAS_EXTENSION,
    card_did,
    card_payload,
    verify_card,
)
from accord.identity.challenges import REGISTRY
from accord.identity.errors import AgentCardError, JwsError
from accord.identity.jws import sign_detached, verify_detached
from accord.identity.manifests import builtin_manifests
from accord.ledger.signing import Ed25519Signer, b64url, public_key_from_did
from tests.audit.conftest import World, open_world
from tests.serving import serve


def key_for(kid: str | None, jku: str | None) -> Ed25519PublicKey:
    """The SDK verifier's key provider: a did:key verification method names its own key."""
    assert kid is not None and jku is None
    return Ed25519PublicKey.from_public_bytes(public_key_from_did(kid.split("#", 1)[0]))


sdk_verify = create_signature_verifier(key_for, ["EdDSA"])


def strict(card: dict[str, Any]) -> AgentCard:
    """The card as the SDK's v1.0 type, refusing any field v1.0 does not define."""
    return ParseDict(card, AgentCard(), ignore_unknown_fields=False)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    world = open_world(tmp_path_factory.mktemp("cards") / "home")
    registry = world.onboarding.registry
    ada = registry.new_agent("ada", now=world.clock(), runtime="reference")
    outcomes = world.onboarding.onboard(ada, ["arithmetic"], item_count=5)
    assert outcomes[0].credential_id is not None
    world.agents["ada"] = ada
    world.agents["carol"] = registry.new_agent("carol", now=world.clock(), runtime="reference")
    return world


@pytest.fixture(scope="module")
def client(world: World) -> TestClient:
    config = ApiConfig(rate=1000.0, burst=10_000.0)
    return TestClient(create_app(world.settings, config=config, context=world.context))


@pytest.fixture(scope="module")
def base(world: World) -> Iterator[str]:
    config = ApiConfig(rate=1000.0, burst=10_000.0)
    app = create_app(world.settings, config=config, context=world.context)
    with serve(app) as url:
        yield url


def cards(client: TestClient, world: World) -> dict[str, dict[str, Any]]:
    out = {"service": client.get("/.well-known/agent-card.json").json()}
    for name, record in world.agents.items():
        out[name] = client.get(f"/agents/{record.did}/card").json()
    return out


def test_every_card_parses_strictly_as_v1(client: TestClient, world: World) -> None:
    for name, card in cards(client, world).items():
        parsed = strict(card)
        interface = parsed.supported_interfaces[0]
        assert interface.url == "http://testserver" + A2A_PATH, name
        assert (interface.protocol_binding, interface.protocol_version) == ("JSONRPC", "1.0")
        scheme = parsed.security_schemes[SECURITY_SCHEME].api_key_security_scheme
        assert (scheme.location, scheme.name) == ("header", "Signature")
        assert "RFC 9421" in scheme.description
        assert SECURITY_SCHEME in parsed.security_requirements[0].schemes
        (did_extension,) = [e for e in parsed.capabilities.extensions if e.uri == DID_EXTENSION]
        assert did_extension.params["did"] == card_did(card)
        assert parsed.signatures[0].protected and parsed.signatures[0].signature
    every = cards(client, world)
    assert card_did(every["service"]) == world.ledger.operator.did
    assert card_did(every["ada"]) == world.agents["ada"].did
    assert "tenant" not in every["ada"]["supportedInterfaces"][0]  # hired through the market


def test_skills_are_the_typed_capabilities(client: TestClient, world: World) -> None:
    every = cards(client, world)
    service_skills = {skill["name"]: skill for skill in every["service"]["skills"]}
    assert set(REGISTRY) <= set(service_skills)
    arithmetic_id = builtin_manifests()[0].skill_id  # a skill is named by its id
    assert service_skills["arithmetic"]["id"] == arithmetic_id
    ada = every["ada"]
    assert [skill["id"] for skill in ada["skills"]] == [arithmetic_id]
    assert [skill["name"] for skill in ada["skills"]] == ["arithmetic"]
    skill = ada["skills"][0]
    assert skill["inputModes"] == skill["outputModes"] == ["application/json"]
    example_input, _ = REGISTRY["arithmetic"].example()
    assert json.loads(skill["examples"][0]) == example_input
    (schemas,) = [
        e["params"]["skills"]
        for e in ada["capabilities"]["extensions"]
        if e["uri"] == SKILL_SCHEMAS_EXTENSION
    ]
    assert schemas[arithmetic_id]["inputSchema"] == REGISTRY["arithmetic"].input_schema
    assert schemas[arithmetic_id]["outputSchema"] == REGISTRY["arithmetic"].output_schema
    assert every["carol"]["skills"] == []
    # an empty JSON Schema is written `true` (A2A's canonical form would drop `{}`)
    python = next(
        e["params"]["skills"][service_skills["python"]["id"]]
        for e in every["service"]["capabilities"]["extensions"]
        if e["uri"] == SKILL_SCHEMAS_EXTENSION
    )
    assert python["inputSchema"]["properties"]["examples"]["items"]["properties"]["result"] is True


def test_signatures_verify_with_theirs_and_ours(client: TestClient, world: World) -> None:
    for name, card in cards(client, world).items():
        sdk_verify(strict(card))
        verified = verify_card(card)
        assert verified.did == card_did(card), name
        header = json.loads(jwt.utils.base64url_decode(card["signatures"][0]["protected"].encode()))
        assert header == {"alg": "EdDSA", "kid": verified.kid, "typ": "JOSE"}
        assert verified.kid == f"{verified.did}#{verified.did.removeprefix('did:key:')}"


ALTERATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "name": lambda card: card.update(name="mallory"),
    "interface": lambda card: card["supportedInterfaces"][0].update(url="https://evil.example/a2a"),
    "did": lambda card: card["capabilities"]["extensions"][0]["params"].update(
        did=Ed25519Signer.generate().did
    ),
    "skill": lambda card: card["skills"].append(
        {"id": "python", "name": "python", "description": "x", "tags": ["x"]}
    ),
    "signature": lambda card: card["signatures"][0].update(signature=b64url(bytes(64))),
}


@pytest.mark.parametrize("alteration", sorted(ALTERATIONS))
def test_a_card_altered_after_signing_is_refused_by_both(
    client: TestClient, world: World, alteration: str
) -> None:
    for card in cards(client, world).values():
        altered = copy.deepcopy(card)
        ALTERATIONS[alteration](altered)
        with pytest.raises(SignatureVerificationError):
            sdk_verify(strict(altered))
        with pytest.raises(AgentCardError, match="no signature on the agent card verifies"):
            verify_card(altered)


def test_an_unsigned_card_is_refused(client: TestClient, world: World) -> None:
    card = cards(client, world)["ada"]
    del card["signatures"]
    with pytest.raises(AgentCardError, match=r"\(1\) the agent card is not signed"):
        verify_card(card)


def test_v0_3_fields_merged_in_do_not_break_the_signature(client: TestClient, world: World) -> None:
    """A v1.0 reader ignores fields it does not know, as the SDK's server merges v0.3 ones."""
    card = cards(client, world)["service"]
    card.update(protocolVersion="0.3.0", url="http://testserver/a2a", preferredTransport="JSONRPC")
    card["securitySchemes"][SECURITY_SCHEME].update(
        type="apiKey", name="Signature", **{"in": "header"}
    )
    assert verify_card(card).did == world.ledger.operator.did
    assert card_payload(card) == card_payload(cards(client, world)["service"])


def test_the_sdk_resolver_fetches_and_verifies_every_card(base: str, world: World) -> None:
    async def resolve(path: str | None) -> AgentCard:
        async with httpx.AsyncClient(timeout=10) as http:
            resolver = A2ACardResolver(http, base)
            return await resolver.get_agent_card(path, signature_verifier=sdk_verify)

    service = asyncio.run(resolve(None))
    assert service.supported_interfaces[0].url == base + A2A_PATH
    ada = asyncio.run(resolve(f"/agents/{world.agents['ada'].did}/card"))
    assert [skill.name for skill in ada.skills] == ["arithmetic"]
    assert [skill.id for skill in ada.skills] == [builtin_manifests()[0].skill_id]


# -- the JWS ------------------------------------------------------------------------------


def test_pyjwt_reads_our_detached_jws() -> None:
    signer = Ed25519Signer.generate()
    payload = json.dumps({"a": "ü", "n": 1}).encode()
    token = sign_detached(payload, signer)
    protected, empty, signature = token.split(".")
    assert empty == ""
    attached = f"{protected}.{b64url(payload)}.{signature}"  # RFC 7515 Appendix F
    decoded = jwt.api_jws.decode_complete(
        attached, key=key_for(signer.kid, None), algorithms=["EdDSA"]
    )
    assert decoded["header"]["kid"] == signer.kid and decoded["payload"] == payload
    assert verify_detached(token, payload).did == signer.did


def _header(header: dict[str, Any]) -> str:
    return b64url(json.dumps(header).encode())


@pytest.mark.parametrize(
    ("make", "step"),
    [
        (lambda t, s: t.replace("..", ".e30."), "(1)"),
        (lambda t, s: t + ".x", "(1)"),
        (lambda t, s: "!!!.." + t.split("..")[1], "(2)"),
        (lambda t, s: _header({"alg": "none", "kid": s.kid}) + ".." + t.split("..")[1], "(3)"),
        (lambda t, s: _header({"alg": "HS256", "kid": s.kid}) + ".." + t.split("..")[1], "(3)"),
        (
            lambda t, s: (
                _header({"alg": "EdDSA", "kid": s.kid, "crit": ["exp"]}) + ".." + t.split("..")[1]
            ),
            "(4)",
        ),
        (lambda t, s: _header({"alg": "EdDSA", "kid": "key-1"}) + ".." + t.split("..")[1], "(5)"),
        (
            lambda t, s: (
                _header({"alg": "EdDSA", "kid": s.did + "#other"}) + ".." + t.split("..")[1]
            ),
            "(5)",
        ),
        (
            lambda t, s: (
                _header({"alg": "EdDSA", "kid": s.kid, "typ": "JOSE"}) + ".." + t.split("..")[1]
            ),
            "(6)",
        ),
        (lambda t, s: t[:-4] + "AAAA", "(6)"),
    ],
)
def test_the_jws_checklist(make: Callable[[str, Ed25519Signer], str], step: str) -> None:
    signer = Ed25519Signer.generate()
    token = sign_detached(b"payload", signer)
    with pytest.raises(JwsError) as raised:
        verify_detached(make(token, signer), b"payload")
    assert raised.value.reason.startswith(step)
    with pytest.raises(JwsError, match=r"^\(6\)"):
        verify_detached(token, b"another payload")
    with pytest.raises(ValueError, match="set by the signer"):
        sign_detached(b"payload", signer, extra={"alg": "none"})


def test_the_service_card_needs_no_open_market(tmp_path: Path) -> None:
    """The card is served with the chain away: only the operator's key is read."""
    env = {"ACCORD_HOME": str(tmp_path / "home"), "ACCORD_RPC_URL": "http://127.0.0.1:9"}
    from accord.ledger.settings import Settings

    card = TestClient(create_app(Settings.from_env(env))).get("/.well-known/agent-card.json")
    assert card.status_code == 200
    sdk_verify(strict(card.json()))
