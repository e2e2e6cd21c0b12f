"""A pattern anchored with `$` also matches before a final newline: every validator of an
identifier, a time, a price or a nonce takes the whole text, so "x\\n" is never "x"."""

from __future__ import annotations

import pytest

from accord.identity.agents import MODEL_PATTERN, NAME_PATTERN
from accord.ledger.errors import MalformedError
from accord.ledger.events import Event
from accord.ledger.signing import from_b64url
from accord.market.errors import BidRejected, WorkError
from accord.market.sealed import _price_field
from accord.market.work import parse_parts


def test_an_event_kind_or_time_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(MalformedError):
        Event("note.added\n", "did:key:z6Mk", 1, "2026-12-02T00:00:00.000Z", "", {})
    with pytest.raises(MalformedError):
        Event("note.added", "did:key:z6Mk", 1, "2026-12-02T00:00:00.000Z\n", "", {})


def test_identifiers_prices_and_base64_take_the_whole_text() -> None:
    assert NAME_PATTERN.fullmatch("alice") and not NAME_PATTERN.fullmatch("alice\n")
    assert MODEL_PATTERN.fullmatch("m-1") and not MODEL_PATTERN.fullmatch("m-1\n")
    with pytest.raises(MalformedError):
        from_b64url("AAAA\n")
    with pytest.raises(BidRejected):
        _price_field("100\n")
    with pytest.raises(WorkError):
        parse_parts([{"id": "a\n", "capability": "arithmetic", "input": {}}], {})
