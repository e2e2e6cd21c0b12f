"""The work of a contract holder that keeps its own key: its process leads the team, and the
service admits what it logs, entry by entry.

A self-custody winner (`accord agent run`, `accord.kit`) runs its team in its own process and
signs its own acts; its members sign their own reports at their own endpoints. The service
never signs for any of them: it checks each entry the winner relays and appends it as signed.

    task.started          the winner, once, while the task is awarded
    conversation.opened   the winner for the task's one top-level conversation, or a member of
                          a conversation of the task for a sub-team one level deeper; every
                          member one the task's team directory lists (credentials checked
                          here, `GET /tasks/{id}/team`) and payable (a payout account bound),
                          never the requester
    conversation.message  its speaker; a legal move of the conversation as the log replays it
                          (`accord.coordinator.conversation.step`: a report carries only its
                          speaker's own work on parts of its sub-task); a report names no part
                          reported before in any conversation of the task, and a sub-team's
                          work is exactly that sub-team's conclusion (`check_report_in_task`);
                          a report's outputs must already be held sealed here
                          (`POST /tasks/{id}/sealed`) and valid for their capability, so the
                          checks can read them at settlement; an assignment is dated within
                          `ASSIGNMENT_SKEW` of the service's clock, and a no-show is admitted
                          only once `NO_SHOW_AFTER` has passed since the assignment, by the
                          entries' times and by the service's clock
    work.answered         a member, itself (not relayed), for an assignment outstanding to it
                          in a conversation of the running task, once, before it hands its
                          answer over: from then on the leader cannot declare it absent
                          (`accord.coordinator.conversation.answered`); hosted teams too
    task.delivered        the winner, once, naming the top-level conversation's conclusion and
                          a document whose hash it carries, which is the plan and assembly the
                          log holds (`accord.coordinator.service.assemble`)

Every entry must verify, be dated near the service's clock, and concern this task while it
runs. What is refused raises `WorkRefused` with the reason, and nothing is logged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from accord.coordinator.conversation import (
    CONVERSATION_MESSAGE,
    CONVERSATION_OPENED,
    WORK_ANSWERED,
    AssignAsync,
    AssignSync,
    Conversation,
    NoShow,
    Report,
    check_answered,
    check_report_in_task,
    message_from_json,
    no_show_due,
    open_conversation,
    step,
)
from accord.coordinator.errors import CoordinatorError, IllegalMove
from accord.coordinator.service import (
    ConversationReplays,
    assemble,
    conversation_ids,
    payable,
    replays_of,
    team_directory,
)
from accord.identity.challenges import validate_output
from accord.identity.errors import ExamError
from accord.ledger.canonical import canonical_json
from accord.ledger.errors import LedgerError, SealError
from accord.ledger.events import Entry, parse_time
from accord.ledger.sealing import open_sealed
from accord.market.blobs import MIB, FileQuota, sha256_hex
from accord.market.errors import TaskError
from accord.market.service import check_in_time
from accord.market.tasks import TASK_DELIVERED, TASK_STARTED, Task
from accord.market.wiring import MarketContext
from accord.market.work import MAX_PARTS

ENTRY_SKEW = timedelta(minutes=5)
"""How far an entry's time may be from the service's clock."""
ASSIGNMENT_SKEW = timedelta(seconds=60)
"""How far before the service's clock an assignment may be dated: a leader cannot backdate an
assignment to declare its member absent (`NoShow`) before the member had its time."""
MAX_DEPTH = 1
"""How deep a self-custody leader's sub-teams may nest (as `RunSettings.max_depth`)."""
MAX_TURNS = 256
SEALED_QUOTA = FileQuota(
    ttl=3600.0, files_per_caller=4 * MAX_PARTS, bytes_per_caller=64 * MIB, bytes_total=256 * MIB
)
"""What a winner may hold sealed and not yet named by a report: a stranger who wins a task
cannot fill the service's disk with outputs no report will ever name."""
WORK_KINDS = (TASK_STARTED, CONVERSATION_OPENED, CONVERSATION_MESSAGE, TASK_DELIVERED)


