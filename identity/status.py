"""W3C Bitstring Status List v1.0: revocation lists for accord's credentials.

A status list is a bitstring of at least 131,072 bits (16 KB, the spec's minimum, which gives
herd privacy). Bit `i` is the `i`-th bit counting from the left: index 0 is the most significant
bit of the first byte (spec §3.1 and §4, "the first index, with a value of zero, is located at
the left-most bit in the bitstring"). A set bit means the credential with that index has the
list's `statusPurpose` (for "revocation": it is revoked, and revocation is permanent).

`encodedList` (spec §2.2) is the multibase base64url form ('u' then unpadded base64url,
RFC 4648 §5) of the GZIP-compressed (RFC 1952) bitstring. Compression here writes `mtime=0` so
the same list always encodes to the same text.

The list lives in a `BitstringStatusListCredential` signed by the issuer with `eddsa-jcs-2022`;
a credential points to one bit with a `BitstringStatusListEntry`. Allocating indices is the
caller's job (the operator keeps a counter); nothing here holds state or reads a clock.

Also here: the RFC 3339 UTC timestamps that credentials and presentations carry, and the check
of a status entry against its status list credential (`check_status`), which is step
"revocation" of credential verification.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from accord.identity.dataintegrity import CRYPTOSUITE, PROOF_TYPE, add_proof, verify_proof
from accord.identity.errors import CredentialError, ProofFormatError
from accord.ledger.errors import MalformedError
from accord.ledger.signing import Ed25519Signer, public_key_from_did

VC_V2_CONTEXT = "https://www.w3.org/ns/credentials/v2"
"""The VC Data Model 2.0 context; it defines every Bitstring Status List term."""

STATUS_LIST_CREDENTIAL_TYPE = "BitstringStatusListCredential"
STATUS_LIST_TYPE = "BitstringStatusList"
STATUS_ENTRY_TYPE = "BitstringStatusListEntry"

MIN_BITS = 131_072
"""The spec's minimum bitstring length: 16 KB."""
MAX_BITS = 1 << 27
"""The longest list `decode` accepts (16 MiB), so a hostile `encodedList` cannot exhaust memory."""

MULTIBASE_BASE64URL = "u"
STEP = "revocation"
"""The `CredentialError.step` of every failure raised by `check_status`."""

PURPOSES = frozenset({"revocation", "suspension", "refresh", "message"})


# --- timestamps ---------------------------------------------------------------------------

_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?(?:Z|[+-][0-9]{2}:[0-9]{2})"
)


def format_timestamp(moment: datetime) -> str:
    """RFC 3339 UTC to the second, e.g. `2026-01-01T12:00:00Z` (fractions are dropped).

    Raises ValueError for a naive datetime.
    """
    _require_aware(moment)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(text: object) -> datetime:
    """The aware datetime of an RFC 3339 timestamp that carries its offset (`Z` or `±hh:mm`).

    Raises ValueError when `text` is not such a string or not a real date and time.
    """
    if not isinstance(text, str) or _TIMESTAMP.fullmatch(text) is None:
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp with a time zone")
    return datetime.fromisoformat(text)


def _require_aware(moment: datetime) -> None:
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise ValueError("times must be timezone-aware datetimes")


