"""`accord credential verify FILE|URL` for someone with no accord home: the credential's checklist
(`accord.identity.credentials.verify_credential`) against an issuer the caller names, or else
against the operator of the service the credential's status list lives at (its A2A card,
`/.well-known/agent-card.json`, is signed by that operator), and the status list fetched at the
URL the credential names. Nothing is written anywhere.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from accord.client import RATE_LIMIT_WAIT_S, retry_after
from accord.identity.credentials import (
    STEP_FORMAT,
    STEP_PROOF,
    VerifiedCredential,
    verify_credential,
)
from accord.identity.errors import CredentialError
from accord.identity.status_lists import STATUS_LIST_PATH
from accord.identity.tls import tls_context
from accord.ledger.errors import AccordError

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
"""The most a fetched credential, card or status list may hold."""
FETCH_TIMEOUT = 30.0
CARD_PATH = "/.well-known/agent-card.json"


class FetchError(AccordError):
    """A document could not be fetched as JSON: the URL, and why."""


@dataclass(frozen=True)
class TrustedIssuer:
    """The issuer a credential is held to, and why it is trusted (said in the output)."""

    did: str
    because: str


def fetch_json(url: str) -> Any:
    """The JSON document at `url` (http or https, no redirects followed, at most
    MAX_DOCUMENT_BYTES); an answer 429 (rate-limited) is asked again after the pause its
    Retry-After names, for at most RATE_LIMIT_WAIT_S in all (the client's rule,
    `accord.client.retry_after`). Raises FetchError naming the URL and what went wrong."""
    waited = 0.0
    while True:
        try:
            return _fetch_json_once(url)
        except _RateLimited as limited:
            if waited + limited.pause > RATE_LIMIT_WAIT_S:
                raise FetchError(f"GET {url}: HTTP 429, still rate-limited") from None
            time.sleep(limited.pause)
            waited += limited.pause


class _RateLimited(Exception):
    """The server answered 429, asking for a pause of `pause` seconds."""

    def __init__(self, pause: float) -> None:
        super().__init__(pause)
        self.pause = pause


def _fetch_json_once(url: str) -> Any:
    """One fetch of `fetch_json`. Raises FetchError, _RateLimited."""
    if urlsplit(url).scheme not in ("http", "https"):
        raise FetchError(f"{url!r} is not an http(s) URL")
    try:
        with (
            httpx.Client(timeout=FETCH_TIMEOUT, verify=tls_context()) as client,
            client.stream("GET", url, headers={"Accept": "application/json"}) as response,
        ):
            if response.status_code == 429:
                raise _RateLimited(retry_after(response.headers))
            if response.is_error:
                raise FetchError(f"GET {url}: HTTP {response.status_code}")
            data = b""
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > MAX_DOCUMENT_BYTES:
                    raise FetchError(f"GET {url}: more than {MAX_DOCUMENT_BYTES} bytes")
    except httpx.HTTPError as exc:
        raise FetchError(f"cannot fetch {url}: {exc}") from exc
    try:
        return json.loads(data)
    except ValueError as exc:
        raise FetchError(f"GET {url}: the answer is not JSON") from exc


def credential_document(value: Any) -> Any:
    """The credential in `value`: itself, or the `document` of a service's stored credential
    (`GET /credentials/ID` answers the credential with its row)."""
    if isinstance(value, dict) and isinstance(value.get("document"), dict) and "agent" in value:
        return value["document"]
    return value


def status_list_urls(credential: Any) -> list[str]:
    """The `statusListCredential` URLs a credential names (none for another shape: the
    checklist says what is wrong with it)."""
    status = credential.get("credentialStatus") if isinstance(credential, Mapping) else None
    entries = status if isinstance(status, list) else [status]
    return [
        entry["statusListCredential"]
        for entry in entries
        if isinstance(entry, Mapping) and isinstance(entry.get("statusListCredential"), str)
    ]


def published_issuer(credential: Any, fetched_from: str | None) -> TrustedIssuer:
    """The operator of the service the verifier fetched the credential from (`fetched_from`,
    its URL), as that service's signed A2A card says, when the credential's status list is at
    that same service. A credential never chooses whom it is checked against: one read from a
    file (`fetched_from` None), or whose list is at another origin than the one the verifier
    asked, is refused, saying to name the issuer. Raises CredentialError for a credential that
    is no signed credential (steps "format" and "proof": asking anyone whom to trust would be
    moot), FetchError when no service vouches or the card cannot be fetched, AgentCardError
    when the card's signature does not hold."""
    from accord.identity.agent_cards import verify_card

    try:
        verify_credential(
            credential, trusted_issuers=frozenset(), now=datetime.now(UTC), status_lookup=None
        )
    except CredentialError as exc:
        if exc.step in (STEP_FORMAT, STEP_PROOF):
            raise
    urls = [url for url in status_list_urls(credential) if url.endswith(STATUS_LIST_PATH)]
    if not urls:
        raise FetchError(
            "the credential names no accord status list, so no service vouches for its "
            "issuer: name the issuer to trust with --issuer DID"
        )
    base = urls[0].removesuffix(STATUS_LIST_PATH)
    if fetched_from is None:
        raise FetchError(
            "a credential read from a file vouches for no issuer by itself: name the issuer "
            "to trust with --issuer DID, or verify it at its service's URL"
        )
    asked, listed = urlsplit(fetched_from), urlsplit(base)
    if (asked.scheme, asked.netloc) != (listed.scheme, listed.netloc):
        raise FetchError(
            f"the credential's status list is at {listed.scheme}://{listed.netloc}, not at the "
            f"service it was fetched from ({asked.scheme}://{asked.netloc}): name the issuer "
            "to trust with --issuer DID"
        )
    card = verify_card(fetch_json(base + CARD_PATH))
    return TrustedIssuer(card.did, f"the operator of {base}, as its signed card says")


def verify_outside(
    credential: Any,
    issuer: TrustedIssuer,
    *,
    holder: str | None = None,
    capability: str | None = None,
) -> VerifiedCredential:
    """The checklist against `issuer` only, its status list fetched where it names it.
    Raises CredentialError naming the first step that fails."""
    return verify_credential(
        credential,
        trusted_issuers={issuer.did},
        holder_did=holder,
        now=datetime.now(UTC),
        status_lookup=fetch_json,
        capability=capability,
    )
