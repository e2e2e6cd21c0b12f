"""Canonical JSON, did:key signing, and the event and entry formats."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.ledger.canonical import canonical_json, canonical_text, parse_canonical
from accord.ledger.errors import CanonicalizationError, MalformedError, SignatureError
from accord.ledger.events import (
    Entry,
    Event,
    entry_bytes,
    format_time,
    make_entry,
    parse_time,
    sign_event,
)
from accord.ledger.signing import (
    Ed25519Signer,
    did_key_from_public_key,
    load_or_create_keyfile,
    public_key_from_did,
    read_keyfile,
    write_keyfile,
)

AT = datetime(2026, 11, 29, 14, 0, 0, 123456, tzinfo=UTC)
ALICE = Ed25519Signer(bytes(32))
BOB = Ed25519Signer(bytes([1]) * 32)


def json_values_up_to(max_leaves: int) -> st.SearchStrategy[object]:
    """Any JSON value: null, booleans, I-JSON integers, finite floats, strings, arrays and
    objects nested, with at most `max_leaves` scalars in all."""
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**53) + 1, 2**53 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda children: st.lists(children) | st.dictionaries(st.text(), children),
        max_leaves=max_leaves,
    )


json_values = json_values_up_to(25)


@settings(max_examples=500)
@given(json_values)
def test_fast_canonical_path_equals_the_reference(value: object) -> None:
    try:
        reference = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        with pytest.raises(CanonicalizationError):
            canonical_json(value)
        return
    assert canonical_json(value) == reference
    assert canonical_json(parse_canonical(reference)) == reference


def test_canonical_refuses_what_json_cannot_carry_exactly() -> None:
    with pytest.raises(CanonicalizationError, match="wei"):
        canonical_json({"budget": 5 * 10**17})
    with pytest.raises(CanonicalizationError):
        canonical_json({1: "non-string key"})
    with pytest.raises(CanonicalizationError):
        canonical_json({"x": float("nan")})
    with pytest.raises(CanonicalizationError):
        canonical_json({"x": "\ud800"})


@pytest.mark.parametrize(
    "data",
    [
        b'{"b":1,"a":2}',
        b'{"a": 1}',
        b'{"a":1.0}',
        b'{"a":"\\u0041"}',
        b"\xff",
        b"{",
        b'{"a":1e400}',
    ],
)
def test_parse_canonical_refuses_other_encodings(data: bytes) -> None:
    with pytest.raises(MalformedError):
        parse_canonical(data)


def test_did_key_matches_the_spec_example_and_round_trips() -> None:
    # did:key spec / W3C test vector: the all-zero seed's Ed25519 key.
    assert ALICE.did == "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"
    assert public_key_from_did(ALICE.did) == ALICE.public_key
    assert did_key_from_public_key(ALICE.public_key) == ALICE.did
    assert ALICE.kid == f"{ALICE.did}#z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"
    for bad in ["did:web:example.com", "did:key:zNotBase58!", "did:key:z6LS" + "1" * 40]:
        with pytest.raises(MalformedError):
            public_key_from_did(bad)


@pytest.mark.parametrize("spelling", [" ", "\n", "\t", "\u3000", "\u00a0"])
def test_a_did_key_has_one_spelling(spelling: str) -> None:
    """The base58 package strips whitespace, Unicode's too: a did:key followed by any would
    name the same key under another actor string (its own seqs, credentials, rate limits)."""
    for alias in (ALICE.did + spelling, ALICE.did[:20] + spelling + ALICE.did[20:]):
        with pytest.raises(MalformedError, match="base58btc"):
            public_key_from_did(alias)


def test_keyfiles_are_private_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "agent.json"
    signer = load_or_create_keyfile(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_or_create_keyfile(path).did == signer.did
    assert "seed" not in repr(signer) and signer.seed.hex() not in repr(signer)
    os.chmod(path, 0o644)
    with pytest.raises(MalformedError, match="chmod 600"):
        read_keyfile(path)
    other = tmp_path / "other.json"
    write_keyfile(other, BOB)
    with pytest.raises(FileExistsError):
        write_keyfile(other, ALICE)  # never overwrite a key


def test_time_format_is_utc_milliseconds() -> None:
    assert format_time(AT) == "2026-11-29T14:00:00.123Z"
    cet = AT.astimezone(timezone(timedelta(hours=1)))
    assert format_time(cet) == "2026-11-29T14:00:00.123Z"
    assert parse_time("2026-11-29T14:00:00.123Z") == AT.replace(microsecond=123000)
    for bad in ["2026-11-29 14:00:00", "2026-11-29T14:00:00Z", "2026-02-30T00:00:00.000Z"]:
        with pytest.raises(MalformedError):
            parse_time(bad)
    with pytest.raises(ValueError):
        format_time(datetime(2026, 1, 1))


def test_entry_is_canonical_and_verifies() -> None:
    entry = make_entry(ALICE, kind="task.posted", seq=7, at=AT, subject="task:1", body={"n": 1})
    assert entry.data == canonical_json(entry.to_json())
    parsed = Entry.from_bytes(entry.data)
    assert parsed == entry and parsed.event_bytes == entry.event.canonical()
    parsed.verify()


def test_entry_signed_by_someone_else_is_refused() -> None:
    event = Event("task.posted", ALICE.did, 1, format_time(AT), "", {})
    with pytest.raises(SignatureError):
        sign_event(BOB, event)
    forged = json.loads(make_entry(BOB, kind="a.b", seq=1, at=AT).data)
    forged["event"]["actor"] = ALICE.did
    forged["kid"] = ALICE.kid
    with pytest.raises(SignatureError):
        Entry.from_bytes(canonical_json(forged)).verify()


def test_a_changed_body_breaks_the_signature() -> None:
    entry = make_entry(ALICE, kind="a.b", seq=1, at=AT, body={"amount": "10"})
    tampered = entry.data.replace(b'"10"', b'"11"')
    with pytest.raises(SignatureError):
        Entry.from_bytes(tampered).verify()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("kind", "Task Posted", "dotted lower-case"),
        ("kind", "task", "dotted lower-case"),
        ("actor", "alice", "did:key"),
        ("seq", -1, "non-negative"),
        ("seq", True, "non-negative"),
        ("at", "yesterday", "UTC time"),
        ("subject", "x" * 600, "at most"),
        ("body", [], "JSON object"),
        ("v", 2, "version"),
        ("v", True, "version"),  # equals 1, but is not the version 1
    ],
)
def test_bad_events_are_refused_with_a_reason(field: str, value: object, message: str) -> None:
    fields = {
        "kind": "a.b",
        "actor": ALICE.did,
        "seq": 1,
        "at": format_time(AT),
        "subject": "",
        "body": {},
        "v": 1,
    }
    fields[field] = value
    with pytest.raises(MalformedError, match=message):
        Event(**fields)  # type: ignore[arg-type]


def test_entry_with_extra_or_missing_fields_is_malformed() -> None:
    entry = json.loads(make_entry(ALICE, kind="a.b", seq=1, at=AT).data)
    for broken in ({**entry, "extra": 1}, {k: v for k, v in entry.items() if k != "kid"}):
        with pytest.raises(MalformedError):
            Entry.from_bytes(canonical_json(broken))
    entry["sig"] = entry["sig"][:-4]
    with pytest.raises(MalformedError):
        Entry.from_bytes(canonical_json(entry))


@settings(max_examples=500)
@given(
    subject=st.text(max_size=40),
    # up to five members of up to five scalars each: with members as big as `json_values` the
    # 500 bodies took 14 s to draw, for a test whose subject is how the event's members are
    # joined (the values' own encoding is test_fast_canonical_path_equals_the_reference's)
    body=st.dictionaries(st.text(max_size=8), json_values_up_to(5), max_size=5),
    seq=st.integers(0, 2**60),
    kind=st.sampled_from(["a.b", "task.posted", "bid.committed", "x_1.y.z"]),
)
def test_an_event_is_canonicalized_member_by_member_as_the_reference_does_it(
    subject: str, body: dict[str, object], seq: int, kind: str
) -> None:
    event = Event(
        kind=kind, actor=ALICE.did, seq=seq, at=format_time(AT), subject=subject, body=body
    )
    try:
        reference = rfc8785.dumps(event.to_json())
    except rfc8785.CanonicalizationError:
        with pytest.raises(CanonicalizationError):
            event.canonical()
        return
    assert event.canonical() == reference


def test_canonical_text_is_the_canonical_json_of_a_string() -> None:
    for text in ["", "plain", 'q"uote', "back\\slash", "\n\r\t\b\f\x00\x1f\x7f", "é€😀", "\u2028"]:
        assert canonical_text(text) == canonical_json(text) == rfc8785.dumps(text)
    with pytest.raises(CanonicalizationError):
        canonical_text("\ud800")
    with pytest.raises(TypeError):
        canonical_text(1)  # type: ignore[arg-type]


def test_the_signer_signs_as_pynacl_does() -> None:
    """Ed25519 is deterministic: the signer's libsodium call gives PyNaCl's own signature."""
    import nacl.signing

    for seed in (bytes(32), bytes(range(32)), os.urandom(32)):
        signer = Ed25519Signer(seed)
        key = nacl.signing.SigningKey(seed)
        assert signer.public_key == bytes(key.verify_key)
        for message in (b"", b"x", os.urandom(500)):
            assert signer.sign(message) == key.sign(message).signature


def test_an_entry_of_version_true_is_malformed() -> None:
    entry = json.loads(make_entry(ALICE, kind="a.b", seq=1, at=AT).data)
    entry["event"]["v"] = True
    with pytest.raises(MalformedError, match="version"):
        Entry.from_bytes(canonical_json(entry))


def test_make_entry_writes_the_bytes_it_always_wrote() -> None:
    """Pinned: the leaf data of one entry, as the code before issue 25's fast path wrote it
    (the log's format is checked by outside verifiers; Ed25519 is deterministic)."""
    signer = Ed25519Signer(bytes(range(32)))
    at = datetime(2026, 11, 29, 15, 0, 0, 123999, tzinfo=timezone(timedelta(hours=1)))
    body = {"amount": "10", "n": 3, "tags": ["x", None, True], "é": 1.5}
    entry = make_entry(signer, kind="task.posted", seq=7, at=at, subject='task:1 "é"\n', body=body)
    assert hashlib.sha256(entry.data).hexdigest() == (
        "9c36dcae6c4b3e12432a300c556b1da5a6244416aeb25a75af52d6332216dbbf"
    )
    assert entry.data.endswith(
        b'"sig":"6owOygi5zauF5mCsrB0gILoo7NqYpp6nasOw_McgXlo-Pr8wKYoccXNRWUM0o12jKkNJFiSahcrYmhed'
        b'507RAQ"}'
    )


def reference_entry(
    seed: bytes, kind: str, seq: int, at: datetime, subject: str, body: dict[str, object]
) -> bytes:
    """JCS(entry) the slow, obvious way: the envelope as a dict, rfc8785 for every byte, the
    time by `isoformat`, PyNaCl's own signature."""
    import nacl.signing

    signer = Ed25519Signer(seed)
    event = {
        "v": 1,
        "kind": kind,
        "actor": signer.did,
        "seq": seq,
        "at": at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "subject": subject,
        "body": body,
    }
    signature = nacl.signing.SigningKey(seed).sign(rfc8785.dumps(event)).signature
    sig = base64.urlsafe_b64encode(signature).rstrip(b"=").decode()
    return rfc8785.dumps({"event": event, "kid": signer.kid, "sig": sig})


times = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.sampled_from(
        [UTC, timezone(timedelta(hours=-11)), timezone(timedelta(hours=5, minutes=30))]
    ),
)


