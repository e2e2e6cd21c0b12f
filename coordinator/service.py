"""Running the awarded task's team, and reading conversations back from the ledger.

`run_awarded_task` is what `accord task run` does: the winner starts the task, leads a team of
credentialed agents through the conversation, and delivers the concluded deliverable.
`replay_conversation` reads a logged conversation, checks each entry against the key that
signed it, and folds it move by move through the state machine
(`accord.coordinator.conversation.conversation_from_events`, which the audit runs on its verified
log).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from accord.coordinator.adapters import RuntimeAdapter, reference_adapter
from accord.coordinator.conversation import (
    CONVERSATION_MESSAGE,
    CONVERSATION_OPENED,
    WORK_ANSWERED,
    Contribution,
    Conversation,
    ConversationRecord,
    continue_conversation,
    conversation_from_events,
    logged_plan,
)
from accord.coordinator.errors import CoordinatorError, IllegalMove, TeamError
from accord.coordinator.liveness import answering
from accord.coordinator.policy import Member, Policy, RulePolicy
from accord.coordinator.runner import (
    Observer,
    RunSettings,
    SealedOutputs,
    TeamRunner,
)
from accord.coordinator.team import Candidate
from accord.coordinator.work import AgentAdapter
from accord.identity.address_guard import private_agents_allowed
from accord.identity.agents import AgentRecord, runtime_for
from accord.identity.challenges import validate_output
from accord.identity.errors import RegistryError
from accord.ledger.errors import LedgerError
from accord.ledger.events import Entry
from accord.ledger.log import StoredEntry
from accord.ledger.signing import Signer
from accord.ledger.store import LogStore
from accord.ledger.views import check_limit, encode_cursor, int_key, reading
from accord.market.discovery import DEPENDS_ON, description, fraction_text, ranked_page
from accord.market.discovery import VIEW_NAME as DISCOVERY_VIEW
from accord.market.precheck import Precheck
from accord.market.privacy import WorkReaders
from accord.market.reputation import DEFAULT_PRIOR_MEAN
from accord.market.tasks import Task
from accord.market.work import resolve_files

if TYPE_CHECKING:  # the chain's wiring (web3): a read of conversations never imports it
    from accord.market.wiring import MarketContext

MAX_CONVERSATION_EVENTS = 100_000


def directory_for(
    context: MarketContext, capabilities: Iterable[str], *, including: Iterable[str] = ()
) -> list[Member]:
    """The directory a team for `capabilities` is formed from: the agents the credential view
    lists as holding one of them, plus `including` (the leader), each then verified (its
    credential documents checked, not the view trusted). Team formation drops every agent that
    holds none of the task's capabilities, so the team is the one the whole directory would
    give, found without a scan of every agent."""
    market = context.market
    wanted = set(including)
    for capability in capabilities:
        wanted.update(market.credentialed(capability))
    records = context.onboarding.registry.records(wanted)
    return _verified_members(context, [records[did] for did in sorted(records)])


def team_directory(context: MarketContext, task: Task) -> list[Member]:
    """Whom the winner may form its team from: `directory_for` the task's capabilities, less
    the task's requester, who is never on its own task's team (nor its winner: bid admission
    refuses its bids), and less every agent but the winner that could not be paid
    (`payable`): only a payable agent may be given a part."""
    leader = [task.winner] if task.winner is not None else []
    found = directory_for(context, task.spec.capabilities, including=leader)
    chain_id = context.market.escrow.chain_id()
    return [
        member
        for member in found
        if member.did != task.requester
        and (member.did in leader or payable(context, member.did, chain_id))
    ]


def payable(context: MarketContext, did: str, chain_id: int) -> bool:
    """Whether `did` can be paid on `chain_id`: it bound a payout account to its DID there, or
    its key is held here (the service binds one for it when its team delivers)."""
    if context.onboarding.payout_address(did, chain_id) is not None:
        return True
    registry = context.onboarding.registry
    record = registry.records([did]).get(did)
    return record is not None and registry.key_path(record.name).exists()


def agent_names(context: MarketContext) -> dict[str, str]:
    """Every registered agent's name by DID (for showing conversations), one query."""
    return {agent.did: agent.name for agent in context.onboarding.registry.list()}


