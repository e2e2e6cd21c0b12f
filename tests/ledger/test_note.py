"""The log speaks C2SP: its latest checkpoint as a `tlog-checkpoint` signed note at
`GET /ledger/checkpoint`, and RFC 9162 consistency proofs at `GET /ledger/consistency`.

The note is checked against the specs' rules by a reader written here from the specs alone
(hashlib and `cryptography`, none of accord's code): the text is the origin, the decimal tree
size and the standard-base64 root, each ending in a newline; a blank line; then
`— <key name> <base64(key ID || signature)>`, the key ID being the first four bytes of
SHA-256(name || 0x0A || 0x01 || public key), the Ed25519 signature over the text with its final
newline. The proofs are checked against roots that pymerkle computes from the entries, by an
RFC 9162 §2.1.4.2 verifier written here too."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from fastapi.testclient import TestClient
from pymerkle import InmemoryTree

from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.ledger.checkpoint import take_checkpoint
from accord.ledger.errors import MalformedError, SignatureError
from accord.ledger.note import (
    checkpoint_note,
    checkpoint_text,
    key_id,
    origin_for,
    parse_checkpoint,
    sign_note,
    verify_note,
)
from accord.ledger.signing import Ed25519Signer
from tests.accord_cli import cli_environ, run_accord
from tests.api.test_app import World, build_world

SEED = bytes(range(32))


# -- an independent reader of the specs ------------------------------------------------------


def spec_read(note: bytes, name: str, public_key: bytes) -> tuple[str, int, bytes]:
    """(origin, size, root) of a checkpoint note whose signature by `name` verifies; raises
    AssertionError or InvalidSignature otherwise."""
    text, _, signatures = note.rpartition(b"\n\n")
    text += b"\n"
    lines = text.decode().split("\n")
    assert lines[-1] == "" and len(lines) >= 4, "text lines each end in a newline"
    origin, size, root = lines[0], lines[1], base64.b64decode(lines[2], validate=True)
    assert size.isdigit() and (size == "0" or not size.startswith("0"))
    assert len(root) == 32
    assert signatures.endswith(b"\n")
    expected_id = hashlib.sha256(name.encode() + b"\x0a\x01" + public_key).digest()[:4]
    for line in signatures[:-1].decode().split("\n"):
        assert line.startswith("\u2014 "), "an em dash and a space"
        line_name, encoded = line[2:].split(" ")
        raw = base64.b64decode(encoded, validate=True)
        if line_name == name and raw[:4] == expected_id:
            Ed25519PublicKey.from_public_bytes(public_key).verify(raw[4:], text)
            return origin, int(size), root
    raise AssertionError(f"no signature line of {name}")


def spec_consistent(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2, step by step."""

    def node(left: bytes, right: bytes) -> bytes:
        return hashlib.sha256(b"\x01" + left + right).digest()

    if first == second:
        return not proof and first_root == second_root
    path = list(proof)
    if first & (first - 1) == 0:  # 1: a power of two: prepend first_hash
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1  # 3
    while fn & 1:  # 4
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]  # 5
    for c in path[1:]:  # 6
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return fr == first_root and sr == second_root and sn == 0  # 7


# -- the format ------------------------------------------------------------------------------


def test_a_checkpoint_note_follows_the_specs() -> None:
    signer = Ed25519Signer(SEED)
    root = hashlib.sha256(b"root").digest()
    note = checkpoint_note("example.com/accord-main", 12, root, signer)
    text = f"example.com/accord-main\n12\n{base64.b64encode(root).decode()}\n".encode()
    assert note.startswith(text + "\n\u2014 example.com/accord-main ".encode())
    assert note.count(b"\n\n") == 1 and note.endswith(b"\n") and note.count(b"\n") == 5
    assert spec_read(note, "example.com/accord-main", signer.public_key) == (
        "example.com/accord-main",
        12,
        root,
    )
    assert verify_note(note, "example.com/accord-main", signer.public_key) == text
    parsed = parse_checkpoint(note)
    assert (parsed.origin, parsed.size, parsed.root, parsed.text) == (
        "example.com/accord-main",
        12,
        root,
        text,
    )
    [signature] = parsed.signatures
    assert signature.key_id == key_id("example.com/accord-main", signer.public_key)
    assert len(signature.signature) == 64


def test_the_signature_covers_the_text_and_the_key_is_named() -> None:
    signer = Ed25519Signer(SEED)
    root = bytes(32)
    note = checkpoint_note("example.com/log", 3, root, signer)
    tampered = note.replace(b"\n3\n", b"\n4\n", 1)
    with pytest.raises(SignatureError, match="does not verify"):
        verify_note(tampered, "example.com/log", signer.public_key)
    with pytest.raises(InvalidSignature):
        spec_read(tampered, "example.com/log", signer.public_key)
    other = Ed25519Signer(bytes(32))
    with pytest.raises(SignatureError, match="no signature by the key"):
        verify_note(note, "example.com/log", other.public_key)
    with pytest.raises(SignatureError, match="no signature by the key"):
        verify_note(note, "example.org/log", signer.public_key)
    # a second signer's line (a witness's cosignature) is ignored by who does not know it
    witnessed = (
        note + sign_note(checkpoint_text("example.com/log", 3, root), "w", other).split(b"\n\n")[1]
    )
    assert verify_note(witnessed, "example.com/log", signer.public_key)
    assert verify_note(witnessed, "w", other.public_key)


