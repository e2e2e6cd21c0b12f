"""When the chain forgets, and when several processes settle at once — on a real anvil.

anvil is SIGKILLed right after a confirmed anchor or a confirmed settle and restarted from the
state it had dumped before that transaction (a copy taken just before it, so the loss does not
depend on the dump timer): the next start reconciles, and the log verifies, the task audits and
every payee is credited exactly once. Four OS processes settle one delivered task at once, on
SQLite and on PostgreSQL: one `settlement.computed`, one `task.settled`, one payment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accord.audit.checks import audit_task
from accord.ledger.devnet import Devnet, find_free_port
from accord.ledger.events import Entry
from accord.ledger.settings import Settings
from accord.ledger.verify import verify_log
from accord.ledger.wiring import connect_chain, devnet_for, open_ledger, operator_signer
from accord.market.settlement import SETTLEMENT_COMPUTED, settle_task
from accord.market.tasks import TASK_SETTLED
from accord.market.wiring import open_market
from tests.integration.anvil_world import anvil_settings, build_anvil_world, settings_env
from tests.ledger.conftest import postgres_schema_url

REPO = Path(__file__).resolve().parents[2]
SETTLERS = 4


@pytest.fixture
def settings(tmp_path: Path) -> Iterator[Settings]:
    """Settings of a fresh home whose managed devnet is always stopped afterwards."""
    settings = anvil_settings(tmp_path / "home", find_free_port())
    yield settings
    devnet_for(settings).down()


def kill_and_restart_from(net: Devnet, saved_state: bytes) -> None:
    """SIGKILL anvil (no dump on the way out) and start it from `saved_state`."""
    pid = int(net.pid_file.read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while net.status().running and time.monotonic() < deadline:
        time.sleep(0.05)
    net.state_file.write_bytes(saved_state)
    net.up()


def saved_state(net: Devnet) -> bytes:
    assert net.dump_state()
    return net.state_file.read_bytes()


def logged(store: object, kind: str, subject: str) -> list[int]:
    return [e.index for e in store.find(kind=kind, subject=subject, limit=100)]  # type: ignore[attr-defined]


@pytest.mark.devnet
def test_a_clean_down_never_loses_a_block(settings: Settings) -> None:
    net = devnet_for(settings)
    info = net.up()
    from accord.ledger.devnet import rpc_call

    for _ in range(3):
        for _ in range(4):
            rpc_call(info.rpc_url, "evm_mine")
        before = rpc_call(info.rpc_url, "eth_blockNumber")
        net.down()  # at once: no periodic dump in between
        net.up()
        assert rpc_call(info.rpc_url, "eth_blockNumber") == before


@pytest.mark.devnet
def test_an_anchor_the_chain_forgot_is_anchored_again(settings: Settings) -> None:
    chain = connect_chain(settings)
    ledger = open_ledger(settings, chain)
    for n in range(5):
        ledger.append(ledger.operator, "note.added", body={"n": n})
    net = devnet_for(settings)
    before = saved_state(net)
    assert ledger.anchorer is not None
    outcome = ledger.anchorer.anchor_latest()
    assert outcome.status == "confirmed"
    kill_and_restart_from(net, before)

    store, operator = ledger.store, operator_signer(settings)
    chain = connect_chain(settings)
    assert chain.latest_size(settings.log_id) == 0  # the chain forgot it
    failed = verify_log(store, operator.did, chain).first_failure
    assert failed is not None and failed.number == 5

    again = open_ledger(settings, chain)  # the next `accord ledger anchor`
    assert again.anchorer is not None
    assert again.anchorer.anchor_latest().status == "confirmed"
    assert chain.root_at(settings.log_id, 5) == outcome.root
    assert verify_log(store, operator.did, chain).ok
    assert again.anchorer.anchor_latest().status == "already-anchored"
    assert len(chain.anchors(settings.log_id)) == 1


@pytest.mark.devnet
def test_a_settlement_the_chain_forgot_is_paid_again_exactly_once(settings: Settings) -> None:
    world = build_anvil_world(settings, until="delivered")
    net = devnet_for(settings)
    before = saved_state(net)
    outcome = settle_task(world.market, world.onboarding, world.task_id)
    assert world.escrow.deposit_of(world.task_id) == (
        world.market.task(world.task_id).spec.budget,
        False,
    )
    kill_and_restart_from(net, before)
    assert world.escrow.deposit_of(world.task_id) is not None
    assert world.escrow.deposit_of(world.task_id)[1] is True  # type: ignore[index]  # Open again

    context = open_market(settings)  # the next start reconciles with the chain
    market, escrow = context.market, context.escrow
    assert escrow.deposit_of(world.task_id)[1] is False  # type: ignore[index]
    again = settle_task(market, context.onboarding, world.task_id)
    assert again.already and again.payouts == outcome.payouts
    for did, payout in outcome.payouts.items():
        assert escrow.credit(outcome.payees[did]) == payout  # paid once, not twice
    settled = [e for e in escrow.chain.events(world.task_id) if e.name == "Settled"]
    assert len(settled) == 1

    store, operator = market.ledger.store, operator_signer(settings)
    anchors = connect_chain(settings)
    assert market.ledger.anchorer is not None
    market.ledger.anchorer.anchor_latest()
    assert verify_log(store, operator.did, anchors).ok
    report = audit_task(store, world.task_id, anchors=anchors, escrow=escrow.chain)
    assert report.ok, report.first_failure
    assert len(logged(store, SETTLEMENT_COMPUTED, world.task_id)) == 1
    assert len(logged(store, TASK_SETTLED, world.task_id)) == 1


# -- several processes settling one task ------------------------------------------------------

SETTLER = """
import faulthandler, json, os, signal, sys, time, traceback
from pathlib import Path
from accord.ledger.settings import Settings
from accord.market.wiring import open_market
from accord.market.settlement import settle_task

