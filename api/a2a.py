"""The market over A2A v1.0: a JSON-RPC 2.0 endpoint at `POST /a2a` (streams as SSE).

An A2A client posts a paid task by sending a message whose one data part is the task spec —
the body of `POST /tasks` (title, budget, windows, parts, checks); the text parts, if any,
become the description when the spec has none. The request is signed like every mutating
request (`accord.api.auth`): the signer is the requester, and an unsigned call gets 401 problem+json
before any JSON-RPC is read. That posts for a requester whose key the service holds.

A requester holding its own key (any did:key) sends instead its own signed `task.posted` in
the message's metadata, `{"accord": {"entry": {...}, "idempotency_key": "..."}}` (the entry and
key `POST /tasks/prepare` gave; the key defaults to the message's `messageId`); the parts are
not read then, the entry carries the spec. The task answered is `posted` and its metadata's
`accord.escrow` is the `TaskEscrow.open` call the requester's own wallet makes; it takes bids
once that deposit is on chain. Methods (the names the A2A 1.x clients send):

    SendMessage            post the task; answers {"task": Task} once it is posted and escrowed
    SendStreamingMessage   the same, then SSE: the Task, then a status update at each change of
                           state and an artifact update at each change of the deliverable, until
                           the task is terminal or `StreamLimits.horizon` seconds have passed
    GetTask                one task; ListTasks: every task of the market (the market is public),
                           newest change first, paged by an opaque cursor
    CancelTask             a posted task whose escrow never opened (`Market.cancel`); any other
                           state is TaskNotCancelable with the reason; a cancelled task is
                           answered as is (cancelling is idempotent). A requester holding its
                           own key sends its signed `task.cancelled` in the request's
                           `metadata.accord.entry` (`Market.cancel_signed`)
    SubscribeToTask        the stream of SendStreamingMessage for a task that is not terminal

Streams are capped per caller and in all (`ApiConfig.streams_per_caller`, `streams_total`,
see `accord.api.streams`): over a cap, the streaming methods answer the JSON-RPC error -32000 with
ErrorInfo reason TOO_MANY_STREAMS (metadata `status` 429, `reason` which cap) before anything
is posted or streamed.

accord's lifecycle as A2A task states (the accord state is in `metadata.accord.state`):

    posted, bidding, revealing   TASK_STATE_SUBMITTED   escrowed and auctioned; nobody works yet
    awarded, running             TASK_STATE_WORKING     the winner's team is at work
    delivered                    TASK_STATE_INPUT_      while the task has review checks and its
                                 REQUIRED               review window is open: the requester's
                                                        review is the input it waits for
                                 TASK_STATE_WORKING     otherwise: the checks run, the settlement
                                                        pays
    settled                      TASK_STATE_COMPLETED   the final status carries the settlement
                                                        (`metadata.accord.settlement`: every
                                                        check's verdict, the share paid, payouts)
    expired, refunded            TASK_STATE_FAILED      no valid bid: the budget went back
    cancelled                    TASK_STATE_CANCELED    its requester cancelled it unfunded
    closed                       TASK_STATE_CANCELED    not funded when its bidding window ended:
                                                        the service closed it

From delivery on, the deliverable is the artifact `deliverable` (a data part, the view of
`accord.market.settlement.deliverable_view`), sent again when it changes (the outputs the requester
may read once the settlement is computed, the checks and the payouts). A stream follows a
task through settlement: the input-required state does not end it.

The artifact is shown only to those who see the work over REST: the requester, the team and
the operator. Where accord departs from the A2A defaults: SendMessage never blocks until the
task is terminal (a market task takes minutes to days), as if `returnImmediately` were set;
each task is its own context (`contextId` is the task id); no message history is kept.

Errors are JSON-RPC error objects with HTTP 200, never a 5xx: -32700 parse error, -32600
invalid request, -32601 method not found, -32602 invalid params (an invalid spec names its
JSON path in the `google.rpc.ErrorInfo` metadata `path` and in a `google.rpc.BadRequest`
field violation; nothing is posted), -32001 task not found, -32002 not cancelable, -32004
unsupported operation, -32005 content type not supported, -32009 version not supported
(`A2A-Version` must be 1.x), -32603 internal (the chain or the database is away), and
-32000 for a refusal of accord's own: the caller may not act on this task, or the market
refuses the request in its current state (the ErrorInfo `reason` says which).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from accord.api.problems import (
    DOMAIN_ERRORS,
    PROBLEM_MEDIA_TYPE,
    ProblemError,
    domain_problem,
)
from accord.api.routes.deps import ApiState, Caller, State
from accord.api.routes.market import TaskPost, post_task, readable_work
from accord.api.routes.remote import EntryBody
from accord.api.streams import SlotStream
from accord.ledger import views
from accord.ledger.canonical import whole_numbers
from accord.ledger.errors import QueryError
from accord.ledger.events import Entry, parse_time
from accord.market.service import LIFECYCLE_KINDS
from accord.market.states import TaskState
from accord.market.tasks import Task, clock_state
from accord.market.wiring import MarketContext

logger = logging.getLogger(__name__)

A2A_VERSION: Final = "1.0"
PATH: Final = "/a2a"
SSE_MEDIA_TYPE: Final = "text/event-stream"
ERROR_INFO: Final = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST: Final = "type.googleapis.com/google.rpc.BadRequest"
DOMAIN: Final = "accord"
ARTIFACT_ID: Final = "deliverable"

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
REFUSED: Final = -32000
"""accord's own: signed, but refused (not the caller's to act on, or a conflict)."""
TASK_NOT_FOUND: Final = -32001
TASK_NOT_CANCELABLE: Final = -32002
UNSUPPORTED_OPERATION: Final = -32004
CONTENT_TYPE_NOT_SUPPORTED: Final = -32005
VERSION_NOT_SUPPORTED: Final = -32009

SUBMITTED: Final = "TASK_STATE_SUBMITTED"
WORKING: Final = "TASK_STATE_WORKING"
COMPLETED: Final = "TASK_STATE_COMPLETED"
FAILED: Final = "TASK_STATE_FAILED"
CANCELED: Final = "TASK_STATE_CANCELED"
INPUT_REQUIRED: Final = "TASK_STATE_INPUT_REQUIRED"
TASK_STATES: Final = (
    "TASK_STATE_UNSPECIFIED",
    SUBMITTED,
    WORKING,
    COMPLETED,
    FAILED,
    CANCELED,
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
)
"""A2A's TaskState enum in its protobuf order (a client may send the number)."""
TERMINAL: Final = frozenset({COMPLETED, FAILED, CANCELED, "TASK_STATE_REJECTED"})

