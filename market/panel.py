"""Disputes decided by a panel of independent agents: who sits on it, how they vote, who is paid.
Pure: no clock, no chain, no store; the log's verified events and a block hash are passed in,
so the audit replays every step from the log alone.

**Who may sit** (`eligible`). For a dispute over a part of capability `c`, an agent may sit when,
at the dispute's entry (the requester's rejection, `review.given`):

- it holds a credential for `c` the operator issued, valid at the dispute's time, not revoked;
- it registered with `"custody": "self"` (it signs in its own process: a hosted agent's vote
  would be the operator's);
- it is not the requester, not on the task's team, and in neither's circle (identities that,
  directly or through others, paid one another: `accord.market.reputation.circles`);
- it is live: its last signed entry is at most `LIVENESS_S` before the dispute.

**The draw** (`draw`). The seed is `panel_seed(block_hash, task_id, check_id)`: the hash of a block
mined after the rejection was anchored, which neither the requester (who signed the rejection
first) nor the team can choose. Every eligible DID is ranked by sha256(seed || DID); the first
`size` sit, and the next ones, in rank order, replace a panelist who does not answer in time
(each seat once: `replace`). A configured judge model takes one seat of its own (`JUDGE_SEAT`),
one vote among the others, never the last word.

**Votes** are committed before they are revealed: `vote_commitment(verdict, salt)`, signed by
the panelist, then the verdict and salt once every seat has committed or the commit window has
closed. `tally` counts the revealed votes matching their commitments: the requester wins only
with a strict majority of the votes cast; a tie, or no vote at all, finds for the team (the
requester does not win by saying no). Panelists who voted with the majority are *coherent*.

**Money** (`panel_pay`, `dispute_money`). A dispute's fee is split into one share per seat (the
fee by largest remainder, ties by seat order); a coherent panelist is paid its seat's share,
and the shares of the others (incoherent or silent) go back to the winner. The loser's stake
pays the coherent seats: the requester's bond when it loses (the rest of its bond goes to the
team, which won), the team's pay when it loses, as far as that pay goes, and the requester's
bond for what the team's pay cannot cover (so the panel is paid the same whoever wins, and
has no reason to favour either side); what the requester bonded beyond that is refunded.
A team that *answered* the dispute with a bond of its own (`TaskEscrow.answer`, logged as
`dispute.answered`) stakes that instead of its pay: when it loses, its answer pays the
coherent seats (its pay, then the requester's bond, only for what the answer cannot cover) and
the rest of the answer goes back to the account that sent it; when it wins, the answer goes
back whole and the requester's bond pays as above.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from accord.identity.status import parse_timestamp
from accord.ledger.canonical import canonical_json
from accord.ledger.events import Event, parse_time
from accord.market.errors import TaskError
from accord.market.reputation import circles, settled_works

PANEL_VERSION = "accord-panel/1"
PANEL_SIZE = 3
"""Seats on a panel, a configured judge's among them."""
LIVENESS_S = 7 * 24 * 3600
"""An agent is live when its last signed entry is at most this many seconds old."""
JUDGE_SEAT = "judge"
"""The seat a configured judge model takes (paid to the evaluator's account); the operator
signs its commitment and vote with `"seat": "judge"`."""

Side = Literal["team", "requester"]
SIDES: tuple[Side, ...] = ("team", "requester")

_HEX = re.compile(r"^(0x)?[0-9a-fA-F]{64}$")

REGISTERED = "agent.registered"
ISSUED = "credential.issued"
REVOKED = "credential.revoked"
SETTLED = "task.settled"


class PanelError(TaskError):
    """A panel cannot be drawn (too few eligible agents) or a vote is malformed."""


@dataclass(frozen=True)
class Candidate:
    """What the log says of one agent at a dispute: the capabilities it holds a valid,
    unrevoked credential for, its declared custody, and when it last signed an entry."""

    did: str
    capabilities: frozenset[str]
    custody: str
    last_active: datetime | None
    """The time of its last signed entry before the dispute (None: none)."""


@dataclass
class _Credential:
    agent: str
    capability: str
    valid_from: datetime
    valid_until: datetime
    revoked: bool = False


