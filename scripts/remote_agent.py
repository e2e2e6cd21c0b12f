"""A remote agent: joins an accord service through its HTTP API only, with its own key.

    python scripts/remote_agent.py --server URL --key FILE --port P --name NAME
        [--capability arithmetic ...] [--items N] [--price 0.3eth] [--host 127.0.0.1]
        [--operator DID|service]

It registers by DID-auth (the record is an `http` agent at http://HOST:P/run), sits an exam in
each capability with the reference solver, binds a payout address (a fresh secp256k1 account
kept next to its key), then serves `POST /run` (the reference agent of
`coordinator.agent_service`: `{"item": ...}` in, `{"answer": ...}` out, the one format of
exams and team work), `POST /sign`, where it signs its own team reports, nothing
else, and `POST /accord/notify`, where the service tells it it won a task. With `--price` it
watches for tasks taking bids in its capabilities, commits a sealed bid at that price, and
reveals it once bidding closes. Every ledger event of its own it builds and signs itself.

With `--operator DID` it answers only calls from accord: each POST must be signed by that
operator's did:key (RFC 9421, tag "accord-call", `identity.http_signatures.
verify_accord_call`), else 401. `--operator service` trusts the operator the service names
(`GET /agents/{did}/next-seq`), fetched once on start.

It prints one JSON line per step (`registered`, `credential`, `payout`, `ready`, `committed`,
`revealed`, `awarded`) on stdout; SIGTERM or SIGINT stops it (exit 0).
"""

from __future__ import annotations

import argparse
import json
import secrets
import signal
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from eth_account import Account  # noqa: E402

from coordinator.agent_service import (  # noqa: E402
    MAX_REQUEST_BYTES,
    AgentServer,
    TaskError,
    _Handler,
    answer_request,
    make_server,
)
from coordinator.runner import CONVERSATION_MESSAGE  # noqa: E402
from identity.http_auth import AccordAuth  # noqa: E402
from identity.payout import bind_payout_address  # noqa: E402
from identity.presentations import create_presentation  # noqa: E402
from ledger.canonical import JSONValue, parse_canonical  # noqa: E402
from ledger.errors import SealError  # noqa: E402
from ledger.events import Event, make_entry  # noqa: E402
from ledger.sealing import open_sealed  # noqa: E402
from ledger.signing import Ed25519Signer, b64url, read_keyfile, write_keyfile  # noqa: E402
from market.money import Wei, parse_amount  # noqa: E402
from market.sealed import commit_bid, reveal_bid  # noqa: E402

POLL_SECONDS = 0.2
NOTIFY_PATH = "/accord/notify"


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def load_key(path: Path) -> Ed25519Signer:
    """The agent's key: read from `path`, or made there (mode 0600) on first use."""
    if not path.exists():
        write_keyfile(path, Ed25519Signer.generate())
    return read_keyfile(path)


class Client:
    """The service's API, every request signed by the agent."""

    def __init__(self, server: str, signer: Ed25519Signer) -> None:
        self.signer = signer
        self.http = httpx.Client(base_url=server, timeout=30.0, auth=AccordAuth(signer))

    def call(self, method: str, path: str, body: Any = None) -> Any:
        response = self.http.request(method, path, json=body)
        if response.status_code >= 400:
            raise SystemExit(f"{method} {path}: HTTP {response.status_code}: {response.text}")
        return response.json()

    def entry(self, kind: str, subject: str, body: dict[str, JSONValue]) -> dict[str, Any]:
        """A ledger entry of the agent's own, with its next seq, signed here."""
        info = self.call("GET", f"/agents/{self.signer.did}/next-seq")
        entry = make_entry(
            self.signer,
            kind=kind,
            seq=int(info["seq"]),
            at=datetime.now(UTC),
            subject=subject,
            body=body,
        )
        return entry.to_json()


def register(client: Client, name: str, endpoint: str) -> dict[str, Any]:
    signer = client.signer
    challenge = client.call("POST", "/registration/challenge")
    presentation = create_presentation(
        signer, [], challenge["challenge"], challenge["domain"], datetime.now(UTC)
    )
    body: dict[str, JSONValue] = {
        "name": name,
        "domain": challenge["domain"],
        "challenge": challenge["challenge"],
        "proof": presentation["proof"],
        "custody": "self",  # this agent keeps its own key
    }
    entry = client.entry("agent.registered", signer.did, body)
    record: dict[str, Any] = client.call(
        "POST",
        "/remote/registration",
        {
            "name": name,
            "endpoint": endpoint,
            "challenge": challenge["challenge"],
            "presentation": presentation,
            "entry": entry,
        },
    )
    return record