A2A_STATE: Final[Mapping[TaskState, str]] = {
    "posted": SUBMITTED,
    "bidding": SUBMITTED,
    "revealing": SUBMITTED,
    "awarded": WORKING,
    "running": WORKING,
    "delivered": WORKING,  # or INPUT_REQUIRED: see `TaskView.a2a_state`
    "settled": COMPLETED,
    "expired": FAILED,
    "refunded": FAILED,
    "cancelled": CANCELED,
    "closed": CANCELED,
}

DEFAULT_PAGE: Final = 50
MAX_PAGE: Final = 100
JSON_MEDIA_TYPES: Final = frozenset({"", "application/json", "text/json"})

RequestId = str | int | None
T = TypeVar("T")


# -- errors ---------------------------------------------------------------------------------


class RpcError(Exception):
    """A failure answered as a JSON-RPC error object (HTTP 200).

    `reason` is the ErrorInfo reason (UPPER_SNAKE); `metadata` its string map; `field`, when
    given, also names the offending field in a `google.rpc.BadRequest` violation.
    """

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str,
        metadata: Mapping[str, str] | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata = dict(metadata or {})
        self.field = field

    def to_json(self) -> dict[str, Any]:
        info = {
            "@type": ERROR_INFO,
            "reason": self.reason,
            "domain": DOMAIN,
            "metadata": {"detail": self.message, **self.metadata},
        }
        data: list[dict[str, Any]] = [info]
        if self.field is not None:
            data.append(
                {
                    "@type": BAD_REQUEST,
                    "fieldViolations": [{"field": self.field, "description": self.message}],
                }
            )
        return {"code": self.code, "message": self.message, "data": data}


def invalid_params(message: str, field: str, *, reason: str = "INVALID_PARAMS") -> RpcError:
    return RpcError(INVALID_PARAMS, message, reason=reason, metadata={"path": field}, field=field)


def rpc_error_of(problem: ProblemError, *, spec: bool = False) -> RpcError:
    """The JSON-RPC error of a problem detail (`accord.api.problems`). With `spec`, bad input is the
    task spec's: its `path` is relative to the message's data part."""
    metadata = {"status": str(problem.status), "kind": problem.kind}
    if problem.reason is not None:
        metadata["reason"] = problem.reason
    reason = problem.kind.upper().replace("-", "_")
    if problem.status in (400, 422):
        path = problem.path or "$"
        metadata["path"] = path
        return RpcError(
            INVALID_PARAMS,
            problem.detail,
            reason="INVALID_SPEC" if spec else reason,
            metadata=metadata,
            field=path,
        )
    if problem.status == 404:
        return RpcError(TASK_NOT_FOUND, problem.detail, reason=reason, metadata=metadata)
    if problem.status >= 500:
        return RpcError(INTERNAL_ERROR, problem.detail, reason=reason, metadata=metadata)
    return RpcError(REFUSED, problem.detail, reason=reason, metadata=metadata)


# -- the JSON-RPC envelope (pure) -----------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One JSON-RPC 2.0 request."""

    id: RequestId
    method: str
    params: Mapping[str, Any]


class CallError(RpcError):
    """An RpcError raised once the request's id is known (or known to be unreadable)."""

    def __init__(self, request_id: RequestId, error: RpcError) -> None:
        super().__init__(
            error.code,
            error.message,
            reason=error.reason,
            metadata=error.metadata,
            field=error.field,
        )
        self.request_id = request_id


def parse_call(body: bytes) -> Call:
    """The JSON-RPC request in `body`.

    Raises CallError: PARSE_ERROR for bytes that are not JSON, INVALID_REQUEST for JSON that
    is not one request object (a batch, no `jsonrpc: "2.0"`, no method, a bad id),
    INVALID_PARAMS for params that are not an object.
    """
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        error = RpcError(PARSE_ERROR, f"not JSON: {exc}", reason="PARSE_ERROR")
        raise CallError(None, error) from exc
    if not isinstance(data, dict):
        what = "a batch (a JSON array)" if isinstance(data, list) else type(data).__name__
        raise CallError(
            None,
            RpcError(
                INVALID_REQUEST,
                f"the request is {what}: send one JSON-RPC 2.0 request object",
                reason="INVALID_REQUEST",
            ),
        )
    raw_id = data.get("id")
    valid_id = raw_id is None or (
        isinstance(raw_id, str | int) and not isinstance(raw_id, bool) and len(str(raw_id)) <= 200
    )
    request_id: RequestId = raw_id if valid_id else None

    def invalid(message: str) -> CallError:
        return CallError(request_id, RpcError(INVALID_REQUEST, message, reason="INVALID_REQUEST"))

    if data.get("jsonrpc") != "2.0":
        raise invalid('the request must have "jsonrpc": "2.0"')
    if not valid_id:
        raise invalid("the id must be a string or an integer")
    if "id" not in data:
        raise invalid("every A2A call needs an id: notifications are not answered here")
    method = data.get("method")
    if not isinstance(method, str) or not method:
        raise invalid("the request has no method (a non-empty string)")
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise CallError(request_id, invalid_params("params must be a JSON object", "params"))
    return Call(request_id, method, params)


