"""The chain seam against a real anvil devnet, and MemoryAnchorChain against the same rules.

Tests taking the `backend` fixture run twice: on a fresh anvil (marked devnet) and on
MemoryAnchorChain. The rest need anvil itself (deployment, persistence, the devnet manager).
Every anvil is started on a free 127.0.0.1 port in a tmp dir and stopped at teardown.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from web3 import Web3

from accord.ledger.chain import (
    DEVNET_OPERATOR_KEY,
    MEMORY_EXEC_GAS_FIRST_ANCHOR,
    MEMORY_EXEC_GAS_LATER_ANCHOR,
    MEMORY_EXEC_GAS_REVERTED,
    AnchorChain,
    AnchorRefusedError,
    Deployment,
    MemoryAnchorChain,
    Web3AnchorChain,
    anchor_calldata,
    ensure_registry,
    intrinsic_gas,
    log_id_hash,
    make_web3,
)
from accord.ledger.devnet import Devnet, DevnetInfo, find_free_port
from accord.ledger.errors import (
    AnchorError,
    ChainError,
    ChainUnavailableError,
    DeploymentError,
    DevnetError,
)

# anvil's default account 1: funded, but not the registry's operator.
OTHER_KEY = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
LOG = "accord-test"
UNAVAILABLE_WITHIN_S = 2.0


def root(n: int) -> bytes:
    return n.to_bytes(32, "big")


# -- fixtures ----------------------------------------------------------------------------


@dataclass
class RunningDevnet:
    net: Devnet
    info: DevnetInfo
    home: Path

    @property
    def deployment_file(self) -> Path:
        return self.home / "deployment.json"


@pytest.fixture
def devnet(tmp_path: Path) -> Iterator[RunningDevnet]:
    """A fresh anvil for one test, always stopped afterwards."""
    net = Devnet(tmp_path / "devnet", find_free_port())
    info = net.up()
    try:
        yield RunningDevnet(net, info, tmp_path)
    finally:
        net.down()


@pytest.fixture
def deployed(devnet: RunningDevnet) -> tuple[RunningDevnet, Deployment]:
    deployment = ensure_registry(devnet.info.rpc_url, DEVNET_OPERATOR_KEY, devnet.deployment_file)
    return devnet, deployment


@dataclass
class Backend:
    """A chain plus the test-only levers each implementation pulls differently."""

    chain: AnchorChain
    pause_mining: Callable[[], None]
    mine: Callable[[], None]
    go_down: Callable[[], None]


def _memory_backend() -> Backend:
    chain = MemoryAnchorChain()

    def pause() -> None:
        chain.auto_mine = False

    def mine() -> None:
        chain.mine()

    def down() -> None:
        chain.available = False

    return Backend(chain, pause, mine, down)


def _anvil_backend(devnet: RunningDevnet, deployment: Deployment) -> Backend:
    chain = Web3AnchorChain(devnet.info.rpc_url, DEVNET_OPERATOR_KEY, deployment.address)
    w3 = make_web3(devnet.info.rpc_url)

    def pause() -> None:
        w3.provider.make_request("evm_setAutomine", [False])

    def mine() -> None:
        w3.provider.make_request("evm_mine", [])

    def down() -> None:
        devnet.net.down()

    return Backend(chain, pause, mine, down)


@pytest.fixture(params=[pytest.param("anvil", marks=pytest.mark.devnet), "memory"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        return _memory_backend()
    devnet, deployment = request.getfixturevalue("deployed")
    return _anvil_backend(devnet, deployment)


def anchor(chain: AnchorChain, log_id: str, size: int, root_bytes: bytes) -> None:
    tx = chain.build_anchor_tx(log_id, size, root_bytes)
    chain.broadcast(tx)
    receipt = chain.wait_for_receipt(tx.tx_hash, timeout_s=5)
    assert receipt is not None and receipt.status_ok


# -- behaviour shared by both implementations ---------------------------------------------


def test_a_new_log_has_nothing_anchored(backend: Backend) -> None:
    chain = backend.chain
    assert chain.chain_id() == 31337
    assert chain.latest_size(LOG) == 0
    assert chain.root_at(LOG, 1) is None
    assert chain.anchors(LOG) == []


def test_anchor_records_size_root_and_event(backend: Backend) -> None:
    chain = backend.chain
    tx = chain.build_anchor_tx(LOG, 3, root(3))
    assert (tx.log_id, tx.size, tx.root, tx.nonce) == (LOG, 3, root(3), chain.account_nonce(True))
    chain.broadcast(tx)
    receipt = chain.wait_for_receipt(tx.tx_hash, timeout_s=5)
    assert receipt is not None
    assert receipt.status_ok and receipt.tx_hash == tx.tx_hash and receipt.block_number > 0
    assert chain.latest_size(LOG) == 3
    assert chain.root_at(LOG, 3) == root(3)
    assert chain.root_at(LOG, 2) is None
    [event] = chain.anchors(LOG)
    assert event.log_id_hash == bytes(Web3.keccak(text=LOG)) == log_id_hash(LOG)
    assert (event.size, event.root, event.tx_hash) == (3, root(3), tx.tx_hash)
    assert event.block_number == receipt.block_number


def test_sizes_must_grow(backend: Backend) -> None:
    chain = backend.chain
    anchor(chain, LOG, 5, root(5))
    for stale in (5, 4, 1):
        with pytest.raises(AnchorRefusedError) as refused:
            chain.build_anchor_tx(LOG, stale, root(99))
        assert isinstance(refused.value, AnchorError)
        assert refused.value.reason == "SizeNotGrowing"
        assert (refused.value.latest_size, refused.value.proposed_size) == (5, stale)
    anchor(chain, LOG, 8, root(8))
    assert [(a.size, a.root) for a in chain.anchors(LOG)] == [(5, root(5)), (8, root(8))]
    assert chain.root_at(LOG, 5) == root(5)
    assert chain.latest_size(LOG) == 8


def test_logs_are_independent(backend: Backend) -> None:
    chain = backend.chain
    anchor(chain, "log-a", 10, root(10))
    anchor(chain, "log-b", 2, root(2))
    assert (chain.latest_size("log-a"), chain.latest_size("log-b")) == (10, 2)
    assert [a.size for a in chain.anchors("log-b")] == [2]


def test_size_zero_and_bad_roots_are_refused_before_signing(backend: Backend) -> None:
    with pytest.raises(ValueError):
        backend.chain.build_anchor_tx(LOG, 0, root(0))
    with pytest.raises(ValueError):
        backend.chain.build_anchor_tx(LOG, 1, b"short")
    with pytest.raises(ValueError):
        backend.chain.build_anchor_tx(LOG, 2**64, root(1))


def test_rebroadcasting_a_mined_tx_does_not_anchor_twice(backend: Backend) -> None:
    chain = backend.chain
    tx = chain.build_anchor_tx(LOG, 4, root(4))
    chain.broadcast(tx)
    first = chain.wait_for_receipt(tx.tx_hash, timeout_s=5)
    nonce_after = chain.account_nonce(latest=True)
    chain.broadcast(tx)  # the node answers "nonce too low": it is this very tx, so fine
    chain.broadcast(tx)
    assert chain.receipt(tx.tx_hash) == first
    assert [a.size for a in chain.anchors(LOG)] == [4]
    assert chain.account_nonce(latest=True) == nonce_after


def test_rebroadcasting_a_pending_tx_is_idempotent(backend: Backend) -> None:
    chain = backend.chain
    backend.pause_mining()
    tx = chain.build_anchor_tx(LOG, 6, root(6))
    chain.broadcast(tx)
    chain.broadcast(tx)  # "already known / imported"
    assert chain.receipt(tx.tx_hash) is None
    assert chain.wait_for_receipt(tx.tx_hash, timeout_s=0.2) is None
    assert chain.account_nonce(latest=False) == chain.account_nonce(latest=True) + 1
    backend.mine()
    receipt = chain.wait_for_receipt(tx.tx_hash, timeout_s=5)
    assert receipt is not None and receipt.status_ok
    assert [a.size for a in chain.anchors(LOG)] == [6]


def test_a_tx_whose_nonce_went_elsewhere_is_an_anchor_error(backend: Backend) -> None:
    chain = backend.chain
    # Both signed at the same pending nonce; only one can ever be mined.
    loser = chain.build_anchor_tx(LOG, 7, root(7))
    winner = chain.build_anchor_tx(LOG, 9, root(9))
    assert loser.nonce == winner.nonce
    chain.broadcast(winner)
    assert chain.wait_for_receipt(winner.tx_hash, timeout_s=5) is not None
    with pytest.raises(AnchorError):
        chain.broadcast(loser)
    assert chain.receipt(loser.tx_hash) is None
    assert [a.size for a in chain.anchors(LOG)] == [9]


def test_an_outrun_anchor_is_mined_as_a_revert(backend: Backend) -> None:
    chain = backend.chain
    backend.pause_mining()
    first = chain.build_anchor_tx(LOG, 10, root(10))
    chain.broadcast(first)
    # Prepared against the mined state (size 0): valid then, stale once `first` lands.
    second = chain.build_anchor_tx(LOG, 10, root(11))
    assert second.nonce == first.nonce + 1
    chain.broadcast(second)
    backend.mine()
    ok = chain.wait_for_receipt(first.tx_hash, timeout_s=5)
    reverted = chain.wait_for_receipt(second.tx_hash, timeout_s=5)
    assert ok is not None and ok.status_ok
    assert reverted is not None and not reverted.status_ok
    assert chain.root_at(LOG, 10) == root(10)
    assert [a.root for a in chain.anchors(LOG)] == [root(10)]


@pytest.mark.parametrize("root_bytes", [root(1), b"\x01" * 32], ids=["sparse-root", "dense-root"])
def test_gas_used_by_anchors(backend: Backend, root_bytes: bytes) -> None:
    """The memory chain charges what the real contract costs (calldata included)."""
    chain = backend.chain
    used = []
    for size in (5, 9):
        tx = chain.build_anchor_tx(LOG, size, root_bytes)
        chain.broadcast(tx)
        receipt = chain.wait_for_receipt(tx.tx_hash, timeout_s=5)
        assert receipt is not None
        used.append(receipt.gas_used - intrinsic_gas(anchor_calldata(LOG, size, root_bytes)))
    assert used == [MEMORY_EXEC_GAS_FIRST_ANCHOR, MEMORY_EXEC_GAS_LATER_ANCHOR]


def test_gas_used_by_a_reverted_anchor(backend: Backend) -> None:
    chain = backend.chain
    backend.pause_mining()
    chain.broadcast(chain.build_anchor_tx(LOG, 1, root(1)))
    stale = chain.build_anchor_tx(LOG, 1, root(2))
    chain.broadcast(stale)
    backend.mine()
    receipt = chain.wait_for_receipt(stale.tx_hash, timeout_s=5)
    assert receipt is not None and not receipt.status_ok
    calldata_gas = intrinsic_gas(anchor_calldata(LOG, 1, root(2)))
    assert receipt.gas_used - calldata_gas == MEMORY_EXEC_GAS_REVERTED


def test_unknown_tx_has_no_receipt(backend: Backend) -> None:
    started = time.monotonic()
    assert backend.chain.wait_for_receipt(b"\x11" * 32, timeout_s=0.3) is None
    assert time.monotonic() - started < 2


def test_chain_down_is_unavailable_quickly(backend: Backend) -> None:
    chain = backend.chain
    tx = chain.build_anchor_tx(LOG, 1, root(1))
    backend.go_down()
    calls: list[Callable[[], object]] = [
        lambda: chain.latest_size(LOG),
        lambda: chain.root_at(LOG, 1),
        lambda: chain.build_anchor_tx(LOG, 2, root(2)),
        lambda: chain.broadcast(tx),
        lambda: chain.receipt(tx.tx_hash),
        lambda: chain.account_nonce(latest=True),
        lambda: chain.anchors(LOG),
    ]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(ChainUnavailableError):
            call()
        assert time.monotonic() - started < UNAVAILABLE_WITHIN_S


def test_memory_chain_can_lose_a_broadcast_reply() -> None:
    chain = MemoryAnchorChain()
    chain.lose_broadcast_replies = 1
    tx = chain.build_anchor_tx(LOG, 2, root(2))
    with pytest.raises(ChainUnavailableError):
        chain.broadcast(tx)
    # The node did get it: the retry is a no-op and the anchor is there once.
    chain.broadcast(tx)
    assert chain.receipt(tx.tx_hash) is not None
    assert [a.size for a in chain.anchors(LOG)] == [2]


# -- anvil only ---------------------------------------------------------------------------


@pytest.mark.devnet
def test_non_operator_is_refused(deployed: tuple[RunningDevnet, Deployment]) -> None:
    devnet, deployment = deployed
    intruder = Web3AnchorChain(devnet.info.rpc_url, OTHER_KEY, deployment.address)
    with pytest.raises(AnchorRefusedError) as refused:
        intruder.build_anchor_tx(LOG, 1, root(1))
    assert refused.value.reason == "NotOperator"
    assert intruder.latest_size(LOG) == 0


@pytest.mark.devnet
def test_deployment_is_recorded_and_reused(deployed: tuple[RunningDevnet, Deployment]) -> None:
    devnet, deployment = deployed
    assert deployment.action == "deployed"
    assert deployment.chain_id == 31337
    record = json.loads(devnet.deployment_file.read_text())
    assert record["address"] == deployment.address
    assert record["codeHash"] == "0x" + deployment.code_hash.hex()
    w3 = make_web3(devnet.info.rpc_url)
    code = bytes(w3.eth.get_code(Web3.to_checksum_address(deployment.address)))
    assert bytes(Web3.keccak(code)) == deployment.code_hash
    chain = Web3AnchorChain(devnet.info.rpc_url, DEVNET_OPERATOR_KEY, deployment.address)
    assert chain.operator() == chain.operator_address()

    again = ensure_registry(devnet.info.rpc_url, DEVNET_OPERATOR_KEY, devnet.deployment_file)
    assert again == deployment
    assert again.action == "reused"


@pytest.mark.devnet
def test_a_recorded_contract_with_other_code_is_refused(
    deployed: tuple[RunningDevnet, Deployment],
) -> None:
    devnet, _ = deployed
    record = json.loads(devnet.deployment_file.read_text())
    record["codeHash"] = "0x" + "ab" * 32
    devnet.deployment_file.write_text(json.dumps(record))
    with pytest.raises(DeploymentError, match="another hash"):
        ensure_registry(devnet.info.rpc_url, DEVNET_OPERATOR_KEY, devnet.deployment_file)


@pytest.mark.devnet
def test_a_registry_of_another_operator_is_refused(
    deployed: tuple[RunningDevnet, Deployment],
) -> None:
    devnet, _ = deployed
    with pytest.raises(DeploymentError, match="operator"):
        ensure_registry(devnet.info.rpc_url, OTHER_KEY, devnet.deployment_file)


@pytest.mark.devnet
def test_a_record_for_another_chain_is_refused(deployed: tuple[RunningDevnet, Deployment]) -> None:
    devnet, _ = deployed
    record = json.loads(devnet.deployment_file.read_text())
    record["chainId"] = 1
    devnet.deployment_file.write_text(json.dumps(record))
    with pytest.raises(DeploymentError, match="chain id 1"):
        ensure_registry(devnet.info.rpc_url, DEVNET_OPERATOR_KEY, devnet.deployment_file)


@pytest.mark.devnet
def test_ensure_registry_on_a_down_chain_is_unavailable(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{find_free_port()}"
    started = time.monotonic()
    with pytest.raises(ChainUnavailableError):
        ensure_registry(url, DEVNET_OPERATOR_KEY, tmp_path / "deployment.json")
    assert time.monotonic() - started < UNAVAILABLE_WITHIN_S
    assert not (tmp_path / "deployment.json").exists()


@pytest.mark.devnet
def test_restart_from_persisted_state_keeps_anchors_and_deployment(
    deployed: tuple[RunningDevnet, Deployment],
) -> None:
    devnet, deployment = deployed
    chain = Web3AnchorChain(devnet.info.rpc_url, DEVNET_OPERATOR_KEY, deployment.address)
    anchor(chain, LOG, 3, root(3))
    anchor(chain, LOG, 7, root(7))
    before = chain.anchors(LOG)

    assert devnet.net.down() is True
    assert devnet.net.state_file.is_file()
    with pytest.raises(ChainUnavailableError):
        chain.latest_size(LOG)
    restarted = devnet.net.up()
    assert restarted.reused is False and restarted.pid != devnet.info.pid

    again = ensure_registry(devnet.info.rpc_url, DEVNET_OPERATOR_KEY, devnet.deployment_file)
    assert again.action == "reused" and again == deployment
    assert chain.latest_size(LOG) == 7
    assert chain.root_at(LOG, 3) == root(3)
    assert chain.anchors(LOG) == before
    anchor(chain, LOG, 8, root(8))  # and anchoring carries on with the right nonce
    assert [a.size for a in chain.anchors(LOG)] == [3, 7, 8]


@pytest.mark.devnet
def test_a_reset_chain_gets_a_fresh_registry(deployed: tuple[RunningDevnet, Deployment]) -> None:
    devnet, deployment = deployed
    devnet.net.down()
    devnet.net.state_file.unlink()
    devnet.net.up()
    fresh = ensure_registry(devnet.info.rpc_url, DEVNET_OPERATOR_KEY, devnet.deployment_file)
    assert fresh.action == "redeployed"
    assert fresh.code_hash == deployment.code_hash
    recorded = Deployment.from_json(devnet.deployment_file.read_text())
    assert recorded == fresh


# -- the devnet manager -------------------------------------------------------------------


@pytest.mark.devnet
def test_second_up_reuses_the_running_devnet(devnet: RunningDevnet) -> None:
    assert devnet.info.reused is False
    assert devnet.info.chain_id == 31337
    assert devnet.info.rpc_url.startswith("http://127.0.0.1:")
    second = Devnet(devnet.net.dir, devnet.net.port).up()
    assert second.reused is True
    assert second.pid == devnet.info.pid
    status = devnet.net.status()
    assert status.running and status.pid == devnet.info.pid and status.block_number == 0
    assert devnet.net.pid_file.read_text().strip() == str(devnet.info.pid)


def runs(pid: int) -> bool:
    """Whether `pid` still runs: a zombie (exited, its parent, not us, yet to reap it: the
    container's init may take a while under load) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False  # gone between the two looks
    return state != "Z"


@pytest.mark.devnet
def test_down_stops_and_removes_the_pid_file(devnet: RunningDevnet) -> None:
    pid = devnet.info.pid
    assert devnet.net.down() is True
    assert not devnet.net.pid_file.exists()
    assert not runs(pid)
    status = devnet.net.status()
    assert not status.running and status.pid is None and status.block_number is None
    assert devnet.net.down() is False


@pytest.mark.devnet
def test_a_stale_pid_file_is_ignored(devnet: RunningDevnet) -> None:
    devnet.net.down()
    devnet.net.pid_file.write_text("999999999\n")
    info = devnet.net.up()
    assert info.reused is False and info.pid != 999999999


@pytest.mark.devnet
def test_up_on_a_taken_port_is_a_devnet_error(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        net = Devnet(tmp_path / "devnet", port)
        with pytest.raises(DevnetError, match="in use"):
            net.up()
    assert not net.pid_file.exists()


@pytest.mark.devnet
def test_anvil_that_dies_at_start_is_a_devnet_error_with_its_log(tmp_path: Path) -> None:
    broken = tmp_path / "anvil"
    broken.write_text("#!/bin/sh\necho 'boom: cannot start' >&2\nexit 3\n")
    broken.chmod(0o755)
    net = Devnet(tmp_path / "devnet", find_free_port(), anvil_path=broken)
    with pytest.raises(DevnetError, match="boom: cannot start"):
        net.up()
    assert not net.pid_file.exists()


def test_chain_errors_share_one_root() -> None:
    assert issubclass(AnchorRefusedError, AnchorError)
    assert issubclass(ChainUnavailableError, ChainError)


def test_a_node_that_never_answers_times_out_as_unavailable() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel accepts connections; nobody ever replies
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        chain = Web3AnchorChain(url, DEVNET_OPERATOR_KEY, "0x" + "11" * 20, timeout_s=0.3)
        started = time.monotonic()
        with pytest.raises(ChainUnavailableError, match="Timeout"):
            chain.latest_size(LOG)
        assert time.monotonic() - started < UNAVAILABLE_WITHIN_S
