"""Signed requests (RFC 9421 with an RFC 9530 Content-Digest): unsigned, forged, expired,
replayed, tampered or misaddressed requests get 401 on every mutating route; requests signed by
another implementation (`http-message-signatures`) are accepted, and ours verify with it; an
agent acts only on its own objects (403 otherwise)."""

from __future__ import annotations

import base64
import datetime
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)
from fastapi.testclient import TestClient
from http_message_signatures import (
    HTTPMessageSigner,
    HTTPMessageVerifier,
    InvalidSignature,
    MappingKeyResolver,
    algorithms,
)

from accord.api.auth import RateLimiter
from accord.api.routes.deps import ApiConfig
from accord.identity.http_auth import AccordAuth
from accord.identity.http_signatures import (
    SIGNATURE_HEADER,
    SIGNATURE_INPUT_HEADER,
    AuthError,
    BadDigest,
    BadSignature,
    ExpiredSignature,
    MalformedSignature,
    MissingSignature,
    NonceMemory,
    PendingNonce,
    ReplayedNonce,
    Target,
    UnknownKey,
    WrongAuthority,
    check_content_digest,
    component_values,
    normalize_authority,
    sign_request,
    signature_base,
    verify_request,
)
from accord.identity.presentations import create_presentation
from accord.identity.structured_fields import parse_dictionary
from accord.ledger.signing import Ed25519Signer
from tests.api.test_app import (
    PART,
    SUM_RIGHT,
    World,
    assert_problem,
    build_world,
    commitment_json,
    post_task,
    reveal_json,
)

BASE = "http://testserver"
JSON = "application/json"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("api-auth") / "home")


@pytest.fixture(scope="module")
def client(world: World) -> TestClient:
    return TestClient(world.app())


@pytest.fixture(scope="module")
def task_id(client: TestClient, world: World) -> str:
    return str(post_task(client, world.signers["req"])["task_id"])


Route = tuple[str, Callable[[World, str], dict[str, Any] | None]]


def _post_body(world: World, task: str) -> dict[str, Any]:
    return {"title": "t", "capabilities": ["arithmetic"], "budget": "1000wei"}


MUTATING: dict[str, Route] = {
    "post-task": ("/tasks", _post_body),
    "commit": (
        "/tasks/{task}/commitments",
        lambda w, t: commitment_json(w.signers["ada"], t, 10**17),
    ),
    "reveal": ("/tasks/{task}/reveals", lambda w, t: reveal_json(w.signers["ada"], t, 10**17)),
    "award": ("/tasks/{task}/award", lambda w, t: None),
    "challenge": ("/registration/challenge", lambda w, t: None),
    "register": ("/registration", lambda w, t: {"challenge": "x" * 43, "presentation": {}}),
}


def _request(name: str, world: World, task: str) -> tuple[str, bytes]:
    path, body_of = MUTATING[name]
    body = body_of(world, task)
    return path.format(task=task), b"" if body is None else json.dumps(body).encode()


def _signed(signer: Any, path: str, body: bytes, **options: Any) -> dict[str, str]:
    """Headers signing POST `path` on the test server, with a JSON content type."""
    return sign_request(signer, "POST", BASE + path, body, content_type=JSON, **options)


def _send(client: TestClient, path: str, body: bytes, headers: dict[str, str]) -> Any:
    sent = httpx.Headers({"content-type": JSON})
    sent.update(headers)  # case-insensitively: one Content-Type line
    return client.post(path, content=body, headers=sent)


class _Claiming:
    """A signer that claims `did` (the keyid) but signs with another key."""

    def __init__(self, did: str, key: Ed25519Signer) -> None:
        self.did = did
        self.kid = did + "#key"
        self.key = key

    def sign(self, message: bytes) -> bytes:
        return self.key.sign(message)


@pytest.mark.parametrize("name", sorted(MUTATING))
def test_unsigned_is_401(client: TestClient, world: World, task_id: str, name: str) -> None:
    path, body = _request(name, world, task_id)
    response = _send(client, path, body, {})
    detail = assert_problem(response, 401)["detail"]
    assert "not signed" in detail and "Signature-Input" in detail
    assert response.headers["WWW-Authenticate"].startswith("Signature ")
    accept = parse_dictionary(response.headers["Accept-Signature"])["accord"]
    assert accept.params["tag"] == "accord" and accept.params["alg"] == "ed25519"


