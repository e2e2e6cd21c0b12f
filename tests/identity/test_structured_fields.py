"""RFC 8941 Dictionaries as request signatures use them: parsed strictly, serialized
canonically (RFC 9421 signs the serialization of Signature-Input's member)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accord.identity.structured_fields import (
    Item,
    Member,
    StructuredFieldError,
    Token,
    parse_dictionary,
    serialize_dictionary,
    serialize_member,
)


def test_a_signature_input_round_trips() -> None:
    text = (
        'sig1=("@method" "@target-uri" "content-digest");created=1618884473;'
        'keyid="did:key:z6Mk";alg="ed25519";tag="accord", sig2=:AAEC:;valid, flag'
    )
    members = parse_dictionary(text)
    assert members["sig1"] == Member(
        [Item("@method"), Item("@target-uri"), Item("content-digest")],
        {"created": 1618884473, "keyid": "did:key:z6Mk", "alg": "ed25519", "tag": "accord"},
    )
    assert members["sig2"] == Member(b"\x00\x01\x02", {"valid": True})
    assert members["flag"] == Member(True)
    assert serialize_dictionary(members) == text


def test_items_of_every_kind() -> None:
    members = parse_dictionary(
        'a=-12, b=4.5, c="q\\"\\\\", d=tok/en:1, e=?0, f=( 1  "x" );p=*x, g=()'
    )
    assert members["a"].value == -12 and members["b"].value == Decimal("4.5")
    assert members["c"].value == 'q"\\'
    assert members["d"].value == Token("tok/en:1") and isinstance(members["d"].value, Token)
    assert members["e"].value is False
    assert members["f"] == Member([Item(1), Item("x")], {"p": Token("*x")})
    assert serialize_member(members["f"]) == '(1 "x");p=*x'
    assert members["g"] == Member([])


@pytest.mark.parametrize(
    "text",
    [
        "a=1,",  # a trailing comma
        "a=1, a=2",  # a repeated key (a signature label must not be ambiguous)
        "A=1",  # keys are lower case
        'a="unterminated',
        'a="bad \\n escape"',
        "a=:not base64!:",
        "a=(1 2",
        "a=(1 2)x",
        "a=1234567890123456",  # 16 digits
        "a=1.2345",
        "a=?2",
        "a=é",
    ],
)
def test_what_is_not_a_dictionary_is_refused(text: str) -> None:
    with pytest.raises(StructuredFieldError):
        parse_dictionary(text)
