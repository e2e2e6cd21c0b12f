"""Canonical JSON, did:key signing, and the event and entry formats."""

from __future__ import annotations

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
from accord.ledger.events import Entry, Event, format_time, make_entry, parse_time, sign_event
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
