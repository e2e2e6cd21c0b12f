"""Conversations and the ledger: entries, inclusion proofs, checkpoints, and the live stream of
a conversation as server-sent events; and the signed revocation status list that credentials
name as their `statusListCredential`."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from accord.api.problems import ProblemError
from accord.api.routes.deps import Context, State, address_of, throttle_reads
from accord.api.streams import SlotStream
from accord.coordinator.conversation import (
    CONVERSATION_MESSAGE,
    CONVERSATION_OPENED,
    message_from_json,
    message_to_json,
)
from accord.coordinator.errors import CoordinatorError, IllegalMove
from accord.coordinator.service import conversation_ids, replay_conversation
from accord.identity.onboarding import STATUS_LIST_PATH
from accord.ledger import merkle
from accord.ledger.checkpoint import SignedCheckpoint
from accord.ledger.events import Entry
from accord.ledger.note import NOTE_MEDIA_TYPE, checkpoint_note, origin_for
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore

reads = APIRouter(dependencies=[Depends(throttle_reads)])

MAX_INDEX = 10**12


@reads.get("/conversations", tags=["coordinator"], summary="Logged conversations")
def list_conversations(
    context: Context, task: Annotated[str | None, Query(max_length=200)] = None
) -> list[dict[str, Any]]:
    store = context.market.ledger.store
    rows = []
    for conv_id in conversation_ids(store, task):
        try:
            rows.append({**replay_conversation(store, conv_id).to_json(), "valid": True})
        except IllegalMove as exc:
            rows.append({"conv_id": conv_id, "valid": False, "reason": exc.reason})
    return rows


@reads.get("/conversations/{conv_id}", tags=["coordinator"], summary="One conversation, replayed")
def show_conversation(conv_id: str, context: Context) -> dict[str, Any]:
    store = context.market.ledger.store
    if conv_id not in conversation_ids(store):
        raise ProblemError(404, f"no conversation {conv_id!r}")
    try:
        record = replay_conversation(store, conv_id)
    except IllegalMove as exc:
        raise ProblemError(409, f"the conversation does not replay: {exc.reason}") from exc
    except CoordinatorError as exc:
        raise ProblemError(404, str(exc)) from exc
    return {
        **record.to_json(),
        "opened_index": record.opened_index,
        # Outstanding assignments whose member logged that it answered (`work.answered`),
        # with that entry's index: a leader never declares such a member absent.
        "answered": dict(record.conversation.answered),
        "messages": [
            {"index": m.index, "turn": m.turn, "at": m.at, "message": message_to_json(m.message)}
            for m in record.messages
        ],
    }


#: How often a live stream polls the log for new entries, and how long one stream may last.
POLL_SECONDS = 0.2
MAX_STREAM_SECONDS = 3600.0
#: A comment line is sent after this many seconds without an event (keeps proxies open).
KEEPALIVE_SECONDS = 15.0
SSE_MEDIA_TYPE = "text/event-stream"


class ConversationFollower:
    """Reads a conversation and its nested children from the log incrementally.

    Each `poll()` returns the `conversation.message` events logged since the last one (of the
    conversation and of every conversation opened under it, at any depth), in log order.
    `closed` turns true once the followed conversation's Conclude is seen.
    """

    def __init__(self, store: LogStore, conv_id: str, after: int = -1) -> None:
        self.store = store
        self.conv_id = conv_id
        self.tracked = {conv_id}
        self.depth = {conv_id: 0}
        self.last = after
        self.closed = False
        self._scanned = -1
        self._resume_after = after

    def poll(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        while True:
            found = self.store.find(
                kinds=(CONVERSATION_OPENED, CONVERSATION_MESSAGE), after=self._scanned, limit=1000
            )
            if not found:
                return events
            for stored in found:
                self._scanned = stored.index
                event = Entry.from_bytes(stored.data).event
                if event.kind == CONVERSATION_OPENED:
                    parent = event.body.get("parent")
                    if parent in self.tracked:
                        self.tracked.add(event.subject)
                        self.depth[event.subject] = self.depth[str(parent)] + 1
                    continue
                if event.subject not in self.tracked:
                    continue
                data = self._message(stored.index, event.subject, event.body, event.actor)
                if event.subject == self.conv_id and data["kind"] == "conclude":
                    self.closed = True
                if stored.index > self._resume_after:
                    self.last = stored.index
                    events.append(data)

    def _message(self, index: int, conv_id: str, body: Any, actor: str) -> dict[str, Any]:
        raw = body.get("message", {})
        message = message_from_json(raw)
        kind = str(raw.get("kind"))
        return {
            "index": index,
            "conv_id": conv_id,
            "depth": self.depth.get(conv_id, 0),
            "turn": int(body.get("turn", 0)),
            "state": message.next_state,
            "speaker": actor,
            "kind": kind,
            "text": _text(raw),
            "message": message_to_json(message),
        }


def _text(raw: dict[str, Any]) -> str:
    """A line a person can read for one message (agents named by DID)."""
    match raw.get("kind"):
        case "discuss":
            return str(raw.get("text", ""))
        case "assign_sync":
            return f"assigns {raw['task'].get('sub_id')} to {raw.get('assignee')} and waits"
        case "assign_async":
            pairs = ", ".join(
                f"{a['task'].get('sub_id')}→{a['assignee']}" for a in raw.get("assignments", [])
            )
            return f"assigns {pairs} (async)"
        case "report":
            result = raw.get("result", {})
            if result.get("ok"):
                count = len(result.get("contributions", []))
                return f"reports {result.get('sub_id')}: {count} answers"
            return f"reports {result.get('sub_id')} failed: {result.get('error')}"
        case "abandon":
            return f"abandons {raw.get('sub_id')}: {raw.get('reason')}"
        case "no_show":
            return f"declares a no-show for {raw.get('sub_id')}: its member did not answer"
        case "conclude":
            return f"concludes: {raw.get('deliverable', {}).get('summary', '')}"
    return ""


def sse(event: str, data: Any, event_id: int | None = None) -> str:
    """One server-sent event (JSON data on one line)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, sort_keys=True)}\n\n"


