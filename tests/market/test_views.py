"""The task view (`accord.market.views`) against the replay it stands in for, on SQLite and
PostgreSQL: every filter and page equals filtering `Market.task` replays; dropping the view and
folding the log again gives identical rows; entries a view-less writer appended are folded in;
a hostile log never fails an append; a hand-edited view fools neither `Market.task` nor the
audit; a bad filter, limit or cursor is a QueryError naming it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import update

from accord.audit.checks import audit_task
from accord.identity.credential_views import VIEW_NAME as CREDENTIAL_VIEW
from accord.identity.credential_views import capabilities_of
from accord.ledger.chain import MemoryAnchorChain
from accord.ledger.errors import QueryError, StoreError
from accord.ledger.events import Entry, make_entry, parse_time
from accord.ledger.service import Ledger
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from accord.ledger.views import encode_cursor, reading
from accord.ledger.wiring import open_ledger
from accord.market import sealed
from accord.market.errors import TransitionError
from accord.market.escrow import MemoryEscrowChain
from accord.market.projections import read_views
from accord.market.service import LIFECYCLE_KINDS, Market
from accord.market.tasks import TASK_AWARDED, Task, clock_state
from accord.market.views import TASK_STATES, TASKS, VIEW_NAME, tasks_by_change
from tests.ledger.conftest import postgres_schema_url
from tests.market.conftest import Bidder, Clock
from tests.market.test_service import SALT_A, post, to_award, to_reveal
from tests.view_rows import view_rows

MakeBidder = Callable[..., Bidder]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """The market's settings (tests/market/conftest.py) on each backend."""
    env = {"ACCORD_HOME": str(tmp_path / "home")}
    if request.param == "sqlite":
        yield Settings.from_env(env)
        return
    with postgres_schema_url() as url:
        yield Settings.from_env({**env, "ACCORD_DB_URL": url})


@pytest.fixture
def ledger(settings: Settings, clock: Clock) -> Iterator[Ledger]:
    """The market's ledger (tests/market/conftest.py), its engine disposed afterwards."""
    ledger = open_ledger(settings)
    ledger.clock = clock
    yield ledger
    ledger.store.engine.dispose()


@dataclass
class World:
    market: Market
    ledger: Ledger
    clock: Clock
    requester: Ed25519Signer
    other: Ed25519Signer
    ids: list[str]


@pytest.fixture
def world(
    market: Market,
    ledger: Ledger,
    clock: Clock,
    requester: Ed25519Signer,
    make_bidder: MakeBidder,
) -> World:
    """Tasks in every state a market reaches: awarded, refunded (no bid), revealing, bidding,
    for two capabilities and two requesters."""
    other = market.onboarding.registry.signer(
        market.onboarding.registry.new_agent("other", now=clock())
    )
    _, alice = make_bidder("alice")
    awarded = post(market, requester)
    refunded = post(market, requester)
    market.commit(sealed.commit_bid(alice, awarded.task_id, 300, SALT_A))
    to_reveal(clock, awarded)
    market.reveal(sealed.reveal_bid(alice, awarded.task_id, 300, SALT_A))
    to_award(clock, awarded)
    market.award(awarded.task_id)
    market.award(refunded.task_id)
    revealing = post(market, other)
    to_reveal(clock, revealing)
    bidding = [
        post(market, requester, capability="python"),
        post(market, other),
        post(market, requester),
    ]
    ids = [awarded.task_id, refunded.task_id, revealing.task_id, *[t.task_id for t in bidding]]
    return World(market, ledger, clock, requester, other, ids)


def replayed(world: World, **filters: str) -> list[Task]:
    """What the list should answer: every task replayed from its events, filtered by hand."""
    now = world.clock()
    tasks = [world.market.task(task_id) for task_id in world.ids]
    return [
        task
        for task in tasks
        if filters.get("state") in (None, clock_state(task, now))
        and filters.get("capability") in (None, *task.spec.capabilities)
        and filters.get("requester") in (None, task.requester)
    ]


