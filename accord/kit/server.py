"""A kit agent's own HTTP service, where leaders and the accord service reach it.

    POST /run            `{"item": ...}` -> `{"answer": ..., "did": DID}`: the item format of
                         exams and team work; answered only for a part a logged conversation
                         of a running task the caller leads (or, for the operator, any running
                         task) assigned to this agent and has not seen reported, and always
                         for that part's input as the requester posted it (the operator's
                         other calls, its exams, as sent); 403 otherwise, 422
                         `{"error"}` when its handler cannot answer; before it hands a
                         contract holder its first answer for an assignment it logs, itself,
                         that it answered it (`work.answered`, via `log_answered`), 503
                         when it cannot: so the leader cannot declare it absent to take it
    POST /sign           `{"event": JCS text, "openings": {commitment: sealed text}}` ->
                         `{"sig": base64url}`: it signs only its own team reports, for
                         assignments it received in a /run: a success whose every part is one
                         it answered for that sub-task, with the answer it gave (opened from
                         `openings` and compared); a failure only for an assignment it did
                         not answer in full (after which it signs no success for it)
    POST /panel          a dispute's panel call from the service's operator, answered by the
                         seat `accord.kit.panel.attach_panel` sets (`panel`): 404 without one
    POST /accord/notify  a notice from the service (`{"event": "task.awarded", "task_id"}`):
                         wakes the agent's loop, which then reads the task from the service
    GET  /health         `{"status": "ok", "did": DID}`

Every call must be signed (RFC 9421, tag "accord-call", `accord.identity.http_signatures`) for this
agent's own URL: a notice by the service's operator; work and signatures by the operator
(a hosted leader's team) or by a caller `may_call` admits (the contract holder of a task
this agent may work on); anything else is 401 or 403. Beyond that, /sign checks what it
signs, and a notice only makes the agent look at the service sooner.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from accord.coordinator.agent_service import reply_json
from accord.coordinator.conversation import CONVERSATION_MESSAGE
from accord.identity.challenges import JSON, JSONObject, validate_output
from accord.identity.errors import ExamError
from accord.identity.http_signatures import (
    CALL_TAG,
    AuthError,
    NonceMemory,
    Target,
    challenge_headers,
    verify_request,
)
from accord.identity.runtimes import AgentRuntime, AgentRuntimeError
from accord.kit.assignments import Assignment
from accord.kit.panel import PanelRefused
from accord.ledger.canonical import parse_canonical
from accord.ledger.errors import SealError
from accord.ledger.events import Event
from accord.ledger.sealing import open_sealed
from accord.ledger.signing import Signer, b64url

MAX_REQUEST_BYTES = 1 << 20


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class AnswersGiven:
    """Every assignment this agent received in a /run and what it answered for each part:
    what its /sign compares a report with."""

    def __init__(self) -> None:
        self._answers: dict[tuple[str, str], dict[str, list[JSON]]] = {}
        self._unanswered: dict[tuple[str, str], set[str]] = {}
        self._renounced: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def received(self, work: Assignment) -> None:
        with self._lock:
            self._unanswered.setdefault((work.conv_id, work.sub_id), set()).add(work.part)

    def add(self, work: Assignment, answer: JSON) -> None:
        key = (work.conv_id, work.sub_id)
        with self._lock:
            self._answers.setdefault(key, {}).setdefault(work.part, []).append(answer)
            self._unanswered.get(key, set()).discard(work.part)

    def gave(self, conv_id: str, sub_id: str, part: str, answer: JSON) -> bool:
        with self._lock:
            if (conv_id, sub_id) in self._renounced:
                return False
            return answer in self._answers.get((conv_id, sub_id), {}).get(part, [])

    def renounce(self, conv_id: str, sub_id: str) -> bool:
        """Whether this agent failed the assignment (received, some part of it unanswered):
        if so it gives it up for good (no success report is signed for it after)."""
        key = (conv_id, sub_id)
        with self._lock:
            if not self._unanswered.get(key):
                return False
            self._renounced.add(key)
            return True


def check_report(did: str, text: bytes, openings: dict[str, str], given: AnswersGiven) -> None:
    """Pure but for `given`: refuse (Refused) unless `text` is the canonical JCS of a team
    report of `did`'s own for an assignment it received: a success whose every contribution is
    its own, of a part it answered for that sub-task, opening (from `openings`) to the answer
    it gave; a failure only for an assignment it did not answer in full."""
    try:
        event = Event.from_json(parse_canonical(text))
    except Exception as exc:
        raise Refused(400, f"not one canonical event: {exc}") from exc
    message = event.body.get("message")
    if event.actor != did or event.kind != CONVERSATION_MESSAGE or not isinstance(message, dict):
        raise Refused(403, "this agent signs only its own conversation messages")
    if message.get("kind") != "report" or message.get("speaker") != did:
        raise Refused(403, "this agent signs only its own reports")
    result = message.get("result")
    if not isinstance(result, dict):
        raise Refused(400, "a report holds a result")
    conv_id, sub_id = str(event.body.get("conversation")), str(result.get("sub_id"))
    contributions = result.get("contributions") or []
    if result.get("ok") is not True:
        if contributions or not given.renounce(conv_id, sub_id):
            raise Refused(
                403, f"this agent did not fail {sub_id}: it signs no failure report for it"
            )
        return
    if not contributions or result.get("team") is not None:
        raise Refused(403, "this agent reports only its own answers")
    for contribution in contributions:
        commitment = str(contribution.get("output_sha256"))
        try:
            sealed = open_sealed(str(openings.get(commitment, "")).encode(), commitment)
        except SealError as exc:
            raise Refused(403, f"the report names an answer not shown: {exc}") from exc
        if contribution.get("agent") != did or not given.gave(
            conv_id, sub_id, str(contribution.get("part")), sealed.value
        ):
            raise Refused(403, "the report carries work this agent did not do")


def panel_reply(
    panel: Callable[[dict[str, Any]], dict[str, Any]] | None, request: Any
) -> tuple[int, JSON]:
    """The status and body answering a panel call (`accord.kit.panel`)."""
    if panel is None:
        return 404, {"error": "this agent sits on no panel"}
    if not isinstance(request, dict):
        return 400, {"error": "a panel call is a JSON object"}
    try:
        return 200, {"entry": panel(request)}
    except PanelRefused as exc:
        return exc.status, {"error": str(exc)}


class KitServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        signer: Signer,
        runtime: AgentRuntime,
        on_notice: Callable[[dict[str, Any]], None],
        *,
        operator: str,
        may_call: Callable[[str], bool] = lambda did: False,
        public_url: str | None = None,
        work_for: Callable[[str, JSONObject], tuple[Assignment, JSONObject]],
        log_answered: Callable[[Assignment], None] = lambda work: None,
    ) -> None:
        self.signer = signer
        self.runtime = runtime
        self.on_notice = on_notice
        self.operator = operator
        self.may_call = may_call
        self.public_url = public_url
        self.nonces = NonceMemory()
        self.given = AnswersGiven()
        self.work_for = work_for
        """`work_for(caller, item)`: the assignment `item` answers and the item to answer for
        it (the part's posted input); raises Refused when `caller` assigned it none."""
        self.panel: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        """Answers the operator's panel calls (`accord.kit.panel`), once attached."""
        self.log_answered = log_answered
        """`log_answered(work)`: log at the service that this agent answered `work`'s
        assignment (once per assignment); raises Refused when it cannot."""
        super().__init__(address, _KitHandler)

    def caller(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> str:
        """Who signed this call to `path` (401 Refused when nobody did, or not for us)."""
        base = self.public_url or self.url
        try:
            return verify_request(
                method,
                Target.from_url(base.rstrip("/") + path),
                [(name.lower(), value) for name, value in headers],
                body,
                nonces=self.nonces,
                tag=CALL_TAG,
            )
        except (AuthError, ValueError) as exc:
            raise Refused(401, f"{exc} (sign calls to this agent, tag {CALL_TAG!r})") from exc

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"http://{name}:{port}"

    def answer(self, caller: str, request: Any) -> JSON:
        if not isinstance(request, dict) or not isinstance(request.get("item"), dict):
            raise Refused(400, 'the request must be a JSON object {"item": {...}}')
        work, item = self.work_for(caller, request["item"])
        self.given.received(work)
        try:
            answer = self.runtime.answer(item)
        except AgentRuntimeError as exc:
            raise Refused(422, f"cannot answer the item: {exc.reason}") from exc
        try:
            validate_output(work.capability, answer)
        except ExamError as exc:
            raise Refused(
                422, f"the handler's answer is not {work.capability} output: {exc}"
            ) from exc
        if work.conv_id and caller != self.operator:
            # A contract holder's team work: the log holds that it answered before the
            # holder has the answer. (The service's own hosted teams log through the service,
            # which could refuse the receipt anyway; its run holds the write lock meanwhile.)
            self.log_answered(work)
        self.given.add(work, answer)
        return answer


class _KitHandler(BaseHTTPRequestHandler):
    server: KitServer
    protocol_version = "HTTP/1.1"

    def _reply(self, status: int, value: JSON, *, challenge: bool = False) -> None:
        reply_json(self, status, value, challenge_headers(CALL_TAG) if challenge else None)

    def do_GET(self) -> None:
        if self.path != "/health":
            self._reply(404, {"error": f"no route GET {self.path}"})
            return
        self._reply(200, {"status": "ok", "did": self.server.signer.did})

    def do_POST(self) -> None:
        try:
            data = self._read()
            caller = self.server.caller("POST", self.path, list(self.headers.items()), data)
            operator = caller == self.server.operator
            if self.path in ("/accord/notify", "/panel") and not operator:
                raise Refused(403, f"notices come from the service's operator, not {caller}")
            if not operator and not self.server.may_call(caller):
                raise Refused(403, f"{caller} leads no task this agent works on")
            request = json.loads(data)
            if self.path == "/run":
                answer = self.server.answer(caller, request)
                self._reply(200, {"answer": answer, "did": self.server.signer.did})
            elif self.path == "/sign":
                text = str(request["event"]).encode()
                openings = request.get("openings") or {}
                check_report(self.server.signer.did, text, openings, self.server.given)
                self._reply(200, {"sig": b64url(self.server.signer.sign(text))})
            elif self.path == "/panel":
                self._reply(*panel_reply(self.server.panel, request))
            elif self.path == "/accord/notify":
                if not isinstance(request, dict):
                    raise Refused(400, "a notice is a JSON object")
                self.server.on_notice(request)
                self._reply(202, {"status": "noted"})
            else:
                self._reply(404, {"error": f"no route POST {self.path}"})
        except Refused as exc:
            self._reply(exc.status, {"error": str(exc)}, challenge=exc.status == 401)
        except json.JSONDecodeError as exc:
            self._reply(400, {"error": f"the request is not JSON: {exc}"})
        except RecursionError:
            self._reply(400, {"error": "the request's JSON is nested too deep"})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self._reply(400, {"error": f"malformed request: {exc!r}"})

    def _read(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if length < 0 or length > MAX_REQUEST_BYTES:
            raise Refused(413, "a Content-Length up to 1 MiB is required")
        return self.rfile.read(length)

    def log_message(self, format: str, *args: Any) -> None:
        pass