def check_version(header: str | None) -> None:
    """Refuse a client that speaks another A2A version than 1.x (an empty header is 0.3).

    Raises RpcError VERSION_NOT_SUPPORTED.
    """
    version = (header or "").strip() or "0.3"
    if version.split(".")[0] != A2A_VERSION.split(".")[0]:
        raise RpcError(
            VERSION_NOT_SUPPORTED,
            f"A2A version {version} is not supported here: send the header A2A-Version: "
            f"{A2A_VERSION}",
            reason="VERSION_NOT_SUPPORTED",
            metadata={"supported": A2A_VERSION, "requested": version},
        )


def response(request_id: RequestId, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: RequestId, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}


def sse_data(payload: Mapping[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


# -- params (pure) --------------------------------------------------------------------------


def _task_id(params: Mapping[str, Any]) -> str:
    value = params.get("id")
    if not isinstance(value, str) or not value.strip():
        raise invalid_params("the task id (`id`, a non-empty string) is missing", "id")
    return value


def _int(params: Mapping[str, Any], name: str, low: int, high: int) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise invalid_params(f"`{name}` must be an integer from {low} to {high}", name)
    return value


def _bool(params: Mapping[str, Any], name: str) -> bool:
    value = params.get(name, False)
    if not isinstance(value, bool):
        raise invalid_params(f"`{name}` must be true or false", name)
    return value


def _time(value: Any, name: str) -> datetime:
    if not isinstance(value, str):
        raise invalid_params(f"`{name}` must be an RFC 3339 time", name)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise invalid_params(f"`{name}` must be an RFC 3339 time: {exc}", name) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Posting:
    """What a SendMessage asks: the task spec, as the body of `POST /tasks`, and the message's
    id, the posting's idempotency key (a client resending a message gets the task it posted)."""

    spec: dict[str, Any]
    message_id: str | None = None


def posting_of(params: Mapping[str, Any]) -> Posting:
    """The task spec a SendMessage request carries in its message's one data part.

    Raises RpcError: INVALID_PARAMS without a message or with no (or several) JSON object
    data parts, CONTENT_TYPE_NOT_SUPPORTED for file parts or a data part in another media
    type. (A message naming a `taskId` is `continued_task`'s to refuse.)
    """
    message = params.get("message")
    if not isinstance(message, dict):
        raise invalid_params("the request has no `message` object", "message")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise invalid_params(
            "the message has no parts: send the task spec as a data part", "message.parts"
        )
    specs: list[tuple[int, Any]] = []
    texts: list[str] = []
    for k, part in enumerate(parts):
        where = f"message.parts[{k}]"
        if not isinstance(part, dict):
            raise invalid_params("a part must be an object", where)
        media = str(part.get("mediaType", "") or "").split(";")[0].strip().lower()
        if "data" in part:
            if media not in JSON_MEDIA_TYPES:
                raise RpcError(
                    CONTENT_TYPE_NOT_SUPPORTED,
                    f"{where} is {media}: the task spec is JSON (application/json)",
                    reason="CONTENT_TYPE_NOT_SUPPORTED",
                    metadata={"path": where},
                )
            specs.append((k, part["data"]))
        elif "text" in part:
            if isinstance(part["text"], str) and part["text"].strip():
                texts.append(part["text"].strip())
        else:
            raise RpcError(
                CONTENT_TYPE_NOT_SUPPORTED,
                f"{where} is a file: accord takes the task spec as one JSON data part; input "
                'files are uploaded with POST /files and named {"$file": "<sha256>"}',
                reason="CONTENT_TYPE_NOT_SUPPORTED",
                metadata={"path": where},
            )
    if len(specs) != 1:
        raise invalid_params(
            f"the message has {len(specs)} data parts: send exactly one, the task spec "
            "(title, budget, parts, checks, windows: the body of POST /tasks)",
            "message.parts",
        )
    k, spec = specs[0]
    if not isinstance(spec, dict):
        raise invalid_params(
            "the data part must be a JSON object: the task spec", f"message.parts[{k}].data"
        )
    spec = whole_numbers(spec)
    if texts and not spec.get("description"):
        spec["description"] = "\n\n".join(texts)
    message_id = message.get("messageId")
    if message_id is not None and not isinstance(message_id, str):
        raise invalid_params("messageId must be a string", "message.messageId")
    return Posting(spec, message_id or None)


@dataclass(frozen=True)
class SignedPosting:
    """A SendMessage of a requester holding its own key: its signed `task.posted` entry and
    the idempotency key the task id derives from."""

    entry: EntryBody
    idempotency_key: str


def signed_posting_of(params: Mapping[str, Any]) -> SignedPosting | None:
    """The requester's own `task.posted` a SendMessage carries in `message.metadata.accord`
    (`entry`, and `idempotency_key`, else the `messageId`), or None when it carries none.

    Raises RpcError INVALID_PARAMS for an entry that is not an entry object, or no key.
    """
    message = params.get("message")
    metadata = message.get("metadata") if isinstance(message, dict) else None
    accord = metadata.get("accord") if isinstance(metadata, dict) else None
    if not isinstance(accord, dict) or "entry" not in accord:
        return None
    try:
        entry = EntryBody.model_validate({"entry": whole_numbers(accord["entry"])})
    except ValidationError as exc:
        raise invalid_params(
            f"message.metadata.accord.entry is not a signed ledger entry {{event, kid, sig}}: "
            f"{exc.errors()[0]['msg']}",
            "message.metadata.accord.entry",
        ) from exc
    key = accord.get("idempotency_key") or (message or {}).get("messageId")
    if not isinstance(key, str) or not key:
        raise invalid_params(
            "a self-signed posting needs the idempotency key its task id derives from "
            "(message.metadata.accord.idempotency_key, or the messageId)",
            "message.metadata.accord.idempotency_key",
        )
    return SignedPosting(entry, key)


def validated_spec(spec: Mapping[str, Any]) -> TaskPost:
    """The spec through the same model as `POST /tasks`.

    Raises RpcError INVALID_PARAMS naming the first invalid field's JSON path (`$.title`).
    """
    try:
        return TaskPost.model_validate(dict(spec))
    except ValidationError as exc:
        first = exc.errors()[0]
        path = "$" + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]
        )
        message = f"{path}: {first['msg']}"
        raise RpcError(
            INVALID_PARAMS,
            message,
            reason="INVALID_SPEC",
            metadata={"path": path},
            field=path,
        ) from exc


