"""A winner that keeps its own key leads its team in its own process.

The kit runs the same team runner the service runs for hosted agents
(`accord.coordinator.runner.TeamRunner`, the same conversation rules and policies), with the service
at arm's length:

- whom it may team with comes from `GET /tasks/{id}/team` (credentials checked there), less
  those whose endpoint does not answer a health probe now (`accord.coordinator.liveness`);
- each part goes to its member's endpoint (`POST /run`), its own parts to its own handler;
- each output is sealed here and sent to the service (`POST /tasks/{id}/sealed`) before a
  report names it; the log gets only commitments (`accord.ledger.sealing`);
- each event is signed by its own party — the leader's by this process, a member's report by
  the member at its `/sign` (shown the sealed answers it names) — and relayed to the service
  (`POST /tasks/{id}/work`), which checks it against the conversation rules and logs it;
- the deliverable it assembles is signed here and relayed the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast
from urllib.parse import quote

from accord.client import AccordClient, ApiError, JsonObject
from accord.coordinator.adapters import RuntimeAdapter
from accord.coordinator.conversation import Conversation
from accord.coordinator.errors import CoordinatorError, TeamError
from accord.coordinator.liveness import answering
from accord.coordinator.policy import Member, Policy, RulePolicy
from accord.coordinator.runner import RunSettings, SealedOutputs, TeamRunner
from accord.coordinator.service import assemble
from accord.coordinator.work import AgentAdapter
from accord.identity.payout_accounts import PAYOUT_BOUND_KIND
from accord.identity.remote_signing import EndpointSigner
from accord.identity.runtimes import AgentRuntime, HttpRuntime
from accord.kit.wallet import Wallet, WalletError
from accord.ledger.canonical import JSONValue, canonical_json
from accord.ledger.errors import AccordError, SequenceError
from accord.ledger.events import Entry, Event, parse_time
from accord.ledger.fast_entries import make_entry
from accord.ledger.sealing import Sealed
from accord.ledger.signing import Signer
from accord.market.blobs import sha256_hex
from accord.market.checks import CheckResult
from accord.market.disputes import bound_accounts, team_of
from accord.market.money import Wei
from accord.market.precheck import Precheck
from accord.market.tasks import REVIEW_GIVEN, TASK_DELIVERED, TASK_STARTED, Task, TaskSpec
from accord.market.work import resolve_files

SEQ_RETRIES = 5


def _segment(value: str) -> str:
    return quote(value, safe="")


class RelayLog:
    """The runner's event log for one task: each event is signed by its party with the seq
    and time the service gives, and relayed to `POST /tasks/{id}/work`. A seq another writer
    took first (the member is busy elsewhere) is taken again, up to `SEQ_RETRIES` times.
    Raises ApiError with the service's reason when it refuses an entry."""

    def __init__(self, client: AccordClient, task_id: str) -> None:
        self.client = client
        self.path = f"/tasks/{_segment(task_id)}/work"

    def append(
        self,
        signer: Signer,
        kind: str,
        *,
        subject: str = "",
        body: Mapping[str, JSONValue] | None = None,
        once_key: str | None = None,
    ) -> tuple[int, Entry]:
        for attempt in range(SEQ_RETRIES):
            info = self.client.get(f"/agents/{_segment(signer.did)}/next-seq")
            entry = make_entry(
                signer,
                kind=kind,
                seq=int(info["seq"]),
                at=parse_time(str(info["server_time"])),
                subject=subject,
                body=body,
            )
            try:
                answer = self.client.post(self.path, {"entry": entry.to_json()})
            except ApiError as exc:
                if exc.status == 409 and "seq" in str(exc) and attempt < SEQ_RETRIES - 1:
                    continue
                raise
            return int(answer["index"]), entry
        raise SequenceError(signer.did, 0, 0)


@dataclass(frozen=True)
class TeamMember:
    """An agent the leader may team with, as `GET /tasks/{id}/team` lists it."""

    member: Member
    endpoint: str | None

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> TeamMember:
        return cls(
            Member(
                str(value["did"]),
                str(value["name"]),
                tuple(str(c) for c in value["capabilities"]),
                str(value["reputation"]),
                str(value.get("description", "")),
                tuple((str(c), str(r)) for c, r in dict(value.get("reputations", {})).items()),
                tuple(str(c) for c in value.get("failing", [])),
            ),
            None if value.get("endpoint") is None else str(value["endpoint"]),
        )


def task_from_json(value: Mapping[str, Any]) -> Task:
    """The task as `GET /tasks/{id}` shows it (its spec, requester, winner and state)."""
    spec = TaskSpec.from_json(value["spec"])
    return Task(
        task_id=str(value["task_id"]),
        requester=str(value["requester"]),
        spec=spec,
        posted_at=datetime.fromisoformat(str(value["posted_at"])),
        state=cast(Any, value["state"]),
        winner=value.get("winner"),
    )