def _verified_members(context: MarketContext, agents: Sequence[AgentRecord]) -> list[Member]:
    records = context.market.indexed_track_records(a.did for a in agents)
    members = []
    for agent in agents:
        held = sorted(
            {
                record["capability"]
                for record in context.onboarding.credentials_of(agent.did)
                if record["revoked_at"] is None
                and context.market.eligible(agent.did, (record["capability"],))
            }
        )
        reputations = {c: records.reputation(agent.did, c) for c in held}
        failing = [c for c in held if records.failing(agent.did, c)]
        members.append(member_of(agent, held, reputations, failing))
    return members


def member_of(
    agent: AgentRecord,
    held: Sequence[str],
    reputations: Mapping[str, Fraction],
    failing: Sequence[str] = (),
) -> Member:
    """An agent as discovery and the leader see it: what it holds, its reputation in each
    (its track record there), the capabilities it is `failing` in (team formation passes it
    over there), and the description discovery ranks by relevance
    (`accord.market.discovery.description`)."""
    overall = sum(reputations.values(), Fraction(0)) / len(reputations) if reputations else None
    return Member(
        agent.did,
        agent.name,
        tuple(held),
        fraction_text(DEFAULT_PRIOR_MEAN if overall is None else overall),
        description(agent.name, held),
        tuple((c, fraction_text(r)) for c, r in sorted(reputations.items())),
        tuple(sorted(failing)),
    )


@dataclass(frozen=True)
class DiscoveryPage:
    """One page of discovery's ranking; `next_cursor` resumes after it (None at its end)."""

    candidates: tuple[Candidate, ...]
    next_cursor: str | None


def discover(
    context: MarketContext,
    capability: str,
    need: str = "",
    *,
    limit: int | None = None,
    cursor: str | None = None,
) -> DiscoveryPage:
    """Discovery for a need from the discovery view (`accord.market.discovery`), not a scan of every
    agent: the agents holding a valid credential for `capability`, ranked exactly as
    `rank_candidates` ranks the whole directory (relevance of the description, reputation,
    DID), the database returning only the rows up to the page. `limit` 1..200 (default 50),
    `cursor` the previous page's `next_cursor`.

    Raises QueryError (ledger.errors) for a bad limit or cursor, StoreError.
    """
    size = check_limit(limit)
    offset = int_key(DISCOVERY_VIEW, cursor) or 0
    market = context.market
    store = market.ledger.store
    with reading(store, DISCOVERY_VIEW, *DEPENDS_ON) as connection:
        found, more = ranked_page(
            connection, capability, need, market.clock(), offset=offset, size=size
        )
    candidates = tuple(
        Candidate(
            Member(
                d.did,
                d.name,
                d.capabilities,
                fraction_text(d.reputation),
                d.description,
                ((capability, fraction_text(d.reputation)),),
            ),
            d.relevance,
            d.reputation,
        )
        for d in found
    )
    return DiscoveryPage(
        candidates, encode_cursor(DISCOVERY_VIEW, str(offset + size)) if more else None
    )


