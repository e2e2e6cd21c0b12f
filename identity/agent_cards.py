"""A2A v1.0 agent cards: their signatures, the DID they name, the interface accord calls.

A card (A2A v1.0 §4.4.1, `AgentCard`) is JSON in the protocol's ProtoJSON form. accord signs
its own cards and reads other agents' cards with the functions here; nothing here does I/O.

**What is signed** (A2A §8.4.1). The card as an A2A v1.0 `AgentCard` (properties the
protocol does not define are ignored, at every level, as a v1.0 reader ignores them: a card
served with v0.3 fields merged in verifies as the card its signer signed), without
`signatures`, with every property whose value is an empty string, list or object, or an
extension's `required: false`, removed (recursively: the proto3 JSON mapping leaves default
values out, and the `a2a-sdk` verifier removes exactly these), in RFC 8785 canonical
form (`accord.ledger.canonical.canonical_json`). The signature is a detached compact JWS
(`accord.identity.jws`), alg EdDSA, kid the did:key verification method, held in the card as
`{"protected", "signature"}`. A verifier also accepts a signature over the card with its
empty values kept (a signer reading §8.4.1 to keep required empty fields).

**The DID.** A card names its agent's DID in an extension under `capabilities`:
`{"uri": DID_EXTENSION, "params": {"did": "did:key:…"}}`. A card accepts as verified only when
a signature holds under the key of exactly that DID (a card that names none is the signer's).

    card_payload(card)          the bytes a signature covers
    sign_card(card, signer)     the card with one signature (any earlier ones replaced)
    card_did(card)              the DID the card names, or None
    verify_card(card)           the checklist below; returns the VerifiedCard
    jsonrpc_interface(card)     the first JSON-RPC interface of protocol version 1.x

`verify_card` checks, and raises AgentCardError naming the first step that fails:

    (1) the card is a JSON object with a name and at least one signature
    (2) some signature verifies over the card's payload (identity.jws's checklist each)
    (3) the verifying signature's DID is the DID the card names, when it names one
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accord.identity.errors import AgentCardError, JwsError
from accord.identity.jws import join_detached, sign_detached, split_detached, verify_detached
from accord.ledger.canonical import canonical_json
from accord.ledger.errors import CanonicalizationError
from accord.ledger.signing import Signer

A2A_PROTOCOL_VERSION = "1.0"
JSONRPC_BINDING = "JSONRPC"
JSON_MEDIA_TYPE = "application/json"
#: The extension whose params name the card's DID: `{"did": "did:key:…"}`.
DID_EXTENSION = "https://w3id.org/accord/a2a/did/v1"
#: The extension whose params hold each skill's JSON Schemas: `{"skills": {id: {...}}}`.
SKILL_SCHEMAS_EXTENSION = "https://w3id.org/accord/a2a/skill-schemas/v1"
MAX_SIGNATURES = 16

CardJSON = dict[str, Any]


@dataclass(frozen=True)
class VerifiedCard:
    """A card whose signature holds: the card, the DID that signed it, the key id."""

    card: Mapping[str, Any]
    did: str
    kid: str


class _Keep:
    """A value kept whole (a `google.protobuf.Struct`, or a scheme not modelled here)."""


KEEP = _Keep()


@dataclass(frozen=True)
class _ListOf:
    item: Any


@dataclass(frozen=True)
class _MapOf:
    value: Any


_SECURITY_REQUIREMENT = {"schemes": _MapOf({"list": KEEP})}
_EXTENSION = {"uri": KEEP, "description": KEEP, "required": KEEP, "params": KEEP}
#: The fields of an A2A v1.0 AgentCard (specification/a2a.proto) in their JSON names.
AGENT_CARD_FIELDS: Mapping[str, Any] = {
    "name": KEEP,
    "description": KEEP,
    "supportedInterfaces": _ListOf(
        {"url": KEEP, "protocolBinding": KEEP, "tenant": KEEP, "protocolVersion": KEEP}
    ),
    "provider": {"url": KEEP, "organization": KEEP},
    "version": KEEP,
    "documentationUrl": KEEP,
    "capabilities": {
        "streaming": KEEP,
        "pushNotifications": KEEP,
        "extensions": _ListOf(_EXTENSION),
        "extendedAgentCard": KEEP,
    },
    "securitySchemes": _MapOf(
        {
            "apiKeySecurityScheme": {"description": KEEP, "location": KEEP, "name": KEEP},
            "httpAuthSecurityScheme": {"description": KEEP, "scheme": KEEP, "bearerFormat": KEEP},
            "oauth2SecurityScheme": KEEP,
            "openIdConnectSecurityScheme": {"description": KEEP, "openIdConnectUrl": KEEP},
            "mtlsSecurityScheme": {"description": KEEP},
        }
    ),
    "securityRequirements": _ListOf(_SECURITY_REQUIREMENT),
    "defaultInputModes": KEEP,
    "defaultOutputModes": KEEP,
    "skills": _ListOf(
        {
            "id": KEEP,
            "name": KEEP,
            "description": KEEP,
            "tags": KEEP,
            "examples": KEEP,
            "inputModes": KEEP,
            "outputModes": KEEP,
            "securityRequirements": _ListOf(_SECURITY_REQUIREMENT),
        }
    ),
    "signatures": KEEP,
    "iconUrl": KEEP,
}


def as_v1_card(value: Any, spec: Any = AGENT_CARD_FIELDS) -> Any:
    """`value` with only what `spec` (default: an AgentCard) defines, recursively; an
    extension's `required: false` (a proto3 default) left out."""
    if isinstance(spec, _Keep):
        return value
    if isinstance(spec, _ListOf):
        return [as_v1_card(v, spec.item) for v in value] if isinstance(value, list) else value
    if isinstance(spec, _MapOf):
        if not isinstance(value, dict):
            return value
        return {k: as_v1_card(v, spec.value) for k, v in value.items()}
    if not isinstance(value, dict):
        return value
    kept = {k: as_v1_card(v, spec[k]) for k, v in value.items() if k in spec}
    if spec is _EXTENSION and kept.get("required") is False:
        del kept["required"]
    return kept


