"""The log's checkpoint as a C2SP `tlog-checkpoint` in a C2SP `signed-note`, so a standard
witness or monitor can follow it.

A checkpoint note is

    <origin>\\n
    <tree size, decimal>\\n
    <root hash, standard base64>\\n
    \\n
    — <key name> <base64(key ID || Ed25519 signature)>\\n

The first three lines are the note's text, which the signature covers (with its final
newline, without the blank line). The key name is the origin. The key ID is the first four
bytes of SHA-256(key name || 0x0A || 0x01 || public key), 0x01 being the Ed25519 signature
type. Bytes in, bytes out; nothing here reads a clock, a file or the network.

Raises, from one tree (`accord.ledger.errors`):

    MalformedError   a note, origin or checkpoint that does not follow the format
    SignatureError   no signature line of the expected key, or one that does not verify
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import nacl.exceptions
import nacl.signing

from accord.ledger.errors import MalformedError, SignatureError
from accord.ledger.merkle import HASH_SIZE
from accord.ledger.signing import Ed25519Signer

ED25519_TYPE = b"\x01"
"""The signed-note signature type of Ed25519."""
SIGNATURE_PREFIX = "\u2014 "
"""Every signature line starts with an em dash (U+2014) and a space."""
MAX_NOTE_BYTES = 1 << 20
MAX_SIGNATURES = 100
NOTE_MEDIA_TYPE = "text/plain; charset=utf-8"

_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: the key name, the 4-byte key ID and the signature bytes."""

    name: str
    key_id: bytes
    signature: bytes


