"""Signed requests (RFC 9421 HTTP Message Signatures, Ed25519 by a did:key, with an RFC 9530
`Content-Digest` of the body), both ways:

    to accord     every mutating request an agent, a requester or any client sends the
                  service, signed by its caller, tag "accord" (`verify_request`, checked by
                  `accord.api.routes.deps.signed_caller`)
    from accord   every call accord makes to an agent (exam items, team work, `/sign`, a
                  notice), signed by the operator, tag "accord-call" (`verify_accord_call`,
                  checked by the agent)

The tag is a signed parameter, so a signature made for one direction is never accepted in the
other. What accord asks of a signature (any RFC 9421 implementation can make one):

    Signature-Input: accord=("@method" "@target-uri" "@authority" "content-digest"
                     "content-type");created=1735689600;expires=1735689900;
                     nonce="…";keyid="did:key:z6Mk…";alg="ed25519";tag="accord"
    Signature:       accord=:<64-byte Ed25519 signature, base64>:
    Content-Digest:  sha-256=:<SHA-256 of the body, base64>:

- covered: `@method`, `@target-uri` and `@authority` always; `content-digest` whenever there is
  a body (sha-256, or sha-512) or the field is sent; `content-type` whenever it is sent;
  other components may be covered too, as plain names;
- parameters: `tag` "accord" or "accord-call" (it selects the signature; the label is free),
  `keyid` the signer's did:key (Ed25519), `created` within ±`window` of the verifier's clock,
  a `nonce` of 16 to 128 characters from `[A-Za-z0-9._~+/=-]`, `alg` "ed25519" if present,
  `expires` if present in the future;
- `@authority` and `@target-uri` are those of the verifier as it is addressed: the request's
  Host, or the public URL it is configured with behind a proxy (a request signed for another
  host or path is refused).

A nonce is remembered (with its `created`) for as long as it could still be accepted, so a
replay inside the window is refused and a replay after it is refused as expired.

`sign_request` makes the headers (`accord.identity.http_auth.AccordAuth` signs every request of an
httpx client), `verify_request` checks one; failures raise one `AuthError` subclass per cause:

    AuthError
    ├── MissingSignature     no Signature-Input / Signature with the expected tag
    ├── MalformedSignature   not structured fields, a parameter or a covered component missing
    ├── UnknownKey           keyid not an Ed25519 did:key, or alg not "ed25519"
    ├── UntrustedSigner      keyid a did:key, but not the one trusted (accord's calls: the operator)
    ├── ExpiredSignature     created outside the window, or expires passed
    ├── BadSignature         the signature does not verify over this request
    ├── WrongAuthority       it verifies, but for another host than this service
    ├── BadDigest            the body does not match the signed Content-Digest
    └── ReplayedNonce        the nonce was already used by this did:key

Pure: no I/O; the clock (`time.time`) and a random nonce are read only when not given.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from accord.identity.structured_fields import (
    BareItem,
    Item,
    Member,
    StructuredFieldError,
    Token,
    parse_dictionary,
    serialize_bare_item,
    serialize_dictionary,
    serialize_member,
)
from accord.ledger.errors import AccordError, MalformedError, SignatureError
from accord.ledger.signing import Signer, b64url, public_key_from_did, verify_signature

SIGNATURE_INPUT_HEADER = "Signature-Input"
SIGNATURE_HEADER = "Signature"
CONTENT_DIGEST_HEADER = "Content-Digest"
TAG = "accord"
"""The `tag` parameter of a request signed for the accord service (by its caller)."""
CALL_TAG = "accord-call"
"""The `tag` parameter of a call accord makes to an agent (signed by the operator)."""
LABEL = "accord"
"""The label `sign_request` writes for tag "accord" (for another tag, the tag itself; any label
is accepted: the tag selects the signature)."""
ALGORITHM = "ed25519"
AUTH_SCHEME = "Signature"
"""The scheme named in `WWW-Authenticate` on a 401."""
DEFAULT_WINDOW = 300.0
REQUIRED_COMPONENTS = ("@method", "@target-uri", "@authority")
PARAMETERS = ("created", "expires", "nonce", "keyid", "alg", "tag")

_NONCE = re.compile(r"^[A-Za-z0-9._~+/=-]{16,128}$")
_DIGESTS: dict[str, Callable[[bytes], Any]] = {
    "sha-256": hashlib.sha256,
    "sha-512": hashlib.sha512,
}
_DEFAULT_PORTS = {"http": "80", "https": "443"}
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%!$&'()*+,;=-]+)(?::([0-9]*))?$")


class AuthError(AccordError):
    """A request is not signed, or its signature, key, time, host, digest or nonce does not
    hold. Every subclass's message is one line saying what to do."""


