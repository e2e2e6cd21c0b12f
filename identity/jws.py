"""JSON Web Signatures (RFC 7515) with Ed25519 keys named by did:key, payload detached.

This is the JWS that A2A agent cards carry (A2A v1.0 §8.4): the compact serialization
`BASE64URL(protected header) '.' BASE64URL(payload) '.' BASE64URL(signature)` with the payload
left out (RFC 7515 Appendix F), so the text is `protected..signature` and the verifier brings
the payload itself (for a card, its RFC 8785 canonical form).

    sign_detached(payload, signer)      -> "eyJ…..sig"   alg EdDSA (RFC 8037), kid the
                                                           signer's did:key verification method
    verify_detached(jws, payload)       -> JwsHeader     the header, once the signature holds
    split_detached(jws)                 -> (protected, signature)
    join_detached(protected, signature) -> jws           (a card signature's two fields)

Verification is a checklist; the first step that fails raises JwsError naming it:

    (1) the text is `protected..signature` (three parts, the payload part empty)
    (2) the protected header is base64url of one JSON object
    (3) `alg` is EdDSA (never `none`, never an HMAC a public key could be abused as)
    (4) no `crit` parameter (none is understood, so any listed one must be refused), no `b64`
    (5) `kid` is a did:key verification method, `did:key:z…#z…`, whose fragment is its key
    (6) the signature, 64 bytes, verifies under that key over `protected '.' BASE64URL(payload)`

The header is written in canonical JSON (RFC 8785), so the same signer, header and payload
always give the same text. Keys are Ed25519 through PyNaCl (`accord.ledger.signing`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accord.identity.errors import JwsError
from accord.ledger.canonical import canonical_json
from accord.ledger.errors import LedgerError, MalformedError
from accord.ledger.signing import Signer, b64url, from_b64url, kid_for, public_key_from_did
from accord.ledger.signing import verify_signature as verify_ed25519

ALGORITHM = "EdDSA"
TYPE = "JOSE"
#: Header parameters the signer may not set through `extra` (they are set here).
RESERVED = frozenset({"alg", "kid", "crit", "b64"})
MAX_HEADER_CHARS = 4096


@dataclass(frozen=True)
class JwsHeader:
    """A verified protected header: its algorithm, key id, the DID that key belongs to, and
    every parameter as sent."""

    alg: str
    kid: str
    did: str
    parameters: Mapping[str, Any]


def sign_detached(payload: bytes, signer: Signer, *, extra: Mapping[str, Any] | None = None) -> str:
    """The detached compact JWS of `payload` by `signer`: `protected..signature`.

    The protected header is `{"alg": "EdDSA", "kid": signer.kid, "typ": "JOSE"}` plus `extra`
    (e.g. `jku`). Raises ValueError when `extra` sets alg, kid, crit or b64, and
    CanonicalizationError (a LedgerError) when it holds something JSON cannot carry.
    """
    extra = dict(extra or {})
    clash = RESERVED & set(extra)
    if clash:
        raise ValueError(f"header parameters {sorted(clash)} are set by the signer, not extra")
    header = {"typ": TYPE, **extra, "alg": ALGORITHM, "kid": signer.kid}
    protected = b64url(canonical_json(header))
    signature = signer.sign(_signing_input(protected, payload))
    return f"{protected}..{b64url(signature)}"


def split_detached(jws: str) -> tuple[str, str]:
    """The protected header and signature parts of a detached compact JWS.

    Raises JwsError unless `jws` is `protected..signature` (step 1).
    """
    if not isinstance(jws, str):
        raise JwsError("(1) a JWS is text")
    parts = jws.split(".")
    if len(parts) != 3:
        raise JwsError(f"(1) a compact JWS has three parts separated by '.', not {len(parts)}")
    protected, payload, signature = parts
    if payload:
        raise JwsError("(1) the JWS carries its payload; a detached JWS leaves it out")
    if not protected or not signature:
        raise JwsError("(1) the JWS has an empty header or signature part")
    return protected, signature


def join_detached(protected: str, signature: str) -> str:
    """The detached compact JWS of a signature held as its two parts (as an A2A card holds it)."""
    return f"{protected}..{signature}"


def read_header(protected: str) -> dict[str, Any]:
    """The JSON object a protected header part encodes (step 2).

    Raises JwsError when it is not base64url of one JSON object.
    """
    if len(protected) > MAX_HEADER_CHARS:
        raise JwsError(f"(2) the protected header is longer than {MAX_HEADER_CHARS} characters")
    try:
        header = json.loads(from_b64url(protected).decode("utf-8"))
    except (MalformedError, UnicodeDecodeError, ValueError) as exc:
        raise JwsError(f"(2) the protected header is not base64url JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise JwsError("(2) the protected header is not a JSON object")
    return header


def did_of_kid(kid: object) -> str:
    """The did:key a verification method id names (step 5).

    Raises JwsError unless `kid` is `did:key:z…#z…` with the DID's own key as its fragment.
    """
    if not isinstance(kid, str) or "#" not in kid:
        raise JwsError(f"(5) kid {kid!r} is not a did:key verification method (did:key:z…#z…)")
    did = kid.split("#", 1)[0]
    try:
        public_key_from_did(did)
    except MalformedError as exc:
        raise JwsError(f"(5) kid {kid!r} does not name an Ed25519 did:key: {exc}") from exc
    if kid != kid_for(did):
        raise JwsError(f"(5) kid {kid!r} is not the verification method of {did}")
    return did


def verify_detached(jws: str, payload: bytes) -> JwsHeader:
    """Check a detached compact JWS over `payload`; returns its verified header.

    Raises JwsError naming the first step of the checklist (module docstring) that fails.
    """
    protected, signature = split_detached(jws)  # (1)
    header = read_header(protected)  # (2)
    # (3): the algorithm, from an allow-list of one
    alg = header.get("alg")
    if alg != ALGORITHM:
        raise JwsError(f"(3) alg {alg!r} is not accepted (only {ALGORITHM})")
    # (4): nothing this verifier would have to understand and does not
    if "crit" in header:
        raise JwsError(f"(4) critical header parameters {header['crit']!r} are not understood")
    if "b64" in header:
        raise JwsError("(4) the b64 header parameter (RFC 7797) is not supported")
    # (5): the key, from the DID itself
    did = did_of_kid(header.get("kid"))
    # (6): the signature
    try:
        raw = from_b64url(signature)
    except MalformedError as exc:
        raise JwsError(f"(6) the signature is not base64url: {exc}") from exc
    try:
        verify_ed25519(did, _signing_input(protected, payload), raw)
    except LedgerError as exc:
        raise JwsError(f"(6) the signature does not verify for {did}: {exc}") from exc
    return JwsHeader(ALGORITHM, str(header["kid"]), did, header)


def _signing_input(protected: str, payload: bytes) -> bytes:
    """RFC 7515 §5.1 step 5: ASCII(protected '.' BASE64URL(payload))."""
    return f"{protected}.{b64url(payload)}".encode("ascii")


__all__ = [
    "ALGORITHM",
    "JwsHeader",
    "did_of_kid",
    "join_detached",
    "read_header",
    "sign_detached",
    "split_detached",
    "verify_detached",
]