def adapter_for(
    record: AgentRecord,
    timeout: float,
    *,
    allow_private_agents: bool | None = None,
    operator: Signer | None = None,
) -> AgentAdapter:
    """The adapter of an agent's runtime: the reference agent in process, any other runtime
    through `accord.identity.runtimes` (`RuntimeAdapter`), each within `timeout` seconds.

    `allow_private_agents` (None: ACCORD_ALLOW_PRIVATE_AGENTS in the environment) lets an
    `http` agent be reached at a loopback, link-local or private address; `operator` (the
    operator's key) signs each request to an `http` or `a2a` agent. Raises TeamError for a
    runtime that cannot work (an invalid record, a refused endpoint, no model key).
    """
    if record.runtime == "reference":
        return reference_adapter(record.did, timeout)
    try:
        allowed = private_agents_allowed() if allow_private_agents is None else allow_private_agents
        runtime = runtime_for(
            record,
            timeout=timeout,
            validate=validate_output,
            allow_private_agents=allowed,
            operator=operator,
        )
    except (RegistryError, ValueError) as exc:
        raise TeamError(
            f"agent {record.name} ({record.runtime}) cannot take team work: {exc}"
        ) from exc
    return RuntimeAdapter(record.did, runtime)


def run_awarded_task(
    context: MarketContext,
    task_id: str,
    *,
    policy: Policy | None = None,
    settings: RunSettings | None = None,
    observer: Observer | None = None,
    lock: AbstractContextManager[Any] | None = None,
) -> Conversation:
    """Start, run and deliver an awarded task; returns the closed top-level conversation.

    `lock` (the service's write lock) is held only for the task's transitions (`start`,
    binding payouts and `deliver`): the team's work between them calls outside agents, runs
    the requester's checks in the box (`Precheck`) and may wait out a member's no-show bound,
    none of which may hold back the service's other writers. The conversation's own entries
    are appended as any writer's are.

    Raises TransitionError unless the task is awarded, TeamError when no team can be formed
    or the winner keeps its own key (it leads its own team: `accord.coordinator.contract_work`),
    CoordinatorError from the conversation.
    """
    market = context.market
    registry = context.onboarding.registry
    task = market.task(task_id)
    if task.winner is None:
        raise TeamError(f"{task_id} has no winner yet (award it first)")
    winner_record = registry.get(task.winner)
    if not registry.key_path(winner_record.name).exists():
        raise TeamError(
            f"the winner {task.winner} keeps its own key: it leads its own team "
            "(`accord agent run`), and the service runs no team for it"
        )
    winner = context.onboarding.member_signer(winner_record)
    directory = team_directory(context, task)
    # An agent served at an endpoint that does not answer now is not put on the team
    # (`accord.coordinator.liveness`); one that goes away later is a no-show.
    records = registry.records([m.did for m in directory])
    served = {
        did: record.endpoint
        for did, record in records.items()
        if record.runtime == "http" and record.endpoint and did != task.winner
    }
    gone = set(served) - answering(served, allow_private=registry.allow_private_agents)
    directory = [m for m in directory if m.did not in gone]
    leader = next((m for m in directory if m.did == task.winner), None)
    if leader is None:
        raise TeamError(f"the winner {task.winner} is not a registered agent")
    run_settings = settings or RunSettings()

    def adapter_of(did: str) -> AgentAdapter:
        return adapter_for(
            registry.get(did),
            run_settings.timeout_s,
            allow_private_agents=registry.allow_private_agents,
            operator=market.ledger.operator,  # accord's calls to agents are signed
        )

    sealed = SealedOutputs(market.keep_sealed)

    def openings(commitment: str) -> bytes | None:
        found = sealed.get(commitment)
        return None if found is None else found.data

    def holds_key(did: str) -> bool:
        return registry.key_path(registry.get(did).name).exists()

    def signer_of(did: str) -> Signer:
        # A local agent's key file, or a remote agent signing its own reports at its endpoint
        # (shown the sealed outputs a report names, to check they are its own).
        return context.onboarding.member_signer(registry.get(did), openings)

    runner = TeamRunner(
        market.ledger,
        signer_of,
        adapter_of,
        directory,
        policy or RulePolicy(),
        run_settings,
        observer,
        resolve_files=lambda payload: resolve_files(
            payload, {sha: market.file_text(task, sha) for sha in task.spec.files}
        ),
        sealed=sealed,
        # A member that keeps its own key signs only its own reports: it leads no sub-team.
        may_lead=holds_key,
        # The team runs the requester's machine checks on each output before it delivers.
        precheck=Precheck(task_id, task.posted_at, task.spec.requester_checks),
        # A member that cannot be reached to sign its failure is declared absent in time,
        # unless it logged that it answered.
        clock=market.ledger.clock,
        answered=lambda conv_id, sub_id: (
            sub_id in replay_conversation(market.ledger.store, conv_id).conversation.answered
        ),
    )
    held = nullcontext() if lock is None else lock
    with held:
        market.start(task_id, winner)
    parts = [(p.part_id, p.capability, p.input) for p in task.spec.parts]
    conversation = runner.run_task(task_id, leader, parts, task.spec.title, task.spec.description)
    if conversation.deliverable is None:
        raise CoordinatorError(f"the team of {task_id} concluded without a deliverable")
    document = assemble(task, conversation)
    # Contributors are paid at settlement to the address each bound to its DID.
    chain_id = market.escrow.chain_id()
    # The leader is paid for its plan and assembly even when it did no part itself. An agent
    # that keeps its own key binds its own account (never one made here for it).
    with held:
        for did in sorted(
            {c.agent for c in conversation.deliverable.contributions} | {task.winner}
        ):
            if holds_key(did):
                context.onboarding.bind_payout(registry.get(did), chain_id)
        market.deliver(
            task_id, winner, conversation.conv_id, conversation.deliverable.to_json(), document
        )
    return conversation


