"""The discovery view: what agent discovery ranks, one row per agent, so that ranking the
holders of a capability for a need is one indexed query that returns a page, not a scan.

    view_discovery  one row per agent: the name it registered under (`agent.registered`,
                    signed by the agent), the capabilities of its unrevoked credentials
                    (`credential.issued`/`credential.revoked`, signed by the operator), the
                    words of its description, their number, its reputation in that
                    capability (its track record there, `accord.market.reputation`: exact `n/d` and
                    a double to sort by), and the window within which all its credentials
                    are valid

An agent is described by what the log proves of it (`description`): its name and what it is
credentialed for, e.g. "ada: agent for arithmetic, extraction". Discovery's relevance is the
Jaccard overlap of the words of a need with the words of that description (`relevance`), so
anyone can recompute a ranking from the log alone.

    view_discovery_words
                    per capability row, the words of the description other than the ones
                    every holder of that capability shares ("agent", "for" and the
                    capability's own words, `base_words`)

How a page is found (`ranked_page`), without reading every holder of the capability: every
holder's description contains the base words, so each holder shares the need's base words
(`c0` of them) and, the "matched" ones, some of its other words. Relevance is
`c / (n + w - c)` for `c` shared words of `n` with a need of `w`, so among the holders that
share no other word (c = c0) a shorter description ranks first, then reputation, then DID:
the ranking index (`ix_view_discovery_by_length`, or `..._by_reputation` for a need that
shares no base word) holds them in that order, and the page is a range scan of it that stops
after the page's rows. The matched holders are found through the word table, ordered by the
database on relevance and reputation (doubles: rounding is monotone, so the database's order
can only tie two different values, never invert them), then DID, again up to the page. The
two lists are merged and ordered exactly with fractions. A row whose credentials are not all
valid now (one expired, or is not valid yet) describes a set of capabilities the clock has
changed: such rows (rare) are ranked from the credential view in Python and merged in, so the
answer is the one a scan of every agent would give. The scans do not test the window
themselves (on SQLite such a test made the planner walk a window index and sort every
holder); the rows outside it are dropped from them instead, and a scan whose page they thinned
is read again, longer by their number. All three come back in one statement.

The view follows the task, credential and reputation views and reads their rows when it folds
(forfeits count in the capabilities of their task; a settlement that closes a circle changes
the weights of every unit within it, so the whole circle is written again): they are attached
before it, and every append, catch-up and reindex applies them first, chunk by
chunk (`DEPENDS_ON` are brought level before it on a read). The audit never reads it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    Float,
    Index,
    Integer,
    String,
    Table,
    bindparam,
    cast,
    delete,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    union_all,
)
from sqlmodel import Column, Field, SQLModel

from accord.identity.credential_views import CREDENTIALS, ISSUED_KIND, capabilities_of, issued_row
from accord.identity.credential_views import VIEW_NAME as CREDENTIAL_VIEW
from accord.identity.credentials import REVOCATION_EVENT_KIND
from accord.identity.registration import REGISTERED_KIND
from accord.ledger.views import ViewEntry, micros
from accord.market.reputation import circles, work_by_agent
from accord.market.views import (
    REPUTATION_VIEW,
    TRACK_RECORD,
    forfeited_in,
    settled_of,
    track_records_of,
    work_pairs,
)
from accord.market.views import VIEW_NAME as TASK_VIEW

VIEW_NAME = "discovery"
DEPENDS_ON = (TASK_VIEW, CREDENTIAL_VIEW, REPUTATION_VIEW)
_IN_CHUNK = 500
_NEVER_US = 2**62
_WORDS = re.compile(r"[a-z0-9]+")


def words(text: str) -> frozenset[str]:
    """The words relevance compares: runs of lower-case letters and digits (pure)."""
    return frozenset(_WORDS.findall(text.lower()))


def description(name: str, capabilities: Sequence[str]) -> str:
    """How discovery and team formation describe an agent: its registered name and what it
    holds a valid credential for (pure)."""
    return f"{name}: agent for {', '.join(capabilities) or 'nothing yet'}"


def base_words(capability: str) -> frozenset[str]:
    """The words of every description of an agent holding `capability` (pure)."""
    return words(description("", [capability]))


def relevance(need: str, text: str) -> Fraction:
    """Word overlap (Jaccard) between a need and a description, exactly (pure)."""
    a, b = words(need), words(text)
    if not a or not b:
        return Fraction(0)
    return Fraction(len(a & b), len(a | b))


class AgentNameRow(SQLModel, table=True):
    __tablename__ = "view_agent_names"

    did: str = Field(primary_key=True)
    name: str


class DiscoveryRow(SQLModel, table=True):
    """An agent as discovery ranks it, once per capability it holds an unrevoked credential
    for, so the holders of one capability are one range of the primary key."""

    __tablename__ = "view_discovery"
    __table_args__ = (
        Index("ix_view_discovery_until", "capability", "valid_until_us"),
        Index("ix_view_discovery_from", "capability", "valid_from_us"),
    )

    capability: str = Field(primary_key=True)
    did: str = Field(primary_key=True)
    name: str
    capabilities: str
    """Every capability of its unrevoked credentials, sorted, joined by newlines."""
    words: str
    """The words of its description, sorted, each with a space either side."""
    word_count: int
    reputation: str
    """Exactly, as `n/d`."""
    reputation_key: float = Field(sa_column=Column(Float, nullable=False))
    valid_from_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    """The latest start of validity among its unrevoked credentials."""
    valid_until_us: int = Field(sa_column=Column(BigInteger, nullable=False))
    """The earliest end of validity among them: outside this window the row's words name
    capabilities that are not all held, and the query ranks the agent from the credentials."""


class DiscoveryWordRow(SQLModel, table=True):
    """A word of an agent's description beyond its capability row's base words."""

    __tablename__ = "view_discovery_words"
    __table_args__ = (Index("ix_view_discovery_words_did", "did"),)

    capability: str = Field(primary_key=True)
    word: str = Field(primary_key=True)
    did: str = Field(primary_key=True)


NAMES: Table = AgentNameRow.__table__  # type: ignore[attr-defined]
DISCOVERY: Table = DiscoveryRow.__table__  # type: ignore[attr-defined]
WORDS: Table = DiscoveryWordRow.__table__  # type: ignore[attr-defined]
# The two orders of the holders that share only base words with a need: shorter descriptions
# first when they share some (relevance falls as the description grows), else by reputation.
Index(
    "ix_view_discovery_by_length",
    DISCOVERY.c.capability,
    DISCOVERY.c.word_count,
    DISCOVERY.c.reputation_key.desc(),
    DISCOVERY.c.did,
)
Index(
    "ix_view_discovery_by_reputation",
    DISCOVERY.c.capability,
    DISCOVERY.c.reputation_key.desc(),
    DISCOVERY.c.did,
)


class DiscoveryView:
    """The discovery projection (`accord.ledger.views.Projection`). Credentials count only when the
    operator `operator_did` logged them; names only as their agent signed them."""

    name = VIEW_NAME
    tables: Sequence[Table] = (NAMES, DISCOVERY, WORDS)

    def __init__(self, operator_did: str) -> None:
        self.operator_did = operator_did

    def apply(self, connection: Any, entries: Sequence[ViewEntry]) -> None:
        names: dict[str, str] = {}
        dirty: set[str] = set()
        revoked: list[str] = []
        requesters: set[str] = set()
        for entry in entries:
            event = entry.event
            if event.kind == REGISTERED_KIND:
                name = event.body.get("name")
                if event.subject == event.actor and isinstance(name, str) and name:
                    names[event.actor] = name
            elif event.actor == self.operator_did and event.kind == ISSUED_KIND:
                row = issued_row(entry)
                if row is not None:
                    dirty.add(row["agent"])
            elif event.actor == self.operator_did and event.kind == REVOCATION_EVENT_KIND:
                revoked.append(event.subject)
            else:
                work = settled_of(entry)
                if work is not None:
                    dirty.update(work_by_agent(work))
                    requesters.add(work.requester)
                dirty.update(forfeited_in(entry))
        if requesters:
            # New work can close a circle: every agent in the requester's circle now may
            # weigh its units otherwise (`accord.market.reputation.circles`), and every agent
            # a member of it hired, whose standing the circle may have swallowed.
            merged = circles(work_pairs(connection))
            closed: set[str] = set()
            for requester in requesters:
                circle = merged.get(requester, frozenset())
                dirty.update(circle)
                if len(circle) > 1:
                    closed.update(circle)
            for chunk in _chunks(sorted(closed)):
                hired = select(TRACK_RECORD.c.did).where(TRACK_RECORD.c.requester.in_(chunk))
                dirty.update(connection.execute(hired.distinct()).scalars())
        registered = sorted(names)
        for chunk in _chunks(registered):  # a repeat (a hand-written log) renames
            connection.execute(delete(NAMES).where(NAMES.c.did.in_(chunk)))
        if names:
            connection.execute(insert(NAMES), [{"did": d, "name": n} for d, n in names.items()])
        dirty.update(registered)
        for chunk in _chunks(revoked):
            found = select(CREDENTIALS.c.agent).where(CREDENTIALS.c.credential_id.in_(chunk))
            dirty.update(connection.execute(found).scalars())
        for chunk in _chunks(sorted(dirty)):
            _describe(connection, chunk)

    def reset(self, connection: Any) -> None:
        connection.execute(delete(WORDS))
        connection.execute(delete(DISCOVERY))
        connection.execute(delete(NAMES))


def _chunks(keys: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(keys), _IN_CHUNK):
        yield keys[start : start + _IN_CHUNK]


def _describe(connection: Any, dids: list[str]) -> None:
    """Write the rows of `dids` again from their names and the credential and reputation
    views: one per capability held (an agent not registered yet has none)."""
    stored = select(NAMES.c.did, NAMES.c.name).where(NAMES.c.did.in_(dids))
    names: dict[str, str] = {did: name for did, name in connection.execute(stored)}
    held: dict[str, set[str]] = {did: set() for did in names}
    window = {did: (0, _NEVER_US) for did in names}
    credentials = connection.execute(
        select(
            CREDENTIALS.c.agent,
            CREDENTIALS.c.capability,
            CREDENTIALS.c.valid_from_us,
            CREDENTIALS.c.valid_until_us,
        ).where(CREDENTIALS.c.agent.in_(list(names)), CREDENTIALS.c.revoked.is_(False))
    )
    for agent, capability, valid_from, valid_until in credentials:
        held[agent].add(capability)
        earliest, latest = window[agent]
        window[agent] = (max(earliest, int(valid_from)), min(latest, int(valid_until)))
    records = track_records_of(connection, [did for did in names if held[did]])
    rows = []
    word_rows = []
    for did, name in names.items():
        capabilities = sorted(held[did])
        described = words(description(name, capabilities))
        for capability in capabilities:
            word_rows += [
                {"capability": capability, "word": word, "did": did}
                for word in sorted(described - base_words(capability))
            ]
            rows.append(
                {
                    "capability": capability,
                    "did": did,
                    "name": name,
                    "capabilities": "\n".join(capabilities),
                    "words": f" {' '.join(sorted(described))} ",
                    "word_count": len(described),
                    "reputation": fraction_text(records.reputation(did, capability)),
                    "reputation_key": float(records.reputation(did, capability)),
                    "valid_from_us": window[did][0],
                    "valid_until_us": window[did][1],
                }
            )
    connection.execute(delete(WORDS).where(WORDS.c.did.in_(dids)))
    connection.execute(delete(DISCOVERY).where(DISCOVERY.c.did.in_(dids)))
    if rows:
        connection.execute(insert(DISCOVERY), rows)
    if word_rows:
        connection.execute(insert(WORDS), word_rows)


def fraction_text(value: Fraction) -> str:
    """A fraction as `n/d` (pure)."""
    return f"{value.numerator}/{value.denominator}"


@dataclass(frozen=True)
class Discovered:
    """One ranked agent: what it holds, its reputation and description, and its relevance."""

    did: str
    name: str
    capabilities: tuple[str, ...]
    reputation: Fraction
    description: str
    relevance: Fraction

    def order(self) -> tuple[Fraction, Fraction, str]:
        return (-self.relevance, -self.reputation, self.did)


_CHANGED, _MATCHED, _ONLY_BASE = 0, 1, 2
"""Which part of a page's statement a row comes from (`_page_statement`)."""


