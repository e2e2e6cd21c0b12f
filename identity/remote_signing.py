"""Who signs for a team member: its key file here, or a remote agent itself at its endpoint."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from accord.identity.address_guard import agent_client, check_url
from accord.identity.agents import AgentRecord, AgentRegistry
from accord.identity.errors import KeyStoreError
from accord.ledger.errors import MalformedError
from accord.ledger.signing import Signer, from_b64url, kid_for, verify_signature

SIGN_PATH = "/sign"
SIGN_TIMEOUT = 30.0


def sign_url(endpoint: str) -> str:
    """Where a remote agent signs its own events: its endpoint's origin + `/sign`."""
    parts = urlsplit(check_url(endpoint, "the agent endpoint"))
    return urlunsplit((parts.scheme, parts.netloc, SIGN_PATH, "", ""))


class EndpointSigner:
    """A `Signer` for a remote agent: the bytes to sign (JCS of an event whose actor is the
    agent) are POSTed to the agent's `/sign` as `{"event": text}`; the agent decides whether
    it signs (a team member signs only its own reports) and replies `{"sig": base64url}`.
    The signature is checked before it is returned.

    An event names outputs by their commitments only (`accord.ledger.sealing`), so the agent could
    not tell its own answers from others': `openings(commitment)` gives the sealed bytes of
    each `output_sha256` the event names, and they travel beside it as
    `{"openings": {commitment: sealed text}}` for the agent to open and compare.

    Like every request to an agent it goes to a public address only unless `allow_private`
    (`accord.identity.address_guard`), and is signed by `operator` when given (a call from accord,
    RFC 9421), so the agent can tell accord's request from anyone's. `sign` raises
    KeyStoreError when the agent cannot be reached, is at a refused address, or refuses;
    SignatureError when its signature does not verify.
    """

    def __init__(
        self,
        did: str,
        endpoint: str,
        timeout: float = SIGN_TIMEOUT,
        *,
        allow_private: bool = False,
        openings: Callable[[str], bytes | None] | None = None,
        operator: Signer | None = None,
    ) -> None:
        self.did = did
        self.kid = kid_for(did)
        self.url = sign_url(endpoint)
        self.timeout = timeout
        self.allow_private = allow_private
        self.openings = openings
        self.operator = operator

    def sign(self, message: bytes) -> bytes:
        request: dict[str, Any] = {"event": message.decode()}
        if self.openings is not None:
            opened = {c: self.openings(c) for c in _commitments(json.loads(message))}
            request["openings"] = {c: d.decode() for c, d in opened.items() if d is not None}
        try:
            with agent_client(
                self.timeout, allow_private=self.allow_private, operator=self.operator
            ) as client:
                response = client.post(self.url, json=request)
        except httpx.HTTPError as exc:
            raise KeyStoreError(f"cannot reach {self.did} at {self.url}: {exc}") from exc
        if response.status_code != 200:
            raise KeyStoreError(
                f"{self.did} refused to sign (HTTP {response.status_code}): {response.text[:200]}"
            )
        try:
            signature = from_b64url(str(response.json()["sig"]))
        except (ValueError, KeyError, TypeError, MalformedError) as exc:
            raise KeyStoreError(f"{self.did} sent no signature: {exc}") from exc
        verify_signature(self.did, message, signature)
        return signature


def _commitments(value: Any) -> list[str]:
    """Every `output_sha256` named anywhere in a JSON value, in order, once."""
    found: dict[str, None] = {}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("output_sha256"), str):
                found.setdefault(item["output_sha256"])
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return list(found)


def member_signer(
    registry: AgentRegistry,
    agent: AgentRecord,
    openings: Callable[[str], bytes | None] | None = None,
) -> Signer:
    """Who signs for `agent` in a team: its key file, or, for a remote `http` agent
    without one, the agent itself at its endpoint (`EndpointSigner`, shown the sealed outputs
    its events name through `openings`, asked in a request the registry's operator signs).

    Raises KeyStoreError when neither is available.
    """
    if registry.key_path(agent.name).exists() or agent.runtime != "http":
        return registry.signer(agent)
    if not agent.endpoint:
        raise KeyStoreError(f"{agent.name!r} has neither a key file nor an endpoint")
    return EndpointSigner(
        agent.did,
        agent.endpoint,
        allow_private=registry.allow_private_agents,
        openings=openings,
        operator=registry.operator,
    )