@settings(max_examples=300)
@given(
    seed=st.binary(min_size=32, max_size=32),
    kind=st.sampled_from(["a.b", "task.posted", "bid.committed", "x_1.y.z"]),
    seq=st.integers(0, 2**53 - 1),
    at=times,
    subject=st.text(max_size=40),
    body=st.dictionaries(st.text(max_size=8), json_values_up_to(5), max_size=5),
)
def test_make_entry_gives_the_reference_bytes_and_objects(
    seed: bytes, kind: str, seq: int, at: datetime, subject: str, body: dict[str, object]
) -> None:
    """`make_entry` (the readable path: `Event(...)` validated in full, then `sign_event`)
    against the reference bytes. tests/ledger/test_fast_entries.py holds the product's fast
    path to this one."""
    signer = Ed25519Signer(seed)
    try:
        reference = reference_entry(seed, kind, seq, at, subject, body)
    except rfc8785.CanonicalizationError:
        with pytest.raises(CanonicalizationError):
            make_entry(signer, kind=kind, seq=seq, at=at, subject=subject, body=body)
        return
    entry = make_entry(signer, kind=kind, seq=seq, at=at, subject=subject, body=body)
    assert entry.data == reference
    event = Event(kind, signer.did, seq, format_time(at), subject, dict(body))
    assert entry == sign_event(signer, event) and entry.event == event
    assert entry.event_bytes == event.canonical() == rfc8785.dumps(event.to_json())
    assert entry == Entry.from_bytes(entry.data)