def sit_exam(client: Client, capability: str, items: int | None) -> dict[str, Any]:
    exam = client.call("POST", "/exams", {"capability": capability, "items": items})
    exam_id = exam["exam_id"]
    for item in exam["items"]:
        try:
            answer = answer_request({"item": item})
        except TaskError:
            continue
        entry = client.entry(
            "exam.answered",
            exam_id,
            {"exam_id": exam_id, "item_id": item["item_id"], "answer": answer},
        )
        client.call("POST", f"/exams/{exam_id}/answers", {"entry": entry})
    graded: dict[str, Any] = client.call("POST", f"/exams/{exam_id}/grade")
    return graded


def bind_payout(client: Client, key_path: Path) -> str:
    signer = client.signer
    eth_path = key_path.with_suffix(".eth.json")
    if not eth_path.exists():
        eth_path.write_text(json.dumps({"key": "0x" + secrets.token_hex(32)}))
        eth_path.chmod(0o600)
    account = Account.from_key(json.loads(eth_path.read_text())["key"])
    info = client.call("GET", f"/agents/{signer.did}/next-seq")
    binding = bind_payout_address(
        signer, account, int(info["chain_id"]), secrets.token_hex(16), datetime.now(UTC)
    )
    entry = client.entry("payout.bound", signer.did, {"binding": binding})
    bound: dict[str, Any] = client.call("POST", f"/agents/{signer.did}/payout", {"entry": entry})
    return str(bound["address"])


# -- the agent's service: POST /run (the reference agent) and POST /sign ---------------------


class RemoteAgentServer(AgentServer):
    signer: Ed25519Signer
    answers: dict[str, Any]
    answers_lock: threading.Lock


class _RemoteHandler(_Handler):
    server: RemoteAgentServer

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if length < 0 or length > MAX_REQUEST_BYTES:
            raise TaskError(413, "a Content-Length up to 1 MiB is required")
        return self.rfile.read(length)

    def do_POST(self) -> None:
        if self.path not in ("/run", "/sign", NOTIFY_PATH):
            self._reply(404, {"error": f"no route POST {self.path}"})
            return
        try:
            body = self._body()
            if self.refused_call(body):  # with --operator: accord's calls only
                return
            request = json.loads(body)
            if self.path == NOTIFY_PATH:
                self._notice(request)
            elif self.path == "/run":
                answer = answer_request(request)
                with self.server.answers_lock:
                    self.server.answers[str(request["item"].get("item_id"))] = answer
                self._reply(200, {"answer": answer, "agent": self.server.did})
            else:
                text = str(request["event"]).encode()
                self._check_report(text, request.get("openings") or {})
                self._reply(200, {"sig": b64url(self.server.signer.sign(text))})
        except json.JSONDecodeError as exc:
            self._reply(400, {"error": f"the request is not JSON: {exc}"})
        except TaskError as exc:
            self._reply(exc.status, {"error": str(exc)})
        except (KeyError, TypeError, ValueError) as exc:
            self._reply(400, {"error": f"malformed request: {exc!r}"})

    def _notice(self, notice: Any) -> None:
        """The service tells this agent it won a task: print it (the bid loop polls too)."""
        if not isinstance(notice, dict) or notice.get("event") != "task.awarded":
            raise TaskError(400, 'a notice is {"event": "task.awarded", ...}')
        if notice.get("winner") != self.server.did:
            raise TaskError(422, f"the notice names {notice.get('winner')}, not this agent")
        say("awarded", task=notice.get("task_id"), index=notice.get("index"))
        self._reply(200, {"received": True})

    def _check_report(self, text: bytes, openings: dict[str, str]) -> None:
        """Sign only a team report of its own whose answers are the ones it gave: the report
        names each answer by its commitment, and `openings` (sent beside it) holds the sealed
        answers, which are opened, checked against the commitments and compared."""
        try:
            event = Event.from_json(parse_canonical(text))
        except Exception as exc:
            raise TaskError(400, f"not one canonical event: {exc}") from exc
        me = self.server.signer.did
        message = event.body.get("message")
        if event.actor != me or event.kind != CONVERSATION_MESSAGE or not isinstance(message, dict):
            raise TaskError(403, "this agent signs only its own conversation messages")
        if message.get("kind") != "report" or message.get("speaker") != me:
            raise TaskError(403, "this agent signs only its own reports")
        result = message.get("result")
        contributions = result.get("contributions", []) if isinstance(result, dict) else []
        with self.server.answers_lock:
            for contribution in contributions:
                commitment = str(contribution.get("output_sha256"))
                try:
                    sealed = open_sealed(str(openings.get(commitment, "")).encode(), commitment)
                except SealError as exc:
                    raise TaskError(403, f"the report names an answer not shown: {exc}") from exc
                given = self.server.answers.get(str(contribution.get("part")), object())
                if contribution.get("agent") != me or sealed.value != given:
                    raise TaskError(403, "the report carries work this agent did not do")