class MissingSignature(AuthError):
    """No `Signature-Input` and `Signature` pair with the expected tag ("accord" for a request
    to the service, "accord-call" for accord's call to an agent)."""


class MalformedSignature(AuthError):
    """The signature fields are not RFC 8941 dictionaries, or a parameter or a required
    covered component is missing or of the wrong type."""


class UnknownKey(AuthError):
    """The `keyid` is not an Ed25519 did:key, or `alg` is not "ed25519"."""


class UntrustedSigner(AuthError):
    """The `keyid` is a did:key, but not the one the verifier trusts (for a call from accord:
    not the operator's). `signer` is the did:key that signed."""

    def __init__(self, message: str, signer: str) -> None:
        super().__init__(message)
        self.signer = signer


class ExpiredSignature(AuthError):
    """`created` is outside the window around the service's clock, or `expires` has passed."""


class BadSignature(AuthError):
    """The signature does not verify over this request as the service received it."""


class WrongAuthority(AuthError):
    """The signature verifies, but for another host than the one this service serves."""


class BadDigest(AuthError):
    """The body does not match the signed `Content-Digest`, or a body is not covered by one."""


class ReplayedNonce(AuthError):
    """This did:key already used this nonce inside the window."""


# -- the request as RFC 9421 sees it -------------------------------------------------------------


def normalize_authority(host: str, scheme: str) -> str:
    """`host[:port]` as RFC 9421's `@authority`: lower case, without the scheme's default port.

    Raises ValueError when `host` is not a URI host with an optional numeric port.
    """
    found = _HOST.match(host.strip())
    if found is None:
        raise ValueError(f"{host!r} is not a host name with an optional port")
    name, port = found.group(1).lower(), found.group(2)
    if port is not None and not port:
        raise ValueError(f"{host!r} names an empty port")
    if port is None or port.lstrip("0") == _DEFAULT_PORTS.get(scheme.lower()):
        return name
    return f"{name}:{port}"


@dataclass(frozen=True)
class Target:
    """Where a request goes: `scheme://authority` + `path` (as sent, percent-encoded) and the
    query (None when the URL has no '?')."""

    scheme: str
    authority: str
    path: str
    query: str | None = None

    @classmethod
    def from_url(cls, url: str) -> Target:
        """The target of an absolute `http(s)://host[:port]/path?query` URL (userinfo and
        fragment dropped). Raises ValueError for anything else."""
        scheme, sep, rest = url.partition("://")
        scheme = scheme.lower()
        if not sep or scheme not in _DEFAULT_PORTS:
            raise ValueError(f"{url!r} is not an absolute http(s) URL")
        rest = rest.partition("#")[0]
        end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
        authority, path_query = rest[:end].rpartition("@")[2], rest[end:]
        path, question, query = path_query.partition("?")
        return cls(
            scheme, normalize_authority(authority, scheme), path, query if question else None
        )

    @property
    def uri(self) -> str:
        """`@target-uri`: the absolute URI, the path "/" when empty."""
        query = "" if self.query is None else "?" + self.query
        return f"{self.scheme}://{self.authority}{self.path or '/'}{query}"


def _field_value(fields: Sequence[tuple[str, str]], name: str) -> str | None:
    """RFC 9421 §2.1: every line of field `name`, trimmed, joined by ", " (None if absent)."""
    values = [value.strip(" \t") for key, value in fields if key.lower() == name]
    return ", ".join(values) if values else None


