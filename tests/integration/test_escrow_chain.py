"""TaskEscrow on a real anvil: every function, every revert, and a state-machine test of random
open/settle/refund/withdraw sequences with crashes between recording and recording the outcome.

One anvil (on a free 127.0.0.1 port in a tmp dir, always stopped) and one deployment serve the
whole module; every test uses fresh task ids and compares balances and credits as deltas.
`run_state_machine` is also run on MemoryEscrowChain by tests/market/test_escrow.py.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from eth_account import Account
from hexbytes import HexBytes
from web3 import Web3

from accord.ledger.chain import DEVNET_OPERATOR_KEY, eip1559_fees, make_web3
from accord.ledger.devnet import Devnet, DevnetInfo, find_free_port
from accord.ledger.errors import DeploymentError
from accord.market.errors import EscrowError
from accord.market.escrow import (
    EscrowActions,
    EscrowChain,
    EscrowDeployment,
    EscrowIntent,
    EscrowOutcome,
    EscrowRefusedError,
    EscrowState,
    MemoryEscrowJournal,
    Web3EscrowChain,
    address_of,
    answer_intent,
    bond_intent,
    deploy_escrow,
    ensure_escrow,
    open_intent,
    pay_out_intent,
    reclaim_intent,
    refund_intent,
    release_intent,
    task_id_hash,
    withdraw_intent,
)

# anvil's default accounts 1-4 (account 0 is the operator).
KEYS = [
    DEVNET_OPERATOR_KEY,
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
]
OPERATOR, REQUESTER, OTHER, PAYEE_A, PAYEE_B = KEYS
ADDR = [address_of(k) for k in KEYS]
REQUESTER_ADDR = ADDR[1]
DEADLINE_AHEAD = 1_000
STATE_MACHINE_RUNS = 200
STATE_MACHINE_SHARDS = 4
"""The state machine's runs are split into this many tests (each with its own histories)."""
_ids = itertools.count()


def fresh_task() -> str:
    return f"task-{time.time_ns()}-{next(_ids)}"


# -- fixtures ----------------------------------------------------------------------------


@dataclass
class Anvil:
    info: DevnetInfo
    home: Path
    deployment: EscrowDeployment
    w3: Web3

    @property
    def chain(self) -> Web3EscrowChain:
        return Web3EscrowChain(self.info.rpc_url, self.deployment.address)

    def now(self) -> int:
        return int(self.w3.eth.get_block("latest")["timestamp"])

    def pass_time(self, seconds: int = 2 * DEADLINE_AHEAD) -> None:
        self.w3.provider.make_request("evm_increaseTime", [seconds])  # type: ignore[arg-type]
        self.w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]

    def steal_nonce(self, key: str, nonce: int) -> None:
        """Mine a plain self-transfer at `nonce`, as another program holding the key would."""
        account = Account.from_key(key)
        max_fee, tip = eip1559_fees(self.w3)
        signed = account.sign_transaction(
            {
                "to": account.address,
                "value": 0,
                "gas": 21_000,
                "nonce": nonce,
                "chainId": 31337,
                "maxFeePerGas": max_fee,
                "maxPriorityFeePerGas": tip,
            }
        )
        self.w3.eth.send_raw_transaction(signed.raw_transaction)
        self.w3.eth.wait_for_transaction_receipt(signed.hash, timeout=5)


@pytest.fixture(scope="module")
def anvil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Anvil]:
    home = tmp_path_factory.mktemp("escrow")
    net = Devnet(home / "devnet", find_free_port())
    info = net.up()
    try:
        deployment = ensure_escrow(info.rpc_url, OPERATOR, home / "escrow.json")
        yield Anvil(info, home, deployment, make_web3(info.rpc_url))
    finally:
        net.down()


def act(chain: EscrowChain, key: str, intent: EscrowIntent) -> int:
    """Sign, send and wait; returns the gas used (the transaction must succeed)."""
    tx = chain.build_tx(key, intent)
    chain.broadcast(tx)
    receipt = chain.wait_for_receipt(tx.tx_hash, 5)
    assert receipt is not None and receipt.status_ok
    return receipt.gas_used


def refused(chain: EscrowChain, key: str, intent: EscrowIntent) -> EscrowRefusedError:
    with pytest.raises(EscrowRefusedError) as caught:
        chain.build_tx(key, intent)
    assert isinstance(caught.value, EscrowError)
    return caught.value


# -- deployment --------------------------------------------------------------------------


@pytest.mark.devnet
def test_ensure_escrow_reuses_the_recorded_deployment(anvil: Anvil) -> None:
    path = anvil.home / "escrow.json"
    again = ensure_escrow(anvil.info.rpc_url, OPERATOR, path)
    assert again == anvil.deployment and again.action == "reused"
    assert '"contract": "TaskEscrow"' in path.read_text()
    assert anvil.chain.operator() == ADDR[0]
    with pytest.raises(DeploymentError):
        ensure_escrow(anvil.info.rpc_url, OTHER, path)  # another operator's escrow
    other = deploy_escrow(anvil.info.rpc_url, OTHER)
    assert Web3EscrowChain(anvil.info.rpc_url, other).operator() == ADDR[2]