@pytest.mark.parametrize(
    "note",
    [
        b"origin\n1\nAAAA\n",  # no signatures
        b"origin\n01\n" + base64.b64encode(bytes(32)) + b"\n\n\xe2\x80\x94 origin AAAAAAA=\n",
        b"origin\n1\n" + base64.b64encode(bytes(31)) + b"\n\n\xe2\x80\x94 origin AAAAAAA=\n",
        b"origin\n1\n\n\xe2\x80\x94 origin AAAAAAA=\n",
        b"origin\n1\n" + base64.b64encode(bytes(32)) + b"\n\n-- origin AAAAAAA=\n",
        b"origin\n1\n" + base64.b64encode(bytes(32)) + b"\n\n\xe2\x80\x94 origin AAAA\n",
        b"origin\n1\n" + base64.b64encode(bytes(32)) + b"\n\n\xe2\x80\x94 origin AAAAAAA=",
        b"or igin\n1\n" + base64.b64encode(bytes(32)) + b"\n\n\xe2\x80\x94 origin AAAAAAA=\n",
    ],
)
def test_notes_that_break_the_rules_do_not_parse(note: bytes) -> None:
    with pytest.raises(MalformedError):
        parse_checkpoint(note)


def test_texts_and_names_that_break_the_rules_are_not_signed() -> None:
    signer = Ed25519Signer(SEED)
    for text in (b"", b"no newline", b"a\n\nb\n", b"a\tb\n"):
        with pytest.raises(MalformedError):
            sign_note(text, "name", signer)
    for name in ("", "a b", "a+b"):
        with pytest.raises(MalformedError):
            sign_note(b"text\n", name, signer)
    assert origin_for("http://127.0.0.1:8600", "accord-main") == "127.0.0.1:8600/accord-main"
    assert origin_for("https://accord.example/net/", "l") == "accord.example/net/l"


# -- served by the service -------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("note-world") / "home")


def _client(world: World) -> TestClient:
    return TestClient(
        create_app(
            world.settings,
            config=ApiConfig(rate=1000.0, burst=10_000.0),
            context=world.context,
            anchors=world.anchors,
            escrow_chain=world.escrow_chain,
        )
    )


def test_the_latest_checkpoint_is_served_as_a_signed_note(world: World) -> None:
    client = _client(world)
    store = world.context.market.ledger.store
    signed = take_checkpoint(store, world.operator, datetime.now(UTC))
    response = client.get("/ledger/checkpoint")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    origin = f"127.0.0.1:8600/{store.log_id}"
    assert spec_read(response.content, origin, world.operator.public_key) == (
        origin,
        signed.checkpoint.size,
        signed.checkpoint.root,
    )
    # the same tree as the JSON checkpoint the operator signed and anchors
    latest = client.get("/ledger/checkpoints").json()["checkpoints"][-1]
    assert (
        latest["size"] == signed.checkpoint.size and latest["root"] == signed.checkpoint.root.hex()
    )


def test_consistency_proofs_hold_against_an_independent_tree(world: World) -> None:
    client = _client(world)
    store = world.context.market.ledger.store
    size = store.size()
    assert size >= 8
    tree = InmemoryTree(algorithm="sha256")
    for stored in store.entries(0, size):
        tree.append_entry(stored.data)
    pairs = [(1, 1), (1, 2), (3, 7), (4, 8), (5, size), (size - 1, size), (size, size)]
    for first, second in pairs:
        response = client.get("/ledger/consistency", params={"first": first, "second": second})
        assert response.status_code == 200, response.text
        body = response.json()
        roots = tree.get_root(first), tree.get_root(second)
        assert (bytes.fromhex(body["first_root"]), bytes.fromhex(body["second_root"])) == roots
        proof = [bytes.fromhex(element) for element in body["proof"]]
        assert spec_consistent(first, second, *roots, proof), (first, second)
        if proof:
            assert not spec_consistent(first, second, roots[0], bytes(32), proof)
    for params, status in (
        ({"first": 5, "second": 4}, 404),
        ({"first": 1, "second": size + 1}, 404),
        ({"first": 0, "second": 3}, 422),
        ({"second": 3}, 422),
    ):
        response = client.get("/ledger/consistency", params=params)
        assert response.status_code == status, response.text
        assert response.headers["content-type"].startswith("application/problem+json")


def test_a_log_without_a_checkpoint_has_no_note(tmp_path: Path) -> None:
    fresh = build_world(tmp_path / "home", bidders=())
    response = _client(fresh).get("/ledger/checkpoint")
    assert response.status_code == 404
    assert "no checkpoint" in response.json()["detail"]


def test_accord_ledger_checkpoints_lists_checkpoints_and_anchors(world: World) -> None:
    ledger = world.context.market.ledger
    assert ledger.anchorer is not None
    outcome = ledger.anchorer.anchor_latest()
    assert outcome.status == "confirmed"

    def accord(*args: str) -> subprocess.CompletedProcess[str]:
        environ = cli_environ(world.settings.home)
        return run_accord(environ, "ledger", "checkpoints", *args, timeout=60)

    run = accord("--json")
    assert run.returncode == 0, run.stderr
    listed = json.loads(run.stdout)
    stored = ledger.store.checkpoints()
    assert listed["log_id"] == ledger.store.log_id
    assert [c["size"] for c in listed["checkpoints"]] == [c.size for c in stored]
    assert all(c["signer"] == world.operator.did for c in listed["checkpoints"])
    [anchored] = [c for c in listed["checkpoints"] if c["size"] == outcome.size]
    assert anchored["anchor"]["status"] == "confirmed"
    assert anchored["anchor"]["tx_hash"] == "0x" + ledger.anchor_journal.records()[-1].tx_hash.hex()
    human = accord()
    assert human.returncode == 0 and anchored["anchor"]["tx_hash"] in "".join(human.stdout.split())