def component_values(
    components: Sequence[str], method: str, target: Target, fields: Sequence[tuple[str, str]]
) -> dict[str, str]:
    """Each covered component's value in this request (RFC 9421 §2.1, §2.2).

    Raises MalformedSignature for a derived component accord does not resolve, a covered field
    the request lacks, or a value that cannot be signed (not ASCII, a line break).
    """
    derived = {
        "@method": method,
        "@target-uri": target.uri,
        "@authority": target.authority,
        "@scheme": target.scheme,
        "@request-target": (target.path or "/")
        + ("" if target.query is None else "?" + target.query),
        "@path": target.path or "/",
        "@query": "?" + (target.query or ""),
    }
    values: dict[str, str] = {}
    for name in components:
        if name.startswith("@"):
            if name not in derived:
                raise MalformedSignature(
                    f"the signature covers {name}, which accord does not resolve: cover "
                    f"{', '.join(derived)} or header fields"
                )
            value = derived[name]
        else:
            sent = _field_value(fields, name)
            if sent is None:
                raise MalformedSignature(
                    f"the signature covers the header {name}, which the request does not carry"
                )
            value = sent
        if not value.isascii() or not value.isprintable():
            raise MalformedSignature(f"the value of {name} cannot be signed: printable ASCII only")
        values[name] = value
    return values


def signature_base(components: Sequence[str], values: Mapping[str, str], params: Member) -> bytes:
    """RFC 9421 §2.5: one `"name": value` line per covered component, then
    `"@signature-params"` — the inner list of components with `params`' parameters."""
    lines = [f"{serialize_bare_item(name)}: {values[name]}" for name in components]
    lines.append(f'"@signature-params": {serialize_member(params)}')
    return "\n".join(lines).encode("ascii")


def content_digest(body: bytes) -> str:
    """RFC 9530 `Content-Digest` of `body`: `sha-256=:<base64>:`."""
    return serialize_dictionary({"sha-256": Member(hashlib.sha256(body).digest())})


def check_content_digest(value: str, body: bytes) -> None:
    """The body matches every sha-256 and sha-512 member of `Content-Digest` (others are
    ignored, RFC 9530 §2). Raises BadDigest otherwise, or when there is neither."""
    try:
        members = parse_dictionary(value)
    except StructuredFieldError as exc:
        raise BadDigest(f"Content-Digest is not a structured dictionary ({exc})") from exc
    known = {name: member for name, member in members.items() if name in _DIGESTS}
    if not known:
        raise BadDigest("Content-Digest has no sha-256 member: send sha-256=:<base64>: of the body")
    for name, member in known.items():
        if not isinstance(member.value, bytes):
            raise BadDigest(f"the {name} member of Content-Digest is not a byte sequence")
        if not hmac.compare_digest(member.value, _DIGESTS[name](body).digest()):
            raise BadDigest(
                f"the body does not match its Content-Digest ({name}): it changed after "
                "signing; sign the body that is sent"
            )


# -- signing ---------------------------------------------------------------------------------


def sign_request(
    signer: Signer,
    method: str,
    url: str,
    body: bytes = b"",
    *,
    content_type: str | None = None,
    created: int | None = None,
    nonce: str | None = None,
    lifetime: float = DEFAULT_WINDOW,
    tag: str = TAG,
) -> dict[str, str]:
    """The headers that sign `method url` with `body` as `signer` (RFC 9421, tag `tag`:
    "accord" for a request to the service, `CALL_TAG` for accord's call to an agent).

    `url` is absolute, as the request is sent (scheme, host, path and query). Returned:
    `Content-Type` (when given; it is covered), `Content-Digest` (when there is a body),
    `Signature-Input` and `Signature`. `expires` is `created + lifetime`.
    Raises ValueError when `url` is not an absolute http(s) URL.
    """
    target = Target.from_url(url)
    stamp = int(time.time()) if created is None else created
    headers: dict[str, str] = {}
    components = list(REQUIRED_COMPONENTS)
    if body:
        headers[CONTENT_DIGEST_HEADER] = content_digest(body)
        components.append("content-digest")
    if content_type is not None:
        headers["Content-Type"] = content_type
        components.append("content-type")
    params: dict[str, BareItem] = {
        "created": stamp,
        "expires": stamp + math.ceil(lifetime),
        "nonce": nonce or b64url(secrets.token_bytes(18)),
        "keyid": signer.did,
        "alg": ALGORITHM,
        "tag": tag,
    }
    covered = Member([Item(name) for name in components], params)
    fields = [(name.lower(), value) for name, value in headers.items()]
    values = component_values(components, method.upper(), target, fields)
    signature = signer.sign(signature_base(components, values, covered))
    label = _label(tag)
    headers[SIGNATURE_INPUT_HEADER] = serialize_dictionary({label: covered})
    headers[SIGNATURE_HEADER] = serialize_dictionary({label: Member(signature)})
    return headers