# -- each function -----------------------------------------------------------------------


@pytest.mark.devnet
def test_open_settle_withdraw_and_refund(anvil: Anvil, capsys: pytest.CaptureFixture[str]) -> None:
    chain = anvil.chain
    task, other_task = fresh_task(), fresh_task()
    start_block = anvil.w3.eth.block_number + 1
    balance0 = chain.balance()
    credits0 = {a: chain.credit(a) for a in ADDR}
    deadline = anvil.now() + DEADLINE_AHEAD
    assert chain.escrow(task) is None

    gas = {"open": act(chain, REQUESTER, open_intent(task, 1_000, deadline))}
    record = chain.escrow(task)
    assert record is not None
    assert (record.requester, record.deposit, record.deadline, record.state) == (
        ADDR[1],
        1_000,
        deadline,
        EscrowState.OPEN,
    )
    assert record.task_id_hash == task_id_hash(task) == bytes(Web3.keccak(text=task))
    assert chain.balance() == balance0 + 1_000

    gas["settle"] = act(chain, OPERATOR, pay_out_intent(task, [ADDR[3], ADDR[4]], [600, 300]))
    record = chain.escrow(task)
    assert record is not None and record.state == EscrowState.SETTLED
    assert chain.credit(ADDR[3]) == credits0[ADDR[3]] + 600
    assert chain.credit(ADDR[4]) == credits0[ADDR[4]] + 300
    assert chain.credit(ADDR[1]) == credits0[ADDR[1]] + 100  # the remainder

    payee = Web3.to_checksum_address(ADDR[3])
    before = anvil.w3.eth.get_balance(payee)
    tx = chain.build_tx(PAYEE_A, withdraw_intent())
    chain.broadcast(tx)
    receipt = chain.wait_for_receipt(tx.tx_hash, 5)
    assert receipt is not None and receipt.status_ok
    gas["withdraw"] = receipt.gas_used
    mined = anvil.w3.eth.get_transaction_receipt(HexBytes(tx.tx_hash))
    fee = mined["gasUsed"] * mined["effectiveGasPrice"]
    assert anvil.w3.eth.get_balance(payee) == before + credits0[ADDR[3]] + 600 - fee
    assert chain.credit(ADDR[3]) == 0

    act(chain, REQUESTER, open_intent(other_task, 500, anvil.now() + DEADLINE_AHEAD))
    anvil.pass_time()
    gas["refund"] = act(chain, REQUESTER, refund_intent(other_task))
    assert chain.credit(ADDR[1]) == credits0[ADDR[1]] + 100 + 500
    refunded = chain.escrow(other_task)
    assert refunded is not None and refunded.state == EscrowState.REFUNDED

    events = chain.events(from_block=start_block)
    assert [e.name for e in events] == ["Opened", "Settled", "Withdrawn", "Opened", "Refunded"]
    opened, settled, withdrawn, _, refund = events
    assert (opened.account, opened.amount, opened.deadline) == (ADDR[1], 1_000, deadline)
    assert settled.payees == (ADDR[3], ADDR[4]) and settled.amounts == (600, 300)
    assert settled.amount == 100 and settled.task_id_hash == task_id_hash(task)
    assert (withdrawn.account, withdrawn.amount) == (ADDR[3], credits0[ADDR[3]] + 600)
    assert (refund.account, refund.amount) == (ADDR[1], 500)
    assert [e.name for e in chain.events(task)] == ["Opened", "Settled"]
    with capsys.disabled():
        print(f"\nTaskEscrow gas used: {gas}")
    assert all(21_000 < used < 150_000 for used in gas.values())


@pytest.mark.devnet
def test_a_payout_to_the_escrow_itself_is_held_under_the_task_until_released(
    anvil: Anvil,
) -> None:
    """A settlement that cannot pay a payee (it bound no payout account) pays the escrow's own
    address: the contract holds it under the task, credited to nobody (the requester's
    remainder leaves it out); only the operator releases it, at most what the task holds,
    journalled so that a second release of the same share is already done."""
    chain = anvil.chain
    escrow_address = anvil.deployment.address
    task = fresh_task()
    before = {a: chain.credit(a) for a in (REQUESTER_ADDR, ADDR[3], ADDR[4], escrow_address)}
    balance = chain.balance()
    act(chain, REQUESTER, open_intent(task, 1_000, anvil.now() + DEADLINE_AHEAD))
    act(chain, OPERATOR, pay_out_intent(task, [ADDR[3], escrow_address], [600, 300]))
    assert chain.held(task) == 300
    assert chain.credit(escrow_address) == before[escrow_address] == 0
    assert chain.credit(ADDR[3]) == before[ADDR[3]] + 600
    assert chain.credit(REQUESTER_ADDR) == before[REQUESTER_ADDR] + 100
    assert chain.balance() == balance + 1_000  # held, not paid out

    assert refused(chain, OTHER, release_intent(task, ADDR[4], 300)).reason == "NotOperator"
    over = refused(chain, OPERATOR, release_intent(task, ADDR[4], 301))
    assert over.reason == "OverHeld" and over.reason_args == (301, 300)
    for payee in (escrow_address, "0x" + "00" * 20):
        assert refused(chain, OPERATOR, release_intent(task, payee, 1)).reason == "ZeroPayee"

    actions = EscrowActions(chain, MemoryEscrowJournal(), receipt_timeout=5)
    first = actions.release(OPERATOR, task, ADDR[4], 300)
    assert first.status == "confirmed"
    assert chain.held(task) == 0 and chain.credit(ADDR[4]) == before[ADDR[4]] + 300
    assert actions.release(OPERATOR, task, ADDR[4], 300).status == "already-done"
    assert chain.credit(ADDR[4]) == before[ADDR[4]] + 300
    [released] = [e for e in chain.events(task) if e.name == "Released"]
    assert (released.account, released.amount, released.task_id_hash) == (
        ADDR[4],
        300,
        task_id_hash(task),
    )
    assert released.tx_hash == first.tx_hash