class WorkRefused(CoordinatorError):
    """An entry of a self-custody team the service does not log; `status` is the HTTP status
    that fits (403 not theirs to log, 409 not now, 422 not a legal entry)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def admit_work_entry(context: MarketContext, task_id: str, caller: str, entry: Entry) -> int:
    """Check one entry the winner of `task_id` (the `caller`) relays, and append it as signed.
    Returns its index. Raises WorkRefused (nothing logged), and what the ledger raises
    (SequenceError for a seq that is not its signer's next)."""
    market = context.market
    task = market.task(task_id)
    if entry.event.kind == WORK_ANSWERED:
        return _admit_answered(context, task, caller, entry)
    if task.winner is None or caller != task.winner:
        raise WorkRefused(f"only the winner of {task_id} relays its team's entries", 403)
    if _holds_key(context, caller):
        raise WorkRefused(
            f"{caller}'s key is held here: the service runs its team (`POST /tasks/{task_id}/run`)",
            409,
        )
    event = entry.event
    try:
        entry.verify()
    except LedgerError as exc:
        raise WorkRefused(f"the entry's signature does not verify: {exc}") from exc
    _check_time(event.at, market.clock())
    if event.kind not in WORK_KINDS:
        raise WorkRefused(f"a team logs {', '.join(WORK_KINDS)} here, not {event.kind!r}")
    if event.kind == TASK_STARTED:
        _check_started(task, entry)
    elif task.state != "running":
        raise WorkRefused(f"{task_id} is {task.state}: start it first (task.started)", 409)
    elif event.kind == CONVERSATION_OPENED:
        _check_opened(context, task, entry)
    elif event.kind == CONVERSATION_MESSAGE:
        _check_message(context, task, entry)
    else:
        _check_delivered(context, task, entry)
    _claim_reported(context, task, entry)
    (index,) = market.ledger.append_entries([entry])
    return index


def _admit_answered(context: MarketContext, task: Task, caller: str, entry: Entry) -> int:
    """A member's own receipt that it answered an assignment outstanding to it (see the
    module). Returns its index. Raises WorkRefused (nothing logged)."""
    event = entry.event
    if event.actor != caller:
        raise WorkRefused(f"a member logs {WORK_ANSWERED} itself: it is not {caller}'s", 403)
    try:
        entry.verify()
    except LedgerError as exc:
        raise WorkRefused(f"the entry's signature does not verify: {exc}") from exc
    market = context.market
    _check_time(event.at, market.clock())
    if task.state != "running":
        raise WorkRefused(f"{task.task_id} is {task.state}: nothing of it is outstanding", 409)
    conv_id = event.body.get("conversation")
    if event.subject != conv_id:
        raise WorkRefused(f"a {WORK_ANSWERED} entry's subject is its conversation")
    conversation = _replayed(context, str(conv_id), task)
    try:
        check_answered(conversation, event.actor, event.body)
    except IllegalMove as exc:
        raise WorkRefused(f"not a receipt this service logs: {exc.reason}", 409) from exc
    (index,) = market.ledger.append_entries([entry])
    return index


def _holds_key(context: MarketContext, did: str) -> bool:
    registry = context.onboarding.registry
    record = registry.records([did]).get(did)
    return record is not None and registry.key_path(record.name).exists()


def _check_time(at: str, now: datetime) -> None:
    if abs(parse_time(at) - now) > ENTRY_SKEW:
        raise WorkRefused(
            f"the entry is dated {at}, more than {int(ENTRY_SKEW.total_seconds())} s from the "
            "service's clock: sign it again with the time `GET /agents/{did}/next-seq` gives"
        )


def _check_started(task: Task, entry: Entry) -> None:
    event = entry.event
    if task.state != "awarded":
        raise WorkRefused(f"{task.task_id} is {task.state}, not awarded", 409)
    if event.actor != task.winner or event.subject != task.task_id:
        raise WorkRefused("task.started is the winner's, with the task as its subject", 403)
    if dict(event.body) != {"task_id": task.task_id}:
        raise WorkRefused('a task.started body is {"task_id": <the task>}')


def _check_opened(context: MarketContext, task: Task, entry: Entry) -> None:
    event = entry.event
    body = event.body
    expected = {"conversation", "task", "parent", "depth", "leader", "members", "max_turns"}
    if set(body) - {"title"} != expected or not isinstance(body.get("members"), list):
        raise WorkRefused(f"a conversation.opened body holds {', '.join(sorted(expected))}")
    if body["task"] != task.task_id or event.subject != body["conversation"]:
        raise WorkRefused("the conversation is not this task's, or its subject is not its id")
    if body["leader"] != event.actor:
        raise WorkRefused("a conversation is opened by its leader", 403)
    store = context.market.ledger.store
    conv_id = str(body["conversation"])
    if conv_id in conversation_ids(store):
        raise WorkRefused(f"conversation {conv_id} is already open", 409)
    max_turns = body["max_turns"]
    if not isinstance(max_turns, int) or not 2 <= max_turns <= MAX_TURNS:
        raise WorkRefused(f"max_turns is a whole number from 2 to {MAX_TURNS}")
    parent = body["parent"]
    depth = body["depth"]
    if parent is None:
        if event.actor != task.winner or depth != 0:
            raise WorkRefused("the top-level conversation is the winner's, at depth 0", 403)
        if conversation_ids(store, task.task_id):
            raise WorkRefused(f"{task.task_id} already has its team conversation", 409)
    else:
        outer = _replayed(context, str(parent), task)
        if event.actor not in outer.members or depth != outer.depth + 1:
            raise WorkRefused("a sub-team is led by a member of its parent, one level deeper")
    members = [str(m) for m in body["members"]]
    if task.requester in members:
        raise WorkRefused("the requester is never on its own task's team", 403)
    # Whoever may be given a part must be payable, or its share would stall the settlement.
    chain_id = context.market.escrow.chain_id()
    for did in members:
        if not payable(context, did, chain_id):
            raise WorkRefused(
                f"{did} may not join {task.task_id}'s team: it has no payout account bound on "
                f"chain {chain_id}, so it could not be paid for a part (it binds one first: "
                "POST /agents/{did}/payout)"
            )
    # The same directory the service forms hosted teams from: credentials checked, not trusted
    # (and payable: `team_directory` lists only who is).
    may_join = {m.did for m in team_directory(context, task)}
    for did in members:
        if did not in may_join:
            raise WorkRefused(
                f"{did} may not join {task.task_id}'s team: it holds no valid credential for "
                "the task's capabilities here (GET /tasks/{id}/team lists who may)"
            )
    try:
        open_conversation(
            conv_id,
            task.task_id,
            str(body["leader"]),
            tuple(members),
            parent=None if parent is None else str(parent),
            depth=int(depth) if isinstance(depth, int) else -1,
            max_depth=MAX_DEPTH,
            max_turns=max_turns,
        )
    except IllegalMove as exc:
        raise WorkRefused(f"the conversation cannot open: {exc.reason}") from exc


def _replayed(context: MarketContext, conv_id: str, task: Task) -> Conversation:
    """The conversation as the log holds it, replayed on from the last state this process
    verified (`ConversationReplays`): not re-read from its opening for each relayed entry."""
    try:
        record = _replays(context).replay(conv_id)
    except CoordinatorError as exc:
        raise WorkRefused(f"no conversation {conv_id} to speak in: {exc}") from exc
    if record.conversation.task_id != task.task_id:
        raise WorkRefused(f"conversation {conv_id} is not {task.task_id}'s")
    return record.conversation


def _replays(context: MarketContext) -> ConversationReplays:
    return replays_of(context.market.ledger.store, max_depth=MAX_DEPTH)


def _check_message(context: MarketContext, task: Task, entry: Entry) -> None:
    event = entry.event
    body = event.body
    if set(body) != {"conversation", "turn", "message"} or event.subject != body["conversation"]:
        raise WorkRefused("a conversation.message body is {conversation, turn, message}")
    conversation = _replayed(context, str(body["conversation"]), task)
    try:
        message = message_from_json(_mapping(body["message"]))
    except (CoordinatorError, KeyError, TypeError, ValueError) as exc:
        raise WorkRefused(f"the message does not parse: {exc}") from exc
    if message.speaker != event.actor:
        raise WorkRefused(f"the message is {message.speaker}'s but signed by {event.actor}", 403)
    if body["turn"] != conversation.turn:
        raise WorkRefused(f"turn {body['turn']} is out of order: the next is {conversation.turn}")
    at = parse_time(event.at)
    now = context.market.clock()
    if isinstance(message, AssignSync | AssignAsync) and now - at > ASSIGNMENT_SKEW:
        raise WorkRefused(
            f"the assignment is dated {event.at}, more than "
            f"{int(ASSIGNMENT_SKEW.total_seconds())} s before the service's clock: sign it "
            "again with the time `GET /agents/{did}/next-seq` gives"
        )
    if isinstance(message, NoShow):
        due = no_show_due(conversation, message.sub_id)
        if due is not None and now < due:
            raise WorkRefused(
                f"too early for a no-show of {message.sub_id}: by the service's clock its member "
                f"has until {due:%Y-%m-%dT%H:%M:%SZ} to answer",
                409,
            )
    try:
        step(conversation, message, at=at)
    except IllegalMove as exc:
        raise WorkRefused(f"not a legal move: {exc.reason}") from exc
    if isinstance(message, Report):
        store = context.market.ledger.store
        replays = _replays(context)
        records = [replays.replay(conv_id) for conv_id in conversation_ids(store, task.task_id)]
        try:
            check_report_in_task(records, conversation, message)
        except IllegalMove as exc:
            raise WorkRefused(f"not a legal report: {exc.reason}") from exc
        for contribution in message.result.contributions:
            _check_output(context, contribution.capability, contribution.output_sha256)


def _check_output(context: MarketContext, capability: str, commitment: str) -> None:
    """A reported output is held here sealed, opens to its commitment and is valid output
    of its capability: settlement's checks will read it."""
    data = context.market.sealed_bytes(commitment)
    if data is None:
        raise WorkRefused(
            f"output {commitment} is not held here: send its sealed bytes first "
            "(POST /tasks/{id}/sealed)",
            409,
        )
    try:
        sealed = open_sealed(data, commitment)
        validate_output(capability, sealed.value)
    except (SealError, ExamError) as exc:
        raise WorkRefused(f"output {commitment}: {exc}") from exc


def _check_delivered(context: MarketContext, task: Task, entry: Entry) -> None:
    event = entry.event
    body = event.body
    if event.actor != task.winner or event.subject != task.task_id:
        raise WorkRefused("task.delivered is the winner's, with the task as its subject", 403)
    keys = {"task_id", "conversation", "deliverable", "document", "sha256"}
    if set(body) != keys or body["task_id"] != task.task_id:
        raise WorkRefused(f"a task.delivered body holds {', '.join(sorted(keys))}")
    try:
        check_in_time(task, context.market.clock())
    except TaskError as exc:
        raise WorkRefused(str(exc), 409) from exc
    top = conversation_ids(context.market.ledger.store, task.task_id)[:1]
    if top != [body["conversation"]]:
        raise WorkRefused("the delivery names another conversation than the task's own")
    conversation = _replayed(context, str(body["conversation"]), task)
    if conversation.state != "closed" or conversation.deliverable is None:
        raise WorkRefused("the team has not concluded yet", 409)
    if body["deliverable"] != conversation.deliverable.to_json():
        raise WorkRefused("the delivery is not what the team concluded")
    document = _mapping(body["document"])
    if dict(document) != assemble(task, conversation):
        raise WorkRefused(
            "the document is not the plan and assembly the log holds: its plan gives each part "
            "to the member first assigned it, its parts each producer's own report"
        )
    if body["sha256"] != sha256_hex(canonical_json(dict(document))):
        raise WorkRefused("the document's sha256 is not its hash")
    context.market.blobs.put(canonical_json(dict(document)), name="the deliverable")


def _mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise WorkRefused(f"expected an object, got {json.dumps(value)[:80]}")
    return value


def admit_sealed(context: MarketContext, task_id: str, caller: str, data: bytes) -> str:
    """Keep a sealed output the winner of a running `task_id` sends before a report names it.
    It is held for the winner under `SEALED_QUOTA` until an admitted report names it (then
    kept for good) or its hold expires. Returns its commitment. Raises WorkRefused (403 not
    the winner, 409 not running, 422 not sealed bytes), QuotaExceeded over the quota."""
    task = context.market.task(task_id)
    if task.winner is None or caller != task.winner:
        raise WorkRefused(f"only the winner of {task_id} sends its team's outputs", 403)
    if task.state != "running":
        raise WorkRefused(f"{task_id} is {task.state}: outputs are sent while it runs", 409)
    commitment = sha256_hex(data)
    try:
        sealed = open_sealed(data, commitment)
    except SealError as exc:
        raise WorkRefused(f"not sealed bytes: {exc}") from exc
    market = context.market
    market.blobs.upload(
        sealed.data,
        holder=sealed_holder(caller),
        now=market.clock(),
        quota=SEALED_QUOTA,
        name="a sealed output",
    )
    return commitment


def sealed_holder(winner: str) -> str:
    """Who holds a winner's sealed outputs in the blob store until a report names them."""
    return f"{winner} sealed"


def _claim_reported(context: MarketContext, task: Task, entry: Entry) -> None:
    """Keep for good the sealed outputs an admitted report names (those held unnamed expire
    with `SEALED_QUOTA.ttl`). Raises WorkRefused (409) for one the winner does not hold."""
    message = entry.event.body.get("message")
    if entry.event.kind != CONVERSATION_MESSAGE or not isinstance(message, Mapping):
        return
    if message.get("kind") != "report" or task.winner is None:
        return
    result = message.get("result")
    contributions = result.get("contributions", []) if isinstance(result, Mapping) else []
    named = [str(c.get("output_sha256")) for c in contributions if isinstance(c, Mapping)]
    market = context.market
    missing = market.blobs.claim(sealed_holder(task.winner), named, task.task_id, market.clock())
    if missing:
        raise WorkRefused(
            f"output {missing[0]} is not held for this task: send its sealed bytes first "
            "(POST /tasks/{id}/sealed)",
            409,
        )