@pytest.mark.parametrize("name", sorted(MUTATING))
def test_forged_is_401(client: TestClient, world: World, task_id: str, name: str) -> None:
    path, body = _request(name, world, task_id)
    ada = world.signers["ada"]
    forged = _signed(_Claiming(ada.did, Ed25519Signer.generate()), path, body)
    assert "does not verify" in assert_problem(_send(client, path, body, forged), 401)["detail"]
    garbage = {**_signed(ada, path, body), SIGNATURE_HEADER: "accord=:!!!:"}
    detail = assert_problem(_send(client, path, body, garbage), 401)["detail"]
    assert "structured dictionary" in detail


@pytest.mark.parametrize("name", sorted(MUTATING))
def test_tampered_is_401(client: TestClient, world: World, task_id: str, name: str) -> None:
    path, body = _request(name, world, task_id)
    headers = _signed(world.signers["ada"], path, body)
    another_body = _send(client, path, body + b" ", headers)
    refused = assert_problem(another_body, 401)["detail"]
    assert ("does not match its Content-Digest" if body else "no Content-Digest") in refused
    another_target = _send(client, path + "?x=1", body, headers)
    assert "does not verify" in assert_problem(another_target, 401)["detail"]
    another_type = _send(client, path, body, {**headers, "content-type": "text/plain"})
    assert "does not verify" in assert_problem(another_type, 401)["detail"]
    as_put = sign_request(world.signers["ada"], "PUT", BASE + path, body, content_type=JSON)
    assert "does not verify" in assert_problem(_send(client, path, body, as_put), 401)["detail"]


@pytest.mark.parametrize("name", sorted(MUTATING))
def test_signed_for_another_host_is_401(
    client: TestClient, world: World, task_id: str, name: str
) -> None:
    path, body = _request(name, world, task_id)
    elsewhere = sign_request(
        world.signers["ada"], "POST", "https://other.example" + path, body, content_type=JSON
    )
    detail = assert_problem(_send(client, path, body, elsewhere), 401)["detail"]
    assert "another host" in detail and "http://testserver" in detail


@pytest.mark.parametrize("name", sorted(MUTATING))
@pytest.mark.parametrize("skew", [-310, 310, -3600])  # past the 300 s window, with room
def test_expired_is_401(
    client: TestClient, world: World, task_id: str, name: str, skew: int
) -> None:
    path, body = _request(name, world, task_id)
    headers = _signed(world.signers["ada"], path, body, created=int(time.time()) + skew)
    assert "time" in assert_problem(_send(client, path, body, headers), 401)["detail"]


def test_a_signature_past_its_expires_is_401(client: TestClient, world: World) -> None:
    headers = _signed(
        world.signers["ada"],
        "/registration/challenge",
        b"",
        created=int(time.time()) - 20,
        lifetime=10,
    )
    detail = assert_problem(_send(client, "/registration/challenge", b"", headers), 401)["detail"]
    assert "expired" in detail


@pytest.mark.parametrize("name", sorted(MUTATING))
def test_replayed_is_401(client: TestClient, world: World, task_id: str, name: str) -> None:
    path, body = _request(name, world, task_id)
    headers = _signed(world.signers["ada"], path, body)
    first = _send(client, path, body, headers)
    assert first.status_code != 401, first.text
    replay = _send(client, path, body, headers)
    assert "replay" in assert_problem(replay, 401)["detail"]


def test_a_fresh_signature_inside_the_window_passes(client: TestClient, world: World) -> None:
    headers = _signed(
        world.signers["ada"], "/registration/challenge", b"", created=int(time.time()) - 250
    )
    assert _send(client, "/registration/challenge", b"", headers).status_code == 200


def test_a_keyid_that_is_not_an_ed25519_did_key_is_401(client: TestClient, world: World) -> None:
    web = _Claiming("did:web:agents.example", world.signers["ada"])
    headers = _signed(web, "/registration/challenge", b"")
    detail = assert_problem(_send(client, "/registration/challenge", b"", headers), 401)["detail"]
    assert "not an Ed25519 did:key" in detail
    other_alg = _signed(world.signers["ada"], "/registration/challenge", b"")
    other_alg[SIGNATURE_INPUT_HEADER] = other_alg[SIGNATURE_INPUT_HEADER].replace(
        'alg="ed25519"', 'alg="rsa-pss-sha512"'
    )
    response = _send(client, "/registration/challenge", b"", other_alg)
    assert 'alg="ed25519"' in assert_problem(response, 401)["detail"]