@pytest.mark.devnet
def test_a_held_share_is_released_once_per_owner_whatever_address_it_names(anvil: Anvil) -> None:
    """A release is keyed by whose share it is: made for an owner and not yet logged (a crash
    between), then asked again after the owner bound another address, it is the first release,
    not a second; two owners who share one payout address and amount are each released."""
    chain = anvil.chain
    escrow_address = anvil.deployment.address
    task = fresh_task()
    before = {a: chain.credit(a) for a in (ADDR[3], ADDR[4])}
    act(chain, REQUESTER, open_intent(task, 1_000, anvil.now() + DEADLINE_AHEAD))
    act(chain, OPERATOR, pay_out_intent(task, [escrow_address] * 3, [300, 300, 400]))
    assert chain.held(task) == 1_000

    actions = EscrowActions(chain, MemoryEscrowJournal(), receipt_timeout=5)
    first = actions.release(OPERATOR, task, ADDR[3], 400, owner="did:key:zCarol")
    assert first.status == "confirmed"
    rebound = actions.release(OPERATOR, task, ADDR[4], 400, owner="did:key:zCarol")
    assert rebound.status == "already-done" and rebound.tx_hash == first.tx_hash
    assert rebound.intent.payees == (ADDR[3],)  # the address the share went to
    assert chain.credit(ADDR[4]) == before[ADDR[4]]

    for owner in ("did:key:zAda", "did:key:zBob"):  # one address, one amount, two shares
        assert actions.release(OPERATOR, task, ADDR[4], 300, owner=owner).status == "confirmed"
    assert chain.held(task) == 0
    assert chain.credit(ADDR[3]) == before[ADDR[3]] + 400
    assert chain.credit(ADDR[4]) == before[ADDR[4]] + 600
    assert actions.find_forgotten() == []  # each share's record finds its own event