task_id, barrier, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])


def settle(me: int) -> None:
    faulthandler.dump_traceback_later(180, exit=True)  # a hang ends with where each thread was
    context = open_market(Settings.from_env())
    (barrier / str(me)).touch()
    while len(list(barrier.iterdir())) < count:
        time.sleep(0.01)
    outcome = settle_task(context.market, context.onboarding, task_id)
    payouts = {k: str(v) for k, v in outcome.payouts.items()}
    answer = {"already": outcome.already, "payouts": payouts}
    os.write(1, f"settler {me}: {json.dumps(answer)}\\n".encode())  # one write: lines never mix


children = {}
for me in range(count):
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            settle(me)
        except BaseException:
            os.write(2, f"settler {me} failed:\\n{traceback.format_exc()}".encode())
            code = 1
        os._exit(code)
    children[pid] = me
failed = False
while children:
    pid, status = os.wait()
    me = children.pop(pid)
    if os.waitstatus_to_exitcode(status) != 0 and not failed:
        failed = True  # the others wait at the barrier for it, or settle no more: stop them
        print(f"settler {me} exited {os.waitstatus_to_exitcode(status)}", file=sys.stderr)
        for other in children:
            os.kill(other, signal.SIGKILL)
sys.exit(1 if failed else 0)
"""
"""The settlers: one Python process imports accord's market once, then forks SETTLERS
children, each of which opens the market on its own (its own database connections and chain
client), waits at the barrier with the others and settles. Each child is an OS process of its
own settling at the same moment as the rest, as four `python -c` processes were, without
paying the imports (2.7 s of CPU) four times. The parent reports the first child that fails
and kills the others, which would otherwise wait at the barrier for it."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
        return
    with postgres_schema_url() as url:
        yield url


def _settled(process: subprocess.Popen[str], timeout_s: float = 240) -> list[dict[str, Any]]:
    """Each settler's answer once the settlers' process exited 0. A settler that fails is
    reported with its traceback (its parent stops the others at once): one that died before
    the barrier must not look like the others hanging. A hang kills the process group (the
    parent and its forks)."""
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"the settlers hung, killed: {err[-3000:]}")
    assert process.returncode == 0, f"a settler failed: {err[-3000:]}"
    lines = [line.split(": ", 1) for line in out.splitlines() if line.startswith("settler ")]
    assert sorted(who for who, _ in lines) == [f"settler {n}" for n in range(SETTLERS)], out
    return [json.loads(answer) for _, answer in lines]


@pytest.mark.devnet
def test_four_processes_settle_one_task_once(tmp_path: Path, shared_db: str | None) -> None:
    settings = anvil_settings(tmp_path / "home", find_free_port(), shared_db)
    engines = []
    try:
        world = build_anvil_world(settings, until="delivered")
        engines.append(world.ledger.store.engine)
        barrier = tmp_path / "barrier"
        barrier.mkdir()
        env = {**os.environ, **settings_env(settings), "PYTHONPATH": str(REPO)}
        settlers = subprocess.Popen(
            [sys.executable, "-c", SETTLER, world.task_id, str(barrier), str(SETTLERS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: a hang kills it with its forks
        )
        answers = _settled(settlers)
        assert len({json.dumps(a["payouts"], sort_keys=True) for a in answers}) == 1
        assert [a["already"] for a in answers].count(False) >= 1

        context = open_market(settings)
        store, escrow = context.market.ledger.store, context.escrow
        engines.append(store.engine)
        assert len(logged(store, SETTLEMENT_COMPUTED, world.task_id)) == 1
        assert len(logged(store, TASK_SETTLED, world.task_id)) == 1
        settled = [e for e in escrow.chain.events(world.task_id) if e.name == "Settled"]
        assert len(settled) == 1
        body = Entry.from_bytes(
            store.find(kind=SETTLEMENT_COMPUTED, subject=world.task_id)[0].data
        ).event.body
        for did, payout in body["payouts"].items():
            if int(payout) > 0:
                assert escrow.credit(body["payees"][did]) == int(payout)
        task = context.market.task(world.task_id)  # the market still replays
        assert task.state == "settled" and task.duplicates == ()
        assert [t.task_id for t in context.market.tasks()] == [world.task_id]
    finally:
        for engine in engines:
            engine.dispose()
        devnet_for(settings).down()