def test_a_body_without_a_signed_digest_is_401(client: TestClient, world: World) -> None:
    headers = _signed(world.signers["ada"], "/tasks", b"")
    detail = assert_problem(_send(client, "/tasks", b'{"title": "t"}', headers), 401)["detail"]
    assert "no Content-Digest" in detail


# -- a public host name behind a proxy ---------------------------------------------------------


def test_a_service_with_a_public_url_refuses_requests_signed_for_another_host(
    world: World,
) -> None:
    app = world.app(ApiConfig(rate=1000, burst=1000, public_url="https://accord.example"))
    path = "/registration/challenge"
    ada = world.signers["ada"]
    # signed for the public URL, received from the proxy with its own Host: accepted
    behind = TestClient(app, base_url="http://10.0.0.5:8600")
    public = sign_request(ada, "POST", "https://accord.example" + path)
    assert behind.post(path, headers=public).status_code == 200
    # signed for another deployment, and sent with that deployment's Host: refused, saying so
    other = TestClient(app, base_url="https://other.example")
    elsewhere = sign_request(ada, "POST", "https://other.example" + path)
    detail = assert_problem(other.post(path, headers=elsewhere), 401)["detail"]
    assert "signed for other.example, but this service is accord.example" in detail
    # the accord client pointed at the service's private address signs for that address
    detail = assert_problem(behind.post(path, auth=AccordAuth(ada)), 401)["detail"]
    assert "signed for 10.0.0.5:8600, but this service is accord.example" in detail
    # the accord client signs for the host it addresses: to reach the service, that is the URL
    assert (
        TestClient(app, base_url="https://accord.example")
        .post(path, auth=AccordAuth(ada))
        .status_code
        == 200
    )


def test_a_public_url_with_a_path_is_refused() -> None:
    with pytest.raises(ValueError, match="without a path"):
        ApiConfig(public_url="https://accord.example/api")
    with pytest.raises(ValueError, match="absolute http"):
        ApiConfig(public_url="accord.example")


# -- interoperability with http-message-signatures ----------------------------------------------


def _library_keys(signer: Ed25519Signer) -> MappingKeyResolver:
    private = Ed25519PrivateKey.from_private_bytes(signer.seed)
    return MappingKeyResolver(
        public_keys={signer.did: private.public_key()}, private_keys={signer.did: private}
    )


def _library_sign(signer: Ed25519Signer, request: httpx.Request, **options: Any) -> None:
    now = datetime.datetime.now(datetime.UTC)
    HTTPMessageSigner(
        signature_algorithm=algorithms.ED25519, key_resolver=_library_keys(signer)
    ).sign(
        request,
        key_id=signer.did,
        created=now,
        expires=now + datetime.timedelta(minutes=5),
        nonce=base64.urlsafe_b64encode(Ed25519Signer.generate().seed[:18]).decode(),
        label=options.pop("label", "sig1"),
        tag=options.pop("tag", "accord"),
        covered_component_ids=options.pop(
            "covered",
            ("@method", "@target-uri", "@authority", "content-type")
            if request.content
            else ("@method", "@target-uri", "@authority"),
        ),
        body=request.content or None,
        **options,
    )


