"""Checkpoints (signed tree heads): `{log_id, size, root, at}` signed by the operator DID."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from accord.ledger.canonical import canonical_json, parse_canonical
from accord.ledger.errors import MalformedError, SignatureError
from accord.ledger.events import format_time, parse_time
from accord.ledger.merkle import HASH_SIZE
from accord.ledger.signing import Signer, b64url, from_b64url, kid_for, verify_signature

if TYPE_CHECKING:  # the store is passed in: the checkpoint format itself needs no database
    from accord.ledger.store import LogStore


@dataclass(frozen=True)
class Checkpoint:
    """The state of a log at one size. Raises MalformedError when constructed badly."""

    log_id: str
    size: int
    root: bytes
    at: str

    def __post_init__(self) -> None:
        if not isinstance(self.log_id, str) or not self.log_id:
            raise MalformedError("a checkpoint needs a log id")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise MalformedError(f"checkpoint size must be a non-negative integer: {self.size!r}")
        if not isinstance(self.root, bytes) or len(self.root) != HASH_SIZE:
            raise MalformedError("checkpoint root must be a 32-byte hash")
        parse_time(self.at)

    def to_json(self) -> dict[str, Any]:
        return {"log_id": self.log_id, "size": self.size, "root": self.root.hex(), "at": self.at}

    def canonical(self) -> bytes:
        return canonical_json(self.to_json())

    @classmethod
    def from_json(cls, value: Any) -> Checkpoint:
        """Raises MalformedError unless `value` is a checkpoint object."""
        if not isinstance(value, dict) or set(value) != {"log_id", "size", "root", "at"}:
            raise MalformedError("a checkpoint has exactly log_id, size, root and at")
        try:
            root = bytes.fromhex(value["root"])
        except (TypeError, ValueError) as exc:
            raise MalformedError("checkpoint root must be hex") from exc
        return cls(value["log_id"], value["size"], root, value["at"])


@dataclass(frozen=True)
class SignedCheckpoint:
    checkpoint: Checkpoint
    kid: str
    sig: bytes
    data: bytes = field(repr=False, compare=False)
    """JCS({checkpoint, kid, sig}), what is stored and published."""

    @property
    def signer_did(self) -> str:
        return self.kid.split("#", 1)[0]

    def verify(self, operator_did: str) -> None:
        """Check that the operator signed this checkpoint. Raises SignatureError."""
        if self.kid != kid_for(operator_did):
            raise SignatureError(f"checkpoint is signed by {self.kid}, not by {operator_did}")
        verify_signature(operator_did, self.checkpoint.canonical(), self.sig)

    def to_json(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint.to_json(), "kid": self.kid, "sig": b64url(self.sig)}

    @classmethod
    def from_bytes(cls, data: bytes) -> SignedCheckpoint:
        """Raises MalformedError unless `data` is one canonical signed checkpoint."""
        value = parse_canonical(data)
        if not isinstance(value, dict) or set(value) != {"checkpoint", "kid", "sig"}:
            raise MalformedError("a signed checkpoint has exactly checkpoint, kid and sig")
        if not isinstance(value["kid"], str):
            raise MalformedError("checkpoint kid must be a string")
        return cls(
            Checkpoint.from_json(value["checkpoint"]), value["kid"], from_b64url(value["sig"]), data
        )


def sign_checkpoint(signer: Signer, checkpoint: Checkpoint) -> SignedCheckpoint:
    """The operator's signature over JCS(checkpoint)."""
    sig = signer.sign(checkpoint.canonical())
    document = {"checkpoint": checkpoint.to_json(), "kid": signer.kid, "sig": b64url(sig)}
    return SignedCheckpoint(checkpoint, signer.kid, sig, canonical_json(document))


def take_checkpoint(store: LogStore, operator: Signer, now: datetime) -> SignedCheckpoint:
    """A signed checkpoint of `store` at its current size, stored; reused if one exists
    (also one another process stored while this one signed: every process hands out the same).

    Raises StoreError when the database fails.
    """
    size = store.size()
    stored = store.checkpoint(size)
    if stored is not None:
        return SignedCheckpoint.from_bytes(stored.data)
    checkpoint = Checkpoint(store.log_id, size, store.root(size), format_time(now))
    signed = sign_checkpoint(operator, checkpoint)
    store.save_checkpoint(size, checkpoint.root, checkpoint.at, signed.data)
    stored = store.checkpoint(size)  # another process's, when it stored one first
    return signed if stored is None else SignedCheckpoint.from_bytes(stored.data)