def listed(market: Market, limit: int | None = None, **filters: str) -> list[Task]:
    """Every page of `list_tasks`, followed by its cursors."""
    found: list[Task] = []
    cursor = None
    while True:
        page = market.list_tasks(**filters, limit=limit, cursor=cursor)
        assert len(page.tasks) <= (limit or 50)
        found.extend(page.tasks)
        if page.next_cursor is None:
            return found
        assert page.tasks, "a page with a next cursor holds tasks"
        cursor = page.next_cursor


def test_every_filter_and_page_equals_the_replay(world: World) -> None:
    market = world.market
    states = {clock_state(world.market.task(t), world.clock()) for t in world.ids}
    assert states == {"awarded", "refunded", "revealing", "bidding"}
    queries: list[dict[str, str]] = [{}]
    queries += [{"state": state} for state in TASK_STATES]
    queries += [{"capability": c} for c in ("arithmetic", "python", "retrieval")]
    queries += [{"requester": d} for d in (world.requester.did, world.other.did, "did:key:zNo")]
    queries += [
        {"state": "bidding", "capability": "arithmetic"},
        {"state": "bidding", "capability": "arithmetic", "requester": world.other.did},
        {"state": "revealing", "requester": world.other.did},
        {"state": "awarded", "capability": "python"},
    ]
    for query in queries:
        expected = replayed(world, **query)
        for limit in (None, 1, 2, 200):
            assert listed(market, limit, **query) == expected, (query, limit)
    assert market.tasks() == replayed(world)
    bidding = market.list_tasks(state="bidding", capability="arithmetic", limit=50)
    assert [t.task_id for t in bidding.tasks] == world.ids[4:] and bidding.next_cursor is None


def test_the_clock_moves_a_task_from_bidding_to_revealing_in_the_view(world: World) -> None:
    youngest = world.market.task(world.ids[-1])
    assert youngest in world.market.list_tasks(state="bidding").tasks
    to_reveal(world.clock, youngest)
    assert world.market.list_tasks(state="bidding").tasks == ()
    assert listed(world.market, state="revealing") == replayed(world, state="revealing")
    assert len(replayed(world, state="revealing")) == 4


def test_dropping_the_view_and_reindexing_gives_identical_rows(world: World) -> None:
    store = world.ledger.store
    store_operator = world.ledger.operator.did
    with store.engine.connect() as connection:
        before = list(view_rows(connection, read_views(store_operator)))
    assert len([row for row in before if row[0] == "view_tasks"]) == len(world.ids)
    applied = store.reindex()
    assert applied == dict.fromkeys(
        ("tasks", "bids", "credentials", "reputation", "discovery"), store.size()
    )
    with store.engine.connect() as connection:
        assert list(view_rows(connection, read_views(store_operator))) == before
    for table in reversed(TASKS.metadata.sorted_tables):
        if table.name.startswith("view_") or table.name == "ledger_views":
            table.drop(store.engine)
    reopened = LogStore(store.engine, store.log_id)
    fresh = Market(
        Ledger(reopened, world.ledger.operator, world.clock),
        world.market.onboarding,
        world.market.escrow,
        clock=world.clock,
    )
    with store.engine.connect() as connection:
        assert list(view_rows(connection, read_views(store_operator))) == before
    assert fresh.tasks() == world.market.tasks()


def test_entries_a_writer_without_the_view_appended_are_folded_in(
    world: World, escrow_chain: MemoryEscrowChain
) -> None:
    """Another process (an older version, a tool) appends with no view attached: the view
    records how far it applied and folds the rest in when it is next read."""
    del escrow_chain
    bare = LogStore(world.ledger.store.engine, world.ledger.store.log_id)
    plain = Ledger(bare, world.ledger.operator, world.clock)
    spec = world.market.task(world.ids[-1]).spec.to_json()
    plain.append(
        world.requester,
        "task.posted",
        subject="task-from-elsewhere",
        body={"task_id": "task-from-elsewhere", "spec": spec, "escrow_from": "0x0"},
    )
    posted = world.market.list_tasks(state="posted").tasks
    assert [t.task_id for t in posted] == ["task-from-elsewhere"]
    assert posted[0] == world.market.task("task-from-elsewhere")