# --- the bitstring ------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusList:
    """An immutable bitstring; `set` returns a new list.

    Raises ValueError (on construction) when `bits` is shorter than `MIN_BITS` or longer than
    `MAX_BITS`.
    """

    bits: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.bits, bytes):
            raise ValueError("a status list's bits are bytes")
        if not MIN_BITS <= len(self.bits) * 8 <= MAX_BITS:
            raise ValueError(
                f"a status list has between {MIN_BITS} and {MAX_BITS} bits, "
                f"not {len(self.bits) * 8}"
            )

    @classmethod
    def empty(cls, size: int = MIN_BITS) -> StatusList:
        """A list of `size` zero bits; raises ValueError unless `size` is a multiple of 8 in
        [MIN_BITS, MAX_BITS]."""
        if size % 8:
            raise ValueError(f"a status list's size is a multiple of 8, not {size}")
        return cls(bytes(size // 8))

    @property
    def size(self) -> int:
        """The number of bits."""
        return len(self.bits) * 8

    def get(self, index: int) -> bool:
        """Whether bit `index` is set. Raises IndexError outside [0, size)."""
        self._check_index(index)
        return bool(self.bits[index // 8] & (0x80 >> (index % 8)))

    def set(self, index: int, value: bool = True) -> StatusList:
        """A copy of this list with bit `index` set to `value`. Raises IndexError outside
        [0, size)."""
        self._check_index(index)
        changed = bytearray(self.bits)
        mask = 0x80 >> (index % 8)
        if value:
            changed[index // 8] |= mask
        else:
            changed[index // 8] &= ~mask & 0xFF
        return StatusList(bytes(changed))

    def encode(self) -> str:
        """The spec's `encodedList`: 'u' + unpadded base64url of GZIP(bits), deterministic."""
        compressed = gzip.compress(self.bits, compresslevel=9, mtime=0)
        return MULTIBASE_BASE64URL + base64.urlsafe_b64encode(compressed).rstrip(b"=").decode()

    @classmethod
    def decode(cls, encoded: object) -> StatusList:
        """The list an `encodedList` holds.

        Raises ProofFormatError when `encoded` is not multibase base64url ('u' prefix), not GZIP,
        or decompresses to fewer than `MIN_BITS` or more than `MAX_BITS` bits.
        """
        if not isinstance(encoded, str) or not encoded.startswith(MULTIBASE_BASE64URL):
            raise ProofFormatError("encodedList is not multibase base64url (it must start 'u')")
        body = encoded[len(MULTIBASE_BASE64URL) :]
        if "=" in body:
            raise ProofFormatError("encodedList must be unpadded base64url")
        try:
            compressed = base64.b64decode(
                body + "=" * (-len(body) % 4), altchars=b"-_", validate=True
            )
        except (binascii.Error, ValueError) as exc:
            raise ProofFormatError(f"encodedList is not base64url: {exc}") from exc
        bits = _gunzip(compressed, MAX_BITS // 8)
        if len(bits) * 8 < MIN_BITS:
            raise ProofFormatError(
                f"the status list has {len(bits) * 8} bits, fewer than the minimum {MIN_BITS}"
            )
        return cls(bits)

    def _check_index(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.size:
            raise IndexError(f"status list index {index!r} is outside [0, {self.size})")


def _gunzip(data: bytes, limit: int) -> bytes:
    """GZIP-decompress one member of at most `limit` bytes; raises ProofFormatError."""
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = decompressor.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ProofFormatError(f"encodedList is not GZIP data: {exc}") from exc
    if len(out) > limit:
        raise ProofFormatError(f"the status list is longer than {limit * 8} bits")
    if not decompressor.eof:
        raise ProofFormatError("encodedList holds truncated GZIP data")
    return out


# --- issuing ------------------------------------------------------------------------------


def status_entry(list_url: str, index: int, purpose: str = "revocation") -> dict[str, Any]:
    """The `credentialStatus` of a credential whose status is bit `index` of the list at
    `list_url`. `statusListIndex` is a decimal string, as the spec requires.

    Raises ValueError for a negative or non-integer index, an empty URL or an unknown purpose.
    """
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"a status list index is a non-negative integer, not {index!r}")
    _check_url_and_purpose(list_url, purpose)
    return {
        "id": f"{list_url}#{index}",
        "type": STATUS_ENTRY_TYPE,
        "statusPurpose": purpose,
        "statusListIndex": str(index),
        "statusListCredential": list_url,
    }


def status_list_credential(
    issuer: Ed25519Signer,
    list_url: str,
    status_list: StatusList,
    *,
    purpose: str = "revocation",
    now: datetime,
    valid_for: timedelta | None = None,
) -> dict[str, Any]:
    """A `BitstringStatusListCredential` for `status_list`, identified by `list_url` and signed
    by `issuer` (eddsa-jcs-2022, proof purpose `assertionMethod`, created `now`).

    `validFrom` is `now`; with `valid_for`, `validUntil` is `now + valid_for` (verifiers then
    refuse the list after that, which bounds how long a stale copy can hide a revocation).

    Raises ValueError for a naive `now`, a non-positive `valid_for`, an empty URL or an unknown
    purpose.
    """
    _require_aware(now)
    _check_url_and_purpose(list_url, purpose)
    document: dict[str, Any] = {
        "@context": [VC_V2_CONTEXT],
        "id": list_url,
        "type": ["VerifiableCredential", STATUS_LIST_CREDENTIAL_TYPE],
        "issuer": issuer.did,
        "validFrom": format_timestamp(now),
    }
    if valid_for is not None:
        if valid_for <= timedelta(0):
            raise ValueError("valid_for must be positive")
        document["validUntil"] = format_timestamp(now + valid_for)
    document["credentialSubject"] = {
        "id": f"{list_url}#list",
        "type": STATUS_LIST_TYPE,
        "statusPurpose": purpose,
        "encodedList": status_list.encode(),
    }
    return sign_assertion(document, issuer, now)


def sign_assertion(
    document: Mapping[str, Any], issuer: Ed25519Signer, now: datetime
) -> dict[str, Any]:
    """`document` with an eddsa-jcs-2022 `assertionMethod` proof by `issuer`, created `now`.

    Raises ValueError for a naive `now`, ProofFormatError when the document cannot be signed.
    """
    options = {
        "type": PROOF_TYPE,
        "cryptosuite": CRYPTOSUITE,
        "created": format_timestamp(now),
        "verificationMethod": issuer.kid,
        "proofPurpose": "assertionMethod",
    }
    return add_proof(document, issuer.seed, options)


def _check_url_and_purpose(list_url: str, purpose: str) -> None:
    if not isinstance(list_url, str) or not list_url or "#" in list_url:
        raise ValueError(f"a status list URL is a non-empty string without '#': {list_url!r}")
    if purpose not in PURPOSES:
        raise ValueError(f"status purpose {purpose!r} is not one of {sorted(PURPOSES)}")


# --- verifying ----------------------------------------------------------------------------


def verify_issuer_proof(document: Mapping[str, Any], issuer: str, step: str) -> None:
    """Check `document`'s eddsa-jcs-2022 `assertionMethod` proof by the key of `issuer`.

    The proof's `verificationMethod` must be a method of the issuer's did:key; the key comes from
    the DID itself. Raises CredentialError with `step`: "unsigned" when there is no proof, and
    the reason otherwise.

    A proof that held is remembered (`_PROVEN`): the check is a pure function of the document
    and the issuer, so the same document by the same issuer holds again (a credential at every
    bid of its holder, the status list at every credential checked against it). Revocation,
    validity and the rest of a checklist are not remembered here.
    """
    key = _proven_key(document, issuer)
    if key is not None and key in _PROVEN:
        return
    _verify_issuer_proof(document, issuer, step)
    if key is not None:
        if len(_PROVEN) >= _PROVEN_MAX:
            _PROVEN.clear()
        _PROVEN[key] = None


_PROVEN_MAX = 65536
_PROVEN: dict[bytes, None] = {}
"""SHA-256 of (issuer, document) of the proofs `verify_issuer_proof` found to hold; emptied
when full. A dict's single reads and writes are atomic, so threads share it without a lock."""


def _proven_key(document: Mapping[str, Any], issuer: str) -> bytes | None:
    """The key of `document` by `issuer` in `_PROVEN`: the SHA-256 of its JSON with sorted
    keys (one text per JSON value), or None for a document that has none (it is checked)."""
    try:
        text = json.dumps([issuer, document], sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _verify_issuer_proof(document: Mapping[str, Any], issuer: str, step: str) -> None:
    if "proof" not in document:
        raise CredentialError(step, "unsigned: the document has no proof")
    proof = document["proof"]
    method = proof.get("verificationMethod") if isinstance(proof, Mapping) else None
    if not isinstance(method, str) or method.partition("#")[0] != issuer:
        raise CredentialError(step, f"the proof's verificationMethod is not a key of {issuer}")
    try:
        key = public_key_from_did(issuer)
    except MalformedError as exc:
        raise CredentialError(step, f"cannot resolve the issuer's key: {exc}") from exc
    try:
        verify_proof(document, key, expected_purpose="assertionMethod")
    except CredentialError as exc:
        raise CredentialError(step, exc.reason) from exc
    except ProofFormatError as exc:
        raise CredentialError(step, str(exc)) from exc


def check_status(
    entry: Mapping[str, Any],
    *,
    issuer: str,
    now: datetime,
    status_lookup: Callable[[str], Mapping[str, Any]],
) -> None:
    """Check one `BitstringStatusListEntry` of a credential issued by `issuer` (spec §3.2).

    Fetches the list with `status_lookup(statusListCredential)`, then requires of it: a valid
    eddsa-jcs-2022 proof by `issuer` itself (a list signed by anyone else is refused), the
    `id` the entry names, the `BitstringStatusListCredential` type, validity at `now`, a
    `BitstringStatusList` subject of the entry's `statusPurpose`, a decodable `encodedList` of
    at least `MIN_BITS` bits, and the index in range. Then reads the bit; a set bit fails.

    Raises CredentialError with step "revocation" for each of those, for a malformed entry, for a
    lookup that raises, and when the bit is set ("revoked" / "suspended" / "<purpose> bit set").
    Raises ValueError for a naive `now`.
    """
    _require_aware(now)
    list_url, index, purpose = _parse_entry(entry)
    try:
        found = status_lookup(list_url)
    except Exception as exc:  # fail closed: whatever the lookup raised, the status is unknown
        _fail(f"cannot fetch the status list {list_url}: {type(exc).__name__}: {exc}")
    if not isinstance(found, Mapping):
        _fail(f"the status list {list_url} is not a JSON object")
    try:
        verify_issuer_proof(found, issuer, STEP)
    except CredentialError as exc:
        _fail(f"status list credential {list_url}: {exc.reason}")
    status_list = _read_list_credential(found, list_url, issuer, purpose, now)
    if index >= status_list.size:
        _fail(f"statusListIndex {index} is beyond the list's {status_list.size} bits")
    if status_list.get(index):
        word = {"revocation": "revoked", "suspension": "suspended"}.get(purpose)
        _fail(word or f"the {purpose} bit is set")


def _parse_entry(entry: Mapping[str, Any]) -> tuple[str, int, str]:
    if not isinstance(entry, Mapping):
        _fail("the credentialStatus entry is not a JSON object")
    if entry.get("type") != STATUS_ENTRY_TYPE:
        _fail(f"unsupported credentialStatus type {entry.get('type')!r}")
    list_url = entry.get("statusListCredential")
    if not isinstance(list_url, str) or not list_url:
        _fail("the status entry has no statusListCredential URL")
    purpose = entry.get("statusPurpose")
    if purpose not in PURPOSES:
        _fail(f"unknown statusPurpose {purpose!r}")
    raw_index = entry.get("statusListIndex")
    if not isinstance(raw_index, str) or not re.fullmatch(r"0|[1-9][0-9]{0,15}", raw_index):
        _fail(f"statusListIndex {raw_index!r} is not a decimal string")
    if entry.get("statusSize", 1) != 1:
        _fail("only statusSize 1 is supported")
    return list_url, int(raw_index), str(purpose)


def _read_list_credential(
    found: Mapping[str, Any], list_url: str, issuer: str, purpose: str, now: datetime
) -> StatusList:
    issuer_field = found.get("issuer")
    found_issuer = issuer_field.get("id") if isinstance(issuer_field, Mapping) else issuer_field
    if found_issuer != issuer:
        _fail(f"the status list is issued by {found_issuer!r}, not the credential's issuer")
    if found.get("id") != list_url:
        _fail(f"the status list credential's id {found.get('id')!r} is not {list_url!r}")
    types = found.get("type")
    if not isinstance(types, list) or STATUS_LIST_CREDENTIAL_TYPE not in types:
        _fail(f"the document at {list_url} is not a {STATUS_LIST_CREDENTIAL_TYPE}")
    try:
        if "validFrom" in found and now < parse_timestamp(found["validFrom"]):
            _fail("the status list credential is not valid yet")
        if "validUntil" in found and now >= parse_timestamp(found["validUntil"]):
            _fail("the status list credential has expired")
    except ValueError as exc:
        _fail(f"the status list credential's validity: {exc}")
    subject = found.get("credentialSubject")
    if not isinstance(subject, Mapping) or subject.get("type") != STATUS_LIST_TYPE:
        _fail(f"the status list credential's subject is not a {STATUS_LIST_TYPE}")
    purposes = subject.get("statusPurpose")
    listed = purposes if isinstance(purposes, list) else [purposes]
    if purpose not in listed:
        _fail(f"the status list is for {purposes!r}, the entry for {purpose!r}")
    encoded = subject.get("encodedList")
    if isinstance(encoded, str) and (known := _DECODED.get(encoded)) is not None:
        return known
    try:
        decoded = StatusList.decode(encoded)
    except ProofFormatError as exc:
        _fail(f"encodedList: {exc}")
    if len(_DECODED) >= _DECODED_MAX:
        _DECODED.clear()
    _DECODED[str(encoded)] = decoded
    return decoded


_DECODED_MAX = 64
_DECODED: dict[str, StatusList] = {}
"""The lists `encodedList` texts decode to (immutable), so a list read once is not unzipped
again for every credential checked against it; emptied when full."""


def _fail(reason: str) -> NoReturn:
    raise CredentialError(STEP, reason)