def assemble(task: Task, conversation: Conversation) -> dict[str, Any]:
    """Pure: the contract holder's deliverable for its concluded top-level `conversation`: its
    plan as the conversation logged it (each part and the member first assigned it,
    `logged_plan`) and, for every part its team did, the commitment to its output and its
    producer, from the producer's own report (a part is reported once). A part nobody did is
    left out: the checks that read it fail, and so does the assembly check. The outputs stay
    sealed in the blob store (`accord.ledger.sealing`); the deliverable names them. The
    service admits, and the audit passes, only a delivery whose document is exactly this."""
    assert conversation.deliverable is not None
    plan = logged_plan(conversation)
    wanted = {p.part_id for p in task.spec.parts}
    made: dict[str, Contribution] = {}
    for contribution in conversation.deliverable.contributions:
        if contribution.part in wanted:
            made.setdefault(contribution.part, contribution)
    return {
        "task": task.task_id,
        "title": task.spec.title,
        "leader": conversation.leader,
        "summary": conversation.deliverable.summary,
        "plan": {
            "assignments": {
                p.part_id: plan[p.part_id] for p in task.spec.parts if p.part_id in plan
            }
        },
        "parts": [
            {
                "part": part.part_id,
                "capability": part.capability,
                "producer": made[part.part_id].agent,
                "output_sha256": made[part.part_id].output_sha256,
            }
            for part in task.spec.parts
            if part.part_id in made
        ],
    }


def team_of(store: LogStore, task_id: str) -> set[str]:
    """Every agent in a conversation of the task (its team, sub-teams included)."""
    members: set[str] = set()
    for stored in store.find(kind=CONVERSATION_OPENED, limit=MAX_CONVERSATION_EVENTS):
        body = Entry.from_bytes(stored.data).event.body
        if body.get("task") == task_id:
            members.update(str(m) for m in body.get("members", []))
    return members


def work_readers(context: MarketContext, task: Task) -> WorkReaders:
    """Who is at work on `task`, as the log says (`accord.market.privacy`)."""
    store = context.market.ledger.store
    return WorkReaders(context.market.ledger.operator.did, team_of(store, task.task_id))


def conversation_ids(store: LogStore, task_id: str | None = None) -> list[str]:
    """Ids of the logged conversations (of one task), in the order they were opened."""
    ids = []
    for stored in store.find(kind=CONVERSATION_OPENED, limit=MAX_CONVERSATION_EVENTS):
        event = Entry.from_bytes(stored.data).event
        if task_id is None or event.body.get("task") == task_id:
            ids.append(event.subject)
    return ids