def without_empties(value: Any) -> Any:
    """`value` with every empty string, list and object removed, recursively (None when
    nothing is left), as A2A's canonical form leaves default values out."""
    if isinstance(value, dict):
        kept = {
            k: v for k, v in ((k, without_empties(v)) for k, v in value.items()) if v is not None
        }
        return kept or None
    if isinstance(value, list):
        items = [v for v in (without_empties(v) for v in value) if v is not None]
        return items or None
    if isinstance(value, str) and not value:
        return None
    return value


def card_payload(card: Mapping[str, Any], *, keep_empties: bool = False) -> bytes:
    """The bytes a card's signature covers: RFC 8785 JSON of the card as a v1.0 AgentCard,
    without `signatures` and (unless `keep_empties`) without empty values.

    Raises AgentCardError when the card has no canonical form (a number JSON cannot carry
    exactly, a key that is not a string).
    """
    unsigned = {key: value for key, value in card.items() if key != "signatures"}
    unsigned = as_v1_card(unsigned)
    body = unsigned if keep_empties else (without_empties(unsigned) or {})
    try:
        return canonical_json(body)
    except CanonicalizationError as exc:
        raise AgentCardError(f"the agent card has no canonical form: {exc}") from exc


def sign_card(card: Mapping[str, Any], signer: Signer) -> CardJSON:
    """A copy of `card` signed by `signer`: `signatures` holds that one signature.

    Raises AgentCardError as `card_payload` does.
    """
    signed = copy.deepcopy(dict(card))
    signed.pop("signatures", None)
    protected, signature = split_detached(sign_detached(card_payload(signed), signer))
    signed["signatures"] = [{"protected": protected, "signature": signature}]
    return signed