def lead(
    client: AccordClient,
    signer: Signer,
    runtime: AgentRuntime,
    task_id: str,
    *,
    policy: Policy | None = None,
    settings: RunSettings | None = None,
    allow_private: bool = False,
    verdicts: Callable[[Mapping[str, CheckResult]], None] | None = None,
) -> Conversation:
    """Start, run and deliver a task this agent won; returns the closed top-level
    conversation. The requester's machine checks run on every output before it counts as done
    (`accord.market.precheck`: a first attempt that fails a check on its part goes to another
    member), and on the whole delivery before it is handed in: `verdicts` is told what they
    are, which is what the settlement will log for the same outputs.

    Raises TeamError when no team can be formed, CoordinatorError from the conversation,
    ApiError when the service refuses a step (its reason in the message)."""
    data = client.task(task_id)
    if data.get("winner") != signer.did:
        raise TeamError(f"{signer.did} did not win {task_id}")
    task = task_from_json(data)
    run_settings = settings or RunSettings()
    log = RelayLog(client, task_id)
    if data.get("state") == "awarded":
        log.append(signer, TASK_STARTED, subject=task_id, body={"task_id": task_id})
    listed = [TeamMember.from_json(m) for m in client.get(f"/tasks/{_segment(task_id)}/team")]
    # Only agents with an endpoint can be reached from here (a hosted agent runs inside the
    # service, and the service works for nobody's team but its own).
    team = [t for t in listed if t.endpoint or t.member.did == signer.did]
    # Nobody who has gone away is put on the team (one who goes away later is a no-show).
    there = answering(
        {t.member.did: t.endpoint for t in team if t.endpoint and t.member.did != signer.did},
        allow_private=allow_private,
    )
    team = [t for t in team if t.member.did == signer.did or t.member.did in there]
    endpoints = {t.member.did: t.endpoint for t in team}
    leader = next((t.member for t in team if t.member.did == signer.did), None)
    if leader is None:
        raise TeamError(f"the service does not list {signer.did} among whom it may team with")
    sent = SealedOutputs(lambda sealed: _send_sealed(client, task_id, sealed))

    def openings(commitment: str) -> bytes | None:
        found = sent.get(commitment)
        return None if found is None else found.data

    def signer_of(did: str) -> Signer:
        if did == signer.did:
            return signer
        return EndpointSigner(
            did,
            _endpoint(endpoints, did),
            allow_private=allow_private,
            openings=openings,
            operator=signer,  # the call is signed by the leader, as it is the leader's
        )

    def adapter_of(did: str) -> AgentAdapter:
        if did == signer.did:
            return RuntimeAdapter(did, runtime)
        http = HttpRuntime(
            _endpoint(endpoints, did),
            timeout=run_settings.timeout_s,
            allow_private=allow_private,
            operator=signer,
        )
        return RuntimeAdapter(did, http)

    files = {
        sha: client.request_text(f"/tasks/{_segment(task_id)}/files/{sha}")
        for sha in task.spec.files
    }
    precheck = Precheck(task_id, task.posted_at, task.spec.requester_checks)
    runner = TeamRunner(
        log,
        signer_of,
        adapter_of,
        [t.member for t in team],
        policy or RulePolicy(),
        run_settings,
        resolve_files=lambda payload: resolve_files(payload, files),
        sealed=sent,
        # Its members sign only their own reports at their endpoints: sub-teams are its own.
        may_lead=lambda did: did == signer.did,
        precheck=precheck,
        # The service's clock dates the entries: a member that stopped is declared absent
        # (`NoShow`) when the service's time says the bound has passed, and its part moves on.
        clock=lambda: service_time(client, signer.did),
        # A member that logged it answered is not waited out: the service refuses its no-show.
        answered=lambda conv_id, sub_id: (
            sub_id in client.get(f"/conversations/{_segment(conv_id)}").get("answered", {})
        ),
    )
    parts = [(p.part_id, p.capability, p.input) for p in task.spec.parts]
    conversation = runner.run_task(task_id, leader, parts, task.spec.title, task.spec.description)
    if conversation.deliverable is None:
        raise CoordinatorError(f"the team of {task_id} concluded without a deliverable")
    document = assemble(task, conversation)
    if verdicts is not None:
        outputs = {}
        for contribution in conversation.deliverable.contributions:
            kept = sent.get(contribution.output_sha256)
            if kept is not None:
                outputs[contribution.part] = kept.value
        verdicts(precheck.verdicts(outputs))
    log.append(
        signer,
        TASK_DELIVERED,
        subject=task_id,
        body={
            "task_id": task_id,
            "conversation": conversation.conv_id,
            "deliverable": conversation.deliverable.to_json(),
            "document": document,
            "sha256": sha256_hex(canonical_json(document)),
        },
    )
    return conversation


DISPUTE_ANSWERED = "dispute.answered"