def _label(tag: str) -> str:
    return LABEL if tag == TAG else tag


def accept_signature(tag: str = TAG) -> str:
    """RFC 9421 §5.1 `Accept-Signature`: the signature asked for with tag `tag` (sent with a
    401)."""
    components = [*REQUIRED_COMPONENTS, "content-digest", "content-type"]
    params: dict[str, BareItem] = {
        "created": True,
        "expires": True,
        "nonce": True,
        "keyid": True,
        "alg": ALGORITHM,
        "tag": tag,
    }
    members = {_label(tag): Member([Item(name) for name in components], params)}
    return serialize_dictionary(members)


def challenge_headers(tag: str = TAG) -> dict[str, str]:
    """`WWW-Authenticate` and `Accept-Signature` for a 401 (asking for tag `tag`)."""
    return {
        "WWW-Authenticate": f'{AUTH_SCHEME} tag="{tag}", alg="{ALGORITHM}"',
        "Accept-Signature": accept_signature(tag),
    }


class RequestNonces(Protocol):
    def use(self, did: str, nonce: str, timestamp: float, now: float) -> bool:
        """Record the nonce; False when this DID already used it (a replay)."""
        ...


class NonceMemory:
    """Nonces seen per DID with their timestamps, forgotten once they fall out of the window.

    In one process only; `SqlRequestNonces` is what a service with several workers uses.
    """

    def __init__(self, window: float = DEFAULT_WINDOW) -> None:
        self.window = window
        self._seen: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._next_purge = 0.0

    def use(self, did: str, nonce: str, timestamp: float, now: float) -> bool:
        """Record the nonce; False when this DID already used it (a replay)."""
        with self._lock:
            if now >= self._next_purge:
                horizon = now - 2 * self.window
                self._seen = {k: t for k, t in self._seen.items() if t >= horizon}
                self._next_purge = now + self.window / 10
            key = (did, nonce)
            if key in self._seen:
                return False
            self._seen[key] = timestamp
            return True

    def __len__(self) -> int:
        return len(self._seen)


# -- verifying -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Selected:
    keyid: str
    created: int
    expires: int | None
    nonce: str
    covered: Member
    components: list[str]
    signature: bytes


def _select(fields: Sequence[tuple[str, str]], tag: str) -> tuple[Member, bytes]:
    inputs_text = _field_value(fields, "signature-input")
    signatures_text = _field_value(fields, "signature")
    if inputs_text is None or signatures_text is None:
        who = "every mutating request" if tag == TAG else "the request"
        raise MissingSignature(
            "the request is not signed: it lacks the Signature-Input and Signature headers; sign "
            f'{who} with RFC 9421 (tag "{tag}", alg "{ALGORITHM}", keyid your did:key), e.g. '
            "accord.identity.http_auth.AccordAuth"
        )
    try:
        inputs = parse_dictionary(inputs_text)
        signatures = parse_dictionary(signatures_text)
    except StructuredFieldError as exc:
        raise MalformedSignature(
            f"Signature-Input or Signature is not a structured dictionary (RFC 8941): {exc}"
        ) from exc
    ours = [
        label
        for label, member in inputs.items()
        if member.is_inner_list
        and type(member.params.get("tag")) is str
        and member.params.get("tag") == tag
    ]
    if not ours:
        raise MissingSignature(
            f'the request carries no signature tagged "{tag}": add tag="{tag}" to its '
            "Signature-Input parameters"
        )
    if len(ours) > 1:
        raise MalformedSignature(f'the request carries {len(ours)} signatures tagged "{tag}"')
    label = ours[0]
    signature = signatures.get(label)
    if signature is None or not isinstance(signature.value, bytes) or signature.is_inner_list:
        raise MalformedSignature(
            f"the Signature header has no byte sequence labelled {label}, as Signature-Input has"
        )
    return inputs[label], signature.value


