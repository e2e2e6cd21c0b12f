"""Ed25519 signing keys, did:key identifiers and the `Signer` seam that identity builds on.

A did:key for Ed25519 is `did:key:z` + base58btc(0xed 0x01 || public key); its verification
method (the `kid` of a signed entry) is `did:key:z…#z…`. Everything a verifier needs is in the
DID itself, so the log can be checked with nothing but the log.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import base58
import nacl.bindings
import nacl.exceptions
import nacl.signing

from accord.ledger.errors import MalformedError, SignatureError

ED25519_MULTICODEC = b"\xed\x01"
DID_KEY_PREFIX = "did:key:z"
SIGNATURE_SIZE = 64
PUBLIC_KEY_SIZE = 32
SEED_SIZE = 32


class Signer(Protocol):
    """Something that signs bytes as one DID. Identity's keystore implements it too."""

    @property
    def did(self) -> str: ...

    @property
    def kid(self) -> str: ...

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of `message`."""
        ...


def did_key_from_public_key(public_key: bytes) -> str:
    """The did:key of a 32-byte Ed25519 public key; raises ValueError on another length."""
    if len(public_key) != PUBLIC_KEY_SIZE:
        raise ValueError(
            f"an Ed25519 public key has {PUBLIC_KEY_SIZE} bytes, not {len(public_key)}"
        )
    return DID_KEY_PREFIX + base58.b58encode(ED25519_MULTICODEC + public_key).decode("ascii")


def kid_for(did: str) -> str:
    """The verification method id of a did:key: the DID, '#', and its multibase key."""
    return f"{did}#{did.removeprefix('did:key:')}"


_BASE58BTC = re.compile(r"[1-9A-HJ-NP-Za-km-z]+")


def base58btc_decode(text: str) -> bytes:
    """The bytes `text` spells in base58btc (the Bitcoin alphabet).

    Raises ValueError for an empty text or any character outside the alphabet. The `base58`
    package would strip surrounding whitespace (Unicode's too) and decode the rest, so one key
    or signature would have many spellings: a did:key with a trailing space naming the same key
    as another actor, a proofValue with a newline a second form of the same signed document."""
    if not _BASE58BTC.fullmatch(text):
        raise ValueError("only the base58btc alphabet may appear (no spaces, no 0, O, I or l)")
    return base58.b58decode(text)


@lru_cache(maxsize=65536)
def public_key_from_did(did: str) -> bytes:
    """The Ed25519 public key inside a did:key (remembered: base58 decoding in Python costs
    more than the signature check it serves, and every signed request and entry needs it).

    Raises MalformedError when `did` is not an Ed25519 did:key.
    """
    if not did.startswith(DID_KEY_PREFIX):
        raise MalformedError(f"{did!r} is not a did:key (want 'did:key:z6Mk…')")
    try:
        raw = base58btc_decode(did[len(DID_KEY_PREFIX) :])
    except ValueError as exc:
        raise MalformedError(f"{did!r} is not base58btc: {exc}") from exc
    if not raw.startswith(ED25519_MULTICODEC) or len(raw) != 2 + PUBLIC_KEY_SIZE:
        raise MalformedError(f"{did!r} is not an Ed25519 did:key")
    return raw[2:]


def verify_signature(did: str, message: bytes, signature: bytes) -> None:
    """Check an Ed25519 signature by the key of `did`.

    Raises SignatureError when it does not verify, MalformedError when `did` is not a did:key.
    """
    if len(signature) != SIGNATURE_SIZE:
        raise SignatureError(f"a signature has {SIGNATURE_SIZE} bytes, not {len(signature)}")
    try:
        _verify_key(public_key_from_did(did)).verify(message, signature)
    except nacl.exceptions.BadSignatureError:
        raise SignatureError(f"signature does not verify for {did}") from None


@lru_cache(maxsize=65536)
def _verify_key(public_key: bytes) -> nacl.signing.VerifyKey:
    return nacl.signing.VerifyKey(public_key)


def b64url(data: bytes) -> str:
    """Base64url without padding (RFC 4648 §5)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def from_b64url(text: str) -> bytes:
    """Inverse of `b64url`, strictly: only the one canonical spelling of each byte string is
    accepted (no padding, no '+' or '/', no stray bits in the last character), so a signed
    value has exactly one text form. Raises MalformedError otherwise."""
    if not isinstance(text, str) or not _B64URL.fullmatch(text):
        raise MalformedError("expected unpadded base64url text")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as exc:
        raise MalformedError(f"not base64url: {exc}") from exc
    if b64url(data) != text:
        raise MalformedError("base64url text is not in its canonical form")
    return data


_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")


class Ed25519Signer:
    """A libsodium Ed25519 key (PyNaCl) acting as its did:key."""

    __slots__ = ("_key", "_secret", "did", "kid", "public_key")

    def __init__(self, seed: bytes) -> None:
        """Raises ValueError unless `seed` has 32 bytes."""
        if len(seed) != SEED_SIZE:
            raise ValueError(f"an Ed25519 seed has {SEED_SIZE} bytes, not {len(seed)}")
        self._key = nacl.signing.SigningKey(seed)
        # libsodium's 64-byte secret key (seed || public key), signed with directly
        self.public_key, self._secret = nacl.bindings.crypto_sign_seed_keypair(seed)
        self.did = did_key_from_public_key(self.public_key)
        self.kid = kid_for(self.did)

    @classmethod
    def generate(cls) -> Ed25519Signer:
        return cls(os.urandom(SEED_SIZE))

    @property
    def seed(self) -> bytes:
        return bytes(self._key)

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of `message`: libsodium's `crypto_sign`, as
        `SigningKey.sign` calls it, without wrapping its output in a `SignedMessage`."""
        return nacl.bindings.crypto_sign(message, self._secret)[:SIGNATURE_SIZE]

    def __repr__(self) -> str:  # never print the seed
        return f"Ed25519Signer(did={self.did!r})"


KEYFILE_TYPE = "Ed25519"


def write_keyfile(path: Path, signer: Ed25519Signer) -> None:
    """Write `signer` to `path` with mode 0600 (created that way, never widened)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    document = {"type": KEYFILE_TYPE, "did": signer.did, "seed": signer.seed.hex()}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle)
        handle.write("\n")


def read_keyfile(path: Path) -> Ed25519Signer:
    """Load a key written by `write_keyfile`.

    Raises MalformedError when the file is unreadable, not a key, or readable by others.
    """
    try:
        mode = path.stat().st_mode & 0o777
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise MalformedError(f"cannot read key file {path}: {exc}") from exc
    if mode & 0o077:
        raise MalformedError(f"key file {path} is readable by others (mode {mode:o}); chmod 600 it")
    if not isinstance(document, dict) or document.get("type") != KEYFILE_TYPE:
        raise MalformedError(f"{path} is not an accord Ed25519 key file")
    try:
        signer = Ed25519Signer(bytes.fromhex(document["seed"]))
    except (KeyError, ValueError, TypeError) as exc:
        raise MalformedError(f"{path} holds no valid seed: {exc}") from exc
    if document.get("did") not in (None, signer.did):
        raise MalformedError(f"{path} names {document['did']} but its seed is {signer.did}")
    return signer


def load_or_create_keyfile(path: Path) -> Ed25519Signer:
    """The key at `path`, generated on first use."""
    if not path.exists():
        # Another process may make it first; then we use theirs.
        with contextlib.suppress(FileExistsError):
            write_keyfile(path, Ed25519Signer.generate())
    return read_keyfile(path)
