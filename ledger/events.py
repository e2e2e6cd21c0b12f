"""The event envelope and the signed entry, exactly as DESIGN.md draws them.

    event = {v, kind, actor, seq, at, subject, body}
    entry = {event, kid, sig}          sig = Ed25519 over JCS(event), base64url
    leaf data = JCS(entry)

JCS is compositional, so JCS(entry) is built from JCS(event) without canonicalizing twice,
and an entry read back is checked to be canonical, so one entry has exactly one byte form.

`sign_event` and `make_entry` here are the readable path: they build `Event` and `Entry` through
their constructors, so every check runs. The product signs through
`accord.ledger.fast_entries.make_entry`, a fenced speed path that checks once and skips the
dataclasses' `__init__`; tests/ledger/test_fast_entries.py holds it equal to `make_entry` here.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
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


# ASCII digits only (re.ASCII): `datetime.fromisoformat` refuses other digits anyway, and so a
# time that matches is plain ASCII that JCS writes as it is (`Event.canonical`).
_TIME_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$", re.ASCII)


def format_time(moment: datetime) -> str:
    """RFC 3339 UTC with milliseconds, e.g. 2026-11-29T14:00:00.000Z.

    Written from the UTC datetime's own fields, as `isoformat(timespec="milliseconds")` writes
    them (four-digit year, milliseconds truncated), for a third of its cost: a datetime's
    fields are in range by construction, so the text always matches `_TIME_PATTERN` and names
    a real time (`accord.ledger.fast_entries` relies on this).

    Raises ValueError for a naive datetime.
    """
    if moment.tzinfo is None:
        raise ValueError("a timestamp must carry its time zone")
    utc = moment.astimezone(UTC)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (  # noqa: UP031 (an f-string costs 70% more)
        utc.year,
        utc.month,
        utc.day,
        utc.hour,
        utc.minute,
        utc.second,
        utc.microsecond // 1000,
    )


def parse_time(text: str) -> datetime:
    """Inverse of `format_time`; raises MalformedError on anything else."""
    if not isinstance(text, str) or not _TIME_PATTERN.fullmatch(text):
        raise MalformedError(f"{text!r} is not a UTC time like 2026-01-01T00:00:00.000Z")
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise MalformedError(f"{text!r} is not a real date and time") from exc


def check_members(kind: str, actor: str, seq: int, subject: str, body: object) -> None:
    """The checks of an event's kind, actor, seq, subject and body (`Event` also checks its
    version and time). Raises MalformedError naming the first that is wrong."""
    if not isinstance(kind, str) or not KIND_PATTERN.fullmatch(kind):
        raise MalformedError(
            f"event kind {kind!r} must be dotted lower-case words, like 'task.posted'"
        )
    if not isinstance(actor, str):
        raise MalformedError("event actor must be a did:key string")
    public_key_from_did(actor)
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise MalformedError(f"event seq must be a non-negative integer, not {seq!r}")
    if not isinstance(subject, str) or len(subject) > MAX_SUBJECT_LENGTH:
        raise MalformedError(f"event subject must be a string of at most {MAX_SUBJECT_LENGTH}")
    if type(body) is not dict and not isinstance(body, Mapping):
        raise MalformedError("event body must be a JSON object")


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
        check_members(self.kind, self.actor, self.seq, self.subject, self.body)
        if not isinstance(self.at, str):
            raise MalformedError("event time must be a string")
        parse_time(self.at)

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

        Construction checked `kind` against KIND_PATTERN, `at` against _TIME_PATTERN (both
        ASCII letters, digits and punctuation JCS writes unescaped) and `v` to be the int 1,
        so those go in as they are; the actor, the subject and the body are escaped here.
        """
        if self.seq > MAX_SAFE_INTEGER:
            return canonical_json(self.to_json())  # raises, naming the problem
        body = self.body if type(self.body) is dict else dict(self.body)
        return b"".join(
            (
                b'{"actor":',
                canonical_text(self.actor),
                b',"at":"',
                self.at.encode(),
                b'","body":',
                canonical_json(body),
                b',"kind":"',
                self.kind.encode(),
                b'","seq":',
                str(self.seq).encode(),
                b',"subject":',
                canonical_text(self.subject),
                b',"v":1}',
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
    with no characters JCS escapes (the kid checked, the sig base64url: `b64url` as bytes),
    so concatenation is the canonical form.

    Raises MalformedError for a kid that is not printable ASCII without quotes.
    """
    return b"".join(
        (
            b'{"event":',
            event_bytes,
            _kid_and_sig_start(kid),
            base64.urlsafe_b64encode(sig).rstrip(b"="),
            b'"}',
        )
    )


@lru_cache(maxsize=4096)
def _kid_and_sig_start(kid: str) -> bytes:
    """The entry's bytes between JCS(event) and the signature: `,"kid":"<kid>","sig":"`,
    remembered per kid (a signer signs many entries; checking its kid cost as much as the
    rest of `entry_bytes`). A kid that fails the check raises every time: nothing is kept.

    Raises MalformedError for a kid that is not printable ASCII without quotes.
    """
    if not kid.isascii() or '"' in kid or "\\" in kid or not kid.isprintable():
        raise MalformedError(f"key id {kid!r} must be printable ASCII without quotes")
    return b',"kid":"' + kid.encode() + b'","sig":"'


def sign_event(signer: Signer, event: Event) -> Entry:
    """Sign `event` as `signer`.

    Raises SignatureError when the signer is not the event's actor, CanonicalizationError when
    the body cannot be canonicalized, MalformedError when the signer's kid is not printable
    ASCII without quotes.
    """
    if signer.did != event.actor:
        raise SignatureError(f"{signer.did} cannot sign an event whose actor is {event.actor}")
    event_bytes = event.canonical()
    sig = signer.sign(event_bytes)
    kid = signer.kid
    data = entry_bytes(event_bytes, kid, sig)
    return Entry(event=event, kid=kid, sig=sig, data=data, event_bytes=event_bytes)


def make_entry(
    signer: Signer,
    *,
    kind: str,
    seq: int,
    at: datetime,
    subject: str = "",
    body: Mapping[str, JSONValue] | None = None,
) -> Entry:
    """Build, validate and sign an event in one step: `Event(...)`, then `sign_event`.

    The body is copied, so what is signed cannot change under the entry. Raises ValueError
    for a naive `at`, and what `Event` and `sign_event` raise.
    """
    event = Event(
        kind=kind,
        actor=signer.did,
        seq=seq,
        at=format_time(at),
        subject=subject,
        body=dict(body or {}),
    )
    return sign_event(signer, event)
