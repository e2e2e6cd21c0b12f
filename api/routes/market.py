"""Tasks, sealed bids, the award, and the per-task audit.

Who may act:
- `POST /files`: any signed caller, within its quotas.
- `POST /tasks` with a spec: any caller whose key the service holds (a
  registered agent, or the operator), and a spec names only files its requester uploaded
  (`Market.post`): `task.posted` is signed by the requester's hosted key, and the escrow is
  paid from the managed devnet's funded requester account
  (`accord.market.wiring.DEVNET_REQUESTER_KEY`) or ACCORD_REQUESTER_ETH_KEY.
- any DID, holding its own key, posts in two steps: `POST /tasks/prepare` (the spec and the
  Ethereum account it deposits from) answers the `task.posted` body to sign and the task id
  (derived from the caller and its Idempotency-Key, one made up when none is sent); then
  `POST /tasks` with `{"entry": <that entry, signed>}` and the same Idempotency-Key logs it
  (`Market.post_signed`) and answers the task with `escrow`, the `TaskEscrow.open` call its
  wallet makes. The task takes bids once that deposit is on chain (`Market.recover`, run by
  the service's lifecycle). `GET /chain` says which chain, contract and RPC URL.
- commitments and reveals: only the bidder itself: the signed commitment's (reveal's) bidder
  must be the caller, and it must be for the task of the path.
- `POST /tasks/{id}/award`: the task's requester or the operator (the network clears auctions
  its requesters leave open); anybody else gets 403.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag
from starlette.concurrency import run_in_threadpool

from accord.api.audits import AuditKey, audit_key
from accord.api.problems import ProblemError
from accord.api.routes.deps import (
    ApiState,
    Caller,
    Context,
    SignedCaller,
    SignedLater,
    State,
    address_of,
    next_page,
    throttle_reads,
)
from accord.api.routes.remote import EntryBody, parse_entry
from accord.audit.checks import AuditReport, audit_task
from accord.identity.errors import RegistryError
from accord.ledger.chain import AnchorChain
from accord.ledger.events import Entry, format_time
from accord.ledger.signing import Signer
from accord.ledger.views import DEFAULT_LIMIT, MAX_LIMIT
from accord.market import sealed
from accord.market.auction import price_reason
from accord.market.blobs import Upload
from accord.market.errors import BidRejected, TaskError
from accord.market.escrow import OPEN_SIGNATURE, EscrowChain
from accord.market.states import TaskState
from accord.market.tasks import (
    CAPABILITY_PATTERN,
    TASK_POSTED,
    Task,
    request_of,
)
from accord.market.wiring import MarketContext, advertised_rpc_url

reads = APIRouter(dependencies=[Depends(throttle_reads)])
writes = APIRouter()


def task_json(context: MarketContext, task: Task) -> dict[str, Any]:
    data: dict[str, Any] = task.to_json()
    data["state"] = context.market.state(task)
    return data


def tasks_body(context: MarketContext, tasks: Iterable[Task]) -> bytes:
    """The JSON answer `[task_json(context, task) for task in tasks]`, byte for byte as
    JSONResponse encodes it, from each task's `Task.json_text`: a task's text but its state
    (the clock's) is encoded once per Task, its spec's once per spec, rather than converted
    to dicts and encoded again for every task of every page (the specs are most of a page).
    Raises ValueError for a spec that JSON cannot hold (a check weight that is no finite
    number), as JSONResponse would."""
    market = context.market
    return f"[{','.join(task.json_text(market.state(task)) for task in tasks)}]".encode()


def _task(context: MarketContext, task_id: str) -> Task:
    try:
        return context.market.task(task_id)
    except TaskError as exc:
        raise ProblemError(404, str(exc)) from exc


def _signer_of(context: MarketContext, did: str, *, acting: str = "") -> Signer:
    """The key of a caller who may post tasks: the operator, or an agent registered here
    (whose key the service holds). Anybody else gets 403; `acting` says what it tried."""
    if did == context.market.ledger.operator.did:
        return context.market.ledger.operator
    try:
        return context.onboarding.registry.signer(context.onboarding.registry.get(did))
    except RegistryError as exc:
        raise ProblemError(
            403,
            f"{did} is not an agent this service holds a key for: only registered agents and "
            f"the operator post tasks here by their spec{acting}; a requester holding its own "
            "key posts its own signed task.posted (POST /tasks/prepare, then POST /tasks "
            '{"entry": ...})',
        ) from exc


class TaskPost(BaseModel):
    """A task spec: the terms, the requester's parts and the checks its deliverable must pass
    (see `accord.market.work`). Files an input references are uploaded first (`POST /files`) and
    named `{"$file": "<sha256>"}`."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=10_000)
    budget: str = Field(description="0.5eth, 20gwei, 1000wei or bare wei", max_length=100)
    bidding: str = Field(default="30s", max_length=20)
    reveal: str = Field(default="30s", max_length=20)
    delivery: str = Field(default="10m", max_length=20)
    review: str = Field(default="1h", max_length=20)
    rule: Literal["second-score", "first-score"] = "second-score"
    parts: list[dict[str, Any]] = Field(
        min_length=1, max_length=64, description="[{id, capability, input}]"
    )
    checks: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=128,
        description="[{id, weight, kind, reads|part, ...}]; none: schema and review per part",
    )