def candidates_from_events(
    events: Iterable[tuple[int, Event]], *, operator: str, before: int, at: datetime
) -> dict[str, Candidate]:
    """Every registered agent as the log's verified `events` (index, event) before index
    `before` show it at time `at`: its valid credentials (issued and revoked by `operator`),
    its custody (its own `agent.registered`) and its last signed entry. Pure."""
    custody: dict[str, str] = {}
    last: dict[str, datetime] = {}
    credentials: dict[str, _Credential] = {}
    for index, event in sorted(events, key=lambda pair: pair[0]):
        if index >= before:
            continue
        when = parse_time(event.at)
        if event.actor not in last or when > last[event.actor]:
            last[event.actor] = when
        body = event.body
        if event.kind == REGISTERED:
            custody.setdefault(event.actor, "self" if body.get("custody") == "self" else "hosted")
        elif event.kind == ISSUED and event.actor == operator:
            credential = _issued(body, when)
            if credential is not None:
                credentials[str(body["credentialId"])] = credential
        elif event.kind == REVOKED and event.actor == operator:
            revoked = credentials.get(str(body.get("credentialId")))
            if revoked is not None:
                revoked.revoked = True
    held: dict[str, set[str]] = {did: set() for did in custody}
    for credential in credentials.values():
        live = credential.valid_from <= at < credential.valid_until
        if credential.agent in held and not credential.revoked and live:
            held[credential.agent].add(credential.capability)
    return {
        did: Candidate(did, frozenset(held[did]), custody[did], last.get(did))
        for did in sorted(custody)
    }


