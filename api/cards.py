"""The service's and each agent's A2A v1.0 agent card, signed (see `accord.identity.agent_cards`).

    service_card(base, ...)        `/.well-known/agent-card.json`, signed by the operator
    agent_card(base, record, ...)  `/agents/{did}/card`, signed by the agent's own key

Both list one interface, the service's JSON-RPC endpoint `POST {base}/a2a` (binding JSONRPC,
protocol version 1.0); an agent's card names the agent as the interface's `tenant`, its DID.
Skills are the typed capabilities (`accord.identity.challenges.REGISTRY`): name, description, one
example input, JSON in and out; their input and output JSON Schemas sit in the
`SKILL_SCHEMAS_EXTENSION` extension (an AgentSkill has no field for them), the DID in the
`DID_EXTENSION` extension.

Requests are signed (RFC 9421 HTTP Message Signatures, Ed25519, `keyid` the caller's did:key
verification method; `accord.identity.http_signatures`). A2A has no scheme type for that, so the
card declares it as an API-key-like header scheme named `SECURITY_SCHEME`, located in the
`Signature` header, whose description says the rest; its requirement lists `did:key`, the one
kind of key it takes.

Card JSON follows the proto3 JSON mapping the a2a-sdk parses strictly: no empty strings, lists
or objects anywhere (A2A's canonical form would drop them from what is signed), so an empty
JSON Schema `{}` is written `true`, its equivalent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from accord.identity.agent_cards import (
    A2A_PROTOCOL_VERSION,
    DID_EXTENSION,
    JSON_MEDIA_TYPE,
    JSONRPC_BINDING,
    SKILL_SCHEMAS_EXTENSION,
    CardJSON,
    sign_card,
)
from accord.identity.challenges import REGISTRY, get_capability
from accord.identity.errors import ExamError
from accord.identity.manifests import builtin_name, resolve_builtin
from accord.ledger.canonical import canonical_json
from accord.ledger.signing import Signer

A2A_PATH = "/a2a"
JSON_MODES = [JSON_MEDIA_TYPE]
SECURITY_SCHEME = "httpMessageSignature"
SIGNATURE_HEADER = "Signature"
SECURITY_DESCRIPTION = (
    "HTTP Message Signatures (RFC 9421): every request is signed with Ed25519 by the caller's "
    "did:key; Signature-Input names the covered components (@method, @target-uri, "
    "content-digest) and keyid is the did:key verification method (did:key:z…#z…)."
)
ORGANIZATION = "accord"


def schema_without_empty_objects(schema: Any) -> Any:
    """`schema` with every empty object `{}` written `true` (the JSON Schema that accepts
    anything either way), recursively."""
    if isinstance(schema, dict):
        if not schema:
            return True
        return {key: schema_without_empty_objects(value) for key, value in schema.items()}
    if isinstance(schema, list):
        return [schema_without_empty_objects(value) for value in schema]
    return schema


def skill_entries(capabilities: Iterable[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The AgentSkill of each capability named (a built-in's name or id, or a declared skill's
    id; unknown ones skipped) and the schema extension's params for them. A skill's `id` is
    its skill id (`accord.identity.manifests`); its old name stays in `name` and `tags`."""
    skills: list[dict[str, Any]] = []
    schemas: dict[str, Any] = {}
    for named in capabilities:
        try:
            capability = get_capability(builtin_name(named))
        except ExamError:
            continue
        builtin = resolve_builtin(capability.name)
        skill_id = capability.name if builtin is None else builtin.skill_id
        title = capability.name if builtin is None else builtin.name
        declared = getattr(capability, "manifest", None)
        if declared is not None:
            title = declared.name
        example_input, _ = capability.example()
        skills.append(
            {
                "id": skill_id,
                "name": title,
                "description": capability.description,
                "tags": ["capability", title],
                "examples": [canonical_json(example_input).decode("utf-8")],
                "inputModes": JSON_MODES,
                "outputModes": JSON_MODES,
            }
        )
        schemas[skill_id] = {
            "version": capability.version,
            "inputSchema": schema_without_empty_objects(capability.input_schema),
            "outputSchema": schema_without_empty_objects(capability.output_schema),
        }
    return skills, schemas