@reads.get(
    "/conversations/{conv_id}/events",
    tags=["coordinator"],
    summary="A live conversation as server-sent events",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "`message` events (JSON: index, conv_id, depth, turn, state "
            "after, speaker, kind, text, message) from the start (or after Last-Event-ID), "
            "then each new one as it is logged, and a last `end` event once the "
            "conversation is closed. Open streams are capped per client address and in "
            "all (429 over a cap, see `accord.api.streams`)",
            "content": {SSE_MEDIA_TYPE: {"schema": {"type": "string"}}},
        }
    },
)
async def conversation_events(
    conv_id: str,
    request: Request,
    context: Context,
    state: State,
    follow: Annotated[
        bool, Query(description="Keep the stream open for new messages until it is closed")
    ] = True,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", max_length=20, include_in_schema=False)
    ] = None,
) -> StreamingResponse:
    store = context.market.ledger.store
    opened = await run_in_threadpool(store.find, kind=CONVERSATION_OPENED, subject=conv_id, limit=1)
    if not opened:
        raise ProblemError(404, f"no conversation {conv_id!r} (see GET /conversations)")
    after = int(last_event_id) if last_event_id and last_event_id.isdigit() else -1
    follower = ConversationFollower(store, conv_id, after)
    slot = state.streams.take(address_of(request))  # 429 over the caps (`accord.api.streams`)

    async def stream() -> AsyncIterator[str]:
        started = quiet = time.monotonic()
        while True:
            try:
                events = await run_in_threadpool(follower.poll)
            except IllegalMove as exc:
                yield sse("error", {"conv_id": conv_id, "detail": exc.reason})
                return
            for data in events:
                yield sse("message", data, data["index"])
            now = time.monotonic()
            if events:
                quiet = now
            if follower.closed or not follow:
                yield sse("end", {"conv_id": conv_id, "closed": follower.closed})
                return
            if now - started > MAX_STREAM_SECONDS or await request.is_disconnected():
                return
            if now - quiet > KEEPALIVE_SECONDS:
                quiet = now
                yield ": keep-alive\n\n"
            await asyncio.sleep(POLL_SECONDS)

    return SlotStream(
        slot,
        stream(),
        media_type=SSE_MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@reads.get("/ledger/entries", tags=["ledger"], summary="Entries of the log")
def ledger_entries(
    context: Context,
    start: Annotated[int, Query(alias="from", ge=0, le=MAX_INDEX)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    kind: Annotated[str | None, Query(max_length=100)] = None,
    subject: Annotated[str | None, Query(max_length=200)] = None,
) -> dict[str, Any]:
    """The entries from index `from` on, oldest first, `limit` at most, of `kind` and about
    `subject` when given (a task's reviews: `kind=review.given&subject=TASK`)."""
    store = context.market.ledger.store
    size = store.size()
    found = store.find(kind=kind, subject=subject, limit=limit, after=start - 1)
    return {
        "log_id": store.log_id,
        "size": size,
        "root": store.root(size).hex(),
        "entries": [
            {"index": stored.index, **Entry.from_bytes(stored.data).to_json()} for stored in found
        ],
    }


@reads.get("/ledger/entries/{index}/proof", tags=["ledger"], summary="An inclusion proof")
def ledger_proof(
    context: Context,
    index: Annotated[int, Path(ge=0, le=MAX_INDEX)],
    size: Annotated[int | None, Query(ge=1, le=MAX_INDEX)] = None,
) -> dict[str, Any]:
    store = context.market.ledger.store
    now = store.size()
    tree_size = now if size is None else size
    if tree_size > now:
        raise ProblemError(404, f"the log has {now} entries, not {tree_size}")
    if index >= tree_size:
        raise ProblemError(404, f"entry {index} is not in a tree of {tree_size} entries")
    proof = store.inclusion_proof(index, tree_size)
    root = store.root(tree_size)
    leaf = store.entry(index).leaf_hash
    merkle.verify_inclusion(leaf, index, tree_size, proof, root)
    return {
        "index": index,
        "tree_size": tree_size,
        "leaf_hash": leaf.hex(),
        "root": root.hex(),
        "proof": [element.hex() for element in proof],
    }


@reads.get(
    "/ledger/checkpoint",
    tags=["ledger"],
    summary="The latest checkpoint as a C2SP tlog-checkpoint signed note",
    response_class=Response,
    responses={
        200: {
            "description": "The origin, the tree size, the base64 root hash, a blank line and "
            "the operator's Ed25519 note signature (C2SP signed-note; key name = origin)",
            "content": {NOTE_MEDIA_TYPE: {"schema": {"type": "string"}}},
        }
    },
)
def ledger_checkpoint_note(context: Context) -> Response:
    store = context.market.ledger.store
    operator = context.market.ledger.operator
    stored = store.latest_checkpoint()
    if stored is None:
        raise ProblemError(404, "the log has no checkpoint yet (see `accord ledger anchor`)")
    if not isinstance(operator, Ed25519Signer):
        raise ProblemError(503, "the operator's key cannot sign notes here")
    origin = origin_for(context.settings.public_url, store.log_id)
    note = checkpoint_note(origin, stored.size, stored.root, operator)
    return Response(note, media_type=NOTE_MEDIA_TYPE, headers={"Cache-Control": "no-cache"})


@reads.get("/ledger/consistency", tags=["ledger"], summary="An RFC 9162 consistency proof")
def ledger_consistency(
    context: Context,
    first: Annotated[int, Query(ge=1, le=MAX_INDEX)],
    second: Annotated[int, Query(ge=1, le=MAX_INDEX)],
) -> dict[str, Any]:
    store = context.market.ledger.store
    now = store.size()
    if first > second:
        raise ProblemError(
            404, f"no tree of {first} entries is a prefix of one of {second} (first > second)"
        )
    if second > now:
        raise ProblemError(404, f"the log has {now} entries, not {second}")
    proof = store.consistency_proof(first, second)
    first_root, second_root = store.root(first), store.root(second)
    merkle.verify_consistency(first, second, first_root, second_root, proof)
    return {
        "first": first,
        "second": second,
        "first_root": first_root.hex(),
        "second_root": second_root.hex(),
        "proof": [element.hex() for element in proof],
    }


@reads.get("/ledger/checkpoints", tags=["ledger"], summary="Signed checkpoints and anchors")
def ledger_checkpoints(context: Context) -> dict[str, Any]:
    ledger = context.market.ledger
    store = ledger.store
    anchors = {anchor.size: anchor for anchor in ledger.anchor_journal.records()}
    rows = []
    for stored in store.checkpoints():
        anchor = anchors.get(stored.size)
        rows.append(
            {
                "size": stored.size,
                "root": stored.root.hex(),
                "at": stored.at,
                "checkpoint": SignedCheckpoint.from_bytes(stored.data).to_json(),
                "anchor": None
                if anchor is None
                else {
                    "status": anchor.status,
                    "chain_id": anchor.chain_id,
                    "registry": anchor.registry_address,
                    "tx_hash": "0x" + anchor.tx_hash.hex(),
                    "block_number": anchor.block_number,
                },
            }
        )
    return {"log_id": store.log_id, "checkpoints": rows}


VC_MEDIA_TYPE = "application/vc"
"""VC Data Model 2.0 §6.3: a credential secured with an embedded Data Integrity proof."""


@reads.get(
    STATUS_LIST_PATH,
    tags=["identity"],
    summary="The revocation status list credential",
    response_class=JSONResponse,
    responses={
        200: {
            "description": "A BitstringStatusListCredential signed by the operator "
            "(eddsa-jcs-2022): the `statusListCredential` every credential names",
            "content": {VC_MEDIA_TYPE: {"schema": {"type": "object"}}},
        }
    },
)
def status_list(request: Request, context: Context) -> JSONResponse:
    try:
        document = context.onboarding.status_list_at(request.url.path)
    except KeyError as exc:
        raise ProblemError(404, "no credential has been issued yet: no status list") from exc
    return JSONResponse(document, media_type=VC_MEDIA_TYPE, headers={"Cache-Control": "no-cache"})