def _parameters(covered: Member, signature: bytes) -> _Selected:
    params = covered.params
    for name in params:
        if name not in PARAMETERS:
            raise MalformedSignature(
                f"unknown signature parameter {name!r}: accord reads {', '.join(PARAMETERS)}"
            )

    def text(name: str) -> str | None:
        value = params.get(name)
        if value is not None and (type(value) is not str):
            raise MalformedSignature(f"the signature parameter {name} must be a string")
        return value

    def integer(name: str) -> int | None:
        value = params.get(name)
        if value is not None and type(value) is not int:
            raise MalformedSignature(f"the signature parameter {name} must be an integer")
        return value

    alg = params.get("alg")
    if alg is not None and alg != ALGORITHM:
        raise UnknownKey(
            f"the signature's alg is {serialize_bare_item(alg)}: accord verifies "
            f'alg="{ALGORITHM}" by the did:key in keyid'
        )
    keyid, nonce, created = text("keyid"), text("nonce"), integer("created")
    if keyid is None:
        raise MalformedSignature("the signature has no keyid: set it to your did:key")
    try:
        public_key_from_did(keyid)
    except MalformedError as exc:
        raise UnknownKey(
            f"the keyid {keyid!r} is not an Ed25519 did:key: set keyid to your did:key ({exc})"
        ) from exc
    if created is None:
        raise MalformedSignature("the signature has no created time: set created (Unix seconds)")
    if nonce is None or not _NONCE.fullmatch(nonce):
        raise MalformedSignature(
            "the signature needs a nonce of 16 to 128 characters from [A-Za-z0-9._~+/=-], "
            "never used twice"
        )
    components: list[str] = []
    for item in covered.value if isinstance(covered.value, list) else ():
        component = item.value
        if not isinstance(component, str) or isinstance(component, Token) or item.params:
            raise MalformedSignature(
                f"the covered component {serialize_bare_item(item.value)} is not supported: "
                "cover plain lower-case names"
            )
        if component != component.lower():
            raise MalformedSignature(f"the covered component {component!r} is not lower case")
        if component in components:
            raise MalformedSignature(f"the signature covers {component} twice")
        components.append(component)
    return _Selected(keyid, created, integer("expires"), nonce, covered, components, signature)


def _check_coverage(selected: _Selected, fields: Sequence[tuple[str, str]], body: bytes) -> None:
    needed = list(REQUIRED_COMPONENTS)
    if body or _field_value(fields, "content-digest") is not None:
        needed.append("content-digest")
    if _field_value(fields, "content-type") is not None:
        needed.append("content-type")
    missing = [name for name in needed if name not in selected.components]
    if "content-digest" in missing and _field_value(fields, "content-digest") is None:
        raise BadDigest(
            "the request has a body but no Content-Digest: send Content-Digest "
            "(sha-256, RFC 9530) and cover it in the signature"
        )
    if missing:
        raise MalformedSignature(
            f"the signature does not cover {', '.join(missing)}: accord requires "
            f"{', '.join(REQUIRED_COMPONENTS)}, and content-digest and content-type when sent"
        )


def verify_request(
    method: str,
    target: Target,
    fields: Sequence[tuple[str, str]],
    body: bytes,
    *,
    nonces: RequestNonces,
    now: float | None = None,
    window: float = DEFAULT_WINDOW,
    received: Target | None = None,
    tag: str = TAG,
    trusted: str | None = None,
) -> str:
    """The did:key that signed this request, once its RFC 9421 signature holds.

    `target` is the service as clients address it (its own scheme and authority, and the
    request's path and query); `fields` the request's header lines as received; `received`
    the target as the request itself names it (its scheme and Host) when that may differ
    (a service behind a proxy), to say so when a request was signed for another host.
    `tag` selects the signature (default "accord": a request to the service); `trusted`, when
    given, is the one did:key whose signature is accepted.
    Raises the `AuthError` subclass of the first check that fails (see the module docstring).
    """
    # (1) the signature with this tag, its parameters and covered components
    covered, signature = _select(fields, tag)
    selected = _parameters(covered, signature)
    _check_coverage(selected, fields, body)
    # (1b) the signer, when only one is trusted
    if trusted is not None and selected.keyid != trusted:
        raise UntrustedSigner(
            f"the request is signed by {selected.keyid}, but only {trusted} is trusted here",
            selected.keyid,
        )
    # (2) the time window
    moment = time.time() if now is None else now
    if not abs(selected.created - moment) <= window:
        raise ExpiredSignature(
            f"the request was signed at {selected.created}, more than {int(window)} s from the "
            f"service's clock ({int(moment)}): sign it again with the current time"
        )
    if selected.expires is not None and selected.expires <= moment:
        raise ExpiredSignature(
            f"the signature expired at {selected.expires} (the service's clock: {int(moment)}): "
            "sign it again with the current time"
        )
    # (3) the signature over this request as this service is addressed
    if not _verifies(selected, method, target, fields):
        if (
            received is not None
            and received.authority != target.authority
            and _verifies(selected, method, received, fields)
        ):
            raise WrongAuthority(
                f"the request was signed for {received.authority}, but this service is "
                f"{target.authority}: sign it for {target.scheme}://{target.authority}"
            )
        raise BadSignature(
            f"the signature does not verify for {selected.keyid} over {method} {target.uri}: "
            "it was made for another host, method, target or header values, or another key"
        )
    # (4) the body against the signed digest
    if "content-digest" in selected.components:
        digest = _field_value(fields, "content-digest")
        assert digest is not None  # it resolved in (3)
        check_content_digest(digest, body)
    # (5) the nonce, once
    if not nonces.use(selected.keyid, selected.nonce, float(selected.created), moment):
        raise _replayed(selected.keyid, selected.nonce)
    return selected.keyid


