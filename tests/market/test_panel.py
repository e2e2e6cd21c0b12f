"""The dispute panel's pure rules (`accord.market.panel`): who may sit, the draw, commit and
reveal, the tally, and who pays whom."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accord.ledger.events import Event, format_time
from accord.ledger.signing import did_key_from_public_key
from accord.market.panel import (
    JUDGE_SEAT,
    PANEL_COMMITTED,
    PANEL_DRAWN,
    PANEL_REPLACED,
    PANEL_REVEALED,
    PanelError,
    Tally,
    can_draw_panel,
    candidates_from_events,
    dispute_money,
    draw,
    eligible,
    excluded_from_panel,
    paid_pairs,
    panel_log,
    panel_pay,
    panel_seed,
    ranking,
    replace,
    tally,
    vote_commitment,
)
from accord.market.reputation import circles


def _did(name: str) -> str:
    """A well-formed did:key named for the test (its key is the name's hash)."""
    import hashlib

    return did_key_from_public_key(hashlib.sha256(name.encode()).digest())


OPERATOR = _did("operator")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BLOCK = "0x" + "ab" * 32


def _event(kind: str, actor: str, at: datetime, body: dict, subject: str = "s") -> Event:
    return Event(kind, actor, 0, format_time(at), subject, body)


def _log(*agents: tuple[str, str, str, datetime]) -> list[tuple[int, Event]]:
    """Each agent (did, custody, capability, last activity) registered, credentialed, active."""
    events: list[Event] = []
    for did, custody, capability, active in agents:
        events.append(_event("agent.registered", did, T0, {"custody": custody}))
        events.append(
            _event(
                "credential.issued",
                OPERATOR,
                T0,
                {
                    "credentialId": f"urn:cred:{did}:{capability}",
                    "agent": did,
                    "capability": capability,
                    "validUntil": (T0 + timedelta(days=365)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                },
            )
        )
        events.append(_event("bid.committed", did, active, {}))
    return list(enumerate(events))


def test_who_may_sit_self_custody_credentialed_live_and_outside_the_circles() -> None:
    at = T0 + timedelta(days=10)
    fresh = at - timedelta(hours=1)
    log = _log(
        (_did("A"), "self", "extract", fresh),
        (_did("B"), "self", "extract", fresh),
        (_did("Hosted"), "hosted", "extract", fresh),
        (_did("Other"), "self", "summarize", fresh),
        (_did("Asleep"), "self", "extract", at - timedelta(days=8)),
        (_did("Team"), "self", "extract", fresh),
        (_did("Friend"), "self", "extract", fresh),
        (_did("Revoked"), "self", "extract", fresh),
    )
    # zFriend and the team member paid one another: one circle.
    for requester, producer in (
        (_did("Team"), _did("Friend")),
        (_did("Friend"), _did("Team")),
    ):
        body = {
            "track_record": {
                "requester": requester,
                "parts": [
                    {"part": "p", "capability": "extract", "producer": producer, "score": "1"}
                ],
            }
        }
        log.append((len(log), _event("task.settled", OPERATOR, T0, body, subject="t-old")))
    log.append(
        (
            len(log),
            _event(
                "credential.revoked",
                OPERATOR,
                T0,
                {"credentialId": f"urn:cred:{_did('Revoked')}:extract"},
            ),
        )
    )
    candidates = candidates_from_events(log, operator=OPERATOR, before=len(log), at=at)
    out = excluded_from_panel(_did("R"), [_did("Team")], circles(paid_pairs(log, before=len(log))))
    assert _did("Friend") in out
    pool = eligible(candidates, capability="extract", excluded=out, at=at)
    assert pool == sorted([_did("A"), _did("B")])
    # a credential a stranger (not the operator) "issued" gives nothing
    forged = [
        *log,
        (
            len(log),
            _event(
                "credential.issued",
                _did("A"),
                T0,
                {
                    "credentialId": "urn:x",
                    "agent": _did("Other"),
                    "capability": "extract",
                    "validUntil": (T0 + timedelta(days=365)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                },
            ),
        ),
    ]
    again = candidates_from_events(forged, operator=OPERATOR, before=len(forged), at=at)
    assert "extract" not in again[_did("Other")].capabilities
    # only what was logged before the dispute counts
    early = candidates_from_events(log, operator=OPERATOR, before=3, at=at)
    assert list(early) == [_did("A")]  # A was registered first


def test_the_draw_is_fixed_by_the_seed_and_not_by_the_pool_order() -> None:
    pool = [_did(str(i)) for i in range(10)]
    seed = panel_seed(BLOCK, "t-1", "review")
    first = draw(pool, seed)
    assert first == draw(list(reversed(pool)), seed)
    assert len(first.seats) == 3 and len(set(first.seats)) == 3
    assert first.seats + first.reserves == tuple(ranking(pool, seed))
    other = draw(pool, panel_seed("0x" + "cd" * 32, "t-1", "review"))
    assert other.seats != first.seats  # another block, another panel
    assert panel_seed(BLOCK, "t-1", "review") != panel_seed(BLOCK, "t-2", "review")
    with_judge = draw(pool, seed, judge=True)
    assert with_judge.seats == (JUDGE_SEAT, *first.seats[:2])
    with pytest.raises(PanelError, match="needs 3 eligible agents"):
        draw(pool[:2], seed)
    assert can_draw_panel(pool[:2], judge=True) and not can_draw_panel(pool[:2])
    with pytest.raises(PanelError, match="block hash"):
        panel_seed("0x1234", "t-1", "review")


def test_an_absent_panelist_is_replaced_once_in_rank_order() -> None:
    panel = draw([_did(str(i)) for i in range(5)], panel_seed(BLOCK, "t", "c"))
    a, b, c = panel.seats
    once = replace(panel, {b})
    assert once.seats == (a, panel.reserves[0], c)
    assert once.replaced == {b: panel.reserves[0]}
    twice = replace(once, {panel.reserves[0]})  # the replacement is absent too: it stays
    assert twice.seats == once.seats
    none_left = replace(replace(once, {a}), {c})
    assert none_left.seats[2] == c  # no reserve left for the third


def test_votes_count_only_when_they_open_their_commitments() -> None:
    seats = (_did("A"), _did("B"), _did("C"))
    salt = "0f" * 16
    commitments = {s: vote_commitment("requester", salt) for s in seats}
    reveals = {s: ("requester", salt) for s in seats}
    assert tally(seats, commitments, reveals).winner == "requester"
    # B reveals a verdict other than the one it committed: not counted; 2 of 2 still win
    changed = {**reveals, _did("B"): ("team", salt)}
    decided = tally(seats, commitments, changed)
    assert decided.votes == {_did("A"): "requester", _did("C"): "requester"}
    assert decided.coherent == (_did("A"), _did("C"))
    # a tie, or no vote at all, finds for the team
    split = {
        _did("A"): vote_commitment("team", salt),
        _did("C"): vote_commitment("requester", salt),
    }
    tie = tally(seats, split, {_did("A"): ("team", salt), _did("C"): ("requester", salt)})
    assert tie.winner == "team" and tie.coherent == (_did("A"),)
    assert tally(seats, {}, {}).winner == "team"
    with pytest.raises(PanelError):
        vote_commitment("maybe", salt)
    with pytest.raises(PanelError):
        vote_commitment("team", "short")


def test_the_losers_stake_pays_the_coherent_seats_and_the_rest_goes_to_the_winner() -> None:
    seats = (_did("A"), _did("B"), _did("C"))
    assert panel_pay(100, seats, seats) == {_did("A"): 34, _did("B"): 33, _did("C"): 33}
    two = Tally("team", {}, (_did("A"), _did("C")))
    # the requester lost: its bond pays A and C; B's share goes to the team
    lost = dispute_money(100, seats, two, team_pay=1000)
    assert lost.panel == {_did("A"): 34, _did("C"): 33}
    assert (lost.from_team, lost.from_bond, lost.to_team) == (0, 67, 33)
    # the team lost: its pay pays the panel; B's share stays with the requester
    won = dispute_money(100, seats, Tally("requester", {}, (_did("A"), _did("C"))), 1000)
    assert (won.from_team, won.from_bond, won.to_team) == (67, 0, 0)
    # a lone bidder's team has nothing left to pay with: the bond covers the panel
    broke = dispute_money(100, seats, Tally("requester", {}, seats), team_pay=40)
    assert (broke.from_team, broke.from_bond) == (40, 60)
    assert sum(broke.panel.values()) == 100


def test_the_panels_log_folds_by_its_windows() -> None:
    """Commitments count inside the commit window from seated panelists, once; reveals only
    once every seat committed (or the window closed and the silent were replaced), opening
    their commitments; the judge's seat is the operator's, named by `"seat"`."""
    pool = [_did(str(i)) for i in range(5)]
    panel = draw(pool, panel_seed(BLOCK, "t", "c"), judge=True)
    judge, a, b = panel.seats
    drawn = {"check": "c", **panel.to_json()}
    salt = "ab" * 16
    minute = timedelta(minutes=1)

    def at(kind: str, actor: str, when: timedelta, body: dict) -> Event:
        return _event(kind, actor, T0 + when, {"check": "c", **body}, subject="t")

    events = [
        at(PANEL_DRAWN, OPERATOR, timedelta(0), drawn),
        at(PANEL_COMMITTED, OPERATOR, minute, {"seat": "judge", "commitment": "x" * 64}),
        at(PANEL_COMMITTED, a, minute, {"commitment": vote_commitment("team", salt)}),
        at(PANEL_REVEALED, a, 2 * minute, {"verdict": "team", "salt": salt}),  # too early
        at(PANEL_COMMITTED, panel.reserves[0], minute, {"commitment": "y" * 64}),  # no seat
        at(PANEL_COMMITTED, b, 11 * minute, {"commitment": "z" * 64}),  # the window closed
        at(PANEL_REPLACED, OPERATOR, 12 * minute, {"replaced": {b: panel.reserves[0]}}),
    ]
    folded = panel_log(list(enumerate(events)), operator=OPERATOR, check_id="c")
    assert folded is not None
    assert folded.panel.seats == (judge, a, panel.reserves[0])
    assert set(folded.commitments) == {JUDGE_SEAT, a} and not folded.reveals
    successor = panel.reserves[0]
    events += [
        at(
            PANEL_COMMITTED,
            successor,
            13 * minute,
            {"commitment": vote_commitment("requester", salt)},
        ),
        at(PANEL_REVEALED, a, 14 * minute, {"verdict": "team", "salt": salt}),
        at(PANEL_REVEALED, successor, 14 * minute, {"verdict": "requester", "salt": salt}),
        at(
            PANEL_REVEALED,
            OPERATOR,
            14 * minute,
            {"seat": "judge", "verdict": "requester", "salt": ""},
        ),
    ]
    folded = panel_log(list(enumerate(events)), operator=OPERATOR, check_id="c")
    assert folded is not None and folded.decided(T0 + 15 * minute)
    decided = folded.tally()
    assert decided.winner == "requester" and decided.coherent == (judge, successor)


def test_a_replacement_counts_only_after_the_commit_window_and_takes_every_silent_seat() -> None:
    """The operator cannot swap out a panelist who still had time to commit (a replacement
    logged inside the window is not taken), nor keep a silent one (a replacement naming one
    silent seat replaces both), nor move the windows when no seat was silent."""
    pool = [_did(str(i)) for i in range(6)]
    panel = draw(pool, panel_seed(BLOCK, "t", "c"))
    a, b, c = panel.seats
    minute = timedelta(minutes=1)

    def at(kind: str, actor: str, when: timedelta, body: dict) -> Event:
        return _event(kind, actor, T0 + when, {"check": "c", **body}, subject="t")

    drawn = at(PANEL_DRAWN, OPERATOR, timedelta(0), {"check": "c", **panel.to_json()})
    committed = at(PANEL_COMMITTED, a, minute, {"commitment": "x" * 64})
    early = at(PANEL_REPLACED, OPERATOR, 2 * minute, {"replaced": {b: panel.reserves[0]}})
    folded = panel_log(list(enumerate([drawn, committed, early])), operator=OPERATOR, check_id="c")
    assert folded is not None
    assert folded.panel.seats == (a, b, c) and folded.replaced_at is None
    # b could still commit: it did, inside the window, and counts
    late_b = at(PANEL_COMMITTED, b, 3 * minute, {"commitment": "y" * 64})
    folded = panel_log(
        list(enumerate([drawn, committed, early, late_b])), operator=OPERATOR, check_id="c"
    )
    assert folded is not None and set(folded.commitments) == {a, b}

    named_one = at(PANEL_REPLACED, OPERATOR, 10 * minute, {"replaced": {b: panel.reserves[0]}})
    folded = panel_log(
        list(enumerate([drawn, committed, named_one])), operator=OPERATOR, check_id="c"
    )
    assert folded is not None
    assert folded.panel.seats == (a, *panel.reserves[:2])
    assert folded.panel.replaced == {b: panel.reserves[0], c: panel.reserves[1]}

    everyone = [
        drawn,
        *(at(PANEL_COMMITTED, s, minute, {"commitment": "x" * 64}) for s in (a, b, c)),
    ]
    extended = at(PANEL_REPLACED, OPERATOR, 30 * minute, {"replaced": {}})
    folded = panel_log(list(enumerate([*everyone, extended])), operator=OPERATOR, check_id="c")
    assert folded is not None and folded.replaced_at is None
    assert folded.reveal_ends == T0 + 20 * minute
