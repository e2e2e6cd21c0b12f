"""The event envelope and the signed entry, exactly as DESIGN.md draws them.

    event = {v, kind, actor, seq, at, subject, body}
    entry = {event, kid, sig}          sig = Ed25519 over JCS(event), base64url
    leaf data = JCS(entry)

JCS is compositional, so JCS(entry) is built from JCS(event) without canonicalizing twice,
and an entry read back is checked to be canonical, so one entry has exactly one byte form.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from accord.ledger.canonical import (
    MAX_SAFE_INTEGER,
    JSONValue,
    canonical_json,
    canonical_text,
    parse_canonical,
)
from accord.ledger.errors import MalformedError, SignatureError
from accord.ledger.signing import (
    SIGNATURE_SIZE,
    Signer,
    b64url,
    from_b64url,
    kid_for,
    public_key_from_did,
    verify_signature,
)

EVENT_VERSION = 1
KIND_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
MAX_SUBJECT_LENGTH = 512
_EVENT_KEYS = frozenset({"v", "kind", "actor", "seq", "at", "subject", "body"})
_ENTRY_KEYS = frozenset({"event", "kid", "sig"})


_TIME_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def format_time(moment: datetime) -> str:
    """RFC 3339 UTC with milliseconds, e.g. 2026-11-29T14:00:00.000Z.

    Raises ValueError for a naive datetime.
    """
    if moment.tzinfo is None:
        raise ValueError("a timestamp must carry its time zone")
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """Inverse of `format_time`; raises MalformedError on anything else."""
    if not isinstance(text, str) or not _TIME_PATTERN.fullmatch(text):
        raise MalformedError(f"{text!r} is not a UTC time like 2026-01-01T00:00:00.000Z")
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise MalformedError(f"{text!r} is not a real date and time") from exc


@dataclass(frozen=True)
class Event:
    """One action, by one DID. Validated on construction; raises MalformedError."""

    kind: str
    actor: str
    seq: int
    at: str
    subject: str
    body: Mapping[str, JSONValue] = field(hash=False)
    v: int = EVENT_VERSION

    def __post_init__(self) -> None:
        # exactly the int 1: `true` equals 1 too, and would be signed as the version
        if type(self.v) is not int or self.v != EVENT_VERSION:
            raise MalformedError(f"event version {self.v!r} is not {EVENT_VERSION}")
        if not isinstance(self.kind, str) or not KIND_PATTERN.fullmatch(self.kind):
            raise MalformedError(
                f"event kind {self.kind!r} must be dotted lower-case words, like 'task.posted'"
            )
        if not isinstance(self.actor, str):
            raise MalformedError("event actor must be a did:key string")
        public_key_from_did(self.actor)
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 0:
            raise MalformedError(f"event seq must be a non-negative integer, not {self.seq!r}")
        if not isinstance(self.at, str):
            raise MalformedError("event time must be a string")
        parse_time(self.at)
        if not isinstance(self.subject, str) or len(self.subject) > MAX_SUBJECT_LENGTH:
            raise MalformedError(f"event subject must be a string of at most {MAX_SUBJECT_LENGTH}")
        if not isinstance(self.body, Mapping):
            raise MalformedError("event body must be a JSON object")

    def to_json(self) -> dict[str, JSONValue]:
        return {
            "v": self.v,
            "kind": self.kind,
            "actor": self.actor,
            "seq": self.seq,
            "at": self.at,
            "subject": self.subject,
            "body": dict(self.body),
        }

    def canonical(self) -> bytes:
        """JCS(event): the signed bytes. Raises CanonicalizationError for a body JSON can't hold.

        Built member by member, as JCS composes: the envelope's keys are fixed and ASCII, so
        their order is known (actor < at < body < kind < seq < subject < v), and each value
        is canonicalized alone (`canonical_json(self.to_json())` gives the same bytes, at
        twice the cost: it walks the whole envelope to check it before encoding it).
        """
        if self.seq > MAX_SAFE_INTEGER:
            return canonical_json(self.to_json())  # raises, naming the problem
        return b"".join(
            (
                b'{"actor":',
                canonical_text(self.actor),
                b',"at":',
                canonical_text(self.at),
                b',"body":',
                canonical_json(dict(self.body)),
                b',"kind":',
                canonical_text(self.kind),
                b',"seq":',
                str(self.seq).encode(),
                b',"subject":',
                canonical_text(self.subject),
                b',"v":',
                str(self.v).encode(),
                b"}",
            )
        )

    @classmethod
    def from_json(cls, value: JSONValue) -> Event:
        """Raises MalformedError unless `value` is exactly an event object."""
        if not isinstance(value, dict) or set(value) != _EVENT_KEYS:
            raise MalformedError(f"an event has exactly the fields {sorted(_EVENT_KEYS)}")
        return cls(
            kind=value["kind"],
            actor=value["actor"],
            seq=value["seq"],
            at=value["at"],
            subject=value["subject"],
            body=value["body"],
            v=value["v"],
        )


@dataclass(frozen=True)
class Entry:
    """A signed event: what one leaf of the log holds."""

    event: Event
    kid: str
    sig: bytes
    data: bytes = field(repr=False, compare=False)
    """JCS(entry), the leaf data; computed once."""
    event_bytes: bytes = field(repr=False, compare=False)
    """JCS(event), the signed bytes: a slice of `data`."""

    def verify(self) -> None:
        """Check that `kid` is the actor's key and `sig` signs JCS(event).

        Raises SignatureError.
        """
        if self.kid != kid_for(self.event.actor):
            raise SignatureError(f"key id {self.kid!r} is not the key of {self.event.actor}")
        verify_signature(self.event.actor, self.event_bytes, self.sig)

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event.to_json(), "kid": self.kid, "sig": b64url(self.sig)}

    @classmethod
    def from_bytes(cls, data: bytes) -> Entry:
        """Parse leaf data. Raises MalformedError unless it is one canonical entry."""
        value = parse_canonical(data)
        if not isinstance(value, dict) or set(value) != _ENTRY_KEYS:
            raise MalformedError(f"an entry has exactly the fields {sorted(_ENTRY_KEYS)}")
        if not isinstance(value["kid"], str):
            raise MalformedError("entry kid must be a string")
        sig = from_b64url(value["sig"])
        if len(sig) != SIGNATURE_SIZE:
            raise MalformedError(f"entry signature must be {SIGNATURE_SIZE} bytes")
        # Canonical form puts the event first and kid/sig (no escapes) last, so JCS(event) is
        # the slice between them.
        event_bytes = data[len(b'{"event":') : data.rindex(b',"kid":"')]
        return cls(Event.from_json(value["event"]), value["kid"], sig, data, event_bytes)


def entry_bytes(event_bytes: bytes, kid: str, sig: bytes) -> bytes:
    """JCS(entry) from JCS(event): keys sort as event < kid < sig, and kid and sig are ASCII
    with no characters JCS escapes (checked), so concatenation is the canonical form."""
    sig_text = b64url(sig)
    if not kid.isascii() or '"' in kid or "\\" in kid or not kid.isprintable():
        raise MalformedError(f"key id {kid!r} must be printable ASCII without quotes")
    return (
        b'{"event":'
        + event_bytes
        + b',"kid":"'
        + kid.encode()
        + b'","sig":"'
        + sig_text.encode()
        + b'"}'
    )


def sign_event(signer: Signer, event: Event) -> Entry:
    """Sign `event` as `signer`.

    Raises SignatureError when the signer is not the event's actor, CanonicalizationError when
    the body cannot be canonicalized.
    """
    if signer.did != event.actor:
        raise SignatureError(f"{signer.did} cannot sign an event whose actor is {event.actor}")
    event_bytes = event.canonical()
    sig = signer.sign(event_bytes)
    return Entry(event, signer.kid, sig, entry_bytes(event_bytes, signer.kid, sig), event_bytes)


def make_entry(
    signer: Signer,
    *,
    kind: str,
    seq: int,
    at: datetime,
    subject: str = "",
    body: Mapping[str, JSONValue] | None = None,
) -> Entry:
    """Build, validate and sign an event in one step (raises as `Event` and `sign_event`)."""
    event = Event(
        kind=kind,
        actor=signer.did,
        seq=seq,
        at=format_time(at),
        subject=subject,
        body=dict(body or {}),
    )
    return sign_event(signer, event)
