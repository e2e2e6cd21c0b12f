"""`accord.ledger.sealing`: a sealed value opens only to its own commitment, and a commitment says
nothing a guess could confirm without the salt."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accord.ledger.canonical import canonical_json
from accord.ledger.errors import ProofError, SealError
from accord.ledger.sealing import SALT_HEX, is_commitment, open_sealed, seal

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(_values)
def test_a_sealed_value_opens_to_itself(value: Any) -> None:
    sealed = seal(value)
    assert is_commitment(sealed.commitment) and len(sealed.salt) == SALT_HEX
    assert sealed.commitment == hashlib.sha256(sealed.data).hexdigest()
    assert sealed.data == canonical_json({"salt": sealed.salt, "value": value})
    assert open_sealed(sealed.data, sealed.commitment) == sealed
    assert open_sealed(sealed.data, sealed.commitment).value == value


def test_the_same_value_seals_to_a_new_commitment_each_time() -> None:
    """A guessable output (a total) cannot be confirmed by hashing candidates."""
    commitments = {seal("2585.50").commitment for _ in range(20)}
    assert len(commitments) == 20
    assert hashlib.sha256(json.dumps("2585.50").encode()).hexdigest() not in commitments
    assert seal("2585.50", "a" * SALT_HEX) == seal("2585.50", "a" * SALT_HEX)


def test_bytes_that_do_not_hash_to_the_commitment_are_refused() -> None:
    honest, other = seal("2585.50"), seal("2585.00")
    with pytest.raises(SealError, match="do not hash"):
        open_sealed(other.data, honest.commitment)
    assert issubclass(SealError, ProofError)


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b'{"value":1}',
        b'{"salt":1,"value":1}',
        b'{"a":1,"salt":"x","value":1}',
        b'{ "salt": "00", "value": 1 }',
    ],
)
def test_bytes_that_are_not_a_sealed_value_are_refused(data: bytes) -> None:
    with pytest.raises(SealError):
        open_sealed(data, hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize("salt", ["", "0" * 31, "0" * 33, "G" * 32, "A" * 32])
def test_a_salt_is_32_lowercase_hex_digits(salt: str) -> None:
    with pytest.raises(SealError, match="salt"):
        seal(1, salt)


@pytest.mark.parametrize("text", ["", "0" * 63, "A" * 64, "g" * 64, None, 7])
def test_what_is_not_a_commitment(text: object) -> None:
    assert not is_commitment(text)