class PreparePost(BaseModel):
    """A spec to post, and the Ethereum account the requester's own wallet deposits from."""

    model_config = ConfigDict(extra="forbid")

    spec: TaskPost
    escrow_from: str = Field(max_length=100, description="0x and 40 hex digits")


def _posting_kind(value: Any) -> str:
    return "entry" if isinstance(value, dict) and "entry" in value else "spec"


Posting = Annotated[
    Annotated[TaskPost, Tag("spec")] | Annotated[EntryBody, Tag("entry")],
    Discriminator(_posting_kind),
]
"""The body of `POST /tasks`: a spec (a requester whose key the service holds), or the
requester's own signed `task.posted` entry."""

IdempotencyKey = Annotated[
    str | None,
    Header(
        max_length=200,
        description="Post at most once per key: a retry with the same key and spec "
        "answers the task the first request posted (409 for another spec)",
    ),
]


class ReviewBody(BaseModel):
    """A rejection needs a `reason`: it opens a dispute an independent evaluator decides."""

    check: str = Field(min_length=1, max_length=64)
    verdict: Literal["accept", "reject"]
    reason: str | None = Field(default=None, max_length=2000)


def _review_kind(value: Any) -> str:
    return "entry" if isinstance(value, dict) and "entry" in value else "review"


Review = Annotated[
    Annotated[ReviewBody, Tag("review")] | Annotated[EntryBody, Tag("entry")],
    Discriminator(_review_kind),
]


class CommitmentBody(BaseModel):
    """A `accord.market.sealed.Commitment` as JSON, signed by its bidder."""

    task: str
    bidder: str
    commitment: str
    signature: str


class RevealBody(BaseModel):
    """A `accord.market.sealed.Reveal` as JSON, signed by its bidder."""

    task: str
    bidder: str
    price: str
    salt: str
    signature: str


@reads.get(
    "/tasks",
    tags=["market"],
    summary="Tasks with their state, filtered, a page at a time (the next page: the Link header)",
    response_model=list[dict[str, Any]],
)
def list_tasks(
    request: Request,
    context: Context,
    state: Annotated[
        TaskState | None, Query(description="The state now (the clock ends bidding)")
    ] = None,
    capability: Annotated[
        str | None,
        Query(pattern=CAPABILITY_PATTERN.pattern, description="Only tasks needing this"),
    ] = None,
    requester: Annotated[
        str | None,
        Query(min_length=1, max_length=200, description="Only tasks posted by this DID"),
    ] = None,
    limit: Annotated[
        int | None,
        Query(ge=1, le=MAX_LIMIT, description=f"Tasks per page (default {DEFAULT_LIMIT})"),
    ] = None,
    cursor: Annotated[
        str | None,
        Query(pattern=r"^(tasks\.[0-9]{1,18})?$", description="The next page (from Link)"),
    ] = None,
) -> Response:
    """Oldest posting first. The body stays a plain list; when more tasks match, the answer
    carries `Link: <...&cursor=...>; rel="next"` (RFC 8288) and `Accord-Next-Cursor`.

    The page is encoded here, by `tasks_body`: a page of 50 tasks with their specs is some
    40 kB of plain JSON, which FastAPI would otherwise validate and convert again before
    encoding."""
    page = context.market.list_tasks(
        state=state, capability=capability, requester=requester, limit=limit, cursor=cursor
    )
    answer = Response(tasks_body(context, page.tasks), media_type=JSONResponse.media_type)
    next_page(request, answer, page.next_cursor)
    return answer


