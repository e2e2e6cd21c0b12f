"""Conversations and the ledger: entries, inclusion proofs, checkpoints."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from api.problems import ProblemError
from api.routes.deps import Context, throttle_reads
from coordinator.conversation import message_to_json
from coordinator.errors import CoordinatorError, IllegalMove
from coordinator.service import conversation_ids, replay_conversation
from ledger import merkle
from ledger.checkpoint import SignedCheckpoint
from ledger.events import Entry

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
            rows.append({"id": conv_id, "valid": False, "reason": exc.reason})
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
        "messages": [
            {"index": m.index, "turn": m.turn, "message": message_to_json(m.message)}
            for m in record.messages
        ],
    }


@reads.get("/ledger/entries", tags=["ledger"], summary="Entries of the log")
def ledger_entries(
    context: Context,
    start: Annotated[int, Query(alias="from", ge=0, le=MAX_INDEX)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    kind: Annotated[str | None, Query(max_length=100)] = None,
) -> dict[str, Any]:
    store = context.market.ledger.store
    size = store.size()
    found = store.find(kind=kind, limit=limit, after=start - 1)
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


@reads.get("/ledger/checkpoints", tags=["ledger"], summary="Signed checkpoints and anchors")
def ledger_checkpoints(context: Context) -> dict[str, Any]:
    store = context.market.ledger.store
    anchors = {anchor.size: anchor for anchor in store.anchors()}
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