def _issued(body: Mapping[str, Any], logged: datetime) -> _Credential | None:
    try:
        document = body.get("credential")
        start = document.get("validFrom") if isinstance(document, Mapping) else None
        return _Credential(
            str(body["agent"]),
            str(body["capability"]),
            parse_timestamp(start) if start else logged,
            parse_timestamp(body["validUntil"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def paid_pairs(events: Iterable[tuple[int, Event]], *, before: int) -> list[tuple[str, str]]:
    """(requester, producer) of every part of every settled task before index `before`: the
    edges whose strongly connected components are the circles. Pure."""
    return [
        (work.requester, part.producer)
        for work in settled_works(events, before=before)
        for part in work.parts
    ]


def excluded_from_panel(
    requester: str, team: Collection[str], circle_of: Mapping[str, frozenset[str]]
) -> frozenset[str]:
    """The requester, the team, and everyone in their circles (`circle_of`: the circles of
    `accord.market.reputation.circles`, by DID)."""
    parties = {requester, *team}
    out: set[str] = set(parties)
    for did in parties:
        out |= circle_of.get(did, frozenset())
    return frozenset(out)


def eligible(
    candidates: Mapping[str, Candidate],
    *,
    capability: str,
    excluded: Collection[str],
    at: datetime,
    liveness_s: int = LIVENESS_S,
) -> list[str]:
    """The DIDs that may sit on a panel over a part of `capability` at `at` (module
    docstring), in DID order."""
    found = []
    for did, candidate in sorted(candidates.items()):
        if did in excluded or candidate.custody != "self":
            continue
        if capability not in candidate.capabilities:
            continue
        last = candidate.last_active
        if last is None or (at - last).total_seconds() > liveness_s:
            continue
        found.append(did)
    return found


def panel_seed(block_hash: str, task_id: str, check_id: str) -> bytes:
    """The draw's seed: sha256 of the JCS of the block hash (hex), the task and the check.
    Raises PanelError for a block hash that is not 32 bytes of hex."""
    if not _HEX.match(block_hash):
        raise PanelError(f"a panel's seed needs a block hash (32 bytes of hex), not {block_hash!r}")
    document = {
        "v": PANEL_VERSION,
        "block": block_hash.lower().removeprefix("0x"),
        "task_id": task_id,
        "check": check_id,
    }
    return hashlib.sha256(canonical_json(document)).digest()


def ranking(pool: Iterable[str], seed: bytes) -> list[str]:
    """`pool` ranked by sha256(seed || DID), lowest first: the order the draw takes them in,
    the same whatever order they are given in."""
    return sorted(set(pool), key=lambda did: (hashlib.sha256(seed + did.encode()).digest(), did))


@dataclass(frozen=True)
class Panel:
    """A drawn panel: its seats in order (DIDs, and `JUDGE_SEAT` for a judge model), and the
    ranked agents left to replace a seat whose panelist does not answer."""

    seats: tuple[str, ...]
    reserves: tuple[str, ...]
    replaced: Mapping[str, str] = field(default_factory=dict)
    """Seat's first panelist -> its replacement (each seat is replaced once at most)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "seats": list(self.seats),
            "reserves": list(self.reserves),
            "replaced": dict(self.replaced),
        }


def draw(pool: Iterable[str], seed: bytes, *, size: int = PANEL_SIZE, judge: bool = False) -> Panel:
    """The panel `seed` draws from the eligible `pool`: a judge model's seat first when
    `judge`, then the highest ranked agents (`ranking`) up to `size` seats.

    Raises PanelError when the pool cannot fill the agents' seats."""
    if size < 1:
        raise PanelError(f"a panel has at least one seat, not {size}")
    agents = size - 1 if judge else size
    ranked = ranking(pool, seed)
    if len(ranked) < agents:
        raise PanelError(
            f"a panel needs {agents} eligible agent{'s' * (agents != 1)} (self-custody, "
            f"credentialed in the part's capability, live, outside both parties' circles); "
            f"{len(ranked)} {'is' if len(ranked) == 1 else 'are'} eligible"
        )
    seats = ((JUDGE_SEAT,) if judge else ()) + tuple(ranked[:agents])
    return Panel(seats, tuple(ranked[agents:]))


def can_draw_panel(pool: Collection[str], *, size: int = PANEL_SIZE, judge: bool = False) -> bool:
    """Whether a panel of `size` seats can be drawn from `pool` (a judge filling one seat):
    a service where it can has an evaluator for a dispute."""
    return len(set(pool)) >= (size - 1 if judge else size)


def replace(panel: Panel, absent: Collection[str]) -> Panel:
    """`panel` with each `absent` agent replaced once by the next unused reserve, in rank
    order. A seat whose replacement was itself absent, or with no reserve left, stays with
    the absent panelist (who votes nothing and is paid nothing). The judge's seat is never
    replaced."""
    seats = list(panel.seats)
    reserves = list(panel.reserves)
    replaced = dict(panel.replaced)
    for position, seat in enumerate(panel.seats):
        if seat not in absent or seat == JUDGE_SEAT or seat in replaced.values():
            continue
        if not reserves:
            continue
        successor = reserves.pop(0)
        replaced[seat] = successor
        seats[position] = successor
    return Panel(tuple(seats), tuple(reserves), replaced)


def vote_commitment(verdict: str, salt: str) -> str:
    """What a panelist commits before it reveals: sha256 hex of the JCS of its verdict and a
    salt (128 random bits in hex). Raises PanelError for a verdict that is not a side or a
    salt that is not hex of at least 128 bits."""
    if verdict not in SIDES:
        raise PanelError(f"a panelist votes for 'team' or 'requester', not {verdict!r}")
    if not re.fullmatch(r"[0-9a-f]{32,128}", salt):
        raise PanelError("a vote's salt is 16 to 64 random bytes in lowercase hex")
    document = {"v": PANEL_VERSION, "verdict": verdict, "salt": salt}
    return hashlib.sha256(canonical_json(document)).hexdigest()


@dataclass(frozen=True)
class Tally:
    """A panel's decision: the winner, each seat's counted vote, and who voted with it."""

    winner: Side
    votes: Mapping[str, Side]
    coherent: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"winner": self.winner, "votes": dict(self.votes), "coherent": list(self.coherent)}


def tally(
    seats: Sequence[str],
    commitments: Mapping[str, str],
    reveals: Mapping[str, tuple[str, str]],
) -> Tally:
    """The decision of `seats` from their `commitments` (seat -> commitment) and `reveals`
    (seat -> (verdict, salt)): a vote counts when its seat committed and its reveal opens the
    commitment (the judge's seat commits to its sealed exchange with the model, which only
    an auditor holding it opens: its vote counts as revealed). The requester wins with a
    strict majority of the counted votes; otherwise the team (a tie or no vote at all
    included). Pure."""
    votes: dict[str, Side] = {}
    for seat in seats:
        committed = commitments.get(seat)
        revealed = reveals.get(seat)
        if committed is None or revealed is None:
            continue
        verdict, salt = revealed
        if seat == JUDGE_SEAT and verdict in SIDES:
            votes[seat] = "team" if verdict == "team" else "requester"
            continue
        try:
            if vote_commitment(verdict, salt) != committed:
                continue
        except PanelError:
            continue
        votes[seat] = "team" if verdict == "team" else "requester"
    against = sum(1 for side in votes.values() if side == "requester")
    winner: Side = "requester" if 2 * against > len(votes) else "team"
    coherent = tuple(seat for seat in seats if votes.get(seat) == winner)
    return Tally(winner, votes, coherent)


def panel_pay(fee: int, seats: Sequence[str], coherent: Collection[str]) -> dict[str, int]:
    """Each coherent seat's share of `fee`: the fee split into one share per seat, the
    remainder one wei each to the first seats. Seats not coherent are paid nothing (their
    shares go back to the winner: `fee - sum(panel_pay(...).values())`)."""
    if not seats:
        return {}
    whole, left = divmod(fee, len(seats))
    return {
        seat: whole + (1 if position < left else 0)
        for position, seat in enumerate(seats)
        if seat in coherent
    }


@dataclass(frozen=True)
class DisputeMoney:
    """Who pays a decided dispute's panel and what the winner gets back, in wei."""

    panel: Mapping[str, int]
    """Each coherent seat's pay."""
    from_team: int
    """Taken from the team's pay (the team lost)."""
    from_bond: int
    """Taken from the requester's bond (it lost, or the team's pay fell short)."""
    to_team: int
    """Of the requester's bond, what goes to the team (the requester lost)."""
    from_answer: int = 0
    """Taken from the team's answer (the team answered and lost)."""


@dataclass(frozen=True)
class TeamAnswer:
    """The team's answer to one dispute: `amount` wei the chain account `account` bonded."""

    account: str
    amount: int


def dispute_money(
    fee: int, seats: Sequence[str], decided: Tally, team_pay: int, answer: int = 0
) -> DisputeMoney:
    """Pure: the money of one decided dispute whose requester bonded `fee`, the team standing
    to be paid `team_pay` after the disputes before it, having answered it with `answer` wei
    of its own (0: it did not answer; module docstring)."""
    pay = panel_pay(fee, seats, decided.coherent)
    owed = sum(pay.values())
    if decided.winner == "team":
        return DisputeMoney(pay, 0, owed, fee - owed)
    from_answer = min(owed, max(answer, 0))
    from_team = min(owed - from_answer, max(team_pay, 0))
    return DisputeMoney(pay, from_team, owed - from_answer - from_team, 0, from_answer)


# -- the panel's log: what was drawn, committed, replaced and revealed -----------------------

PANEL_DRAWN = "panel.drawn"
"""The operator's draw: the seed block, the seats and the reserves (once per dispute)."""
PANEL_COMMITTED = "panel.committed"
"""A panelist's signed commitment to its vote."""
PANEL_REPLACED = "panel.replaced"
"""The operator's replacement of the seats whose panelists did not commit in the window."""
PANEL_REVEALED = "panel.revealed"
"""A panelist's signed vote and salt, opening its commitment."""
PANEL_KINDS = (PANEL_DRAWN, PANEL_COMMITTED, PANEL_REPLACED, PANEL_REVEALED)

COMMIT_WINDOW_S = 600
"""How long the panelists have to commit after the draw (and a replacement after it is
named)."""
REVEAL_WINDOW_S = 600
"""How long the panelists have to reveal once the last commit window has closed."""


def capabilities_read(parts: Mapping[str, str], reads: Sequence[str]) -> tuple[str, ...]:
    """The capabilities of the parts a review reads (`parts`: part id -> capability; the plan
    and the assembly have none): a panelist must hold every one of them."""
    return tuple(sorted({parts[p] for p in reads if p in parts}))


def pool_at(
    events: Sequence[tuple[int, Event]],
    *,
    operator: str,
    requester: str,
    team: Collection[str],
    capabilities: Sequence[str],
    before: int,
    at: datetime,
    liveness_s: int = LIVENESS_S,
) -> list[str]:
    """Pure: the DIDs that may sit on the panel of a dispute entered at index `before`, time
    `at` (module docstring), from the log's verified `events`, in DID order."""
    candidates = candidates_from_events(events, operator=operator, before=before, at=at)
    out = excluded_from_panel(requester, team, circles(paid_pairs(events, before=before)))
    pools = [
        set(eligible(candidates, capability=c, excluded=out, at=at, liveness_s=liveness_s))
        for c in capabilities
    ]
    if not pools:
        return []
    return sorted(set.intersection(*pools))


@dataclass(frozen=True)
class PanelLog:
    """One dispute's panel as its logged entries fold: the draw, the commitments and reveals
    by seat, the replacements, and the windows (`None` before the draw)."""

    drawn: Mapping[str, Any]
    drawn_at: datetime
    drawn_index: int
    panel: Panel
    commitments: Mapping[str, str]
    reveals: Mapping[str, tuple[str, str]]
    replaced_at: datetime | None

    @property
    def commit_ends(self) -> datetime:
        """When the last commit window closes (a replacement opens one of its own)."""
        start = self.replaced_at or self.drawn_at
        return start + timedelta(seconds=int(self.drawn.get("commit_s", COMMIT_WINDOW_S)))

    @property
    def reveal_ends(self) -> datetime:
        return self.commit_ends + timedelta(
            seconds=int(self.drawn.get("reveal_s", REVEAL_WINDOW_S))
        )

    def absent(self) -> list[str]:
        """The seats with no commitment (the judge's excepted)."""
        return [s for s in self.panel.seats if s not in self.commitments and s != JUDGE_SEAT]

    def all_committed(self) -> bool:
        return all(seat in self.commitments for seat in self.panel.seats)

    def revealing(self, now: datetime) -> bool:
        """Whether reveals are taken: every seat committed, or the last commit window closed
        (after the one replacement, when a seat was absent)."""
        if self.all_committed():
            return True
        return now >= self.commit_ends and (self.replaced_at is not None or not self.absent())

    def decided(self, now: datetime) -> bool:
        """Whether the votes are in: every committed seat revealed, or the reveal window
        closed (after the commit windows)."""
        if not self.revealing(now):
            return False
        if all(seat in self.reveals for seat in self.panel.seats if seat in self.commitments):
            return True
        return now >= self.reveal_ends

    def tally(self) -> Tally:
        return tally(self.panel.seats, self.commitments, self.reveals)

    def to_json(self) -> dict[str, Any]:
        """What a settlement's dispute record keeps of the panel (the audit replays it)."""
        return {
            "drawn": self.drawn_index,
            "block": dict(self.drawn.get("block") or {}),
            **self.panel.to_json(),
            **self.tally().to_json(),
        }


def panel_log(
    events: Iterable[tuple[int, Event]], *, operator: str, check_id: str
) -> PanelLog | None:
    """Pure: the panel of the dispute over `check_id` from the task's verified `events`, or
    None before it is drawn. The first draw counts; a commitment counts from a seat of the
    panel as it stood then, once; a reveal from a seat that committed, once, only while
    reveals are taken (its time is its entry's); a replacement only from the operator, once,
    once the commit window has closed: of every seat that had not committed then, whatever
    seats its body names (an operator can neither swap out a panelist who still had time to
    commit, nor keep a silent one)."""
    found: PanelLog | None = None
    commitments: dict[str, str] = {}
    reveals: dict[str, tuple[str, str]] = {}
    for index, event in sorted(events, key=lambda pair: pair[0]):
        body = event.body
        if event.kind not in PANEL_KINDS or body.get("check") != check_id:
            continue
        when = parse_time(event.at)
        if event.kind == PANEL_DRAWN:
            if found is None and event.actor == operator:
                panel = Panel(
                    tuple(str(s) for s in body.get("seats") or ()),
                    tuple(str(s) for s in body.get("reserves") or ()),
                )
                found = PanelLog(dict(body), when, index, panel, {}, {}, None)
            continue
        if found is None:
            continue
        if event.kind == PANEL_REPLACED:
            absent = [s for s in found.panel.seats if s not in commitments and s != JUDGE_SEAT]
            if (
                event.actor == operator
                and found.replaced_at is None
                and when >= found.commit_ends
                and absent
            ):
                found = PanelLog(
                    found.drawn,
                    found.drawn_at,
                    found.drawn_index,
                    replace(found.panel, absent),
                    {},
                    {},
                    when,
                )
            continue
        state = _with(found, commitments, reveals)
        actor = event.actor
        if actor == operator and body.get("seat") == JUDGE_SEAT:
            actor = JUDGE_SEAT
        if event.kind == PANEL_COMMITTED:
            if (
                actor in state.panel.seats
                and actor not in commitments
                and when < state.commit_ends
                and not state.all_committed()
            ):
                commitments[actor] = str(body.get("commitment", ""))
        elif event.kind == PANEL_REVEALED and (
            actor in commitments
            and actor not in reveals
            and state.revealing(when)
            and when < state.reveal_ends
        ):
            reveals[actor] = (str(body.get("verdict", "")), str(body.get("salt", "")))
    if found is None:
        return None
    return _with(found, commitments, reveals)


def _with(
    found: PanelLog, commitments: Mapping[str, str], reveals: Mapping[str, tuple[str, str]]
) -> PanelLog:
    return PanelLog(
        found.drawn,
        found.drawn_at,
        found.drawn_index,
        found.panel,
        dict(commitments),
        dict(reveals),
        found.replaced_at,
    )


DecidedDispute = tuple[int, Sequence[str], Tally, TeamAnswer | None]
"""A decided panel dispute: the requester's fee, the seats, the tally, the team's answer."""


def settle_disputes(
    decided: Iterable[DecidedDispute], earned: int
) -> tuple[int, dict[str, int], dict[str, int]]:
    """Pure: the team's pay after its decided panel disputes (`decided`, in check order),
    each seat's pay, and what was taken from each answering account's answers (by account),
    from `earned`, what the passed checks pay the team: a dispute the team lost is paid from
    its answer first, then what is left of its pay; one it won adds the rest of the
    requester's bond (`dispute_money`)."""
    amount = earned
    pay: dict[str, int] = {}
    taken: dict[str, int] = {}
    for fee, seats, decision, answer in decided:
        staked = 0 if answer is None else answer.amount
        money = dispute_money(fee, seats, decision, amount, staked)
        amount = amount - money.from_team + money.to_team
        for seat, wei in money.panel.items():
            pay[seat] = pay.get(seat, 0) + wei
        if answer is not None and money.from_answer:
            taken[answer.account] = taken.get(answer.account, 0) + money.from_answer
    return amount, pay, taken


def decided_disputes(
    records: Mapping[str, Mapping[str, Any] | None],
) -> list[DecidedDispute]:
    """The panel disputes among checks' records (by check id, in id order): each one's fee,
    seats, tally and the team's answer as its record logs them. Raises PanelError for a record
    that does not parse."""
    found: list[DecidedDispute] = []
    for check_id in sorted(records):
        record = records[check_id] or {}
        dispute = record.get("dispute")
        if not isinstance(dispute, Mapping) or not isinstance(dispute.get("panel"), Mapping):
            continue
        try:
            panel = dispute["panel"]
            winner: Side = "team" if dispute["winner"] == "team" else "requester"
            seats = tuple(str(s) for s in panel["seats"])
            coherent = tuple(str(s) for s in panel["coherent"])
            answered = dispute.get("answer")
            answer = (
                None
                if answered is None
                else TeamAnswer(str(answered["account"]), int(str(answered["amount"])))
            )
            fee = int(str(record["fee"]))
            found.append((fee, seats, Tally(winner, {}, coherent), answer))
        except (KeyError, TypeError, ValueError) as exc:
            raise PanelError(f"the dispute over {check_id} does not parse: {exc!r}") from exc
    return found