@reads.get("/tasks/{task_id}", tags=["market"], summary="One task, and its requester's record")
def show_task(task_id: str, context: Context) -> dict[str, Any]:
    """The task, and `requester_record`: what bidders see of its requester (tasks posted and
    settled, review checks rejected, rejections overturned), from the log's read views; an
    awarded or running task says in `waiting` what it waits for and until when
    (`accord.coordinator.waiting`)."""
    from accord.coordinator.waiting import task_waiting

    task = _task(context, task_id)
    data = task_json(context, task)
    data["requester_record"] = context.market.requester_record(task.requester).to_json()
    waiting = task_waiting(context, task)
    if waiting is not None:
        data["waiting"] = waiting
    return data


@reads.get("/tasks/{task_id}/bids", tags=["market"], summary="Bids: sealed until revealed")
def task_bids(task_id: str, context: Context) -> list[dict[str, Any]]:
    _task(context, task_id)
    return [bid.to_json() for bid in context.market.bids(task_id)]


@reads.get("/tasks/{task_id}/audit", tags=["audit"], summary="The audit checklist of a task")
async def task_audit(
    task_id: str, request: Request, context: Context, state: State
) -> dict[str, Any]:
    """The audit (`accord.audit.checks`), computed once for the log and the chain as they are
    and served to everyone who asks (`accord.api.audits`): 429 with Retry-After when this
    caller, or the service, already computes as many audits as it may. Async, so that one
    waiting for a computation under way holds no worker thread; the reads and the audit
    itself run in worker threads."""
    market = context.market

    def prepare() -> tuple[AnchorChain, EscrowChain, AuditKey | None]:
        _task(context, task_id)
        anchors, escrow = state.audit_chains()
        return anchors, escrow, audit_key(market.ledger.store, task_id, anchors, escrow)

    def compute() -> AuditReport:
        store, outputs = market.ledger.store, market.sealed_bytes
        return audit_task(store, task_id, anchors=anchors, escrow=escrow, outputs=outputs)

    anchors, escrow, key = await run_in_threadpool(prepare)
    report = await state.audits.report(address_of(request), key, compute)
    data: dict[str, Any] = report.to_json()
    return data