def ranked_page(
    connection: Any, capability: str, need: str, now: datetime, *, offset: int, size: int
) -> tuple[list[Discovered], bool]:
    """The agents holding a credential for `capability` valid at `now`, ranked by relevance
    of their description to `need`, then reputation, then DID: the `size` after the first
    `offset`, and whether more follow. Reads the views only (bring them level first); reads
    at most about `offset + size` rows of each kind (see the module docstring), not every
    holder: one statement, and a second only when rows outside their window sit among the
    first (`_page_statement`)."""
    need_words = words(need)
    base = base_words(capability)
    shared_base = len(need_words & base)
    other_words = sorted(need_words - base)
    wanted = offset + size + 1
    statement = _page_statement(bool(other_words), shared_base > 0)
    values: dict[str, Any] = {
        "capability": capability,
        "now_us": micros(now),
        "other_words": other_words,
        "shared_base": shared_base,
        "need_count": len(need_words),
    }
    limit = wanted
    while True:
        rows = connection.execute(statement, {**values, "limit": limit}).all()
        changed = {row.did: row for row in rows if row.part == _CHANGED}
        # The scans are not filtered by the window (a filter there would keep SQLite from
        # walking the ranking index): a row outside it is one of `changed`, ranked below.
        scans = [
            [row for row in rows if row.part == part]
            for part in (_MATCHED, _ONLY_BASE)
            if part != _MATCHED or other_words
        ]
        if all(
            len(scan) < limit or sum(row.did not in changed for row in scan) >= wanted
            for scan in scans
        ):
            break
        limit = wanted + len(changed)  # at most that many of a scan's rows are changed
    reputations: dict[str, Fraction] = {}
    found = [
        _discovered(
            need_words, row.did, row.name, row.capabilities.split("\n"), row.reputation, reputations
        )
        for scan in scans
        for row in scan
        if row.did not in changed
    ]
    if changed:
        held = capabilities_of(connection, list(changed), now)
        found += [
            _discovered(need_words, did, row.name, held[did], row.reputation, reputations)
            for did, row in changed.items()
            if capability in held[did]
        ]
    found.sort(key=Discovered.order)
    return found[offset : offset + size], len(found) > offset + size


