"""The fenced speed path `accord.ledger.fast_entries.make_entry` against the readable one,
`accord.ledger.events.make_entry`: for the same input, good or bad, the same entry (equal
objects, fields in the same order, equal bytes, hashes and repr) or the same exception."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.ledger import events, fast_entries
from accord.ledger.errors import MalformedError
from accord.ledger.events import Entry, Event, format_time
from accord.ledger.signing import Ed25519Signer
from tests.ledger.test_events import json_values_up_to, times


class OddDatetime(datetime):
    """A datetime subclass whose UTC fields are out of range: `format_time` writes a time
    `parse_time` refuses, which the fast path (trusting a datetime's fields) must not sign."""

    def astimezone(self, tz: Any = None) -> Any:
        return SimpleNamespace(
            year=12026, month=13, day=1, hour=0, minute=0, second=0, microsecond=self.microsecond
        )


class FrozenMapping(Mapping[str, object]):
    """A body that is a Mapping but not a dict."""

    def __init__(self, items: dict[str, object]) -> None:
        self._items = dict(items)

    def __getitem__(self, key: str) -> object:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class OddSigner:
    """A Signer whose DID or kid another implementation might get wrong."""

    def __init__(self, seed: bytes, did: str | None = None, kid: str | None = None) -> None:
        self._real = Ed25519Signer(seed)
        self.did = self._real.did if did is None else did
        self.kid = self._real.kid if kid is None else kid

    def sign(self, message: bytes) -> bytes:
        return self._real.sign(message)


def outcome(call: Any, first: Any, fields: dict[str, Any]) -> tuple[str, Any]:
    """("entry", what `call(first, **fields)` returned) or ("raised", (exception type,
    message))."""
    try:
        return "entry", call(first, **fields)
    except Exception as exc:  # any exception: both paths must raise the same
        return "raised", (type(exc), str(exc))


def assert_same_entry(fast: Entry, reference: Entry) -> None:
    assert type(fast) is Entry and type(fast.event) is Event
    assert fast == reference and fast.event == reference.event
    assert vars(fast.event) == vars(reference.event)
    assert list(vars(fast.event)) == [f.name for f in dataclasses.fields(Event)]
    assert vars(fast) == vars(reference)  # data and event_bytes too (compare=False)
    assert list(vars(fast)) == [f.name for f in dataclasses.fields(Entry)]
    assert hash(fast) == hash(reference) and hash(fast.event) == hash(reference.event)
    assert repr(fast) == repr(reference)
    assert hashlib.sha256(fast.data).digest() == hashlib.sha256(reference.data).digest()
    assert Entry.from_bytes(fast.data) == fast
    assert outcome(Entry.verify, fast, {}) == outcome(Entry.verify, reference, {})


def assert_same_outcome(signer: Any, fields: dict[str, Any]) -> None:
    fast = outcome(fast_entries.make_entry, signer, fields)
    reference = outcome(events.make_entry, signer, fields)
    assert fast[0] == reference[0], (fast, reference)
    if fast[0] == "raised":
        assert fast[1] == reference[1]
    else:
        assert_same_entry(fast[1], reference[1])


kinds = st.sampled_from(["a.b", "task.posted", "bid.committed", "x_1.y.z"]) | st.text(max_size=12)
seqs = st.integers(0, 2**53 - 1) | st.sampled_from([-1, 2**53, True, False, 1.0, "1", None])
subjects = st.text(max_size=40) | st.sampled_from(["x" * 512, "x" * 513, None, 7])
bodies = (
    st.dictionaries(st.text(max_size=8), json_values_up_to(5), max_size=5)
    | st.dictionaries(st.text(max_size=8), json_values_up_to(3), max_size=3).map(FrozenMapping)
    | st.sampled_from(
        [
            None,
            {},
            {"x": float("nan")},
            {"x": float("inf")},
            {"x": "\ud800"},
            {"wei": 2**53},
            {1: "not a string key"},
            [("pairs", 1)],
            ["not", "pairs"],
            5,
        ]
    )
)
moments = (
    times
    | times.map(lambda moment: moment.replace(tzinfo=None))
    | times.map(lambda moment: OddDatetime.fromtimestamp(moment.timestamp(), UTC))
    | st.sampled_from([None, "2026-01-01T00:00:00.000Z", 0])
)
signers = st.binary(min_size=32, max_size=32).flatmap(
    lambda seed: st.sampled_from(
        [
            Ed25519Signer(seed),
            OddSigner(seed),
            OddSigner(seed, kid='key "quoted"'),
            OddSigner(seed, kid="é"),
            OddSigner(seed, did="did:web:example.com"),
            OddSigner(seed, did=Ed25519Signer(bytes(32)).did),  # lies: entries that fail verify
        ]
    )
)


@settings(max_examples=600)
@given(signer=signers, kind=kinds, seq=seqs, at=moments, subject=subjects, body=bodies)
def test_the_fast_path_gives_what_the_readable_path_gives(
    signer: Any, kind: Any, seq: Any, at: Any, subject: Any, body: Any
) -> None:
    fields = {"kind": kind, "seq": seq, "at": at, "subject": subject, "body": body}
    assert_same_outcome(signer, fields)


@settings(max_examples=200)
@given(
    seed=st.binary(min_size=32, max_size=32),
    seq=st.integers(0, 2**53 - 1),
    at=times,
    subject=st.text(max_size=40),
    body=st.dictionaries(st.text(max_size=8), json_values_up_to(8), max_size=6),
)
def test_good_events_give_equal_entries(
    seed: bytes, seq: int, at: datetime, subject: str, body: dict[str, object]
) -> None:
    """The common case alone (the mixed test above mostly meets refusals)."""
    fields = {"kind": "task.posted", "seq": seq, "at": at, "subject": subject, "body": body}
    fast = outcome(fast_entries.make_entry, Ed25519Signer(seed), fields)
    if fast[0] == "raised":  # a float JCS cannot hold, or the like: refused by both
        assert outcome(events.make_entry, Ed25519Signer(seed), fields) == fast
        return
    assert_same_entry(fast[1], events.make_entry(Ed25519Signer(seed), **fields))


def test_the_fast_path_writes_the_pinned_bytes() -> None:
    """The entry tests/ledger/test_events.py pins for the readable path."""
    signer = Ed25519Signer(bytes(range(32)))
    at = datetime(2026, 11, 29, 15, 0, 0, 123999, tzinfo=timezone(timedelta(hours=1)))
    body = {"amount": "10", "n": 3, "tags": ["x", None, True], "é": 1.5}
    fields = {"kind": "task.posted", "seq": 7, "at": at, "subject": 'task:1 "é"\n', "body": body}
    entry = fast_entries.make_entry(signer, **fields)  # type: ignore[arg-type]
    assert hashlib.sha256(entry.data).hexdigest() == (
        "9c36dcae6c4b3e12432a300c556b1da5a6244416aeb25a75af52d6332216dbbf"
    )
    assert_same_entry(entry, events.make_entry(signer, **fields))  # type: ignore[arg-type]


def test_the_signed_body_is_a_copy() -> None:
    """Changing the caller's body afterwards changes neither the entry nor its bytes."""
    body: dict[str, object] = {"n": 1}
    entry = fast_entries.make_entry(
        Ed25519Signer(bytes(32)), kind="a.b", seq=1, at=datetime.now(UTC), body=body
    )
    body["n"] = 2
    assert entry.event.body == {"n": 1} and Entry.from_bytes(entry.data) == entry


def test_a_datetime_subclass_takes_the_readable_path() -> None:
    """Its time is parsed back, and refused when it is not a real one."""
    odd = OddDatetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(MalformedError, match="12026-13-01"):
        fast_entries.make_entry(Ed25519Signer(bytes(32)), kind="a.b", seq=1, at=odd)


def test_the_unchecked_instances_are_frozen_like_the_constructors() -> None:
    entry = fast_entries.make_entry(
        Ed25519Signer(bytes(32)), kind="a.b", seq=1, at=datetime(2026, 1, 1, tzinfo=UTC)
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.event.seq = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.kid = "other"  # type: ignore[misc]
    assert entry.event.at == format_time(datetime(2026, 1, 1, tzinfo=UTC))
    assert dataclasses.replace(entry.event, seq=2).seq == 2  # the constructor still checks
    with pytest.raises(Exception, match="seq"):
        dataclasses.replace(entry.event, seq=-1)