@pytest.mark.devnet
def test_a_requester_bonds_from_its_own_account_and_the_bond_is_paid_out_with_the_deposit(
    anvil: Anvil, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lone bidder's price is the whole deposit: the requester's bond, from its own account,
    is what pays a dispute's panel. Only the requester bonds, each bond names the total it
    brings the task's bonds to (a bond sent twice reverts), a settlement pays out deposit and
    bond together (the rest to the requester), and a refund returns both."""
    chain = anvil.chain
    task, lone = fresh_task(), fresh_task()
    deadline = anvil.now() + DEADLINE_AHEAD
    before = {a: chain.credit(a) for a in (REQUESTER_ADDR, ADDR[3], ADDR[4])}
    balance = chain.balance()
    act(chain, REQUESTER, open_intent(task, 1_000, deadline))
    assert refused(chain, OTHER, bond_intent(task, 50, 50)).reason == "NotRequester"
    gas = act(chain, REQUESTER, bond_intent(task, 50, 50))
    mismatch = refused(chain, REQUESTER, bond_intent(task, 50, 50))
    assert mismatch.reason == "BondMismatch" and mismatch.reason_args == (50, 100)
    assert chain.bonded(task) == 50 and chain.balance() == balance + 1_050
    [bonded] = [e for e in chain.events(task) if e.name == "Bonded"]
    assert (bonded.account, bonded.amount, bonded.amounts) == (REQUESTER_ADDR, 50, (50,))
    over = refused(chain, OPERATOR, pay_out_intent(task, [ADDR[3]], [1_051]))
    assert over.reason == "OverDeposit" and over.reason_args == (1_051, 1_050)
    # the team is paid the whole budget, the panel (two seats) from the bond, 10 wei back
    act(chain, OPERATOR, pay_out_intent(task, [ADDR[3], ADDR[4]], [1_000, 40]))
    assert chain.credit(ADDR[3]) == before[ADDR[3]] + 1_000
    assert chain.credit(ADDR[4]) == before[ADDR[4]] + 40
    assert chain.credit(REQUESTER_ADDR) == before[REQUESTER_ADDR] + 10
    assert chain.bonded(task) == 0
    assert refused(chain, REQUESTER, bond_intent(task, 1, 1)).reason == "NotOpen"

    actions = EscrowActions(chain, MemoryEscrowJournal(), receipt_timeout=5)
    act(chain, REQUESTER, open_intent(lone, 500, anvil.now() + 5))
    assert actions.bond(REQUESTER, lone, 25, 25).status == "confirmed"
    assert actions.bond(REQUESTER, lone, 25, 25).status == "already-done"
    assert chain.bonded(lone) == 25
    anvil.pass_time(10)
    credit = chain.credit(REQUESTER_ADDR)
    act(chain, REQUESTER, refund_intent(lone))
    assert chain.credit(REQUESTER_ADDR) == credit + 525
    [refunded] = [e for e in chain.events(lone) if e.name == "Refunded"]
    assert refunded.amount == 525
    with capsys.disabled():
        print(f"\nTaskEscrow.bond gas used: {gas}")
    assert 21_000 < gas < 100_000


@pytest.mark.devnet
def test_a_team_answers_a_dispute_from_its_own_account_and_only_payees_take_its_answer(
    anvil: Anvil, capsys: pytest.CaptureFixture[str]
) -> None:
    """The team's answer to a dispute is a bond of its own: any account but the requester
    answers, each answer names the account's total (sent twice, it reverts), a settlement pays
    deposit, bond and answers together and must name payees for at least the answers (the
    requester's remainder never takes one), and after a refund each account reclaims its own
    answer, once; crash-safe through the journal like every other action."""
    chain = anvil.chain
    task, refunded = fresh_task(), fresh_task()
    leader, member = PAYEE_A, PAYEE_B
    leader_addr, member_addr = ADDR[3], ADDR[4]
    before = {a: chain.credit(a) for a in ADDR}
    balance = chain.balance()
    act(chain, REQUESTER, open_intent(task, 1_000, anvil.now() + DEADLINE_AHEAD))
    act(chain, REQUESTER, bond_intent(task, 60, 60))
    assert refused(chain, REQUESTER, answer_intent(task, 60, 60)).reason == "RequesterAnswer"
    assert refused(chain, leader, answer_intent(fresh_task(), 1, 1)).reason == "NotOpen"
    gas = act(chain, leader, answer_intent(task, 60, 60))
    twice = refused(chain, leader, answer_intent(task, 60, 60))
    assert twice.reason == "BondMismatch" and twice.reason_args == (60, 120)
    act(chain, member, answer_intent(task, 5, 5))
    assert (chain.answered(task, leader_addr), chain.answered(task, member_addr)) == (60, 5)
    assert chain.answers(task) == 65 and chain.balance() == balance + 1_125
    answered = [
        (e.account, e.amount, e.amounts) for e in chain.events(task) if e.name == "Answered"
    ]
    assert answered == [(leader_addr, 60, (60,)), (member_addr, 5, (5,))]
    # a settlement paying less than the answers would hand the rest of them to the requester
    unpaid = refused(chain, OPERATOR, pay_out_intent(task, [ADDR[2]], [64]))
    assert unpaid.reason == "AnswersUnpaid" and unpaid.reason_args == (64, 65)
    over = refused(chain, OPERATOR, pay_out_intent(task, [ADDR[2]], [1_126]))
    assert over.reason == "OverDeposit" and over.reason_args == (1_126, 1_125)
    # the team lost: the panel (ADDR[2]) paid 40 from the leader's answer, the rest of the
    # answers back, the team paid 0; the requester's deposit and bond come back whole
    settle_gas = act(
        chain, OPERATOR, pay_out_intent(task, [ADDR[2], leader_addr, member_addr], [40, 20, 5])
    )
    assert chain.credit(REQUESTER_ADDR) == before[REQUESTER_ADDR] + 1_060
    assert chain.credit(ADDR[2]) == before[ADDR[2]] + 40
    assert chain.credit(leader_addr) == before[leader_addr] + 20
    assert chain.credit(member_addr) == before[member_addr] + 5
    assert chain.answers(task) == 0 and chain.bonded(task) == 0
    assert refused(chain, leader, reclaim_intent(task)).reason == "NothingToReclaim"
    assert refused(chain, leader, answer_intent(task, 1, 61)).reason == "NotOpen"

    # a refunded task: the requester takes its deposit, each answer stays its account's
    actions = EscrowActions(chain, MemoryEscrowJournal(), receipt_timeout=5)
    act(chain, REQUESTER, open_intent(refunded, 300, anvil.now() + 5))
    assert actions.answer(leader, refunded, 30, 30).status == "confirmed"
    assert actions.answer(leader, refunded, 30, 30).status == "already-done"
    open_early = refused(chain, leader, reclaim_intent(refunded))
    assert open_early.reason == "NothingToReclaim"
    anvil.pass_time(10)
    requester_credit, leader_credit = chain.credit(REQUESTER_ADDR), chain.credit(leader_addr)
    act(chain, REQUESTER, refund_intent(refunded))
    assert chain.credit(REQUESTER_ADDR) == requester_credit + 300
    assert refused(chain, member, reclaim_intent(refunded)).reason == "NothingToReclaim"
    record = actions.record(leader, reclaim_intent(refunded))  # then "crash" after sending
    chain.broadcast(record.signed())
    restarted = EscrowActions(chain, actions.journal, receipt_timeout=5)
    [outcome] = restarted.reconcile()
    assert outcome.status == "confirmed" and outcome.tx_hash == record.tx_hash
    assert restarted.reclaim(leader, refunded).status == "already-done"
    assert chain.credit(leader_addr) == leader_credit + 30
    assert chain.answered(refunded, leader_addr) == 0
    assert refused(chain, leader, reclaim_intent(refunded)).reason == "NothingToReclaim"
    assert restarted.find_forgotten() == []
    with capsys.disabled():
        print(f"\nTaskEscrow.answer gas used: {gas}; settle with answers, 3 payees: {settle_gas}")
    assert 21_000 < gas < 100_000


@pytest.mark.devnet
def test_every_revert_has_its_custom_error(anvil: Anvil) -> None:
    chain = anvil.chain
    task = fresh_task()
    deadline = anvil.now() + DEADLINE_AHEAD
    assert refused(chain, REQUESTER, open_intent(task, 0, deadline)).reason == "ZeroDeposit"
    late = refused(chain, REQUESTER, open_intent(task, 10, anvil.now() - 1))
    assert late.reason == "DeadlineNotInFuture"
    act(chain, REQUESTER, open_intent(task, 1_000, deadline))
    double = refused(chain, OTHER, open_intent(task, 5, deadline))
    assert double.reason == "AlreadyOpened" and double.reason_args == (task_id_hash(task),)
    assert refused(chain, OTHER, pay_out_intent(task, [], [])).reason == "NotOperator"
    assert refused(chain, REQUESTER, pay_out_intent(task, [], [])).reason == "NotOperator"
    over = refused(chain, OPERATOR, pay_out_intent(task, [ADDR[3], ADDR[4]], [600, 401]))
    assert over.reason == "OverDeposit" and over.reason_args == (1_001, 1_000)
    mismatch = refused(chain, OPERATOR, EscrowIntent("settle", task, payees=(ADDR[3],)))
    assert mismatch.reason == "LengthMismatch"
    zero = "0x0000000000000000000000000000000000000000"
    assert refused(chain, OPERATOR, pay_out_intent(task, [zero], [1])).reason == "ZeroPayee"
    early = refused(chain, REQUESTER, refund_intent(task))
    assert early.reason == "DeadlineNotReached"
    anvil.pass_time()
    assert refused(chain, OTHER, refund_intent(task)).reason == "NotRequester"
    act(chain, REQUESTER, refund_intent(task))
    twice = refused(chain, REQUESTER, refund_intent(task))
    assert twice.reason == "NotOpen" and twice.reason_args == (task_id_hash(task), 3)
    assert refused(chain, OPERATOR, pay_out_intent(task, [], [])).reason == "NotOpen"

    settled = fresh_task()
    act(chain, REQUESTER, open_intent(settled, 100, anvil.now() + DEADLINE_AHEAD))
    act(chain, OPERATOR, pay_out_intent(settled, [ADDR[4]], [100]))
    again = refused(chain, OPERATOR, pay_out_intent(settled, [ADDR[4]], [1]))
    assert again.reason == "NotOpen" and again.reason_args == (task_id_hash(settled), 2)
    anvil.pass_time()
    assert refused(chain, REQUESTER, refund_intent(settled)).reason == "NotOpen"
    assert refused(chain, REQUESTER, refund_intent(fresh_task())).reason == "NotOpen"

    act(chain, PAYEE_B, withdraw_intent())
    assert refused(chain, PAYEE_B, withdraw_intent()).reason == "NothingToWithdraw"


@pytest.mark.devnet
def test_a_mined_revert_is_reconciled_as_reverted(anvil: Anvil) -> None:
    chain = anvil.chain
    task = fresh_task()
    actions = EscrowActions(chain, MemoryEscrowJournal(), receipt_timeout=5)
    assert actions.open(REQUESTER, task, 100, anvil.now() + DEADLINE_AHEAD).status == "confirmed"
    credit_b = chain.credit(ADDR[4])
    first = actions.record(OPERATOR, pay_out_intent(task, [ADDR[3]], [10]))
    # A second settle signed while the first is unmined passes the estimate, reverts when mined.
    nonce = chain.account_nonce(ADDR[0], latest=False) + 1
    second = chain.build_tx(OPERATOR, pay_out_intent(task, [ADDR[4]], [20]), nonce=nonce)
    assert actions.send(first).status == "confirmed"
    chain.broadcast(second)
    receipt = chain.wait_for_receipt(second.tx_hash, 5)
    assert receipt is not None and not receipt.status_ok
    assert chain.credit(ADDR[4]) == credit_b  # unchanged by the revert
    [event] = [e for e in chain.events(task) if e.name == "Settled"]
    assert event.payees == (ADDR[3],)


# -- crashes -----------------------------------------------------------------------------


@pytest.mark.devnet
@pytest.mark.parametrize("crash", ["after-record", "after-broadcast"])
def test_a_crash_is_reconciled_without_paying_twice(anvil: Anvil, crash: str) -> None:
    chain = anvil.chain
    journal = MemoryEscrowJournal()
    task = fresh_task()
    EscrowActions(chain, journal).open(REQUESTER, task, 700, anvil.now() + DEADLINE_AHEAD)
    credit0 = chain.credit(ADDR[3])
    record = EscrowActions(chain, journal).record(OPERATOR, pay_out_intent(task, [ADDR[3]], [700]))
    if crash == "after-broadcast":
        chain.broadcast(record.signed())
    restarted = EscrowActions(chain, journal)
    [outcome] = restarted.reconcile()
    assert outcome.status == "confirmed" and outcome.tx_hash == record.tx_hash
    again = restarted.pay_out(OPERATOR, task, [ADDR[3]], [700])
    assert again.status == "already-done"
    assert chain.credit(ADDR[3]) == credit0 + 700
    assert [e.name for e in chain.events(task)] == ["Opened", "Settled"]


@pytest.mark.devnet
def test_a_nonce_spent_elsewhere_drops_the_record_then_it_is_signed_again(anvil: Anvil) -> None:
    chain = anvil.chain
    journal = MemoryEscrowJournal()
    task = fresh_task()
    record = EscrowActions(chain, journal).record(
        REQUESTER, open_intent(task, 300, anvil.now() + DEADLINE_AHEAD)
    )
    anvil.steal_nonce(REQUESTER, record.nonce)
    restarted = EscrowActions(chain, journal)
    [dropped] = restarted.reconcile()
    assert dropped.status == "dropped" and chain.escrow(task) is None
    outcome = restarted.perform(REQUESTER, record.intent)
    assert outcome.status == "confirmed" and outcome.tx_hash != record.tx_hash
    assert [r.status for r in journal.records(task)] == ["dropped", "confirmed"]
    assert [e.name for e in chain.events(task)] == ["Opened"]


# -- the state machine -------------------------------------------------------------------


@dataclass
class ModelEscrow:
    requester: str
    deposit: int
    state: EscrowState
    deadline_passed: bool = False


@dataclass
class Harness:
    """What `run_state_machine` needs from a backend."""

    chain: EscrowChain
    pass_time: Callable[[], None]
    steal_nonce: Callable[[str, int], None]
    now: Callable[[], int]
    block_number: Callable[[], int]


@dataclass
class Model:
    tasks: dict[str, ModelEscrow] = field(default_factory=dict)
    credit: dict[str, int] = field(default_factory=dict)
    balance: int = 0
    #: what each account answered for each task (reclaimable after a refund)
    answered: dict[tuple[str, str], int] = field(default_factory=dict)
    #: what every account answered for each open task, in all
    answers: dict[str, int] = field(default_factory=dict)

    def refusal(self, sender: str, intent: EscrowIntent) -> str | None:
        """The custom error the contract must answer with (None: it must accept)."""
        escrow = self.tasks.get(intent.task_id)
        if intent.kind == "open":
            return "AlreadyOpened" if escrow is not None else None
        if intent.kind == "answer":
            if escrow is None or escrow.state != EscrowState.OPEN:
                return "NotOpen"
            if sender == escrow.requester:
                return "RequesterAnswer"
            after = self.answered.get((intent.task_id, sender), 0) + intent.deposit
            return None if after == intent.amounts[0] else "BondMismatch"
        if intent.kind == "reclaim":
            refunded = escrow is not None and escrow.state == EscrowState.REFUNDED
            held = self.answered.get((intent.task_id, sender), 0)
            return None if refunded and held > 0 else "NothingToReclaim"
        if intent.kind == "settle":
            if sender != ADDR[0]:
                return "NotOperator"
            if escrow is None or escrow.state != EscrowState.OPEN:
                return "NotOpen"
            answering = self.answers.get(intent.task_id, 0)
            if sum(intent.amounts) > escrow.deposit + answering:
                return "OverDeposit"
            return "AnswersUnpaid" if sum(intent.amounts) < answering else None
        if intent.kind == "refund":
            if escrow is None or escrow.state != EscrowState.OPEN:
                return "NotOpen"
            if sender != escrow.requester:
                return "NotRequester"
            return None if escrow.deadline_passed else "DeadlineNotReached"
        return None if self.credit[sender] > 0 else "NothingToWithdraw"

    def apply(self, sender: str, intent: EscrowIntent) -> None:
        if intent.kind == "open":
            self.tasks[intent.task_id] = ModelEscrow(sender, intent.deposit, EscrowState.OPEN)
            self.balance += intent.deposit
        elif intent.kind == "answer":
            self.answered[(intent.task_id, sender)] = intent.amounts[0]
            self.answers[intent.task_id] = self.answers.get(intent.task_id, 0) + intent.deposit
            self.balance += intent.deposit
        elif intent.kind == "reclaim":
            self.credit[sender] += self.answered[(intent.task_id, sender)]
            self.answered[(intent.task_id, sender)] = 0
        elif intent.kind == "settle":
            escrow = self.tasks[intent.task_id]
            escrow.state = EscrowState.SETTLED
            pool = escrow.deposit + self.answers.pop(intent.task_id, 0)
            for payee, amount in zip(intent.payees, intent.amounts, strict=True):
                self.credit[payee] += amount
            self.credit[escrow.requester] += pool - sum(intent.amounts)
        elif intent.kind == "refund":
            escrow = self.tasks[intent.task_id]
            escrow.state = EscrowState.REFUNDED
            self.answers.pop(intent.task_id, None)  # each answer stays its account's
            self.credit[sender] += escrow.deposit
        else:
            self.balance -= self.credit[sender]
            self.credit[sender] = 0


def _random_intent(
    rng: random.Random, tasks: list[str], now: int, model: Model
) -> tuple[str, EscrowIntent]:
    kinds = ["open", "open", "settle", "settle", "refund", "withdraw", "answer", "reclaim"]
    kind = rng.choice(kinds)
    task = rng.choice(tasks)
    if kind == "answer":
        key = rng.choice(KEYS[1:])
        amount = rng.randint(1, 200)
        total = model.answered.get((task, address_of(key)), 0) + amount
        if rng.random() < 0.15:
            total += 1  # a stale or wrong total: BondMismatch
        return key, answer_intent(task, amount, total)
    if kind == "reclaim":
        answering = [k for k in KEYS[1:] if model.answered.get((task, address_of(k)), 0) > 0]
        key = rng.choice(answering) if answering and rng.random() < 0.8 else rng.choice(KEYS[1:])
        return key, reclaim_intent(task)
    if kind == "open":
        return rng.choice(KEYS[1:3]), open_intent(task, rng.randint(1, 1_000), now + DEADLINE_AHEAD)
    if kind == "settle":
        key = OPERATOR if rng.random() < 0.85 else rng.choice(KEYS[1:])
        payees = rng.sample(ADDR[1:], rng.randint(0, 3))
        amounts = [rng.randint(0, 400) for _ in payees]
        answering = model.answers.get(task, 0)
        if payees and answering and rng.random() < 0.7:  # most settlements pay the answers
            amounts[0] += answering
        return key, pay_out_intent(task, payees, amounts)
    if kind == "refund":
        return rng.choice(KEYS[1:3]), refund_intent(task)
    return rng.choice(KEYS[1:]), withdraw_intent()


def _check_invariants(
    harness: Harness,
    model: Model,
    balance0: int,
    from_block: int,
    journal: MemoryEscrowJournal,
    accounts: Iterable[str],
) -> None:
    """The chain agrees with the model: balance, events, every task's escrow, and the credit of
    `accounts` (after a step, the ones it may have moved; after a run, all of them)."""
    chain = harness.chain
    events = chain.events(from_block=from_block)
    deposits = sum(e.amount for e in events if e.name in ("Opened", "Answered"))
    withdrawals = sum(e.amount for e in events if e.name == "Withdrawn")
    balance = chain.balance()
    assert balance == balance0 + deposits - withdrawals == balance0 + model.balance
    per_task: dict[bytes | None, list[str]] = {}
    for event in events:
        per_task.setdefault(event.task_id_hash, []).append(event.name)
    for names in per_task.values():
        assert names.count("Settled") + names.count("Refunded") <= 1  # never both, never twice
        assert names.count("Opened") <= 1
    for task, expected in model.tasks.items():
        record = chain.escrow(task)
        assert record is not None
        assert (record.requester, record.deposit, record.state) == (
            expected.requester,
            expected.deposit,
            expected.state,
        )
    for address in accounts:
        assert chain.credit(address) == model.credit[address], address
    for (task, account), answered in model.answered.items():
        assert chain.answered(task, account) == answered, (task, account)
    for task in model.tasks:
        assert chain.answers(task) == model.answers.get(task, 0), task
    done = [
        f"{r.intent.kind}:{r.intent.task_id}:{r.sender}:{r.intent.amounts}"
        for r in journal.records()
        if r.intent.kind != "withdraw" and r.status in ("confirmed", "superseded")
    ]
    assert len(done) == len(set(done))


def _moved_by(model: Model, sender: str, intent: EscrowIntent) -> set[str]:
    """The accounts whose credit `intent` may move: its sender, a settlement's payees and the
    task's requester (a settlement's remainder, a refund). Any other account's credit is checked
    at the end of the run."""
    escrow = model.tasks.get(intent.task_id)
    return {sender, *intent.payees} | ({escrow.requester} if escrow is not None else set())


def run_state_machine(
    harness: Harness, runs: int | Sequence[int], seed: int, steps: int = 5
) -> dict[str, int]:
    """Random open/settle/refund/withdraw sequences with crashes; returns counts per outcome.

    `runs` is how many runs, or which of them (run numbers): run `n` draws from its own
    generator seeded by (`seed`, `n`), so a run is the same history whichever shard runs it."""
    chain = harness.chain
    stats: dict[str, int] = {}
    for run in range(runs) if isinstance(runs, int) else runs:
        rng = random.Random(f"{seed}:{run}")
        tasks = [f"sm-{seed}-{run}-{i}-{time.time_ns()}" for i in range(2)]
        journal = MemoryEscrowJournal()
        actions = EscrowActions(chain, journal, receipt_timeout=5)
        from_block = harness.block_number() + 1
        balance0 = chain.balance()
        model = Model(credit={a: chain.credit(a) for a in ADDR})
        model.balance = 0
        for _ in range(steps):
            if rng.random() < 0.12:
                harness.pass_time()
                for escrow in model.tasks.values():
                    escrow.deadline_passed = True
                stats["time"] = stats.get("time", 0) + 1
                continue
            key, intent = _random_intent(rng, tasks, harness.now(), model)
            sender = address_of(key)
            expected = model.refusal(sender, intent)
            crash = rng.choice(["none", "none", "after-record", "after-broadcast", "stolen"])
            repeated = intent.kind != "withdraw" and any(
                r.intent == intent and r.sender == sender and r.status == "confirmed"
                for r in journal.records(intent.task_id)
            )
            if crash == "none" and repeated:  # actions are idempotent: nothing is sent again
                outcome = actions.perform(key, intent)
                assert outcome.status == "already-done", outcome
                stats["already-done"] = stats.get("already-done", 0) + 1
                moved = _moved_by(model, sender, intent)
                _check_invariants(harness, model, balance0, from_block, journal, moved)
                continue
            try:
                if crash == "none":
                    outcomes = [actions.perform(key, intent)]
                else:
                    record = actions.record(key, intent)
                    if crash == "after-broadcast":
                        chain.broadcast(record.signed())
                    elif crash == "stolen":
                        harness.steal_nonce(key, record.nonce)
                    actions = EscrowActions(chain, journal, receipt_timeout=5)  # restarted
                    outcomes = actions.reconcile()
            except EscrowRefusedError as exc:
                assert exc.reason == expected, (intent, exc)
                stats["refused"] = stats.get("refused", 0) + 1
            else:
                assert expected is None, (intent, outcomes)
                [outcome] = outcomes
                _apply_outcome(model, sender, intent, outcome, crash)
                if outcome.status == "dropped":  # signed anew after the nonce was lost
                    again = actions.perform(key, intent)
                    _apply_outcome(model, sender, intent, again, "none")
                stats[outcome.status] = stats.get(outcome.status, 0) + 1
                by_kind = f"{intent.kind} {outcome.status}"
                stats[by_kind] = stats.get(by_kind, 0) + 1
            moved = _moved_by(model, sender, intent)
            _check_invariants(harness, model, balance0, from_block, journal, moved)
        _check_invariants(harness, model, balance0, from_block, journal, ADDR)
        assert journal.pending() == []
    return stats


def _apply_outcome(
    model: Model, sender: str, intent: EscrowIntent, outcome: EscrowOutcome, crash: str
) -> None:
    assert outcome.intent == intent and outcome.sender == sender
    if crash == "stolen":
        assert outcome.status == "dropped"
        return
    assert outcome.status == "confirmed", outcome
    model.apply(sender, intent)


def anvil_harness(anvil: Anvil) -> Harness:
    def block_number() -> int:
        return int(anvil.w3.eth.block_number)

    return Harness(anvil.chain, anvil.pass_time, anvil.steal_nonce, anvil.now, block_number)


@pytest.mark.devnet
@pytest.mark.parametrize("shard", range(STATE_MACHINE_SHARDS))
def test_state_machine_with_crashes(
    anvil: Anvil, shard: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shard `shard` of the STATE_MACHINE_RUNS runs (every STATE_MACHINE_SHARDS-th): the shards
    together run each history once, and xdist may run them side by side (tests/conftest.py).
    Each shard must see its share of every outcome, so together they see at least as many as
    one run of them all was asked to (over 100 confirmed, 10 dropped, 50 refused)."""
    runs = range(shard, STATE_MACHINE_RUNS, STATE_MACHINE_SHARDS)
    started = time.monotonic()
    stats = run_state_machine(anvil_harness(anvil), runs, seed=4)
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\nstate machine shard {shard}: {len(runs)} runs in {elapsed:.1f} s, {stats}")
    assert stats.get("confirmed", 0) > 100 // STATE_MACHINE_SHARDS
    assert stats.get("dropped", 0) > 10 // STATE_MACHINE_SHARDS
    assert stats.get("refused", 0) > 50 // STATE_MACHINE_SHARDS
    assert stats.get("answer confirmed", 0) > 0