def test_requests_signed_by_http_message_signatures_are_accepted(world: World) -> None:
    client = TestClient(world.app(ApiConfig(rate=1000, burst=1000, challenge_burst=1000)))
    req = world.signers["req"]
    body = {"title": "Check", "parts": [PART], "checks": [SUM_RIGHT], "budget": "0.1eth"}
    body["bidding"] = "30s"
    posting = client.build_request("POST", "/tasks", json=body)
    _library_sign(req, posting)
    assert "content-digest" in posting.headers["signature-input"]
    posted = client.send(posting)
    assert posted.status_code == 201, posted.text
    assert posted.json()["requester"] == req.did  # the rate limiter's key: the verified DID
    challenge = client.build_request("POST", "/registration/challenge")
    _library_sign(world.signers["ada"], challenge)
    assert client.send(challenge).status_code == 200
    # and the library's requests are refused like ours when they do not hold
    replayed = client.send(challenge)
    assert "replay" in assert_problem(replayed, 401)["detail"]
    tampered = client.build_request("POST", "/tasks", json=body)
    _library_sign(req, tampered)
    tampered.headers["content-digest"] = "sha-256=:" + base64.b64encode(bytes(32)).decode() + ":"
    assert "does not verify" in assert_problem(client.send(tampered), 401)["detail"]
    untagged = client.build_request("POST", "/registration/challenge")
    _library_sign(world.signers["ada"], untagged, tag=None)
    assert "no signature tagged" in assert_problem(client.send(untagged), 401)["detail"]
    narrow = client.build_request("POST", "/registration/challenge")
    _library_sign(world.signers["ada"], narrow, covered=("@method", "@target-uri"))
    detail = assert_problem(client.send(narrow), 401)["detail"]
    assert "does not cover @authority" in detail


def test_our_requests_verify_with_http_message_signatures(client: TestClient, world: World) -> None:
    ada = world.signers["ada"]
    verifier = HTTPMessageVerifier(
        signature_algorithm=algorithms.ED25519, key_resolver=_library_keys(ada)
    )
    required = ("@method", "@target-uri", "@authority", "content-digest", "content-type")
    request = client.build_request("POST", "/tasks?draft=1", json={"title": "t"})
    AccordAuth(ada)(request)
    [result] = verifier.verify(
        request, expect_tag="accord", body=request.content, require_components=required
    )
    assert result.parameters["keyid"] == ada.did and result.parameters["alg"] == "ed25519"
    assert result.covered_components['"@target-uri"'] == "http://testserver/tasks?draft=1"
    assert result.covered_components['"@authority"'] == "testserver"
    assert result.nonce and result.parameters["expires"] > result.parameters["created"]
    # the library sees the same tampering the service refuses
    with pytest.raises(InvalidSignature):
        verifier.verify(request, expect_tag="accord", body=request.content + b" ")
    moved = client.build_request("POST", "/tasks?draft=2", json={"title": "t"})
    moved.headers.update({k: v for k, v in request.headers.items() if "signature" in k})
    moved.headers["content-digest"] = request.headers["content-digest"]
    with pytest.raises(InvalidSignature):
        verifier.verify(moved, expect_tag="accord", body=moved.content)


# -- the cross-user matrix -------------------------------------------------------------------


def test_b_cannot_commit_or_reveal_for_a(client: TestClient, world: World) -> None:
    ada, bob = world.signers["ada"], world.signers["bob"]
    task = str(post_task(client, world.signers["req"])["task_id"])
    as_bob = AccordAuth(bob)
    commit_a = commitment_json(ada, task, 10**17)
    assert_problem(client.post(f"/tasks/{task}/commitments", json=commit_a, auth=as_bob), 403)
    reveal_a = reveal_json(ada, task, 10**17)
    assert_problem(client.post(f"/tasks/{task}/reveals", json=reveal_a, auth=as_bob), 403)
    # the owner can
    ok = client.post(f"/tasks/{task}/commitments", json=commit_a, auth=AccordAuth(ada))
    assert ok.status_code == 201, ok.text
    # bob's body but ada's signature on the request: still not ada's to send
    commit_b = commitment_json(bob, task, 10**17)
    assert_problem(
        client.post(f"/tasks/{task}/commitments", json=commit_b, auth=AccordAuth(ada)), 403
    )


def test_only_the_requester_or_operator_awards(client: TestClient, world: World) -> None:
    task = str(post_task(client, world.signers["req"])["task_id"])
    for intruder in ("ada", "bob", "carol"):
        response = client.post(f"/tasks/{task}/award", auth=AccordAuth(world.signers[intruder]))
        assert "only the requester" in assert_problem(response, 403)["detail"]
    stranger = Ed25519Signer.generate()
    assert_problem(client.post(f"/tasks/{task}/award", auth=AccordAuth(stranger)), 403)
    # the requester and the operator pass authorisation (the auction is not due yet: 409)
    for owner in (world.signers["req"], world.operator):
        assert_problem(client.post(f"/tasks/{task}/award", auth=AccordAuth(owner)), 409)