def test_an_event_that_does_not_replay_is_recorded_not_raised(world: World) -> None:
    """A hostile writer logs an award for a refunded task (the view cannot fold it):
    the append succeeds, the view records the problem and leaves the task out of the lists,
    as `Market.task` refuses it."""
    task_id = world.ids[1]
    operator = world.ledger.operator
    body = {"task_id": task_id, "winner": "did:key:zX", "price": "1", "forfeited": []}
    world.ledger.append(operator, TASK_AWARDED, subject=task_id, body=body)
    with pytest.raises(TransitionError, match="cannot be awarded"):
        world.market.task(task_id)
    assert task_id not in [t.task_id for t in world.market.tasks()]
    with world.ledger.store.engine.connect() as connection:
        problem = connection.execute(TASKS.select().where(TASKS.c.subject == task_id)).one().problem
    assert problem is not None and "does not replay" in problem
    malformed = make_entry(
        world.requester,
        kind="task.posted",
        seq=world.ledger.next_seq(world.requester.did),
        at=world.clock(),
        subject="task-not-a-spec",
        body={"task_id": "task-not-a-spec", "spec": {"title": 3}},
    )
    world.ledger.append_entries([malformed])
    assert "task-not-a-spec" not in [t.task_id for t in world.market.tasks()]


def test_a_hand_edited_view_fools_neither_the_replay_nor_the_audit(
    world: World, escrow_chain: MemoryEscrowChain
) -> None:
    store = world.ledger.store
    awarded = world.ids[0]
    anchors = MemoryAnchorChain()
    report = audit_task(store, awarded, anchors=anchors, escrow=escrow_chain).to_json()
    with store.engine.begin() as connection:
        connection.execute(
            update(TASKS).where(TASKS.c.subject == awarded).values(winner="did:key:zThief")
        )
    assert world.market.list_tasks(state="awarded").tasks[0].winner == "did:key:zThief"
    assert world.market.task(awarded).winner != "did:key:zThief"
    again = audit_task(store, awarded, anchors=anchors, escrow=escrow_chain).to_json()
    assert again == report
    store.reindex()
    assert world.market.list_tasks(state="awarded").tasks[0] == world.market.task(awarded)


def test_a_listed_task_is_its_row_now_not_the_row_it_was(
    world: World, make_bidder: MakeBidder
) -> None:
    """The lists build a Task once per distinct row (`views.listed_task`): a task that moves
    on, or a row edited in place, is listed as it is now, and the same row the same again."""
    market, youngest = world.market, world.ids[-1]
    before = listed(market, requester=world.requester.did)
    assert listed(market, requester=world.requester.did) == before
    assert market.list_tasks(state="bidding").tasks[-1].task_id == youngest
    _, bea = make_bidder("bea")
    market.commit(sealed.commit_bid(bea, youngest, 200, SALT_A))
    to_reveal(world.clock, market.task(youngest))
    market.reveal(sealed.reveal_bid(bea, youngest, 200, SALT_A))
    to_award(world.clock, market.task(youngest))
    market.award(youngest)
    after = listed(market, requester=world.requester.did)
    assert after == replayed(world, requester=world.requester.did) != before
    assert [t.task_id for t in after] == [t.task_id for t in before]
    assert market.list_tasks(state="awarded").tasks[-1] == market.task(youngest)
    with world.ledger.store.engine.begin() as connection:
        connection.execute(update(TASKS).where(TASKS.c.task_id == youngest).values(price="7"))
    assert market.list_tasks(state="awarded").tasks[-1].price == 7


@pytest.mark.parametrize(
    ("filters", "parameter"),
    [
        ({"state": "open"}, "state"),
        ({"capability": "Not A Name"}, "capability"),
        ({"requester": "x" * 201}, "requester"),
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": encode_cursor("agents", "12")}, "cursor"),
        ({"cursor": encode_cursor("tasks", "twelve")}, "cursor"),
    ],
)
def test_a_bad_filter_limit_or_cursor_names_itself(
    market: Market, filters: dict[str, object], parameter: str
) -> None:
    with pytest.raises(QueryError) as caught:
        market.list_tasks(**filters)  # type: ignore[arg-type]
    assert caught.value.parameter == parameter