def replay_conversation(store: LogStore, conv_id: str, *, max_depth: int = 8) -> ConversationRecord:
    """Replay a logged conversation through the state machine: its entries read from `store`
    and each signature checked as `conversation_from_events` folds them.

    Raises IllegalMove naming the entry when an entry does not verify, or a message breaks the
    transition table or was not signed by its speaker; CoordinatorError when there is no such
    conversation.
    """
    entries = store.find(
        subject=conv_id,
        kinds=(CONVERSATION_OPENED, CONVERSATION_MESSAGE, WORK_ANSWERED),
        limit=MAX_CONVERSATION_EVENTS,
    )
    verified = ((stored.index, _verified(stored.index, stored.data).event) for stored in entries)
    return conversation_from_events(conv_id, verified, max_depth=max_depth)


class ConversationReplays:
    """This process's replays of the conversations in `store`, each kept at the last entry it
    verified: a replay reads only the entries logged after it (one indexed query) and folds
    them in (`continue_conversation`), so relaying a conversation's n messages reads and
    verifies each entry once instead of n times. Entries are appended in index order under
    the head lock, so none can appear later below an index read. The threads of a process
    share it (one replay at a time); it keeps the `MAX_KEPT` conversations used last.

    `replays_of(store)` is the one a store's process shares."""

    MAX_KEPT = 1024

    def __init__(self, store: LogStore, *, max_depth: int = 8) -> None:
        self.store = store
        self.max_depth = max_depth
        self._known: OrderedDict[str, tuple[int, ConversationRecord]] = OrderedDict()
        self._lock = threading.Lock()

    def replay(self, conv_id: str) -> ConversationRecord:
        """The conversation as the log holds it now (what `replay_conversation` returns).
        Raises what that raises; a conversation that fails to replay is not kept."""
        with self._lock:
            known = self._known.get(conv_id)
            last, record = known if known is not None else (-1, None)
            entries: list[StoredEntry] = []
            while True:
                page = self.store.find(
                    subject=conv_id,
                    kinds=(CONVERSATION_OPENED, CONVERSATION_MESSAGE, WORK_ANSWERED),
                    after=entries[-1].index if entries else last,
                    limit=MAX_CONVERSATION_EVENTS,
                )
                entries += page
                if len(page) < MAX_CONVERSATION_EVENTS:
                    break
            verified = ((s.index, _verified(s.index, s.data).event) for s in entries)
            if record is None:
                record = conversation_from_events(conv_id, verified, max_depth=self.max_depth)
            else:
                record = continue_conversation(record, verified)
            self._known[conv_id] = (entries[-1].index if entries else last, record)
            self._known.move_to_end(conv_id)
            while len(self._known) > self.MAX_KEPT:
                self._known.popitem(last=False)
            return record


_REPLAYS: WeakKeyDictionary[LogStore, dict[int, ConversationReplays]] = WeakKeyDictionary()
_REPLAYS_LOCK = threading.Lock()


def replays_of(store: LogStore, *, max_depth: int = 8) -> ConversationReplays:
    """The `ConversationReplays` this process keeps for `store` (one per depth limit), made on
    first use and gone with the store."""
    with _REPLAYS_LOCK:
        by_depth = _REPLAYS.setdefault(store, {})
        if max_depth not in by_depth:
            by_depth[max_depth] = ConversationReplays(store, max_depth=max_depth)
        return by_depth[max_depth]


def _verified(index: int, data: bytes) -> Entry:
    """The entry at `index`, its signature checked against its actor's key.

    Raises IllegalMove naming the entry when it does not parse or is not signed by its actor.
    """
    try:
        entry = Entry.from_bytes(data)
        entry.verify()
    except LedgerError as exc:
        raise IllegalMove(f"entry {index}: {exc}") from exc
    return entry