@writes.post(
    "/tasks", tags=["market"], summary="Post a task; its budget is escrowed", status_code=201
)
def post_task(
    body: Posting,
    caller: Caller,
    context: Context,
    state: State,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """A spec: posted and escrowed from the service's requester account, signed by the
    caller's key held here (403 for anybody else). `{"entry": ...}`: the caller's own signed
    `task.posted` (see `POST /tasks/prepare`), with its Idempotency-Key; the answer's
    `escrow` is the deposit the caller's wallet makes before the task takes bids. Each DID
    posts at most `ApiConfig.post_burst` at once and `posts_per_hour` after that (429)."""
    _throttle_posting(caller, state)
    if isinstance(body, EntryBody):
        return _post_signed(body, caller, context, state, idempotency_key)
    requester = _signer_of(context, caller)
    spec = context.market.spec_from_request(body.model_dump(), requester=caller)
    key = os.environ.get("ACCORD_REQUESTER_ETH_KEY") or context.default_requester_key()
    with state.write_lock:
        task = context.market.post(
            requester, spec, requester_key=key, idempotency_key=idempotency_key
        )
    data = task_json(context, task)
    data["warnings"] = context.market.warnings(spec)
    return data


def _throttle_posting(caller: str, state: ApiState) -> None:
    """Raises ProblemError 429, with Retry-After, when `caller` is over its posting rate."""
    wait = state.post_limiter.take(caller)
    if wait is None:
        return
    seconds = max(1, math.ceil(wait))
    config = state.config
    raise ProblemError(
        429,
        f"{caller} posts at most {config.post_burst} tasks at once and {config.posts_per_hour} "
        f"an hour after that: post again in {seconds} s",
        kind="post-rate",
        headers={"Retry-After": str(seconds)},
    )


def _post_signed(
    body: EntryBody, caller: str, context: MarketContext, state: State, key: str | None
) -> dict[str, Any]:
    entry = parse_entry(body.entry, caller)
    if key is None:
        raise ProblemError(
            400,
            "a task.posted you signed yourself is posted with the Idempotency-Key its task id "
            "derives from: send the header POST /tasks/prepare answered (idempotency_key)",
            reason="idempotency-key",
        )
    request = request_of(entry.event.body.get("spec"))
    spec = context.market.spec_from_request(request, requester=caller)
    with state.write_lock:
        task = context.market.post_signed(entry, spec, idempotency_key=key)
    data = task_json(context, task)
    data["warnings"] = context.market.warnings(spec)
    data["escrow"] = context.market.escrow_call(task)
    return data


@writes.post(
    "/tasks/prepare",
    tags=["market"],
    summary="What a requester holding its own key signs to post a task (nothing is logged)",
)
def prepare_task(
    body: PreparePost,
    caller: Caller,
    context: Context,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """The `task.posted` entry to sign (`kind`, `subject`, `body`: exactly what the service
    would log), the task id (derived from the caller and the Idempotency-Key; one is made up
    and answered as `idempotency_key` when none is sent), and the caller's next `seq` and the
    service's time to sign it with. Post it with `POST /tasks` `{"entry": ...}` and the same
    Idempotency-Key. Any DID may ask; a spec names only files the caller uploaded."""
    spec = context.market.spec_from_request(body.spec.model_dump(), requester=caller)
    key = idempotency_key if idempotency_key is not None else uuid.uuid4().hex
    task_id, posted = context.market.prepare_post(caller, spec, body.escrow_from, key)
    ledger = context.market.ledger
    return {
        "task_id": task_id,
        "idempotency_key": key,
        "kind": TASK_POSTED,
        "subject": task_id,
        "body": posted,
        "seq": ledger.next_seq(caller),
        "server_time": format_time(ledger.clock()),
        "warnings": context.market.warnings(spec),
    }


@reads.get(
    "/chain",
    tags=["market"],
    summary="The chain the escrow lives on: what a requester's wallet needs to deposit",
)
def chain(context: Context) -> dict[str, Any]:
    """`chain_id`, `escrow_contract` (TaskEscrow's address), `registry_contract` (the
    AnchorRegistry the log's checkpoints are anchored in; null when the log is not anchored
    on chain), `rpc_url` (the JSON-RPC endpoint the service advertises, ACCORD_PUBLIC_RPC_URL
    or the managed devnet's; null on an external chain without one: use your own node for
    that chain id), `open_function`, and `devnet`: true on the devnet the service manages,
    where wallets cover their own gas (`anvil_setBalance`; `accord devnet fund`). An auditor
    reads the anchors and the escrow's events there (`accord audit TASK --server URL`)."""
    anchorer = context.market.ledger.anchorer
    return {
        "chain_id": context.escrow.chain_id(),
        "escrow_contract": context.escrow.escrow_address(),
        "registry_contract": None if anchorer is None else anchorer.chain.registry_address(),
        "rpc_url": advertised_rpc_url(context.settings),
        "open_function": OPEN_SIGNATURE,
        "devnet": context.settings.managed_devnet,
    }


@writes.post(
    "/tasks/{task_id}/cancel",
    tags=["market"],
    summary="End a posted task whose escrow never opened (its requester)",
)
def cancel_task(
    task_id: str,
    caller: Caller,
    context: Context,
    state: State,
    body: Annotated[EntryBody | None, Body()] = None,
) -> dict[str, Any]:
    """A requester whose key the service holds sends no body; one holding its own key sends
    `{"entry": ...}`, its signed `task.cancelled` (body `{"task_id"}`, subject the task id).
    A task whose key on chain holds an escrow that is not its deposit (a stranger opened it
    first, or with a wrong amount or deadline) never takes bids: cancel it and post again
    under a new Idempotency-Key. 409 once the escrow is open."""
    task = _task(context, task_id)
    if caller != task.requester:
        raise ProblemError(403, f"only the requester of {task_id} ({task.requester}) cancels it")
    with state.write_lock:
        if body is None:
            task = context.market.cancel(_signer_of(context, caller), task_id)
        else:
            entry = _entry_about(body, caller, task_id, "cancels")
            task = context.market.cancel_signed(entry)
    return task_json(context, task)


@writes.post(
    "/files",
    tags=["market"],
    summary="Store a file your task specs may name (any signed caller; within quotas)",
    status_code=201,
)
async def upload_file(
    request: Request, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    """The body's bytes, held for the caller, who alone may name them in its task specs.
    An upload no posted task names expires after `ApiConfig.file_ttl` seconds. Any DID may
    upload (as any DID may post: a requester holding its own key names its uploads in the
    spec it signs), within quotas on the uploads it holds that no task names yet, and on all
    callers' together: over one, 429 with Retry-After (when the oldest held upload expires),
    or 413 for a file that can never fit; nothing is stored."""
    data = await request.body()
    config = state.config

    def store() -> Upload:
        return context.market.upload_file(caller, data, config.file_quota())

    held = await run_in_threadpool(store)
    expires = held.expires_at
    return {
        "sha256": held.sha256,
        "size": held.size,
        "stored_by": caller,
        "expires_unless_posted": None if expires is None else expires.isoformat(),
    }


def _work_forbidden(task: Task) -> ProblemError:
    return ProblemError(
        403, f"only the requester, the team and the operator see the work of {task.task_id}"
    )


@writes.get(
    "/tasks/{task_id}/files/{digest}",
    tags=["market"],
    summary="One of the task's input files (signed: requester, team or operator)",
    response_class=Response,
)
def task_file(task_id: str, digest: str, caller: Caller, context: Context) -> Response:
    from accord.coordinator.service import work_readers

    task = _task(context, task_id)
    if not work_readers(context, task).may_see_files(task, caller):
        raise _work_forbidden(task)
    data = context.market.file_text(task, digest).encode()
    return Response(data, media_type="text/plain; charset=utf-8")


@writes.get(
    "/tasks/{task_id}/deliverable",
    tags=["market"],
    summary="The deliverable: each part's producer and output commitment, the outputs the "
    "caller may read, and the checks once settled (signed: requester, team or operator)",
)
def deliverable(task_id: str, caller: Caller, context: Context) -> dict[str, Any]:
    """The team and the operator read every output; the requester the parts its review checks
    read during the review window, and once the settlement is computed the parts it pays for
    (`accord.market.privacy`); `withheld` lists the parts not shown."""
    from accord.market.settlement import deliverable_view, logged_settlement

    task = _task(context, task_id)
    settlement = logged_settlement(context.market, task_id)
    readable = readable_work(context, task, caller, settlement)
    if readable is None:
        raise _work_forbidden(task)
    return deliverable_view(context.market, task_id, readable)


def readable_work(
    context: MarketContext, task: Task, caller: str, settlement: Mapping[str, Any] | None
) -> frozenset[str] | None:
    """The parts of a delivered `task` whose outputs `caller` reads now, given its logged
    settlement body (None: not computed yet); None when `caller` sees none of its work
    (`accord.market.privacy`). Raises TaskError before delivery, BlobError when the stored
    deliverable was altered."""
    from accord.coordinator.service import work_readers
    from accord.market.privacy import paid_parts

    readers = work_readers(context, task)
    paid = None
    if settlement is not None and not readers.works_on(task, caller):
        document = context.market.delivered_document(task.task_id)
        producers = {
            str(entry.get("part")): str(entry.get("producer"))
            for entry in document.get("parts", [])
            if isinstance(entry, Mapping)
        }
        paid = paid_parts(task, settlement, producers)
    return readers.readable_parts(task, caller, paid=paid)


@writes.post(
    "/tasks/{task_id}/reviews",
    tags=["market"],
    summary="The requester accepts or rejects a review check of the delivered work",
    status_code=201,
)
def review(
    task_id: str, body: Review, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    """`{"check", "verdict", "reason"}` from a requester whose key the service holds, or
    `{"entry": ...}`: the requester's own signed `review.given` (body `{"task_id", "check",
    "verdict"}`, and for a rejection `"reason"` and the dispute `"fee"`). A python check the
    service's `checks.previewed` named inconclusive is contested the same way, by a
    rejection."""
    task = _task(context, task_id)
    if caller != task.requester:
        raise ProblemError(403, f"only the requester of {task_id} reviews its work")
    if isinstance(body, EntryBody):
        entry = _entry_about(body, caller, task_id, "reviews")
        with state.write_lock:
            index = context.market.review_signed(entry)
        given = entry.event.body
        return {
            "task_id": task_id,
            "check": given.get("check"),
            "verdict": given.get("verdict"),
            "index": index,
        }
    with state.write_lock:
        index = context.market.review(
            _signer_of(context, caller), task_id, body.check, body.verdict, body.reason
        )
    return {"task_id": task_id, "check": body.check, "verdict": body.verdict, "index": index}


@writes.post(
    "/tasks/{task_id}/disputes/answers",
    tags=["market"],
    summary="A team member answers the requester's rejection with a bond of its own",
    status_code=201,
)
def answer_dispute(
    task_id: str, body: EntryBody, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    """`{"entry": ...}`: a team member's own signed `dispute.answered` (body `{"task_id",
    "check", "account", "amount"}`), once `account` has sent `amount` wei to the escrow
    (`TaskEscrow.answer`, from its own wallet): the team stakes its own bond on the dispute's
    panel instead of its pay (`accord.market.disputes`). Before the panel's commit window
    closes; at least the dispute's fee; once per dispute."""
    entry = _entry_about(body, caller, task_id, "answers")
    with state.write_lock:
        index = context.market.answer_dispute(entry)
    answered = entry.event.body
    return {
        "task_id": task_id,
        "check": answered.get("check"),
        "account": answered.get("account"),
        "amount": answered.get("amount"),
        "index": index,
    }


def _own_bid(signed: SignedCaller, bidder: str, what: str) -> str:
    """The did:key that signed a bid's request, its nonce spent (`SignedCaller.confirm`), when
    it is the bidder's. Raises ProblemError 401 (a replay) or 403 (another's bid)."""
    caller = signed.confirm()
    if bidder != caller:
        raise ProblemError(
            403,
            f"the {what} is {bidder}'s, but the request is signed by {caller}: "
            "an agent bids only for itself",
        )
    return caller


@writes.post(
    "/tasks/{task_id}/commitments",
    tags=["market"],
    summary="Commit a sealed bid (signed by the bidder, who must be the caller)",
    status_code=201,
)
async def commit(
    task_id: str, body: CommitmentBody, signed: SignedLater, context: Context
) -> dict[str, Any]:
    # One hop to a worker thread for the work, the request's nonce included (`SignedLater`);
    # the answer is then serialised on the event loop (a sync route's answer is validated in
    # a worker thread, a second hop per bid).
    return await run_in_threadpool(_commit, task_id, body, signed, context)


def _commit(
    task_id: str, body: CommitmentBody, signed: SignedCaller, context: MarketContext
) -> dict[str, Any]:
    caller = _own_bid(signed, body.bidder, "commitment")
    commitment = sealed.Commitment.from_json(body.model_dump())
    if commitment.task_id != task_id:
        raise ProblemError(
            400,
            f"the commitment is signed for {commitment.task_id}, not {task_id}",
            reason="wrong-task",
        )
    try:
        index = context.market.commit(commitment)
    except BidRejected as exc:
        if exc.reason == "wrong-task":  # the commitment names the path's task: there is none
            raise ProblemError(404, f"no task {task_id!r} (see `accord task list`)") from exc
        raise
    return {"task_id": task_id, "bidder": caller, "index": index}


@writes.post(
    "/tasks/{task_id}/reveals",
    tags=["market"],
    summary="Reveal a sealed bid (signed by the bidder, who must be the caller)",
    status_code=201,
)
async def reveal(
    task_id: str, body: RevealBody, signed: SignedLater, context: Context
) -> dict[str, Any]:
    # one hop to a worker thread, as `commit`
    return await run_in_threadpool(_reveal, task_id, body, signed, context)


def _reveal(
    task_id: str, body: RevealBody, signed: SignedCaller, context: MarketContext
) -> dict[str, Any]:
    caller = _own_bid(signed, body.bidder, "reveal")
    _task(context, task_id)
    shown = sealed.Reveal.from_json(body.model_dump())
    if shown.task_id != task_id:
        raise ProblemError(
            400, f"the reveal is signed for {shown.task_id}, not {task_id}", reason="wrong-task"
        )
    index = context.market.reveal(shown)
    return {"task_id": task_id, "bidder": caller, "price": str(shown.price), "index": index}


@writes.post(
    "/tasks/{task_id}/award",
    tags=["market"],
    summary="Clear the auction (the requester or the operator)",
)
def award(task_id: str, caller: Caller, context: Context, state: State) -> dict[str, Any]:
    task = _task(context, task_id)
    if caller not in (task.requester, context.market.ledger.operator.did):
        raise ProblemError(
            403, f"only the requester of {task_id} ({task.requester}) or the operator may award it"
        )
    with state.write_lock:
        outcome = context.market.award(task_id)
    winner = outcome.winner
    return {
        "task_id": task_id,
        "winner": None if winner is None else winner.bidder,
        "price": str(outcome.price),
        "rule": outcome.rule,
        "bids": len(outcome.ranking),
        "expired": winner is None,
        "reason": price_reason(outcome),
    }


class RunRequest(BaseModel):
    """Who leads the team: the rule policy (the default), or an LLM policy on any
    OpenAI-compatible endpoint (`model`, else ACCORD_LLM_MODEL on the service; `endpoint`, else
    the service's OPENAI_BASE_URL; no key needed at an endpoint). An endpoint must be a public
    address unless the service sets ACCORD_ALLOW_PRIVATE_AGENTS=1."""

    model_config = ConfigDict(extra="forbid")

    policy: Literal["rule", "llm"] = "rule"
    model: str | None = Field(default=None, min_length=1, max_length=200)
    endpoint: str | None = Field(default=None, min_length=8, max_length=2000, pattern=r"^https?://")


@writes.post(
    "/tasks/{task_id}/run",
    tags=["coordinator"],
    summary="Run the awarded task's team to its deliverable (the winner or the operator)",
)
def run_task(
    task_id: str,
    caller: Caller,
    context: Context,
    state: State,
    body: Annotated[RunRequest | None, Body()] = None,
) -> dict[str, Any]:
    from accord.coordinator.errors import CoordinatorError, PolicyError
    from accord.coordinator.llm_policy import leader_policy
    from accord.coordinator.service import run_awarded_task
    from accord.identity.address_guard import check_endpoint_address
    from accord.identity.errors import PrivateEndpointError

    task = _task(context, task_id)
    if caller not in (task.winner, context.market.ledger.operator.did):
        raise ProblemError(403, f"only the winner of {task_id} or the operator may run it")
    request = body or RunRequest()
    allow_private = context.settings.allow_private_agents
    try:
        if request.endpoint is not None:  # the server will connect to it: public only
            check_endpoint_address(request.endpoint, allow_private=allow_private, what="endpoint")
        leader = leader_policy(
            request.policy,
            model=request.model,
            endpoint=request.endpoint,
            allow_private=allow_private,
        )
    except (PolicyError, PrivateEndpointError) as exc:
        raise ProblemError(422, str(exc)) from exc
    try:  # the lock is held for the task's transitions only, never for the team's work
        conversation = run_awarded_task(context, task_id, policy=leader, lock=state.write_lock)
    except CoordinatorError as exc:
        raise ProblemError(409, str(exc)) from exc
    deliverable = conversation.deliverable
    return {
        "task_id": task_id,
        "conv_id": conversation.conv_id,
        "turns": conversation.turn,
        "deliverable": None if deliverable is None else deliverable.to_json(),
    }


@writes.post(
    "/tasks/{task_id}/settle",
    tags=["market"],
    summary="Pay the team by Shapley value through the escrow (requester or operator; once)",
)
def settle(task_id: str, caller: Caller, context: Context, state: State) -> dict[str, Any]:
    from accord.market.settlement import settle_task

    task = _task(context, task_id)
    if caller not in (task.requester, context.market.ledger.operator.did):
        raise ProblemError(403, f"only the requester of {task_id} or the operator may settle it")
    # the write lock only to log and pay: the checks (strangers' code) run before it is taken
    outcome = settle_task(context.market, context.onboarding, task_id, lock=state.write_lock)
    return {
        "task_id": task_id,
        "amount": str(outcome.amount),
        "refund": str(outcome.refund),
        "payouts": {p: str(w) for p, w in outcome.payouts.items()},
        "payees": dict(outcome.payees),
        "held": {p: str(w) for p, w in outcome.held.items()},
        "shapley": dict(outcome.values),
        "tx_hash": outcome.tx_hash,
        "already_settled": outcome.already,
    }


def _entry_about(body: EntryBody, caller: str, task_id: str, verb: str) -> Entry:
    """The caller's own signed entry in `body`, about `task_id` (400 naming the task it
    `verb`s otherwise). Raises ProblemError."""
    entry = parse_entry(body.entry, caller)
    if entry.event.subject != task_id:
        raise ProblemError(400, f"the entry {verb} {entry.event.subject!r}, not {task_id}")
    return entry