def test_b_cannot_register_as_a(client: TestClient, world: World) -> None:
    ada, bob = world.signers["ada"], world.signers["bob"]
    challenge = client.post("/registration/challenge", auth=AccordAuth(ada)).json()
    presentation = create_presentation(
        ada, [], challenge["challenge"], challenge["domain"], world.clock()
    )
    body = {"challenge": challenge["challenge"], "presentation": presentation}
    assert_problem(client.post("/registration", json=body, auth=AccordAuth(bob)), 403)


def test_b_cannot_post_as_a(client: TestClient, world: World) -> None:
    """A task is posted by the signer of the request, never by a DID named in the body."""
    bob = world.signers["bob"]
    task = post_task(client, bob)
    assert task["requester"] == bob.did


# -- units --------------------------------------------------------------------------------------


def test_nonce_memory_forgets_after_the_window() -> None:
    memory = NonceMemory(window=10)
    assert memory.use("did:a", "n" * 16, 100.0, 100.0)
    assert not memory.use("did:a", "n" * 16, 100.0, 105.0)
    assert memory.use("did:b", "n" * 16, 100.0, 105.0)  # per DID
    memory.use("did:a", "m" * 16, 200.0, 200.0)  # purges old entries
    assert len(memory) == 1


def test_token_bucket() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=1.0, burst=2, clock=lambda: now[0])
    assert limiter.take("k") is None and limiter.take("k") is None
    wait = limiter.take("k")
    assert wait is not None and 0 < wait <= 1
    now[0] += 1.0
    assert limiter.take("k") is None


def test_a_pending_nonce_is_spent_once_where_the_route_says() -> None:
    """`PendingNonce` (what `signed_later` verifies with) records nothing until it is spent:
    a request verified with it twice is refused on the second spend, not before."""
    ada = Ed25519Signer.generate()
    body = b'{"a": 1}'
    signed = sign_request(ada, "POST", TARGET.uri, body, content_type=JSON, created=NOW)
    nonces = NonceMemory()
    first, second = PendingNonce(), PendingNonce()
    assert _verify(signed, body, nonces=first) == _verify(signed, body, nonces=second) == ada.did
    first.spend(nonces)
    with pytest.raises(ReplayedNonce, match="already used"):
        second.spend(nonces)
    with pytest.raises(RuntimeError, match="not verified"):
        PendingNonce().spend(nonces)
    with pytest.raises(BadDigest):  # a request that fails verification keeps no nonce
        _verify(signed, b'{"a": 2}', nonces=(refused := PendingNonce()))
    with pytest.raises(RuntimeError):
        refused.spend(nonces)


def test_a_replayed_bid_is_refused_and_logged_once(
    client: TestClient, world: World, task_id: str
) -> None:
    """Commitments and reveals spend their nonce in the route's worker thread
    (`signed_later`): the replay of a bid that went through is still 401, and the log holds
    the bid once."""
    from accord.ledger.wiring import open_store

    bob = world.signers["bob"]
    path = f"/tasks/{task_id}/commitments"
    body = json.dumps(commitment_json(bob, task_id, 10**17)).encode()
    headers = _signed(bob, path, body)
    assert _send(client, path, body, headers).status_code == 201
    assert "replay" in assert_problem(_send(client, path, body, headers), 401)["detail"]
    store = open_store(world.settings)
    logged = [
        s for s in store.find(kind="bid.committed", subject=task_id) if bob.did in s.data.decode()
    ]
    assert len(logged) == 1


def test_sql_nonces_refuse_a_replay_across_workers(tmp_path: Any) -> None:
    """Two workers share the service's database: a nonce used at one is refused at the other."""
    from accord.api.auth import SqlRequestNonces
    from accord.ledger.database import make_engine

    engine = make_engine(f"sqlite:///{tmp_path / 'shared.db'}")
    worker_a, worker_b = SqlRequestNonces(engine, 300), SqlRequestNonces(engine, 300)
    now = 1_000_000.0
    assert worker_a.use("did:key:z6MkA", "n1", now, now)
    assert not worker_b.use("did:key:z6MkA", "n1", now, now)
    assert worker_b.use("did:key:z6MkB", "n1", now, now)  # nonces are per DID
    later = now + 10 * 300
    assert worker_a.use("did:key:z6MkA", "n2", later, later)  # old ones are purged
    assert worker_b.use("did:key:z6MkA", "n1", later, later)
    engine.dispose()


