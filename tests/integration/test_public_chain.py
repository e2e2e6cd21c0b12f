"""A public chain's faults, on a real anvil: reorganised blocks, a risen base fee, a fee ceiling.

A reorg is simulated with anvil's evm_snapshot / evm_revert (the blocks after the snapshot
are taken away, their transactions with them); a stuck transaction with automine off and
anvil_setNextBlockBaseFeePerGas above its maxFee. One anvil and one deployment of each
contract serve the module; every test uses its own log id and task ids, and leaves automine
on and the base fee low.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from accord.ledger.anchoring import Anchorer
from accord.ledger.chain import DEVNET_OPERATOR_KEY, Web3AnchorChain, ensure_registry
from accord.ledger.database import make_engine
from accord.ledger.devnet import Devnet, DevnetInfo, find_free_port, rpc_call
from accord.ledger.errors import FeesAboveCeilingError
from accord.ledger.events import make_entry
from accord.ledger.fees import FeePolicy
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from accord.market.escrow import (
    EscrowActions,
    EscrowRefusedError,
    SqlEscrowJournal,
    Web3EscrowChain,
    address_of,
    ensure_escrow,
    pay_out_intent,
)

REQUESTER = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
PAYEE = address_of("0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a")
OPERATOR = address_of(DEVNET_OPERATOR_KEY)
GWEI = 10**9
SIGNER = Ed25519Signer(bytes(range(32)))
_ids = itertools.count()


@dataclass
class Net:
    info: DevnetInfo
    registry: str
    escrow: str

    def rpc(self, method: str, *params: Any) -> Any:
        return rpc_call(self.info.rpc_url, method, params=list(params))

    def anchors(self, *, confirmations: int = 0, ceiling_gwei: int = 500) -> Web3AnchorChain:
        policy = FeePolicy(ceiling=ceiling_gwei * GWEI)
        return Web3AnchorChain(
            self.info.rpc_url, DEVNET_OPERATOR_KEY, self.registry, fee_policy=policy
        )

    def escrow_chain(self, *, ceiling_gwei: int = 500) -> Web3EscrowChain:
        policy = FeePolicy(ceiling=ceiling_gwei * GWEI)
        return Web3EscrowChain(self.info.rpc_url, self.escrow, fee_policy=policy)

    def now(self) -> int:
        return int(self.rpc("eth_getBlockByNumber", "latest", False)["timestamp"], 16)

    def raise_base_fee(self, gwei: int) -> None:
        """Mine one block whose base fee is `gwei`: what the market asks from then on."""
        self.rpc("anvil_setNextBlockBaseFeePerGas", hex(gwei * GWEI))
        self.rpc("evm_mine")


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    home = tmp_path_factory.mktemp("public-chain")
    devnet = Devnet(home / "devnet", find_free_port())
    info = devnet.up()
    try:
        registry = ensure_registry(info.rpc_url, DEVNET_OPERATOR_KEY, home / "registry.json")
        escrow = ensure_escrow(info.rpc_url, DEVNET_OPERATOR_KEY, home / "escrow.json")
        yield Net(info, registry.address, escrow.address)
    finally:
        devnet.down()


@pytest.fixture
def calm(net: Net) -> Iterator[Net]:
    """The net, put back to automine and a 1 gwei base fee whatever the test did."""
    try:
        yield net
    finally:
        net.rpc("evm_setAutomine", True)
        net.raise_base_fee(1)


def fresh(prefix: str) -> str:
    return f"{prefix}-{time.time_ns()}-{next(_ids)}"


def log_store(tmp_path: Path) -> LogStore:
    store = LogStore(make_engine(f"sqlite:///{tmp_path / 'log.db'}"), fresh("log"))
    at = datetime.now(UTC)
    store.append_batch([make_entry(SIGNER, kind="note.added", seq=i, at=at) for i in (1, 2, 3)])
    return store


def journal(tmp_path: Path) -> SqlEscrowJournal:
    return SqlEscrowJournal(make_engine(f"sqlite:///{tmp_path / 'market.db'}"))


# -- a reorganised block -----------------------------------------------------------------


@pytest.mark.devnet
def test_an_anchor_whose_block_is_reorganised_away_is_sent_again_once(
    calm: Net, tmp_path: Path
) -> None:
    store = log_store(tmp_path)
    chain = calm.anchors()
    anchorer = Anchorer(store, chain, SIGNER, lambda: datetime.now(UTC), receipt_timeout=5)
    snapshot = calm.rpc("evm_snapshot")
    first = anchorer.anchor_latest()
    assert first.status == "confirmed"
    assert calm.rpc("evm_revert", snapshot) is True  # the block is reorganised away
    assert chain.latest_size(store.log_id) == 0 and chain.receipt(first.tx_hash or b"") is None
    outcomes = anchorer.reconcile()
    assert [o.status for o in outcomes] == ["forgotten-by-chain", "confirmed"]
    assert outcomes[1].tx_hash == first.tx_hash  # the same signed bytes, sent once more
    assert [a.size for a in chain.anchors(store.log_id)] == [3]
    assert [o.status for o in anchorer.reconcile()] == []  # settled: nothing is sent again
    assert anchorer.anchor_latest().status == "already-anchored"
    assert [(a.status, a.tx_hash) for a in anchorer.journal.records()] == [
        ("confirmed", first.tx_hash)
    ]


@pytest.mark.devnet
def test_an_anchor_reorganised_before_it_is_deep_enough_is_sent_again(
    calm: Net, tmp_path: Path
) -> None:
    store = log_store(tmp_path)
    chain = calm.anchors()
    anchorer = Anchorer(
        store, chain, SIGNER, lambda: datetime.now(UTC), receipt_timeout=0.3, confirmations=2
    )
    snapshot = calm.rpc("evm_snapshot")
    seen = anchorer.anchor_latest()
    assert seen.status == "pending" and seen.block_number is not None  # mined, not deep
    calm.rpc("evm_revert", snapshot)
    again = anchorer.anchor_latest()
    assert again.status == "pending" and again.tx_hash == seen.tx_hash
    calm.rpc("evm_mine")
    calm.rpc("evm_mine")
    done = anchorer.anchor_latest()
    assert done.status == "confirmed" and done.tx_hash == seen.tx_hash
    assert [a.size for a in chain.anchors(store.log_id)] == [3]


@pytest.mark.devnet
def test_a_settle_whose_block_is_reorganised_away_is_paid_exactly_once(
    calm: Net, tmp_path: Path
) -> None:
    chain = calm.escrow_chain()
    actions = EscrowActions(chain, journal(tmp_path), receipt_timeout=5, keys=[DEVNET_OPERATOR_KEY])
    task = fresh("reorg")
    assert actions.open(REQUESTER, task, 1_000, calm.now() + 3_600).status == "confirmed"
    credit0 = chain.credit(PAYEE)
    snapshot = calm.rpc("evm_snapshot")
    settled = actions.pay_out(DEVNET_OPERATOR_KEY, task, [PAYEE], [700])
    assert settled.status == "confirmed" and chain.credit(PAYEE) == credit0 + 700
    calm.rpc("evm_revert", snapshot)
    assert chain.credit(PAYEE) == credit0  # the payment went with the block
    outcomes = actions.reconcile()
    assert [o.status for o in outcomes] == ["forgotten", "confirmed"]
    assert outcomes[1].tx_hash == settled.tx_hash  # the same bytes: they can be mined once
    assert chain.credit(PAYEE) == credit0 + 700
    assert actions.reconcile() == []
    again = actions.pay_out(DEVNET_OPERATOR_KEY, task, [PAYEE], [700])
    assert again.status == "already-done" and chain.credit(PAYEE) == credit0 + 700
    assert [e.name for e in chain.events(task)] == ["Opened", "Settled"]
    with pytest.raises(EscrowRefusedError) as refused:  # and the contract refuses a second
        chain.build_tx(DEVNET_OPERATOR_KEY, pay_out_intent(task, [PAYEE], [700]))
    assert refused.value.reason == "NotOpen"


# -- a risen base fee, and the ceiling ---------------------------------------------------


@pytest.mark.devnet
def test_a_settle_stuck_under_a_risen_base_fee_is_replaced_not_duplicated(
    calm: Net, tmp_path: Path
) -> None:
    chain = calm.escrow_chain(ceiling_gwei=300)
    actions = EscrowActions(chain, journal(tmp_path), receipt_timeout=0.3, replace_after_s=0)
    task = fresh("stuck")
    assert actions.open(REQUESTER, task, 1_000, calm.now() + 3_600).status == "confirmed"
    credit0 = chain.credit(PAYEE)
    nonce0 = chain.account_nonce(OPERATOR, latest=True)
    calm.rpc("evm_setAutomine", False)
    stuck = actions.pay_out(DEVNET_OPERATOR_KEY, task, [PAYEE], [600])
    assert stuck.status == "pending"
    calm.raise_base_fee(100)  # its maxFee (a few gwei) is now under the base fee
    assert chain.receipt(stuck.tx_hash or b"") is None
    [replaced] = actions.reconcile()
    assert replaced.status == "pending" and replaced.tx_hash != stuck.tx_hash
    old, new = actions.journal.records(task)[1:]
    assert (old.status, new.status, old.nonce) == ("replaced", "pending", new.nonce)
    old_fees, new_fees = chain.fees_of(old.raw), chain.fees_of(new.raw)
    assert old_fees is not None and new_fees is not None
    assert new_fees.max_fee * 8 >= old_fees.max_fee * 9 and new_fees.tip * 8 >= old_fees.tip * 9
    assert new_fees.max_fee <= 300 * GWEI  # never above the ceiling
    calm.rpc("evm_mine")
    [done] = actions.reconcile()
    assert done.status == "confirmed" and done.tx_hash == new.tx_hash
    assert chain.receipt(old.tx_hash) is None  # one nonce, one transaction
    assert chain.account_nonce(OPERATOR, latest=True) == nonce0 + 1
    assert chain.credit(PAYEE) == credit0 + 600  # one payment
    assert [e.name for e in chain.events(task)] == ["Opened", "Settled"]


@pytest.mark.devnet
def test_fees_above_the_ceiling_are_a_typed_error_and_nothing_is_sent(
    calm: Net, tmp_path: Path
) -> None:
    escrow = calm.escrow_chain(ceiling_gwei=20)
    actions = EscrowActions(escrow, journal(tmp_path), receipt_timeout=5)
    store = log_store(tmp_path)
    anchorer = Anchorer(store, calm.anchors(ceiling_gwei=20), SIGNER, lambda: datetime.now(UTC))
    requester = address_of(REQUESTER)
    nonces = (escrow.account_nonce(requester, False), escrow.account_nonce(OPERATOR, False))
    calm.raise_base_fee(50)
    with pytest.raises(FeesAboveCeilingError, match="fees above your ceiling") as caught:
        actions.open(REQUESTER, fresh("ceiling"), 1_000, calm.now() + 3_600)
    assert caught.value.ceiling == 20 * GWEI and caught.value.needed > 50 * GWEI
    with pytest.raises(FeesAboveCeilingError):
        anchorer.anchor_latest()
    assert actions.journal.records() == [] and anchorer.journal.records() == []
    assert (escrow.account_nonce(requester, False), escrow.account_nonce(OPERATOR, False)) == (
        nonces
    )
    calm.raise_base_fee(1)
    assert anchorer.anchor_latest().status == "confirmed"
    [record] = anchorer.journal.records()
    fees = escrow.fees_of(record.raw_tx)
    assert fees is not None and fees.max_fee <= 20 * GWEI


@pytest.mark.devnet
def test_an_anchor_stuck_under_a_risen_base_fee_is_replaced_not_duplicated(
    calm: Net, tmp_path: Path
) -> None:
    store = log_store(tmp_path)
    chain = calm.anchors(ceiling_gwei=300)
    anchorer = Anchorer(
        store, chain, SIGNER, lambda: datetime.now(UTC), receipt_timeout=0.3, replace_after_s=0
    )
    nonce0 = chain.account_nonce(latest=True)
    calm.rpc("evm_setAutomine", False)
    stuck = anchorer.anchor_latest()
    assert stuck.status == "pending"
    calm.raise_base_fee(100)
    [replaced] = anchorer.reconcile()
    [record] = anchorer.journal.pending()
    assert replaced.tx_hash == record.tx_hash != stuck.tx_hash and record.nonce == nonce0
    fees = chain.fees_of(record.raw_tx)
    assert fees is not None and 100 * GWEI < fees.max_fee <= 300 * GWEI
    calm.rpc("evm_mine")
    [done] = anchorer.reconcile()
    assert done.status == "confirmed" and done.tx_hash == record.tx_hash
    assert chain.receipt(stuck.tx_hash or b"") is None
    assert chain.account_nonce(latest=True) == nonce0 + 1
    assert [a.size for a in chain.anchors(store.log_id)] == [3]


@pytest.mark.devnet
def test_deployments_sign_under_the_configured_fee_ceiling(calm: Net, tmp_path: Path) -> None:
    """A fee market above ACCORD_MAX_FEE_GWEI refuses the deployment of either contract
    before anything is sent or recorded; under the ceiling both deploy."""
    calm.raise_base_fee(40)
    tight = FeePolicy(ceiling=30 * GWEI)
    sent_before = calm.rpc("eth_getTransactionCount", OPERATOR, "pending")
    with pytest.raises(FeesAboveCeilingError):
        ensure_registry(
            calm.info.rpc_url, DEVNET_OPERATOR_KEY, tmp_path / "r.json", fee_policy=tight
        )
    with pytest.raises(FeesAboveCeilingError):
        ensure_escrow(calm.info.rpc_url, DEVNET_OPERATOR_KEY, tmp_path / "e.json", fee_policy=tight)
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "e.json").exists()
    assert calm.rpc("eth_getTransactionCount", OPERATOR, "pending") == sent_before
    roomy = FeePolicy(ceiling=200 * GWEI)
    made = ensure_escrow(
        calm.info.rpc_url, DEVNET_OPERATOR_KEY, tmp_path / "e.json", fee_policy=roomy
    )
    assert made.action == "deployed"


class WatchedChain(Web3EscrowChain):
    """The escrow chain on anvil, noting from which block each event query reads."""

    def __init__(self, rpc_url: str, address: str) -> None:
        super().__init__(rpc_url, address)
        self.reads_from: list[int] = []

    def events(self, task_id: str | None = None, *, from_block: int = 0) -> list[Any]:
        self.reads_from.append(from_block)
        return super().events(task_id, from_block=from_block)


@pytest.mark.devnet
def test_the_check_for_forgotten_transactions_starts_above_the_block_found_whole(
    calm: Net, tmp_path: Path
) -> None:
    """Each escrow action looks for forgotten transactions only above the block the last
    look found whole (not from block 0, which grows with every task); a reorganisation below
    that block changes its hash, and the next look is whole again and finds both."""
    snapshot = calm.rpc("evm_snapshot")
    chain = WatchedChain(calm.info.rpc_url, calm.escrow)
    actions = EscrowActions(chain, journal(tmp_path), receipt_timeout=5, keys=[DEVNET_OPERATOR_KEY])
    task = fresh("watermark")
    opened = actions.open(REQUESTER, task, 1_000, calm.now() + 3_600)
    credit0 = chain.credit(PAYEE)
    settled = actions.pay_out(DEVNET_OPERATOR_KEY, task, [PAYEE], [700])
    assert opened.status == settled.status == "confirmed"
    assert actions.find_forgotten() == []
    whole_through, _ = actions.journal.intact_through() or (-1, b"")
    assert whole_through >= (settled.block_number or 0)
    chain.reads_from.clear()
    assert actions.find_forgotten() == [] and chain.reads_from == []  # nothing above it
    calm.rpc("evm_revert", snapshot)  # below the open: both blocks go
    for _ in range(whole_through + 3 - int(calm.rpc("eth_blockNumber"), 16)):
        calm.rpc("evm_mine")  # the new history is longer: only its hashes tell
    forgotten = actions.find_forgotten()
    assert {o.tx_hash for o in forgotten} == {opened.tx_hash, settled.tx_hash}
    assert chain.reads_from == [0]
    outcomes = actions.reconcile()
    assert {o.status for o in outcomes} == {"confirmed"}
    assert chain.credit(PAYEE) == credit0 + 700  # paid once, in the new history