A2A_VIEW: Final = "a2a"
"""The view name in ListTasks' pageToken: `a2a.<changed-at micros>.<task id>`, the one cursor
form every paged list of accord hands out (`accord.ledger.views.encode_cursor`)."""


def encode_cursor(changed_at: datetime, task_id: str) -> str:
    """ListTasks' next pageToken: resume after the task `task_id` last changed at `changed_at`."""
    return views.encode_cursor(A2A_VIEW, f"{views.micros(changed_at)}.{task_id}")


def decode_cursor(token: str) -> tuple[datetime, str]:
    """The (changed at, task id) a pageToken resumes after.

    Raises RpcError INVALID_PARAMS for a token this service did not hand out."""
    refused = invalid_params("`pageToken` is not one this service handed out", "pageToken")
    try:
        key = views.decode_cursor(A2A_VIEW, token)
    except QueryError as exc:
        raise refused from exc
    stamp, _, task_id = (key or "").partition(".")
    if not stamp.isdigit() or len(stamp) > 18 or not task_id:
        raise refused
    try:
        return views.from_micros(int(stamp)), task_id
    except OverflowError as exc:  # 18 digits of microseconds reach past the year 9999
        raise refused from exc


def state_filter(value: Any) -> str | None:
    """The A2A state a ListTasks `status` names (its name or its enum number), or None."""
    if value is None or value in ("", 0, "TASK_STATE_UNSPECIFIED"):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < len(TASK_STATES):
        return TASK_STATES[value]
    if isinstance(value, str) and value in TASK_STATES:
        return value
    raise invalid_params(f"`status` must be one of {', '.join(TASK_STATES[1:])}", "status")


# -- tasks as A2A objects (pure) ------------------------------------------------------------


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class TaskView:
    """A task as one caller sees it now: its accord state, when it last changed, and the
    deliverable when it was delivered and the caller may see it."""

    task: Task
    state: TaskState
    changed_at: datetime
    deliverable: Mapping[str, Any] | None = None
    warnings: tuple[str, ...] = field(default=())
    review_open: bool = False
    """Delivered, with review checks, inside the review window: the requester is asked."""
    settlement: Mapping[str, Any] | None = None
    """The logged settlement, once computed (public in the log)."""
    waiting: str | None = None
    """What an awarded or running task waits for (`accord.coordinator.waiting`)."""

    @property
    def a2a_state(self) -> str:
        if self.state == "delivered" and self.review_open:
            return INPUT_REQUIRED
        return A2A_STATE[self.state]


def status_text(task: Task, state: TaskState) -> str:
    """One sentence on where the task stands, for the A2A status message."""
    match state:
        case "posted":
            return "posted; its budget is not escrowed yet, so it takes no bids"
        case "bidding":
            return f"escrowed; taking sealed bids until {rfc3339(task.bidding_ends)}"
        case "revealing":
            return (
                f"bidding closed; bids are revealed until {rfc3339(task.reveal_ends)}, then "
                "the auction is cleared"
            )
        case "awarded":
            return f"awarded to {task.winner} for {task.price} wei; its team starts"
        case "running":
            return (
                f"{task.winner}'s team is at work; delivery is due by "
                f"{rfc3339(task.delivery_deadline)}"
            )
        case "delivered":
            return (
                "delivered: the deliverable is the artifact `deliverable`; the settlement "
                "pays the team once the checks have run and the review window "
                f"({rfc3339(task.review_ends or task.delivery_deadline)}) has closed"
            )
        case "settled":
            return "settled: the checks ran and the team was paid by Shapley value"
        case "expired":
            return "expired: no valid bid; the escrow goes back to the requester"
        case "refunded":
            return "ended without a winner: the budget was refunded to the requester"
        case "cancelled":
            return "cancelled by its requester before its escrow opened"
        case "closed":
            return (
                "closed by the service: its budget was not deposited by the end of its bidding "
                f"window ({rfc3339(task.bidding_ends)}); post it again and fund it to go on"
            )