def test_the_credential_and_reputation_views_answer_as_the_log(world: World) -> None:
    """On each backend: who holds a valid credential is who `Market.eligible` admits, and
    each agent's track record from the view is the fold of the log (`track_records_from_log`)."""
    market = world.market
    agents = market.onboarding.registry.list()
    dids = [agent.did for agent in agents]
    holders = market.credentialed("arithmetic")
    assert holders == sorted(d for d in dids if market.eligible(d, ["arithmetic"]))
    assert len(holders) == 1
    assert held_capabilities(market, dids) == {
        d: (["arithmetic"] if d in holders else []) for d in dids
    }
    assert market.indexed_track_records(dids) == market.track_records()


def test_the_bid_view_shows_what_the_bid_book_holds(world: World, make_bidder: MakeBidder) -> None:
    """Sealed while committed, priced once revealed, in commit order: the view equals the
    bids as the log's bid book folds them (`Market.commitments` and `Market.reveals`)."""
    market = world.market
    task_id = world.ids[-1]
    for name, price in (("bea", 400), ("cal", 500)):
        _, signer = make_bidder(name)
        market.commit(sealed.commit_bid(signer, task_id, price, SALT_A))
    for checked in (task_id, world.ids[0], world.ids[1]):
        revealed = {shown.reveal.bidder: shown.reveal.price for shown in market.reveals(checked)}
        expected = [
            (
                c.commitment.bidder,
                c.index,
                c.commitment.digest.hex(),
                revealed.get(c.commitment.bidder),
            )
            for c in market.commitments(checked)
        ]
        shown = [(b.bidder, b.committed_index, b.commitment, b.price) for b in market.bids(checked)]
        assert shown == expected
        assert all(b.revealed == (b.price is not None) for b in market.bids(checked))
    assert [b.price for b in market.bids(task_id)] == [None, None]
    assert market.bids(world.ids[0])[0].price == 300


def last_change(world: World, task_id: str) -> datetime:
    found = world.ledger.store.find(subject=task_id, kinds=LIFECYCLE_KINDS, limit=100)
    return max(parse_time(Entry.from_bytes(stored.data).event.at) for stored in found)


@pytest.mark.parametrize("states", [None, {"bidding"}, {"settled", "refunded", "awarded"}])
def test_tasks_by_change_pages_as_sorting_every_replay(
    world: World, states: set[str] | None
) -> None:
    """A2A's ListTasks order: newest lifecycle entry first, then task id; keyset pages of 2
    followed to the end give every matching task once, with the time of its last entry."""
    every = [world.market.task(task_id) for task_id in world.ids]
    expected = sorted(
        (
            (task.task_id, last_change(world, task.task_id))
            for task in every
            if states is None or task.state in states
        ),
        key=lambda pair: (pair[1], pair[0]),
        reverse=True,
    )
    found: list[tuple[str, datetime]] = []
    before = None
    while True:
        with reading(world.ledger.store, VIEW_NAME) as connection:
            page = tasks_by_change(
                connection, states=states, changed_after=None, before=before, size=2
            )
        assert page.total == len(expected)
        found += [(task.task_id, changed) for task, changed in page.tasks]
        if len(page.tasks) < 2:
            break
        before = (found[-1][1], found[-1][0])
    assert found == expected and expected
    newest = expected[0][1]
    with reading(world.ledger.store, VIEW_NAME) as connection:
        later = tasks_by_change(
            connection, states=states, changed_after=newest, before=None, size=9
        )
    assert later.total == 0 and later.tasks == ()


def test_a_failing_view_table_is_a_store_error_naming_the_view(world: World) -> None:
    """The task list runs its page on the driver's connection: a database failure is a
    StoreError naming the view, with the driver's reason and not SQLAlchemy's statement dump."""
    store = world.ledger.store
    with store.engine.begin() as connection:
        connection.exec_driver_sql(f"ALTER TABLE {TASKS.name} RENAME TO {TASKS.name}_gone")
    with pytest.raises(StoreError, match=f"cannot read the {VIEW_NAME} view") as caught:
        world.market.list_tasks(state="bidding")
    assert "[SQL:" not in str(caught.value)


def held_capabilities(market: Market, dids: list[str]) -> dict[str, list[str]]:
    """What each DID holds a valid, unrevoked credential for now, from the credential view."""
    with reading(market.ledger.store, CREDENTIAL_VIEW) as connection:
        return capabilities_of(connection, dids, market.clock())