# -- verify_request: one error per cause ------------------------------------------------------

NOW = 1_800_000_000
TARGET = Target.from_url("https://accord.example/tasks")


def _lines(headers: dict[str, str], body: bytes) -> list[tuple[str, str]]:
    return [(name.lower(), value) for name, value in headers.items()] + (
        [("content-length", str(len(body)))] if body else []
    )


def _verify(headers: dict[str, str], body: bytes = b"", **options: Any) -> str:
    options.setdefault("nonces", NonceMemory())
    options.setdefault("now", NOW)
    target = options.pop("target", TARGET)
    return verify_request("POST", target, _lines(headers, body), body, **options)


@pytest.mark.parametrize(
    ("tamper", "error", "words"),
    [
        (lambda h: {}, MissingSignature, "not signed"),
        (
            lambda h: {**h, "Signature-Input": h["Signature-Input"].replace("accord", "x")},
            MissingSignature,
            "no signature tagged",
        ),
        (lambda h: {**h, "Signature": "accord=(1 2"}, MalformedSignature, "structured"),
        (
            lambda h: {**h, "Signature-Input": h["Signature-Input"].replace(";created=", ";when=")},
            MalformedSignature,
            "unknown signature parameter 'when'",
        ),
        (
            lambda h: {**h, "Signature-Input": h["Signature-Input"].replace('nonce="', 'nonce="!')},
            MalformedSignature,
            "nonce",
        ),
        (
            lambda h: {**h, "Signature-Input": h["Signature-Input"].replace("keyid=", "kid=")},
            MalformedSignature,
            "unknown signature parameter",
        ),
        (
            lambda h: {
                **h,
                "Signature-Input": h["Signature-Input"].replace('"@method"', "@method"),
            },
            MalformedSignature,
            "structured",
        ),
        (
            lambda h: {**h, "Signature-Input": h["Signature-Input"].replace('"@method" ', "")},
            MalformedSignature,
            "does not cover @method",
        ),
        (
            lambda h: {
                **h,
                "Signature-Input": h["Signature-Input"].replace(
                    '"@method"', '"@method" "@query-param";name="a"'
                ),
            },
            MalformedSignature,
            "not supported",
        ),
        (lambda h: {**h, "Content-Type": "text/plain"}, BadSignature, "does not verify"),
        (
            lambda h: {**h, "Content-Digest": "sha-256=:" + "A" * 43 + "=:"},
            BadSignature,
            "does not verify",
        ),
    ],
)
def test_each_failure_has_its_error(
    tamper: Callable[[dict[str, str]], dict[str, str]], error: type[AuthError], words: str
) -> None:
    body = b'{"title": "t"}'
    headers = sign_request(
        Ed25519Signer.generate(), "POST", TARGET.uri, body, content_type=JSON, created=NOW
    )
    assert _verify(headers, body)
    with pytest.raises(error, match=words):
        _verify(tamper(headers), body)


def test_time_digest_authority_and_nonce_errors() -> None:
    ada = Ed25519Signer.generate()
    body = b'{"a": 1}'
    signed = sign_request(ada, "POST", TARGET.uri, body, content_type=JSON, created=NOW)
    nonces = NonceMemory()
    assert _verify(signed, body, nonces=nonces) == ada.did
    with pytest.raises(ReplayedNonce, match="already used"):
        _verify(signed, body, nonces=nonces, now=NOW + 1)
    with pytest.raises(ExpiredSignature, match="more than 300 s"):
        _verify(signed, body, now=NOW + 301)
    with pytest.raises(ExpiredSignature, match="expired at"):
        _verify(signed, body, now=NOW + 400, window=1000.0)  # expires = created + 300
    with pytest.raises(BadDigest, match="does not match its Content-Digest"):
        _verify(signed, b'{"a": 2}')
    elsewhere = sign_request(
        ada, "POST", "https://other.example/tasks", body, content_type=JSON, created=NOW
    )
    with pytest.raises(WrongAuthority, match=r"signed for other\.example, but this service is"):
        _verify(elsewhere, body, received=Target.from_url("https://other.example/tasks"))
    with pytest.raises(BadSignature, match="another host"):
        _verify(elsewhere, body)  # no Host to tell: it does not verify
    with pytest.raises(UnknownKey, match="not an Ed25519 did:key"):
        _verify(_signed(_Claiming("did:key:zQ3shXYZ", ada), "/tasks", b"", created=NOW))