def _accord_metadata(view: TaskView) -> dict[str, Any]:
    task = view.task
    data: dict[str, Any] = {
        "state": view.state,
        "title": task.spec.title,
        "requester": task.requester,
        "budget": str(task.spec.budget),
        "escrowed": task.escrowed,
        "posted_at": rfc3339(task.posted_at),
        "bidding_ends": rfc3339(task.bidding_ends),
        "reveal_ends": rfc3339(task.reveal_ends),
        "delivery_deadline": rfc3339(task.delivery_deadline),
        "capabilities": list(task.spec.capabilities),
    }
    if task.winner is not None:
        data["winner"] = task.winner
    if task.price is not None:
        data["price"] = str(task.price)
    if view.warnings:
        data["warnings"] = list(view.warnings)
    if view.settlement is not None:
        data["settlement"] = settlement_summary(view.settlement)
    return data


def settlement_summary(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the final status says of a settlement: each check's verdict, the share of the
    price paid, the amount, the evaluator's fee and each payee's wei (all public in the log)."""
    return {
        "checks": [
            {"id": c.get("id"), "passed": c.get("passed"), "detail": c.get("detail")}
            for c in body.get("checks", [])
        ],
        "paid_share": body.get("paid_share"),
        "amount": body.get("amount"),
        "evaluator_fee": body.get("evaluator_fee", "0"),
        "payouts": dict(body.get("payouts", {})),
    }


def status_object(view: TaskView) -> dict[str, Any]:
    return {
        "state": view.a2a_state,
        "message": {
            "messageId": f"{view.task.task_id}-{view.state}",
            "role": "ROLE_AGENT",
            "taskId": view.task.task_id,
            "contextId": view.task.task_id,
            "parts": [{"text": status_text(view.task, view.state) + _waiting_text(view)}],
        },
        "timestamp": rfc3339(view.changed_at),
    }


def _waiting_text(view: TaskView) -> str:
    return "" if view.waiting is None else f". Now: {view.waiting}"


def artifact_object(view: TaskView) -> dict[str, Any] | None:
    if view.deliverable is None:
        return None
    return {
        "artifactId": ARTIFACT_ID,
        "name": "deliverable",
        "description": "Each part's output and producer and the leader's plan; once settled, "
        "every check's result and the payouts",
        "parts": [{"data": dict(view.deliverable), "mediaType": "application/json"}],
        "metadata": {"sha256": str(view.deliverable.get("sha256") or "")},
    }


def task_object(view: TaskView, *, artifacts: bool = True) -> dict[str, Any]:
    """The A2A `Task` of `view` (its artifacts omitted when `artifacts` is false)."""
    data: dict[str, Any] = {
        "id": view.task.task_id,
        "contextId": view.task.task_id,
        "status": status_object(view),
        "metadata": {"accord": _accord_metadata(view)},
    }
    if artifacts:
        artifact = artifact_object(view)
        data["artifacts"] = [] if artifact is None else [artifact]
    return data


def status_update(view: TaskView) -> dict[str, Any]:
    return {
        "statusUpdate": {
            "taskId": view.task.task_id,
            "contextId": view.task.task_id,
            "status": status_object(view),
            "metadata": {"accord": _update_metadata(view)},
        }
    }


def _update_metadata(view: TaskView) -> dict[str, Any]:
    data: dict[str, Any] = {"state": view.state}
    if view.settlement is not None:
        data["settlement"] = settlement_summary(view.settlement)
    return data


def artifact_update(view: TaskView) -> dict[str, Any] | None:
    artifact = artifact_object(view)
    if artifact is None:
        return None
    return {
        "artifactUpdate": {
            "taskId": view.task.task_id,
            "contextId": view.task.task_id,
            "artifact": artifact,
            "append": False,
            "lastChunk": True,
        }
    }


def page_of(
    views: list[TaskView],
    *,
    context_id: str | None,
    state: str | None,
    after: datetime | None,
    cursor: tuple[datetime, str] | None,
    size: int,
) -> tuple[list[TaskView], str, int]:
    """One page of `views`, newest change first: (page, next page token or "", total)."""
    chosen = [
        v
        for v in views
        if (context_id is None or v.task.task_id == context_id)
        and (state is None or v.a2a_state == state)
        and (after is None or v.changed_at > after)
    ]
    chosen.sort(key=lambda v: (v.changed_at, v.task.task_id), reverse=True)
    total = len(chosen)
    if cursor is not None:
        chosen = [v for v in chosen if (v.changed_at, v.task.task_id) < cursor]
    page = chosen[:size]
    more = len(chosen) > size
    token = encode_cursor(page[-1].changed_at, page[-1].task.task_id) if more and page else ""
    return page, token, total


# -- the market (I/O) -----------------------------------------------------------------------


@dataclass(frozen=True)
class Env:
    """What a call runs with: the service state and the DID that signed the call."""

    state: ApiState
    caller: str

    def context(self) -> MarketContext:
        return self.state.context()


def state_now(context: MarketContext, task: Task) -> TaskState:
    """The task's state on the market's clock (which ends bidding and revealing)."""
    return clock_state(task, context.market.clock())


def changed_at(context: MarketContext, task: Task) -> datetime:
    """When the task's A2A status last changed: the time of its last lifecycle entry (the
    clock moving a task from bidding to revealing leaves it submitted)."""
    found = context.market.ledger.store.find(
        subject=task.task_id, kinds=LIFECYCLE_KINDS, limit=1000
    )
    return max(
        (parse_time(Entry.from_bytes(stored.data).event.at) for stored in found),
        default=task.posted_at,
    )


def view_of(
    env: Env,
    task: Task,
    *,
    artifacts: bool = True,
    warnings: tuple[str, ...] = (),
    changed: datetime | None = None,
) -> TaskView:
    """The caller's view of `task` now (`changed`: its `changed_at`, when known). Raises
    BlobError when a stored deliverable was altered, StoreError when the database is away."""
    from accord.market.settlement import deliverable_view, logged_settlement

    context = env.context()
    state = state_now(context, task)
    deliverable = None
    settlement = None
    if task.delivered_index is not None:
        settlement = logged_settlement(context.market, task.task_id)
    if artifacts and task.delivered_index is not None:
        readable = readable_work(context, task, env.caller, settlement)
        if readable is not None:
            deliverable = deliverable_view(context.market, task.task_id, readable)
    changed = changed_at(context, task) if changed is None else changed
    review_open = (
        state == "delivered"
        and task.review_ends is not None
        and context.market.clock() < task.review_ends
        and any(check.kind == "review" for check in task.spec.rubric)
    )
    from accord.coordinator.waiting import task_waiting

    waiting = task_waiting(context, task) if state in ("awarded", "running") else None
    return TaskView(task, state, changed, deliverable, warnings, review_open, settlement, waiting)


def find_task(env: Env, task_id: str) -> Task:
    """Raises RpcError TASK_NOT_FOUND."""
    from accord.market.errors import TaskError

    try:
        return env.context().market.task(task_id)
    except TaskError as exc:
        raise RpcError(
            TASK_NOT_FOUND, str(exc), reason="TASK_NOT_FOUND", metadata={"task": task_id}
        ) from exc


def continued_task(env: Env, params: Mapping[str, Any]) -> None:
    """A message that names a task continues it; accord tasks take none once posted.

    Raises RpcError TASK_NOT_FOUND or UNSUPPORTED_OPERATION when the message names a task.
    """
    message = params.get("message")
    task_id = message.get("taskId") if isinstance(message, dict) else None
    if not task_id:
        return
    task = find_task(env, str(task_id))
    state = state_now(env.context(), task)
    raise RpcError(
        UNSUPPORTED_OPERATION,
        f"{task.task_id} is {state} ({A2A_STATE[state]}): a posted task takes no further "
        "messages; send a message without taskId to post a new task",
        reason="UNSUPPORTED_OPERATION",
        metadata={"task": task.task_id, "state": state},
    )


def send_message(env: Env, params: Mapping[str, Any]) -> dict[str, Any]:
    """Post the task the message carries; the result is `{"task": Task}`.

    Raises RpcError for a bad message or spec (nothing is posted), ProblemError (a caller
    whose key the service does not hold) and the market's errors as `post_task` does.
    """
    continued_task(env, params)
    context = env.context()
    signed = signed_posting_of(params)
    try:
        if signed is not None:
            posted = post_task(signed.entry, env.caller, context, env.state, signed.idempotency_key)
        else:
            posting = posting_of(params)
            body = validated_spec(posting.spec)
            posted = post_task(
                body, env.caller, context, env.state, idempotency_key=posting.message_id
            )
    except ProblemError as exc:
        raise rpc_error_of(exc, spec=True) from exc
    except DOMAIN_ERRORS as exc:
        raise rpc_error_of(domain_problem(exc), spec=True) from exc
    task = context.market.task(posted["task_id"])
    view = view_of(env, task, warnings=tuple(posted.get("warnings", ())))
    answer = task_object(view)
    if "escrow" in posted:  # the deposit the requester's own wallet makes
        answer["metadata"]["accord"]["escrow"] = posted["escrow"]
    return {"task": answer}


def get_task(env: Env, params: Mapping[str, Any]) -> dict[str, Any]:
    _int(params, "historyLength", 0, 1000)
    return task_object(view_of(env, find_task(env, _task_id(params))))


def list_tasks(env: Env, params: Mapping[str, Any]) -> dict[str, Any]:
    context_id = params.get("contextId") or None
    if context_id is not None and not isinstance(context_id, str):
        raise invalid_params("`contextId` must be a string", "contextId")
    state = state_filter(params.get("status"))
    size = _int(params, "pageSize", 1, MAX_PAGE) or DEFAULT_PAGE
    _int(params, "historyLength", 0, 1000)
    token = params.get("pageToken") or ""
    if not isinstance(token, str):
        raise invalid_params("`pageToken` must be a string", "pageToken")
    cursor = decode_cursor(token) if token else None
    raw_after = params.get("statusTimestampAfter")
    after = None if raw_after is None else _time(raw_after, "statusTimestampAfter")
    include = _bool(params, "includeArtifacts")
    if context_id is None:  # every task, newest change first: a page of the task view
        page, next_token, total = _page_of_market(env, state, after, cursor, size)
    else:  # a context is one task (its id)
        views = [view_of(env, task, artifacts=False) for task in _context_tasks(env, context_id)]
        page, next_token, total = page_of(
            views, context_id=context_id, state=state, after=after, cursor=cursor, size=size
        )
    if include:
        page = [view_of(env, view.task, changed=view.changed_at) for view in page]
    return {
        "tasks": [task_object(view, artifacts=include) for view in page],
        "nextPageToken": next_token,
        "pageSize": size,
        "totalSize": total,
    }


def _page_of_market(
    env: Env,
    state: str | None,
    after: datetime | None,
    cursor: tuple[datetime, str] | None,
    size: int,
) -> tuple[list[TaskView], str, int]:
    """One page of every task, newest change first, from the task view (indexed by the
    time of each task's last lifecycle entry): (page, next page token or "", total)."""
    from accord.ledger.views import reading
    from accord.market.views import VIEW_NAME, tasks_by_change

    states = None if state is None else {s for s, named in A2A_STATE.items() if named == state}
    with reading(env.context().market.ledger.store, VIEW_NAME) as connection:
        found = tasks_by_change(
            connection, states=states, changed_after=after, before=cursor, size=size + 1
        )
    page = [view_of(env, task, artifacts=False, changed=changed) for task, changed in found.tasks]
    more = len(page) > size
    page = page[:size]
    token = encode_cursor(page[-1].changed_at, page[-1].task.task_id) if more else ""
    return page, token, found.total


def _context_tasks(env: Env, context_id: str) -> list[Task]:
    """The tasks of a context: the one task whose id it is, or none."""
    try:
        return [find_task(env, context_id)]
    except RpcError:
        return []


def _not_cancelable(task: Task, state: TaskState) -> str:
    match state:
        case "bidding" | "revealing":
            why = (
                "its budget is escrowed and it takes sealed bids: it ends at its auction, "
                "and expires with a refund when no valid bid comes"
            )
        case "awarded" | "running":
            why = f"it is awarded to {task.winner}, whose team holds the escrowed contract"
        case "delivered" | "settled":
            why = "it was delivered: settle it or review its checks instead"
        case _:
            why = "it has already ended"
    return (
        f"{task.task_id} is {state}, and {why}; only a posted task whose escrow never opened "
        "can be cancelled"
    )


def cancel_task(env: Env, params: Mapping[str, Any]) -> dict[str, Any]:
    """Cancel a posted, never escrowed task (its requester only).

    Raises RpcError TASK_NOT_FOUND, REFUSED (not the requester), TASK_NOT_CANCELABLE.
    """
    from accord.api.routes.market import _signer_of
    from accord.market.errors import TransitionError

    task = find_task(env, _task_id(params))
    context = env.context()
    if env.caller != task.requester:
        raise RpcError(
            REFUSED,
            f"only the requester of {task.task_id} ({task.requester}) may cancel it",
            reason="FORBIDDEN",
            metadata={"task": task.task_id, "requester": task.requester},
        )
    if task.state != "cancelled":
        signed = _signed_cancellation(params, env.caller, task.task_id)
        try:
            requester = None if signed is not None else _signer_of(context, env.caller)
        except ProblemError as exc:
            raise rpc_error_of(exc) from exc
        try:
            with env.state.write_lock:
                if signed is not None:
                    task = context.market.cancel_signed(signed)
                else:
                    assert requester is not None
                    task = context.market.cancel(requester, task.task_id)
        except TransitionError as exc:
            now = find_task(env, task.task_id)
            state = state_now(context, now)
            raise RpcError(
                TASK_NOT_CANCELABLE,
                _not_cancelable(now, state),
                reason="TASK_NOT_CANCELABLE",
                metadata={"task": task.task_id, "state": state},
            ) from exc
    return task_object(view_of(env, task))


def _signed_cancellation(params: Mapping[str, Any], caller: str, task_id: str) -> Entry | None:
    """The requester's own `task.cancelled` in `metadata.accord.entry`, or None.

    Raises RpcError: INVALID_PARAMS for an entry that is not one, or cancels another task;
    REFUSED for an entry of another DID than the caller.
    """
    from accord.api.routes.remote import parse_entry

    metadata = params.get("metadata")
    accord = metadata.get("accord") if isinstance(metadata, dict) else None
    if not isinstance(accord, dict) or "entry" not in accord:
        return None
    where = "metadata.accord.entry"
    try:
        body = EntryBody.model_validate({"entry": whole_numbers(accord["entry"])})
        entry = parse_entry(body.entry, caller)
    except ValidationError as exc:
        raise invalid_params(f"{where} is not a signed ledger entry", where) from exc
    except ProblemError as exc:
        raise rpc_error_of(exc) from exc
    if entry.event.subject != task_id:
        raise invalid_params(f"{where} cancels {entry.event.subject!r}, not {task_id}", where)
    return entry


Method = Callable[[Env, Mapping[str, Any]], dict[str, Any]]
METHODS: Final[Mapping[str, Method]] = {
    "SendMessage": send_message,
    "GetTask": get_task,
    "ListTasks": list_tasks,
    "CancelTask": cancel_task,
}
STREAMING: Final = frozenset({"SendStreamingMessage", "SubscribeToTask"})
UNSUPPORTED: Final = frozenset(
    {
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
        "GetExtendedAgentCard",
    }
)


def guarded(run: Callable[[], T]) -> T:
    """Run one call; every failure becomes an RpcError (an unexpected one is logged)."""
    try:
        return run()
    except RpcError:
        raise
    except ProblemError as exc:
        raise rpc_error_of(exc) from exc
    except DOMAIN_ERRORS as exc:
        raise rpc_error_of(domain_problem(exc)) from exc
    except Exception as exc:
        logger.exception("A2A call failed")
        raise RpcError(
            INTERNAL_ERROR,
            "an unexpected error; the operator's log has the details",
            reason="INTERNAL",
        ) from exc


# -- the stream -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamLimits:
    """How a stream follows its task: it polls the market every `poll` seconds, sends an SSE
    comment after `keepalive` quiet seconds, and ends after `horizon` seconds even when the
    task is not terminal (the client goes on with GetTask or SubscribeToTask)."""

    horizon: float = 600.0
    poll: float = 0.25
    keepalive: float = 15.0


def first_view(env: Env, method: str, params: Mapping[str, Any]) -> TaskView:
    """The task a stream follows: posted by SendStreamingMessage, or the one subscribed to
    (UNSUPPORTED_OPERATION when it is terminal already)."""
    if method == "SendStreamingMessage":
        task_json = send_message(env, params)["task"]
        metadata = task_json["metadata"]["accord"]
        task = find_task(env, task_json["id"])
        return view_of(env, task, warnings=tuple(metadata.get("warnings", ())))
    view = view_of(env, find_task(env, _task_id(params)))
    if view.a2a_state in TERMINAL:
        raise RpcError(
            UNSUPPORTED_OPERATION,
            f"{view.task.task_id} is {view.state} ({view.a2a_state}): there is nothing more "
            "to follow; GetTask reads it",
            reason="UNSUPPORTED_OPERATION",
            metadata={"task": view.task.task_id, "state": view.state},
        )
    return view


async def follow(
    env: Env, request: Request, request_id: RequestId, view: TaskView, limits: StreamLimits
) -> AsyncIterator[str]:
    """SSE: the Task, then an artifact update at each change of the deliverable and a status
    update at each change of state (the artifact first when both change), until the task is
    terminal or the horizon has passed."""
    yield sse_data(response(request_id, {"task": task_object(view)}))
    started = quiet = time.monotonic()
    task_id = view.task.task_id
    while view.a2a_state not in TERMINAL:
        now = time.monotonic()
        if now - started >= limits.horizon:
            last = status_update(view)
            last["statusUpdate"]["metadata"]["accord"]["stream"] = (
                f"ends after {limits.horizon:g} s; the task goes on: follow it with GetTask "
                "or SubscribeToTask"
            )
            yield sse_data(response(request_id, last))
            return
        if await request.is_disconnected():
            return
        await asyncio.sleep(limits.poll)
        try:
            current = await run_in_threadpool(
                guarded, lambda: view_of(env, find_task(env, task_id))
            )
        except RpcError as exc:
            yield sse_data(error_response(request_id, exc))
            return
        # the deliverable may change without the state (a review logged while it is still
        # delivered): each change is sent, or one that lands between two polls with the
        # next change of state would be missed
        if current.deliverable is not None and current.deliverable != view.deliverable:
            update = artifact_update(current)
            if update is not None:
                yield sse_data(response(request_id, update))
                quiet = time.monotonic()
        if (current.state, current.a2a_state) != (view.state, view.a2a_state):
            yield sse_data(response(request_id, status_update(current)))
            quiet = time.monotonic()
        elif time.monotonic() - quiet >= limits.keepalive:
            quiet = time.monotonic()
            yield ": keep-alive\n\n"
        view = current


# -- the route ------------------------------------------------------------------------------


_OPENAPI: Final[dict[str, Any]] = {
    "security": [{"AccordSignature": []}],
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["jsonrpc", "id", "method"],
                    "properties": {
                        "jsonrpc": {"const": "2.0"},
                        "id": {"type": ["string", "integer"]},
                        "method": {
                            "type": "string",
                            "enum": [*METHODS, *sorted(STREAMING)],
                        },
                        "params": {"type": "object"},
                    },
                }
            }
        },
    },
}
_RESPONSES: Final[dict[int | str, dict[str, Any]]] = {
    200: {
        "description": "A JSON-RPC 2.0 response (`result` or `error`; errors too are 200), or "
        "for the streaming methods server-sent events, each a JSON-RPC response whose result "
        "is an A2A StreamResponse",
        "content": {
            "application/json": {"schema": {"type": "object"}},
            SSE_MEDIA_TYPE: {"schema": {"type": "string"}},
        },
    },
    401: {
        "description": "Not signed, forged, outside the time window, or a replayed nonce",
        "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    },
}


def a2a_router(limits: StreamLimits | None = None) -> APIRouter:
    """The `POST /a2a` endpoint; streams follow their task within `limits`."""
    limits = limits or StreamLimits()
    router = APIRouter()

    @router.post(
        PATH,
        tags=["a2a"],
        summary="A2A v1.0 over JSON-RPC 2.0: post a task by message, get, list, cancel, stream",
        response_class=Response,
        responses=_RESPONSES,
        openapi_extra=_OPENAPI,
    )
    async def a2a(request: Request, caller: Caller, state: State) -> Response:
        request_id: RequestId = None
        try:
            call = parse_call(await request.body())
            request_id = call.id
            check_version(
                request.headers.get("A2A-Version") or request.query_params.get("A2A-Version")
            )
            env = Env(state, caller)
            if call.method in STREAMING:
                method, params = call.method, call.params
                # the slot first: a stream over the cap posts nothing and opens nothing
                slot = guarded(lambda: state.streams.take(f"did {caller}"))
                try:
                    view = await run_in_threadpool(guarded, lambda: first_view(env, method, params))
                except BaseException:
                    slot.release()
                    raise
                return SlotStream(
                    slot,
                    follow(env, request, request_id, view, limits),
                    media_type=SSE_MEDIA_TYPE,
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                )
            handler = METHODS.get(call.method)
            if handler is None:
                raise _unknown_method(call.method)
            params = call.params
            result = await run_in_threadpool(guarded, lambda: handler(env, params))
        except CallError as exc:
            return JSONResponse(error_response(exc.request_id, exc))
        except RpcError as exc:
            return JSONResponse(error_response(request_id, exc))
        return JSONResponse(response(request_id, result))

    return router


def _unknown_method(method: str) -> RpcError:
    if method in UNSUPPORTED:
        return RpcError(
            UNSUPPORTED_OPERATION,
            f"{method} is not offered: accord has no push notifications or extended card",
            reason="UNSUPPORTED_OPERATION",
            metadata={"method": method},
        )
    known = ", ".join([*METHODS, *sorted(STREAMING)])
    return RpcError(
        METHOD_NOT_FOUND,
        f"no method {method[:100]!r}: the A2A 1.0 methods here are {known}",
        reason="METHOD_NOT_FOUND",
        metadata={"method": method[:100]},
    )


router = a2a_router()
"""The endpoint as the service includes it (`accord.api.app`)."""
