"""Work kept off the public log: sealed with a secret salt, named in the log by its hash.

    sealed bytes   JCS({"salt": <32 lowercase hex digits>, "value": <the JSON value>})
    commitment     the hex SHA-256 of the sealed bytes

The log is public, but a task's work is the requester's until it is paid for. So what a team
delivers (each part's output) and what an evaluator was shown and said (a judge's prompt and
answer) enter the log only as commitments; the sealed bytes are kept in the blob store, whose
content address is the commitment itself, and shown to those who may read them
(`accord.market.privacy`). Whoever holds the sealed bytes can open them and check them against the
signed log; whoever does not learns nothing from the commitment:

- the salt is 128 random bits, so a guessable value (a total, "yes", a date) cannot be found
  by hashing candidates against the commitment;
- the sealed form is canonical (RFC 8785), so one value and salt have exactly one commitment.

Pure (no I/O), but for the one random draw: `seal` without a salt takes a fresh one from
`secrets`; it is called where work is sealed (the team's runner, the settlement's judge), and
`Sealed(value, salt)` is deterministic for tests and audits. `open_sealed` raises
SealError (a ProofError: bytes that do not hold what the log committed to).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field

from accord.ledger.canonical import JSONValue, canonical_json, parse_canonical
from accord.ledger.errors import MalformedError, SealError

SALT_HEX = 32
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SALT = re.compile(rf"[0-9a-f]{{{SALT_HEX}}}")


@dataclass(frozen=True)
class Sealed:
    """A JSON value and its salt: `data` is what the blob store keeps, `commitment` what the
    log names."""

    value: JSONValue = field(hash=False)
    salt: str
    data: bytes = field(init=False, repr=False, compare=False)
    commitment: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if not _SALT.fullmatch(self.salt):
            raise SealError(f"a salt is {SALT_HEX} lowercase hex digits")
        data = canonical_json({"salt": self.salt, "value": self.value})
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "commitment", hashlib.sha256(data).hexdigest())


def seal(value: JSONValue, salt: str | None = None) -> Sealed:
    """`value` sealed under `salt`, or under a fresh random salt.

    Raises CanonicalizationError for a value JSON cannot carry exactly."""
    return Sealed(value, secrets.token_hex(SALT_HEX // 2) if salt is None else salt)


def is_commitment(text: object) -> bool:
    """Whether `text` has the form of a commitment (64 lowercase hex digits)."""
    return isinstance(text, str) and _HEX64.fullmatch(text) is not None


def open_sealed(data: bytes, commitment: str) -> Sealed:
    """The sealed value in `data`, checked against `commitment`.

    Raises SealError when the bytes do not hash to the commitment or are not a sealed value.
    """
    if hashlib.sha256(data).hexdigest() != commitment:
        raise SealError(f"the sealed bytes do not hash to their commitment {commitment}")
    try:
        parsed = parse_canonical(data)
    except MalformedError as exc:
        raise SealError(f"the bytes committed to as {commitment} are not sealed JSON") from exc
    if not isinstance(parsed, dict) or set(parsed) != {"salt", "value"}:
        raise SealError(f"the bytes committed to as {commitment} are not a sealed value")
    salt = parsed["salt"]
    if not isinstance(salt, str):
        raise SealError(f"the bytes committed to as {commitment} hold no salt")
    return Sealed(parsed["value"], salt)