def test_a_signature_may_cover_more_and_use_any_label() -> None:
    signer = Ed25519Signer.generate()
    request = httpx.Request(
        "POST",
        TARGET.uri + "?b=2",
        headers={"Date": "today", "Content-Type": JSON},
        content=b"{}",
    )
    _library_sign(
        signer,
        request,
        label="anything",
        covered=(
            "date",
            "@method",
            "@path",
            "@query",
            "@authority",
            "@target-uri",
            "content-type",
            "@scheme",
            "@request-target",
        ),
    )
    target = replace_query(TARGET, "b=2")
    created = int(
        parse_dictionary(request.headers["signature-input"])["anything"].params["created"]
    )  # type: ignore[arg-type]
    fields = [(k.decode(), v.decode()) for k, v in request.headers.raw]
    assert verify_request("POST", target, fields, b"{}", nonces=NonceMemory(), now=created) == (
        signer.did
    )


def replace_query(target: Target, query: str) -> Target:
    return Target(target.scheme, target.authority, target.path, query)


# -- RFC vectors ---------------------------------------------------------------------------------

# RFC 9421 Appendix B.1.4 (test-key-ed25519) and B.2.6 (signing a request using ed25519).
_RFC_KEY = b"""-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF
-----END PRIVATE KEY-----
"""
_RFC_FIELDS = [
    ("host", "example.com"),
    ("date", "Tue, 20 Apr 2021 02:07:55 GMT"),
    ("content-type", "application/json"),
    (
        "content-digest",
        "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:",
    ),
    ("content-length", "18"),
]
_RFC_BASE = """"date": Tue, 20 Apr 2021 02:07:55 GMT
"@method": POST
"@path": /foo
"@authority": example.com
"content-type": application/json
"content-length": 18
"@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length")\
;created=1618884473;keyid="test-key-ed25519\""""
_RFC_SIGNATURE = (
    "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw=="
)


def test_rfc_9421_ed25519_vector() -> None:
    key = load_pem_private_key(_RFC_KEY, None)
    seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    signature_input = (
        'sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length")'
        ';created=1618884473;keyid="test-key-ed25519"'
    )
    covered = parse_dictionary(signature_input)["sig-b26"]
    assert isinstance(covered.value, list)
    components = [str(item.value) for item in covered.value]
    target = Target.from_url("https://example.com/foo?param=Value&Pet=dog")
    base = signature_base(
        components, component_values(components, "POST", target, _RFC_FIELDS), covered
    )
    assert base.decode() == _RFC_BASE
    assert Ed25519Signer(seed).sign(base) == base64.b64decode(_RFC_SIGNATURE)


def test_rfc_9530_content_digest_vector() -> None:
    body = b'{"hello": "world"}'
    check_content_digest(_RFC_FIELDS[3][1], body)  # sha-512, RFC 9421 B.2
    check_content_digest("sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:", body)
    with pytest.raises(BadDigest, match="does not match"):
        check_content_digest(_RFC_FIELDS[3][1], body + b"\n")
    with pytest.raises(BadDigest, match="no sha-256"):
        check_content_digest("md5=:AAAA:", body)


@pytest.mark.parametrize(
    ("host", "scheme", "authority"),
    [
        ("Example.COM", "https", "example.com"),
        ("example.com:443", "https", "example.com"),
        ("example.com:80", "https", "example.com:80"),
        ("127.0.0.1:8600", "http", "127.0.0.1:8600"),
        ("[::1]:80", "http", "[::1]"),
    ],
)
def test_authority_normalization(host: str, scheme: str, authority: str) -> None:
    assert normalize_authority(host, scheme) == authority


@pytest.mark.parametrize("host", ["", "a b", "host:port", "a/b", "example.com:"])
def test_a_host_that_is_not_one_is_refused(host: str) -> None:
    with pytest.raises(ValueError):
        normalize_authority(host, "http")