def answer_dispute(
    client: AccordClient, wallet: Wallet, task_id: str, check: str, amount: int
) -> JsonObject:
    """Answer the requester's rejection of `check` with a bond of `amount` wei from the
    wallet's own account (at least the dispute's fee): the client's signer (the leader, or a
    member) is on the team. The wallet brings the account's answers on chain to what its
    logged answers and this one stake (`Wallet.answer`: a retry sends nothing twice), then
    the signed `dispute.answered` goes to `POST /tasks/{id}/disputes/answers`. Returns the
    answer as logged, `{"task_id", "check", "account", "amount", "index", "already"}`:
    `already` when the log held this account's answer for `check` before (a retry; nothing
    was sent). Raises AnswerError, before anything is sent, for an answer the log shows the
    service would refuse (the signer not on the team, no rejection of `check` to answer, an
    amount under its fee, a wallet account the signer did not bind); ApiError (the service's
    reason: the panel's commit window closed ...), EscrowRefusedError, WalletError,
    ChainError."""
    account = wallet.address.lower()
    staked = 0
    for index, event in _signed_entries(client, DISPUTE_ANSWERED, task_id):
        body = event.body
        if str(body.get("account", "")).lower() != account:
            continue
        try:
            if body.get("check") == check:
                return _answered(body, index, already=True)
            staked += int(str(body.get("amount", "0")))
        except ValueError:
            continue
    _check_answerable(client, task_id, check, amount, wallet.address)
    wallet.answer(task_id, Wei(staked + amount))
    answer = {"task_id": task_id, "check": check, "account": wallet.address}
    signed = client.entry(DISPUTE_ANSWERED, task_id, answer | {"amount": str(amount)})
    path = f"/tasks/{_segment(task_id)}/disputes/answers"
    logged = cast(JsonObject, client.request("POST", path, json={"entry": signed}))
    return _answered(answer | {"amount": str(amount)}, int(str(logged["index"])), already=False)


class AnswerError(WalletError):
    """An answer to a dispute the log shows the service would refuse: nothing was sent."""


def _signed_entries(client: AccordClient, kind: str, subject: str) -> list[tuple[int, Event]]:
    """The log's `kind` entries about `subject` whose signatures verify, with their indexes
    (the service's word is not taken for them)."""
    logged = client.get("/ledger/entries", params={"kind": kind, "subject": subject, "limit": 1000})
    found = []
    for row in cast(list[JsonObject], logged.get("entries") or []):
        try:
            entry = Entry.from_bytes(canonical_json({k: row[k] for k in ("event", "kid", "sig")}))
            entry.verify()
            if entry.event.kind == kind and entry.event.subject == subject:
                found.append((int(str(row["index"])), entry.event))
        except (AccordError, KeyError, TypeError, ValueError):
            continue
    return found


def _check_answerable(
    client: AccordClient, task_id: str, check: str, amount: int, account: str
) -> None:
    """Raises AnswerError when the log shows the service would refuse the client's signer's
    answer to the rejection of `check` with `amount` wei from `account`: the signer not on
    the task's team (its winner and the producers its delivery names), no rejection of
    `check` signed by the task's requester, an amount under the fee that rejection names, or
    an account the signer bound for payouts in no `payout.bound` of its own. ApiError when
    the service cannot be read."""
    if client.signer is None:
        raise AnswerError("an answer is signed by a member of the team: give the client its key")
    did = client.signer.did
    task = task_from_json(client.task(task_id))
    delivered = [
        event.body
        for _, event in _signed_entries(client, TASK_DELIVERED, task_id)
        if event.actor == task.winner
    ]
    if did not in team_of(task, delivered[0] if delivered else None):
        raise AnswerError(f"{did} is not on the team of {task_id}: only its members answer")
    fees = [
        int(str(event.body.get("fee", "0")))
        for _, event in _signed_entries(client, REVIEW_GIVEN, task_id)
        if event.actor == task.requester
        and event.body.get("check") == check
        and event.body.get("verdict") == "reject"
    ]
    if not fees:
        raise AnswerError(f"the requester of {task_id} has not rejected {check}: nothing to answer")
    if amount < max(fees[0], 1):
        raise AnswerError(
            f"an answer stakes at least the dispute's fee, {fees[0]} wei; {amount} was not sent"
        )
    bound = bound_accounts(_signed_entries(client, PAYOUT_BOUND_KIND, did)).get(did, {})
    if account.lower() not in bound:
        raise AnswerError(
            f"an answer's bond comes from an account {did} bound for payouts (payout.bound, "
            f"signed by both keys), and it bound no {account}: bind it first, as `accord agent "
            "run` binds its payout account; nothing was sent"
        )


def _answered(body: Mapping[str, Any], index: int, *, already: bool) -> JsonObject:
    fields = ("task_id", "check", "account", "amount")
    return {key: str(body.get(key, "")) for key in fields} | {"index": index, "already": already}


def service_time(client: AccordClient, did: str) -> datetime:
    """The service's clock, as `GET /agents/{did}/next-seq` tells it (the time entries are
    dated with). Raises ApiError when the service cannot be reached."""
    info = client.get(f"/agents/{_segment(did)}/next-seq")
    return parse_time(str(info["server_time"]))


def _endpoint(endpoints: Mapping[str, str | None], did: str) -> str:
    endpoint = endpoints.get(did)
    if not endpoint:
        raise TeamError(f"{did} has no endpoint a leader can reach")
    return endpoint


def _send_sealed(client: AccordClient, task_id: str, sealed: Sealed) -> None:
    client.post_bytes(f"/tasks/{_segment(task_id)}/sealed", sealed.data)