@settings(max_examples=300)
@given(at=times)
def test_format_time_writes_what_isoformat_writes_and_parse_time_reads_it(at: datetime) -> None:
    text = format_time(at)
    assert text == at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert parse_time(text) == at.replace(microsecond=at.microsecond // 1000 * 1000)


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("kind", "Task Posted", MalformedError),
        ("kind", 7, MalformedError),
        ("seq", -1, MalformedError),
        ("seq", True, MalformedError),
        ("seq", 2**53, CanonicalizationError),
        ("subject", "x" * 600, MalformedError),
        ("subject", None, MalformedError),
        ("body", {"x": float("nan")}, CanonicalizationError),
        ("body", {"x": "\ud800"}, CanonicalizationError),
        ("at", datetime(2026, 1, 1), ValueError),
    ],
)
def test_make_entry_refuses_what_event_refuses(field: str, value: object, error: type) -> None:
    fields: dict[str, object] = {"kind": "a.b", "seq": 1, "at": AT, "subject": "", "body": {}}
    fields[field] = value
    with pytest.raises(error):
        make_entry(ALICE, **fields)  # type: ignore[arg-type]


def test_a_bad_kid_is_refused_every_time() -> None:
    """`entry_bytes` remembers good kids; a bad one is checked, and refused, on each call."""
    for _ in range(2):
        with pytest.raises(MalformedError, match="key id"):
            entry_bytes(b"{}", 'did:key:z6Mk"', bytes(64))