def card_did(card: Mapping[str, Any]) -> str | None:
    """The DID the card names in its DID extension, or None when it names none.

    Raises AgentCardError when the extension is there but its `did` is not a string.
    """
    capabilities = card.get("capabilities")
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    for extension in extensions if isinstance(extensions, list) else []:
        if isinstance(extension, dict) and extension.get("uri") == DID_EXTENSION:
            params = extension.get("params")
            did = params.get("did") if isinstance(params, dict) else None
            if not isinstance(did, str) or not did:
                raise AgentCardError(f"the card's {DID_EXTENSION} extension has no params.did")
            return did
    return None


def verify_card(card: object) -> VerifiedCard:
    """Check a card's signatures (module docstring, steps 1-3); returns who signed it.

    Raises AgentCardError naming the first step that fails and why.
    """
    # (1): a card with signatures
    if not isinstance(card, dict) or not isinstance(card.get("name"), str):
        raise AgentCardError("(1) the agent card is not a JSON object with a name")
    signatures = card.get("signatures")
    if not signatures:
        raise AgentCardError("(1) the agent card is not signed: it has no signatures")
    if not isinstance(signatures, list) or len(signatures) > MAX_SIGNATURES:
        raise AgentCardError(f"(1) the card's signatures are not a list of 1-{MAX_SIGNATURES}")
    named = card_did(card)
    # (2): one signature that verifies, over either payload form
    payloads = [card_payload(card)]
    if (kept := card_payload(card, keep_empties=True)) != payloads[0]:
        payloads.append(kept)
    reasons: list[str] = []
    for number, signature in enumerate(signatures, start=1):
        if not isinstance(signature, dict):
            reasons.append(f"signature {number} is not an object")
            continue
        protected, value = signature.get("protected"), signature.get("signature")
        if not isinstance(protected, str) or not isinstance(value, str):
            reasons.append(f"signature {number} lacks its protected header or signature")
            continue
        failures: list[str] = []
        for payload in payloads:
            try:
                header = verify_detached(join_detached(protected, value), payload)
            except JwsError as exc:
                failures.append(exc.reason)
                continue
            # (3): signed by the DID the card names
            if named is not None and header.did != named:
                reasons.append(f"signature {number} is by {header.did}, not the card's DID {named}")
                break
            return VerifiedCard(card, header.did, header.kid)
        else:
            reasons.append(f"signature {number}: {failures[0]}")
    step = "(3)" if reasons and all(" not the card's DID " in r for r in reasons) else "(2)"
    raise AgentCardError(
        f"{step} no signature on the agent card verifies (was it changed after signing?): "
        + "; ".join(reasons)
    )


def jsonrpc_interface(card: Mapping[str, Any]) -> tuple[str, str | None]:
    """The URL and tenant of the card's first JSON-RPC interface of protocol version 1.x
    (A2A §8.3.2: the first supported entry wins).

    Raises AgentCardError when the card lists none.
    """
    interfaces = card.get("supportedInterfaces")
    for interface in interfaces if isinstance(interfaces, list) else []:
        if not isinstance(interface, dict):
            continue
        version = str(interface.get("protocolVersion", ""))
        url = interface.get("url")
        if (
            interface.get("protocolBinding") == JSONRPC_BINDING
            and (version == "1" or version.startswith("1."))
            and isinstance(url, str)
            and url
        ):
            tenant = interface.get("tenant")
            return url, tenant if isinstance(tenant, str) and tenant else None
    raise AgentCardError(
        "the agent card lists no JSON-RPC interface of A2A 1.x in supportedInterfaces "
        f"(protocolBinding {JSONRPC_BINDING!r}, protocolVersion '1.0')"
    )


__all__ = [
    "A2A_PROTOCOL_VERSION",
    "AGENT_CARD_FIELDS",
    "DID_EXTENSION",
    "JSONRPC_BINDING",
    "JSON_MEDIA_TYPE",
    "SKILL_SCHEMAS_EXTENSION",
    "VerifiedCard",
    "as_v1_card",
    "card_did",
    "card_payload",
    "jsonrpc_interface",
    "sign_card",
    "verify_card",
    "without_empties",
]