def _card(
    *,
    base: str,
    name: str,
    description: str,
    version: str,
    did: str,
    tenant: str | None,
    skills: list[dict[str, Any]],
    schemas: Mapping[str, Any],
) -> CardJSON:
    interface: dict[str, Any] = {
        "url": base + A2A_PATH,
        "protocolBinding": JSONRPC_BINDING,
        "protocolVersion": A2A_PROTOCOL_VERSION,
    }
    if tenant is not None:
        interface["tenant"] = tenant
    extensions: list[dict[str, Any]] = [
        {
            "uri": DID_EXTENSION,
            "description": "The DID of this agent; the card is signed by its key.",
            "params": {"did": did},
        }
    ]
    if schemas:
        extensions.append(
            {
                "uri": SKILL_SCHEMAS_EXTENSION,
                "description": "Each skill's input and output JSON Schemas.",
                "params": {"skills": dict(schemas)},
            }
        )
    return {
        "name": name,
        "description": description,
        "supportedInterfaces": [interface],
        "provider": {"organization": ORGANIZATION, "url": base},
        "version": version,
        "capabilities": {
            "streaming": True,  # SendStreamingMessage and SubscribeToTask at /a2a
            "pushNotifications": False,
            "extensions": extensions,
        },
        "securitySchemes": {
            SECURITY_SCHEME: {
                "apiKeySecurityScheme": {
                    "description": SECURITY_DESCRIPTION,
                    "location": "header",
                    "name": SIGNATURE_HEADER,
                }
            }
        },
        "securityRequirements": [{"schemes": {SECURITY_SCHEME: {"list": ["did:key"]}}}],
        "defaultInputModes": JSON_MODES,
        "defaultOutputModes": JSON_MODES,
        "skills": skills,
    }


def service_card(
    base: str, *, name: str, description: str, version: str, operator: Signer
) -> CardJSON:
    """The service's card at `base` (no trailing slash), signed by the operator.

    Its skills are every capability with an exam, then the market and the audit.
    """
    skills, schemas = skill_entries(REGISTRY)
    skills += [
        {
            "id": "task-market",
            "name": "Sealed-bid task market",
            "description": "Post paid tasks escrowed on chain; commit and reveal bids.",
            "tags": ["market", "escrow"],
        },
        {
            "id": "audit",
            "name": "Audit a task",
            "description": "Re-check a finished collaboration from the log and the chain.",
            "tags": ["audit"],
        },
    ]
    card = _card(
        base=base,
        name=name,
        description=description,
        version=version,
        did=operator.did,
        tenant=None,
        skills=skills,
        schemas=schemas,
    )
    return sign_card(card, operator)


def agent_card(
    base: str,
    *,
    name: str,
    did: str,
    runtime: str,
    capabilities: Iterable[str],
    signer: Signer,
) -> CardJSON:
    """An agent's card: its credentialed `capabilities` as skills, signed by `signer` (the
    agent's key). Its interface is the service's A2A endpoint, where the agent is hired
    through the market (a task posted there is open to it, as to every credentialed agent):
    the endpoint does not route by agent, so the card names no tenant."""
    skills, schemas = skill_entries(sorted(capabilities))
    held = ", ".join(str(skill["name"]) for skill in skills) or "nothing yet"
    card = _card(
        base=base,
        name=name,
        description=f"{name}: a {runtime} agent on accord, credentialed for {held}",
        version="1",
        did=did,
        tenant=None,
        skills=skills,
        schemas=schemas,
    )
    return sign_card(card, signer)


__all__ = [
    "A2A_PATH",
    "JSON_MODES",
    "SECURITY_SCHEME",
    "agent_card",
    "schema_without_empty_objects",
    "service_card",
    "skill_entries",
]