@cache
def _page_statement(matching: bool, by_length: bool) -> Any:
    """The one statement a page reads (built once per shape), its rows tagged by `part`:

    - `_CHANGED`: every holder whose row is outside its window at `now_us` (an index range
      each side; normally none);
    - `_MATCHED` (when the need has words beyond the base words, `matching`): the `limit`
      first holders sharing one of `other_words`, by relevance and reputation (doubles),
      then DID;
    - `_ONLY_BASE`: the `limit` first holders sharing none of them, in the order of the
      ranking index: a range scan of `ix_view_discovery_by_length` (`by_length`, when the
      need shares base words, so that a shorter description ranks first) or of
      `ix_view_discovery_by_reputation`, stopping after `limit` rows.

    Neither scan is filtered by the window: rows outside it are ranked from the credentials.
    Parameters: capability, now_us, other_words, shared_base, need_count, limit."""
    capability = bindparam("capability", type_=String)
    now_us = bindparam("now_us", type_=BigInteger)
    limit = bindparam("limit", type_=Integer)
    columns = (DISCOVERY.c.did, DISCOVERY.c.name, DISCOVERY.c.capabilities, DISCOVERY.c.reputation)

    def part(tag: int) -> Any:
        return literal_column(str(tag), Integer).label("part")

    of_capability = DISCOVERY.c.capability == capability
    changed = select(*columns, part(_CHANGED)).where(
        of_capability,
        or_(DISCOVERY.c.valid_until_us <= now_us, DISCOVERY.c.valid_from_us > now_us),
    )
    parts = [changed]
    only_base = select(*columns, part(_ONLY_BASE)).where(of_capability)
    if matching:
        other_words = bindparam("other_words", expanding=True, type_=String)
        also_shared = (
            select(WORDS.c.did, func.count().label("extra"))
            .where(WORDS.c.capability == capability, WORDS.c.word.in_(other_words))
            .group_by(WORDS.c.did)
            .subquery()
        )
        shared = bindparam("shared_base", type_=Integer) + also_shared.c.extra
        need_count = bindparam("need_count", type_=Integer)
        overlap = cast(shared, Float) / (DISCOVERY.c.word_count + need_count - shared)
        matched = (
            select(*columns, part(_MATCHED))
            .join(also_shared, also_shared.c.did == DISCOVERY.c.did)
            .where(of_capability)
            .order_by(overlap.desc(), DISCOVERY.c.reputation_key.desc(), DISCOVERY.c.did)
            .limit(limit)
        )
        parts.append(matched)
        only_base = only_base.where(
            ~exists().where(
                WORDS.c.capability == capability,
                WORDS.c.did == DISCOVERY.c.did,
                WORDS.c.word.in_(other_words),
            )
        )
    order = [DISCOVERY.c.reputation_key.desc(), DISCOVERY.c.did]
    if by_length:
        order.insert(0, DISCOVERY.c.word_count)
    parts.append(only_base.order_by(*order).limit(limit))
    # each part a subquery of its own, so that its ORDER BY and LIMIT stay its own
    return union_all(*(select(*each.subquery().c) for each in parts))


def _discovered(
    need_words: frozenset[str],
    did: str,
    name: str,
    capabilities: Sequence[str],
    reputation: str,
    reputations: dict[str, Fraction],
) -> Discovered:
    """A row as discovery ranks it; `reputations` remembers the fractions parsed so far (a
    page's holders mostly share a few, e.g. the prior)."""
    text = description(name, capabilities)
    described = words(text)
    shared = len(need_words & described)
    score = Fraction(shared, len(need_words | described)) if need_words and described else None
    parsed = reputations.get(reputation)
    if parsed is None:
        parsed = reputations[reputation] = Fraction(reputation)
    return Discovered(
        did, name, tuple(capabilities), parsed, text, Fraction(0) if score is None else score
    )
