"""`audit_task` over a real collaboration: the honest run passes, and each tampering of a
corpus fails at the checklist step (and entry) that should catch it."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from accord.audit.checks import AuditReport, audit_task
from accord.coordinator.conversation import CONVERSATION_MESSAGE
from accord.coordinator.service import directory_for, run_awarded_task, team_directory
from accord.ledger.canonical import canonical_json
from accord.ledger.chain import MemoryAnchorChain
from accord.ledger.events import Entry, Event, entry_bytes, make_entry
from accord.ledger.sealing import seal
from accord.ledger.store import LogStore
from accord.market.blobs import sha256_hex
from accord.market.errors import BidRejected
from accord.market.escrow import EscrowActions, EscrowChain, MemoryEscrowJournal
from accord.market.sealed import commit_bid
from accord.market.settlement import SETTLEMENT_COMPUTED, logged_settlement, settle_task
from accord.market.tasks import (
    BID_COMMITTED,
    BID_REVEALED,
    TASK_AWARDED,
    TASK_DELIVERED,
    TASK_STARTED,
)
from accord.market.work import ASSEMBLY_CHECK, PLAN_CHECK
from tests.audit.conftest import (
    OPERATOR_KEY,
    REQUESTER_KEY,
    World,
    copy_db,
    onboard_agents,
    open_copy,
    open_world,
    post_task,
    rebuild_log,
    sealed_auction,
    sql,
    with_body,
)
from tests.specs import invoice_spec

# -- helpers ---------------------------------------------------------------------------------


def audit(
    world: World,
    store: LogStore | None = None,
    *,
    anchors: MemoryAnchorChain | None = None,
    escrow: EscrowChain | None = None,
    outputs: Callable[[str], bytes | None] | None = None,
) -> AuditReport:
    """The audit by one who holds the sealed outputs (the operator's blob store), unless
    `outputs` says otherwise."""
    return audit_task(
        store or world.ledger.store,
        world.task_id,
        anchors=anchors or world.anchors,
        escrow=escrow or world.escrow_chain,
        outputs=outputs or world.market.sealed_bytes,
    )


def failure(report: AuditReport) -> tuple[int, int | None]:
    """(step, entry) of the first failure; the steps before it passed, those after not run."""
    found = report.first_failure
    assert found is not None, [s.to_json() for s in report.steps]
    assert not report.ok
    assert report.to_json()["verdict"] == "FAIL"
    assert [s.status for s in report.steps[: found.number - 1]] == ["pass"] * (found.number - 1)
    assert all(s.status == "not-run" for s in report.steps[found.number :])
    return found.number, found.entry


def index_of(world: World, kind: str, *, actor: str | None = None, contains: bytes = b"") -> int:
    found = world.ledger.store.find(kind=kind, subject=None, actor=actor, limit=100_000)
    return next(s.index for s in found if contains in s.data)


def entry_at(world: World, index: int) -> Entry:
    return Entry.from_bytes(world.ledger.store.entry(index).data)


# -- the honest run --------------------------------------------------------------------------


def test_the_honest_collaboration_passes(world: World) -> None:
    report = audit(world)
    assert report.ok, [s.to_json() for s in report.steps]
    assert [(s.number, s.status) for s in report.steps] == [(n, "pass") for n in range(1, 8)]
    summary = report.to_json()
    assert summary["verdict"] == "PASS"
    assert summary["failed_step"] is None
    # the story the audit saw: two bidders, a team with a nested sub-team, three payees
    assert len(summary["facts"]["bids"]) == 2
    depths = sorted(c["depth"] for c in summary["facts"]["conversations"])
    assert depths[0] == 0 and depths[-1] >= 1
    assert summary["facts"]["winner"] == world.agents["linus"].did
    # every agent here was made by this home: each signature is the operator's in truth
    custody = summary["facts"]["custody"]
    agents = {did: held for did, held in custody.items() if did != world.requester.did}
    assert world.agents["linus"].did in agents and set(agents.values()) == {"hosted"}
    assert "signed by a key the operator holds" in report.steps[0].detail
    # the requester never registered: the log shows a key of its own, never a hosted one
    assert custody[world.requester.did] == "unregistered"
    counted = re.findall(r"(\d+) of the (\d+) by agents", report.steps[0].detail)
    hosted, by_agents = map(int, counted[0])
    assert 0 < hosted < by_agents  # the requester's own entries are not counted as hosted


def test_an_auditor_without_the_outputs_checks_the_commitments_and_says_so(world: World) -> None:
    """Without the sealed outputs, plan and assembly re-run on the commitments, every check
    that reads an output is held to its signed verdict, the arithmetic is redone, and the
    report names the checks it did not re-run; with them, it re-runs all."""
    sealed = audit(world, outputs=lambda commitment: None)
    assert sealed.ok, [s.to_json() for s in sealed.steps]
    held = sealed.facts["outputs"]["checks_held_to_log"]
    rubric = {c.check_id: c for c in world.market.task(world.task_id).spec.rubric}
    assert held and sealed.facts["outputs"]["opened"] is False
    assert all(rubric[c].kind in ("expect", "schema", "python", "judge", "review") for c in held)
    assert PLAN_CHECK not in held and ASSEMBLY_CHECK not in held
    assert "held to the operator's signed verdicts" in sealed.steps[5].detail
    opened = audit(world)
    assert opened.facts["outputs"] == {"opened": True, "checks_held_to_log": []}
    assert "every check re-run on the sealed outputs" in opened.steps[5].detail


def test_sealed_bytes_that_do_not_open_to_their_commitment_fail_step_6(world: World) -> None:
    """An auditor handed a wrong file for an output (a swapped answer, the right name) is told
    so: nothing unproven is run."""
    report = audit(world, outputs=lambda commitment: seal("2585.00").data)
    assert failure(report)[0] == 6
    assert "do not hash to their commitment" in report.steps[5].detail


def test_the_honest_copy_passes_too(world: World, tmp_path: Path) -> None:
    """The copying itself changes nothing the audit sees (so the failures below are the
    tamperings', not the copies')."""
    store = open_copy(world, copy_db(world, tmp_path / "copy.db"))
    assert audit(world, store).ok


# -- tampering with bytes of the log (the anchors stay honest) -------------------------------


def test_a_changed_conversation_message_fails_step_1_at_that_entry(
    world: World, tmp_path: Path
) -> None:
    target = next(
        s
        for s in world.ledger.store.find(kind=CONVERSATION_MESSAGE, limit=100_000)
        if b'"text":"plan: ' in s.data
    )
    data = bytearray(target.data)
    at = data.index(b'"text":"plan: ') + len(b'"text":"plan: ')
    data[at] = ord("X") if data[at] != ord("X") else ord("Y")  # one byte of the leader's plan
    path = copy_db(world, tmp_path / "tampered.db")
    sql(path, "UPDATE ledger_entries SET data = ? WHERE idx = ?", (bytes(data), target.index))
    assert failure(audit(world, open_copy(world, path))) == (1, target.index)


def test_a_forged_signature_fails_step_1_at_that_entry(world: World, tmp_path: Path) -> None:
    """The award, signed over the very same event by another key (ada's) than its actor's."""
    index = index_of(world, TASK_AWARDED)
    original = entry_at(world, index)
    forged_sig = world.signer("ada").sign(original.event_bytes)
    forged = entry_bytes(original.event_bytes, original.kid, forged_sig)
    assert forged != original.data
    path = copy_db(world, tmp_path / "forged.db")
    sql(path, "UPDATE ledger_entries SET data = ? WHERE idx = ?", (forged, index))
    assert failure(audit(world, open_copy(world, path))) == (1, index)


def test_a_removed_bid_fails_step_2(world: World, tmp_path: Path) -> None:
    """The losing bidder's reveal deleted, the later entries renumbered so the log is
    contiguous again. Every remaining entry is still signed by its actor, so step 1 holds;
    what a removal breaks is the append-only history the chain anchored: the log no longer
    holds the tree whose roots are on chain. That is step 2's to say (no single entry is at
    fault, so it names none)."""
    ada = world.agents["ada"].did
    index = index_of(world, BID_REVEALED, contains=ada.encode())
    size = world.ledger.store.size()
    path = copy_db(world, tmp_path / "removed.db")
    sql(path, "DELETE FROM ledger_entries WHERE idx = ?", (index,))
    sql(path, "UPDATE ledger_entries SET idx = -idx WHERE idx > ?", (index,))
    sql(path, "UPDATE ledger_entries SET idx = -idx - 1 WHERE idx < 0")
    sql(path, "UPDATE ledger_head SET size = ?", (size - 1,))
    store = open_copy(world, path)
    assert store.size() == size - 1
    report = audit(world, store)
    assert failure(report)[0] == 2
    assert "anchors more" in report.steps[1].detail


def test_an_unanchored_tail_fails_step_2_at_the_first_unanchored_entry(
    world: World, tmp_path: Path
) -> None:
    """Entries about the task appended after the last anchor: not (yet) provable."""
    path = copy_db(world, tmp_path / "tail.db")
    store = open_copy(world, path)
    size = store.size()
    requester = world.requester
    last = store.last_seq(requester.did)
    store.append(
        make_entry(
            requester,
            kind="task.comment",
            seq=(last or 0) + 1,
            at=world.clock(),
            subject=world.task_id,
            body={"text": "the figures were late"},
        )
    )
    assert failure(audit(world, store)) == (2, size)


# -- a powerful operator rewriting history: re-signed, re-anchored ---------------------------


def test_a_rewrite_that_is_not_re_anchored_fails_step_2(world: World, tmp_path: Path) -> None:
    """The rewrites below re-anchor on a fresh chain; against the real chain they would not
    even get past step 2."""
    index = index_of(world, SETTLEMENT_COMPUTED)

    def rewrite(i: int, event: Event) -> Event:
        if i != index:
            return event
        body = copy.deepcopy(dict(event.body))
        body["seed"] = int(body["seed"]) + 1
        return with_body(event, body)

    store, fresh = rebuild_log(world, tmp_path / "rewritten.db", rewrite)
    assert audit(world, store, anchors=fresh).steps[1].status == "pass"
    assert failure(audit(world, store))[0] == 2


def test_a_removed_bid_re_anchored_fails_step_4_at_the_award(world: World, tmp_path: Path) -> None:
    """The runner-up's bid erased altogether and the log re-anchored: the award's price was
    set by that bid, so the auction no longer replays to it."""
    ada = world.agents["ada"].did.encode()
    award = index_of(world, TASK_AWARDED)
    dropped = {
        index_of(world, BID_COMMITTED, contains=ada),
        index_of(world, BID_REVEALED, contains=ada),
    }
    store, fresh = rebuild_log(
        world, tmp_path / "no-bid.db", lambda i, e: None if i in dropped else e
    )
    assert failure(audit(world, store, anchors=fresh)) == (4, award - len(dropped))


def test_a_swapped_winner_re_signed_and_re_anchored_fails_step_4_at_the_award(
    world: World, tmp_path: Path
) -> None:
    """The award names the loser (ada) instead of linus; ada re-signs the start and the
    delivery (their actor must be the winner: step 1 would catch it otherwise), later seqs
    renumbered. Signatures and anchors hold; only the auction's replay can catch it."""
    linus, ada = world.agents["linus"].did, world.agents["ada"].did
    award = index_of(world, TASK_AWARDED)

    def rewrite(i: int, event: Event) -> Event:
        if i == award:
            body = copy.deepcopy(dict(event.body))
            assert body["winner"] == linus
            body["winner"] = ada
            return with_body(event, body)
        if event.subject == world.task_id and event.kind in (TASK_STARTED, TASK_DELIVERED):
            return Event(event.kind, ada, event.seq, event.at, event.subject, event.body)
        return event

    store, fresh = rebuild_log(world, tmp_path / "swapped.db", rewrite)
    report = audit(world, store, anchors=fresh)
    assert report.facts["winner"] == ada
    assert failure(report) == (4, award)
    assert linus in report.steps[3].detail


def _rewrite_report(
    world: World, path: Path, pick: Callable[[dict[str, Any]], bool], change: Any
) -> tuple[AuditReport, int]:
    """The first report `pick` chooses rewritten by `change` and re-signed by its speaker."""
    index = next(
        s.index
        for s in world.ledger.store.find(kind=CONVERSATION_MESSAGE, limit=100_000)
        if (message := Entry.from_bytes(s.data).event.body["message"])["kind"] == "report"
        and pick(message)
    )

    def rewrite(i: int, event: Event) -> Event:
        if i != index:
            return event
        body = copy.deepcopy(dict(event.body))
        change(body["message"])
        return with_body(event, body)

    store, fresh = rebuild_log(world, path, rewrite)
    return audit(world, store, anchors=fresh), index


def test_a_report_crediting_another_producer_fails_step_5_at_that_report(
    world: World, tmp_path: Path
) -> None:
    """A leader's (or any speaker's) report that names someone else as a part's producer (the
    frame-a-victim and take-a-member's-work attacks) is refused by the replay at its entry."""
    victim = world.agents["ada"].did

    def own_work(message: dict[str, Any]) -> bool:
        result = message["result"]
        return bool(result["ok"]) and "team" not in result and message["speaker"] != victim

    def credit_victim(message: dict[str, Any]) -> None:
        message["result"]["contributions"][0]["agent"] = victim

    report, index = _rewrite_report(world, tmp_path / "framed.db", own_work, credit_victim)
    assert failure(report) == (5, index)
    assert "names " + victim in report.steps[4].detail
    assert f"entry {index}" in report.steps[4].detail


def test_a_report_naming_a_sub_team_it_did_not_lead_fails_step_5_at_that_report(
    world: World, tmp_path: Path
) -> None:
    """A sub-team's work comes up only as the conclusion of the sub-team its speaker led."""

    def from_a_sub_team(message: dict[str, Any]) -> bool:
        return "team" in message["result"]

    def elsewhere(message: dict[str, Any]) -> None:
        message["result"]["team"] = "conv-nowhere"

    report, index = _rewrite_report(world, tmp_path / "team.db", from_a_sub_team, elsewhere)
    assert failure(report) == (5, index)
    assert "conv-nowhere" in report.steps[4].detail


def test_a_delivered_plan_that_is_not_the_logged_one_fails_step_5_at_the_delivery(
    world: World, tmp_path: Path
) -> None:
    """The plan check reads the plan the delivery carries: it must be the conversation's
    logged assignments, not any DID the leader writes for a part."""
    index = index_of(world, TASK_DELIVERED)

    def rewrite(i: int, event: Event) -> Event:
        if i != index:
            return event
        body = copy.deepcopy(dict(event.body))
        assignments = body["document"]["plan"]["assignments"]
        part = sorted(assignments)[0]
        outsider = next(a.did for a in world.agents.values() if a.did != assignments[part])
        assignments[part] = outsider
        body["sha256"] = sha256_hex(canonical_json(body["document"]))
        return with_body(event, body)

    store, fresh = rebuild_log(world, tmp_path / "plan.db", rewrite)
    report = audit(world, store, anchors=fresh)
    assert failure(report) == (5, index)
    assert "logged assignments" in report.steps[4].detail


def _rewrite_settlement(world: World, path: Path, change: Any) -> tuple[AuditReport, int]:
    index = index_of(world, SETTLEMENT_COMPUTED)

    def rewrite(i: int, event: Event) -> Event:
        if i != index:
            return event
        body = copy.deepcopy(dict(event.body))
        change(body)
        return with_body(event, body)

    store, fresh = rebuild_log(world, path, rewrite)
    return audit(world, store, anchors=fresh), index


def test_an_altered_v_of_s_fails_step_6_at_the_settlement(world: World, tmp_path: Path) -> None:
    def change(body: dict[str, Any]) -> None:
        item = next(i for i in body["evaluated"] if len(i["coalition"]) == 1)
        value = Fraction(item["value"]) + Fraction(1, 12)
        item["value"] = f"{value.numerator}/{value.denominator}"

    report, index = _rewrite_settlement(world, tmp_path / "v.db", change)
    assert failure(report) == (6, index)
    assert "recomputes to" in report.steps[5].detail


@pytest.mark.parametrize("name", ["part_values", "values"])
def test_an_altered_shapley_value_fails_step_6_at_the_settlement(
    world: World, tmp_path: Path, name: str
) -> None:
    """A part's value, or a producer's sum of its parts' values, moved by 1/12: the logged
    values are recomputed, not taken as given."""

    def change(body: dict[str, Any]) -> None:
        key = sorted(body[name])[0]
        value = Fraction(body[name][key]) + Fraction(1, 12)
        body[name][key] = f"{value.numerator}/{value.denominator}"

    report, index = _rewrite_settlement(world, tmp_path / "values.db", change)
    assert failure(report) == (6, index)
    assert f"the settlement's {name} recompute to" in report.steps[5].detail


def test_a_payout_held_from_a_payee_that_had_bound_an_address_fails_step_6(
    world: World, tmp_path: Path
) -> None:
    """The operator holds a bound payee's payout in the escrow instead of paying it (issue 41,
    item 5, turned against a member): only a payee with no payout account may be held."""

    def change(body: dict[str, Any]) -> None:
        player = sorted(p for p, w in body["payouts"].items() if int(w) > 0)[0]
        del body["payees"][player]
        body["held"] = {player: body["payouts"][player]}
        body["holder"] = world.escrow_chain.escrow_address()

    report, index = _rewrite_settlement(world, tmp_path / "held.db", change)
    assert failure(report) == (6, index)
    assert "yet it had bound" in report.steps[5].detail


def test_an_altered_payout_fails_step_6_at_the_settlement(world: World, tmp_path: Path) -> None:
    """One wei moved from one payee to another: the sum, and so conservation, still hold."""

    def change(body: dict[str, Any]) -> None:
        payees = sorted(p for p, w in body["payouts"].items() if int(w) > 0)
        body["payouts"][payees[0]] = str(int(body["payouts"][payees[0]]) - 1)
        body["payouts"][payees[1]] = str(int(body["payouts"][payees[1]]) + 1)

    report, index = _rewrite_settlement(world, tmp_path / "payout.db", change)
    assert failure(report) == (6, index)
    assert "payouts recompute" in report.steps[5].detail


def test_a_redirected_payee_address_fails_step_6(world: World, tmp_path: Path) -> None:
    def change(body: dict[str, Any]) -> None:
        player = sorted(body["payees"])[0]
        body["payees"][player] = "0x" + "77" * 20

    report, index = _rewrite_settlement(world, tmp_path / "payee.db", change)
    assert failure(report) == (6, index)


# -- the chain disagrees ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["moved", "withheld"])
def test_an_on_chain_payout_that_differs_fails_step_7(world: World, how: str) -> None:
    """The escrow as it was before the settlement, paid out with other amounts than logged
    (one wei moved between payees; or one wei withheld, back to the requester)."""
    body = logged_settlement(world.market, world.task_id)
    assert body is not None and world.before_settlement is not None
    chain = copy.deepcopy(world.before_settlement)
    paid = [(body["payees"][p], int(w)) for p, w in body["payouts"].items() if int(w) > 0]
    amounts = [w for _, w in paid]
    amounts[0] -= 1
    if how == "moved":
        amounts[1] += 1
    actions = EscrowActions(chain, MemoryEscrowJournal(), receipt_timeout=0)
    outcome = actions.pay_out(OPERATOR_KEY, world.task_id, [a for a, _ in paid], amounts)
    assert outcome.status == "confirmed"
    report = audit(world, escrow=chain)
    assert failure(report)[0] == 7
    assert "the chain paid" in report.steps[6].detail


# -- a revoked credential used to bid --------------------------------------------------------


def test_a_bid_on_a_revoked_credential_fails_step_3_at_the_bid(tmp_path: Path) -> None:
    """A fresh world: linus's arithmetic credential is revoked before the task is posted; the
    market refuses its commitment, so the operator logs it directly (admission bypassed)."""
    world = open_world(tmp_path / "home")
    onboard_agents(world)
    linus = world.agents["linus"]
    credential = next(
        c for c in world.onboarding.credentials_of(linus.did) if c["capability"] == "arithmetic"
    )
    revoked_at = world.onboarding.revoke(credential["id"], "exam leaked")
    world.clock.advance(1)
    task_id = post_task(world)
    with pytest.raises(BidRejected):
        world.market.commit(commit_bid(world.signer("linus"), task_id, 10**17, b"s" * 32))
    sealed_auction(world, bypass={"linus": True})
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    bid = index_of(world, BID_COMMITTED, contains=linus.did.encode())
    assert revoked_at < bid
    report = audit(world)
    assert failure(report) == (3, bid)
    assert linus.did in report.steps[2].detail


def test_an_agent_that_posts_a_task_is_never_on_its_team(tmp_path: Path) -> None:
    """hopper is credentialed for arithmetic, which the task needs, but posted it: the team
    is formed without it, and the audit of the collaboration passes."""
    world = open_world(tmp_path / "home")
    onboard_agents(world)
    hopper = world.signer("hopper")
    task = world.market.post(hopper, invoice_spec(), requester_key=REQUESTER_KEY)
    world.task_id = task.task_id
    sealed_auction(world)
    awarded = world.market.task(world.task_id)
    credentialed = {m.did for m in directory_for(world.context, awarded.spec.capabilities)}
    assert hopper.did in credentialed
    assert hopper.did not in {m.did for m in team_directory(world.context, awarded)}
    conversation = run_awarded_task(world.context, world.task_id)
    assert conversation.deliverable is not None
    workers = {c.agent for c in conversation.deliverable.contributions}
    assert hopper.did not in workers and workers
    settle_task(world.market, world.onboarding, world.task_id)
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    report = audit(world)
    assert report.ok, report.to_json()


def test_every_part_a_track_record_counts_is_its_producers_own_report(world: World) -> None:
    """The track record (and the revocation rule on it) counts a part for an agent only when
    the agent signed the report that produced it: every part the settlement records names a
    producer whose own logged report, signed by it, carried that part."""
    from accord.coordinator.conversation import Report
    from accord.coordinator.service import conversation_ids, replay_conversation
    from accord.market.reputation import settled_work
    from accord.market.tasks import TASK_SETTLED

    store = world.ledger.store
    [found] = store.find(kind=TASK_SETTLED, subject=world.task_id, limit=1)
    work = settled_work(found.index, world.task_id, Entry.from_bytes(found.data).event.body)
    assert work is not None and work.parts
    signed = set()
    for conv_id in conversation_ids(store, world.task_id):
        for logged in replay_conversation(store, conv_id).messages:
            message = logged.message
            if isinstance(message, Report) and message.result.team is None:
                actor = Entry.from_bytes(store.entry(logged.index).data).event.actor
                signed |= {
                    (c.part, c.agent) for c in message.result.contributions if c.agent == actor
                }
    assert {(p.part_id, p.producer) for p in work.parts if p.producer} <= signed