def serve(
    signer: Ed25519Signer, host: str, port: int, operator: str | None = None
) -> RemoteAgentServer:
    server = make_server(port, host=host, allow_remote=True, did=signer.did, trust=operator)
    server.__class__ = RemoteAgentServer
    assert isinstance(server, RemoteAgentServer)
    server.RequestHandlerClass = _RemoteHandler
    server.signer = signer
    server.answers = {}
    server.answers_lock = threading.Lock()
    return server


# -- bidding ---------------------------------------------------------------------------------


def open_calls(client: Client, capabilities: set[str]) -> list[dict[str, Any]]:
    """The tasks taking bids now that need one of our capabilities: `GET /tasks?state=bidding
    &capability=...`, every page (the service pages its lists; Link names the next page)."""
    found: dict[str, dict[str, Any]] = {}
    for capability in sorted(capabilities):
        params: dict[str, Any] = {"state": "bidding", "capability": capability, "limit": 200}
        while True:
            response = client.http.get("/tasks", params=params)
            response.raise_for_status()
            found.update((task["id"], task) for task in response.json())
            cursor = response.headers.get("Accord-Next-Cursor")
            if cursor is None:
                break
            params["cursor"] = cursor
    return list(found.values())


def bid_loop(client: Client, capabilities: set[str], price: int, stopping: threading.Event) -> None:
    """Commit on every task taking bids in our capabilities; reveal once the service says
    bidding has closed (its clock decides the windows, not this machine's)."""
    signer = client.signer
    pending: dict[str, bytes] = {}
    done: set[str] = set()
    while not stopping.wait(POLL_SECONDS):
        try:
            tasks = open_calls(client, capabilities)
        except httpx.HTTPError:
            continue
        for task in tasks:
            task_id = task["id"]
            if task_id in done or task_id in pending:
                continue
            wanted = set(task["spec"]["capabilities"])
            if task.get("state") != "bidding" or not wanted <= capabilities:
                continue
            if int(task["spec"]["budget"]) < price:
                continue
            salt = secrets.token_bytes(32)
            commitment = commit_bid(signer, task_id, Wei(price), salt).to_json()
            response = client.http.post(f"/tasks/{task_id}/commitments", json=commitment)
            if response.status_code != 201:
                say("refused", task=task_id, status=response.status_code, detail=response.text)
                done.add(task_id)
                continue
            pending[task_id] = salt
            say("committed", task=task_id, price=str(price))
        for task_id, salt in list(pending.items()):
            try:
                state = client.http.get(f"/tasks/{task_id}").json().get("state")
            except (httpx.HTTPError, ValueError):
                continue
            if state == "bidding":
                continue
            shown = reveal_bid(signer, task_id, Wei(price), salt).to_json()
            response = client.http.post(f"/tasks/{task_id}/reveals", json=shown)
            if response.status_code == 409 and "early" in response.text:
                continue
            del pending[task_id]
            done.add(task_id)
            say("revealed", task=task_id, status=response.status_code, price=str(price))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--server", required=True, help="the accord service's base URL")
    parser.add_argument("--key", required=True, type=Path, help="the agent's key file")
    parser.add_argument("--port", required=True, type=int, help="the port /run listens on")
    parser.add_argument("--host", default="127.0.0.1", help="the address /run listens on")
    parser.add_argument("--name", default="remote", help="the agent's name on the service")
    parser.add_argument("--capability", action="append", default=[], help="exam to sit")
    parser.add_argument("--items", type=int, default=None, help="items per exam")
    parser.add_argument("--price", default=None, help="bid this price (0.3eth, wei...)")
    parser.add_argument(
        "--operator",
        metavar="DID|service",
        default=None,
        help="answer only calls signed by this operator did:key ('service': the one the "
        "service names)",
    )
    args = parser.parse_args(argv)
    signer = load_key(args.key)
    client = Client(args.server, signer)
    operator = args.operator
    if operator == "service":
        operator = str(client.call("GET", f"/agents/{signer.did}/next-seq")["operator"])
    server = serve(signer, args.host, args.port, operator)
    endpoint = f"{server.url}/run"
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    serving = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    serving.start()
    record = register(client, args.name, endpoint)
    say("registered", did=signer.did, endpoint=record["endpoint"], index=record["index"])
    for capability in args.capability:
        graded = sit_exam(client, capability, args.items)
        say(
            "credential",
            capability=capability,
            passed=graded["passed"],
            credential=graded["credential_id"],
        )
    address = bind_payout(client, args.key)
    say("payout", address=address)
    say("ready", did=signer.did, endpoint=endpoint, operator=operator)
    if args.price is not None:
        bidder = threading.Thread(
            target=bid_loop,
            args=(client, set(args.capability), int(parse_amount(args.price)), stopping),
            daemon=True,
        )
        bidder.start()
    while not stopping.wait(0.2):
        pass
    serving.join(timeout=5)
    server.server_close()
    time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