def _replayed(did: str, nonce: str) -> ReplayedNonce:
    return ReplayedNonce(
        f"the nonce {nonce} was already used by {did}: a replay is refused; sign each request "
        "with a fresh nonce"
    )


class PendingNonce:
    """A `RequestNonces` for `verify_request` that keeps the nonce it is asked to use rather
    than using it, so that a service whose replay guard is a database can check the signature
    where it is (the event loop) and spend the nonce later, where it does its other database
    work (`spend`). The request is not verified until it is spent."""

    def __init__(self) -> None:
        self._asked: tuple[str, str, float, float] | None = None

    def use(self, did: str, nonce: str, timestamp: float, now: float) -> bool:
        self._asked = (did, nonce, timestamp, now)
        return True

    def spend(self, nonces: RequestNonces) -> None:
        """Use the kept nonce with `nonces`. Raises ReplayedNonce when its did:key used it
        already, and RuntimeError when `verify_request` never reached the nonce."""
        if self._asked is None:
            raise RuntimeError("no nonce to spend: the request's signature was not verified")
        did, nonce, timestamp, now = self._asked
        if not nonces.use(did, nonce, timestamp, now):
            raise _replayed(did, nonce)


def _verifies(
    selected: _Selected, method: str, target: Target, fields: Sequence[tuple[str, str]]
) -> bool:
    values = component_values(selected.components, method, target, fields)
    base = signature_base(selected.components, values, selected.covered)
    try:
        verify_signature(selected.keyid, base, selected.signature)
    except SignatureError:
        return False
    return True


# -- accord's calls to agents ----------------------------------------------------------------


def verify_accord_call(
    method: str,
    url: str,
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
    body: bytes,
    operator_did: str,
    nonces: RequestNonces,
    now: float | None = None,
    *,
    window: float = DEFAULT_WINDOW,
) -> str:
    """What an agent checks on a request that says it comes from accord: it is signed by the
    operator `operator_did` (RFC 9421, tag "accord-call", `CALL_TAG`) over this method, this
    URL, these headers and this body, within `window` seconds of `now` (default the clock),
    and its nonce is new to `nonces`. Returns the operator's did:key.

    `url` is the absolute URL the agent is addressed at, as accord calls it: the agent's own
    public origin (or the request's Host) with the request's path and query. `headers` are
    the request's header lines, as a mapping or as (name, value) pairs.

    Raises MissingSignature (unsigned, or signed only for another direction: a signature
    tagged "accord" is an agent's request to the service, never a call from it),
    UntrustedSigner (signed by a key other than the operator's), BadSignature (signed for
    another URL, method or body), ExpiredSignature, BadDigest, ReplayedNonce,
    MalformedSignature, UnknownKey: each an AuthError whose message says what failed.
    Raises ValueError when `url` is not an absolute http(s) URL.
    """
    target = Target.from_url(url)
    pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
    fields = [(str(name).lower(), str(value)) for name, value in pairs]
    return verify_request(
        method.upper(),
        target,
        fields,
        body,
        nonces=nonces,
        now=now,
        window=window,
        tag=CALL_TAG,
        trusted=operator_did,
    )