@dataclass(frozen=True)
class CheckpointNote:
    """A parsed checkpoint note: its text's origin, tree size and root hash, extension lines,
    its signature lines, and `text`, the bytes the signatures cover."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...]
    signatures: tuple[NoteSignature, ...]
    text: bytes


def key_id(name: str, public_key: bytes) -> bytes:
    """The signed-note key ID of an Ed25519 key called `name`."""
    return hashlib.sha256(name.encode() + b"\n" + ED25519_TYPE + public_key).digest()[:4]


def check_key_name(name: str) -> str:
    """`name` if it is a valid key name (non-empty, no whitespace, no '+'); raises
    MalformedError otherwise."""
    if not name or any(c.isspace() or c == "+" for c in name):
        raise MalformedError(f"a key name is non-empty, with no space and no '+': {name!r}")
    return name


def origin_for(public_url: str, log_id: str) -> str:
    """The log's origin: the service's public URL without its scheme, then `/` and the log
    id, e.g. `127.0.0.1:8600/accord-main`. Raises MalformedError when that is no key name."""
    parts = urlsplit(public_url)
    return check_key_name(f"{parts.netloc}{parts.path.rstrip('/')}/{log_id}")


def checkpoint_text(origin: str, size: int, root: bytes) -> bytes:
    """The note text of the checkpoint of a tree of `size` leaves with root `root`.

    Raises MalformedError for a bad origin, a negative size or a root that is not 32 bytes.
    """
    check_key_name(origin)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise MalformedError(f"a tree size is a non-negative integer, not {size!r}")
    if not isinstance(root, bytes) or len(root) != HASH_SIZE:
        raise MalformedError("a root hash has 32 bytes")
    return f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n".encode()


def sign_note(text: bytes, name: str, signer: Ed25519Signer) -> bytes:
    """The signed note of `text` by `signer` under the key name `name`.

    Raises MalformedError when `text` is empty, does not end in a newline, holds a blank line
    or a control character other than newline, or `name` is no key name.
    """
    check_key_name(name)
    _check_text(text)
    signature = signer.sign(text)
    line = base64.b64encode(key_id(name, signer.public_key) + signature).decode()
    return text + b"\n" + f"{SIGNATURE_PREFIX}{name} {line}\n".encode()


def checkpoint_note(origin: str, size: int, root: bytes, signer: Ed25519Signer) -> bytes:
    """The signed checkpoint note of a tree, signed by `signer` under the origin's name.

    Raises MalformedError (see `checkpoint_text`)."""
    return sign_note(checkpoint_text(origin, size, root), origin, signer)


def parse_note(note: bytes) -> tuple[bytes, tuple[NoteSignature, ...]]:
    """The text of a signed note and its signature lines.

    Raises MalformedError when the note is longer than 1 MiB or not UTF-8, has no blank line
    before its signatures, a text that breaks the rules of `sign_note`, a signature line that
    is not `— <name> <base64>` with at least 5 decoded bytes, or more than 100 of them.
    """
    if len(note) > MAX_NOTE_BYTES:
        raise MalformedError("a signed note is at most 1 MiB")
    try:
        note.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedError(f"a signed note is UTF-8: {exc}") from exc
    split = note.rfind(b"\n\n")
    if split < 0:
        raise MalformedError("a signed note has a blank line between its text and signatures")
    text, block = note[: split + 1], note[split + 2 :]
    _check_text(text)
    if not block.endswith(b"\n"):
        raise MalformedError("a signed note ends with a newline")
    lines = block[:-1].decode().split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedError(f"a signed note has at most {MAX_SIGNATURES} signatures")
    signatures = []
    for line in lines:
        if not line.startswith(SIGNATURE_PREFIX):
            raise MalformedError(f"a signature line starts with an em dash and a space: {line!r}")
        name, space, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
        check_key_name(name)
        if not space or not encoded or " " in encoded:
            raise MalformedError(f"a signature line is '— <name> <base64>': {line!r}")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise MalformedError(f"a signature is standard base64: {exc}") from exc
        if len(raw) < 5:
            raise MalformedError("a signature holds a 4-byte key ID and the signature")
        signatures.append(NoteSignature(name, raw[:4], raw[4:]))
    return text, tuple(signatures)


def verify_note(note: bytes, name: str, public_key: bytes) -> bytes:
    """The text of `note` once the signature of the Ed25519 key `public_key` called `name`
    verifies over it. Lines of other keys are ignored; the first line with the key's name and
    ID decides.

    Raises MalformedError (see `parse_note`), SignatureError when no line is the key's or its
    signature does not verify.
    """
    text, signatures = parse_note(note)
    wanted = key_id(name, public_key)
    for signature in signatures:
        if signature.name == name and signature.key_id == wanted:
            try:
                nacl.signing.VerifyKey(public_key).verify(text, signature.signature)
            except (nacl.exceptions.BadSignatureError, ValueError) as exc:
                raise SignatureError(f"the note's signature by {name} does not verify") from exc
            return text
    raise SignatureError(f"the note has no signature by the key {name}+{wanted.hex()}")


def parse_checkpoint(note: bytes) -> CheckpointNote:
    """A checkpoint note's origin, size, root, extension lines and signatures (unverified).

    Raises MalformedError when the note or its text is not a checkpoint: fewer than three
    lines, a size that is not decimal without leading zeros, a root that is not standard
    base64 of 32 bytes.
    """
    text, signatures = parse_note(note)
    lines = text.decode()[:-1].split("\n")
    if len(lines) < 3:
        raise MalformedError("a checkpoint has an origin, a tree size and a root hash")
    origin, size, root = lines[:3]
    check_key_name(origin)
    if _DECIMAL.fullmatch(size) is None:
        raise MalformedError(f"a checkpoint's tree size is decimal: {size!r}")
    try:
        root_hash = base64.b64decode(root, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedError(f"a checkpoint's root hash is standard base64: {exc}") from exc
    if len(root_hash) != HASH_SIZE or base64.b64encode(root_hash).decode() != root:
        raise MalformedError("a checkpoint's root hash is the base64 of 32 bytes")
    return CheckpointNote(origin, int(size), root_hash, tuple(lines[3:]), signatures, text)


def _check_text(text: bytes) -> None:
    if not text or not text.endswith(b"\n"):
        raise MalformedError("a note's text is not empty and ends with a newline")
    if b"\n\n" in text:
        raise MalformedError("a note's text holds no blank line")
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedError(f"a note's text is UTF-8: {exc}") from exc
    if any(ord(c) < 0x20 and c != "\n" for c in decoded):
        raise MalformedError("a note's text holds no control character but newline")
