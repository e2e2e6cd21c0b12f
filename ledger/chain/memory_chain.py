"""`MemoryAnchorChain`: an in-process AnchorChain with the registry's rules, for unit tests,
and `MemoryChainFaults`, the public chain's faults both in-memory chains (anchors and escrow)
simulate. No I/O and no web3.
"""

from __future__ import annotations

import json

from eth_utils.crypto import keccak

from accord.ledger.chain.protocol import poll_receipt
from accord.ledger.chain.values import (
    AnchorReceipt,
    AnchorRefusedError,
    OnChainAnchor,
    SignedAnchorTx,
    log_id_hash,
    validate_anchor,
)
from accord.ledger.errors import AnchorError, ChainUnavailableError
from accord.ledger.fees import FeeMarket, FeePolicy, Fees, fees_for

MEMORY_RPC_URL = "memory://anchor-chain"
MEMORY_REGISTRY_ADDRESS = "0x000000000000000000000000000000000000A4C0"
#: Execution gas of the real AnchorRegistry.anchor beyond the intrinsic 21000 and calldata
#: (measured on anvil 1.7.1, solc 0.8.28 -O200 cancun; tests/integration/test_chain.py keeps
#: these honest). The first anchor of a log fills two empty storage slots; later ones fill
#: one and overwrite latestSize. A SizeNotGrowing revert that is mined anyway (signed before
#: a competing anchor landed) still costs gas.
MEMORY_EXEC_GAS_FIRST_ANCHOR = 46_747
MEMORY_EXEC_GAS_LATER_ANCHOR = 29_647
MEMORY_EXEC_GAS_REVERTED = 2_677
_TX_BASE_GAS = 21_000
_ANCHOR_SELECTOR = keccak(text="anchor(bytes32,uint64,bytes32)")[:4]


def anchor_calldata(log_id: str, size: int, root: bytes) -> bytes:
    """The ABI-encoded `anchor(logId, size, root)` call data (pure)."""
    return _ANCHOR_SELECTOR + log_id_hash(log_id) + size.to_bytes(32, "big") + root


def intrinsic_gas(calldata: bytes) -> int:
    """21000 plus 4 gas per zero and 16 per non-zero calldata byte (pure)."""
    return _TX_BASE_GAS + sum(4 if byte == 0 else 16 for byte in calldata)


MEMORY_OPERATOR_ADDRESS = "0x000000000000000000000000000000000000A4C1"
MEMORY_BASE_FEE = 1_000_000_000
MEMORY_TIP = 1_000_000_000


def memory_block_hash(number: int, fork: int) -> bytes:
    """The in-memory chains' block hash: a block mined again after a rewind has another."""
    return keccak(f"memory-block:{fork}:{number}".encode())


def replaces_queued(old: Fees | None, new: Fees | None) -> bool:
    """Whether `new` fees may replace a queued transaction with `old` ones at the same nonce:
    both raised by at least 12.5 %, as geth and anvil require (pure)."""
    if old is None or new is None:
        return False
    return new.max_fee * 8 >= old.max_fee * 9 and new.tip * 8 >= old.tip * 9


class MemoryChainFaults:
    """What both in-memory chains share of a public chain's faults: a fee market (`base_fee`
    and `tip` are test switches; a transaction whose maxFee is under the base fee is not
    mined), replacement at a nonce, and block hashes that change when blocks are mined again
    after a `rewind`. A subclass calls `_init_faults` and keeps `_block_number`."""

    base_fee: int
    tip: int
    _fee_policy: FeePolicy
    _block_number: int
    _fork: int
    _hashes: dict[int, bytes]

    def _init_faults(self, fee_policy: FeePolicy | None) -> None:
        self.base_fee = MEMORY_BASE_FEE
        self.tip = MEMORY_TIP
        self._fee_policy = fee_policy or FeePolicy()
        self._fork = 0
        self._hashes = {}

    def _check_available(self, doing: str) -> None:
        """Raises ChainUnavailableError when the chain is switched off (the subclass's)."""

    def fee_market(self) -> FeeMarket:
        self._check_available("reading the fee market")
        tip = self.tip if self._fee_policy.default_tip is None else self._fee_policy.default_tip
        return FeeMarket(self.base_fee, tip)

    def fees_of(self, raw: bytes) -> Fees | None:
        return memory_fees_of(raw)

    def fee_policy(self) -> FeePolicy:
        return self._fee_policy

    def _fees_now(self, fees: Fees | None) -> Fees:
        """`fees`, or the market's under the ceiling. Raises FeesAboveCeilingError."""
        return fees or fees_for(self.fee_market(), self._fee_policy)

    def _affordable(self, raw: bytes) -> bool:
        """Whether the transaction's maxFee covers the base fee (it may be mined now)."""
        fees = self.fees_of(raw)
        return fees is None or fees.max_fee >= self.base_fee

    def _outbids(self, queued_raw: bytes, raw: bytes) -> bool:
        return replaces_queued(self.fees_of(queued_raw), self.fees_of(raw))

    def block_hash(self, number: int) -> bytes | None:
        self._check_available("eth_getBlockByNumber")
        if number > self._block_number:
            return None
        return self._hashes.get(number, memory_block_hash(number, 0))

    def _new_block(self) -> bytes:
        """Mine the next block number; returns its hash."""
        self._block_number += 1
        self._hashes[self._block_number] = memory_block_hash(self._block_number, self._fork)
        return self._hashes[self._block_number]

    def _forget_blocks_after(self, block: int) -> None:
        self._block_number = min(self._block_number, block)
        self._hashes = {n: h for n, h in self._hashes.items() if n <= block}
        self._fork += 1  # blocks mined from here on are other blocks


class MemoryAnchorChain(MemoryChainFaults):
    """An in-process AnchorChain with the registry's rules, for unit tests.

    Test switches:
      available = False      every call raises ChainUnavailableError
      auto_mine = False      broadcasts wait in the mempool until `mine()`
      lose_broadcast_replies = n
                             the next n broadcasts reach the mempool but then raise
                             ChainUnavailableError, like a reply lost to a timeout
      base_fee, tip          the fee market; `mine()` leaves a transaction whose maxFee is
                             under `base_fee` in the mempool (stuck)
      rewind(block)          forget every block after `block`, as a node restarted from an
                             older state (or a reorg) does; the mempool is forgotten too
    """

    def __init__(self, chain_id: int = 31337, fee_policy: FeePolicy | None = None) -> None:
        self.available = True
        self.auto_mine = True
        self.lose_broadcast_replies = 0
        self._init_faults(fee_policy)
        self._chain_id = chain_id
        self._block_number = 0
        self._latest: dict[bytes, int] = {}
        self._roots: dict[tuple[bytes, int], bytes] = {}
        self._events: list[OnChainAnchor] = []
        self._mempool: dict[bytes, SignedAnchorTx] = {}
        self._receipts: dict[bytes, AnchorReceipt] = {}
        self._mined_nonce = 0

    def _check_available(self, doing: str) -> None:
        if not self.available:
            raise ChainUnavailableError(MEMORY_RPC_URL, f"{doing}: simulated outage")

    def chain_id(self) -> int:
        self._check_available("eth_chainId")
        return self._chain_id

    def registry_address(self) -> str:
        return MEMORY_REGISTRY_ADDRESS

    def operator_address(self) -> str:
        return MEMORY_OPERATOR_ADDRESS

    def latest_size(self, log_id: str) -> int:
        self._check_available("latestSize")
        return self._latest.get(log_id_hash(log_id), 0)

    def root_at(self, log_id: str, size: int) -> bytes | None:
        self._check_available("rootAt")
        return self._roots.get((log_id_hash(log_id), size))

    def build_anchor_tx(
        self,
        log_id: str,
        size: int,
        root: bytes,
        *,
        nonce: int | None = None,
        fees: Fees | None = None,
    ) -> SignedAnchorTx:
        """Raises ValueError, AnchorRefusedError (size not growing), FeesAboveCeilingError,
        ChainUnavailableError."""
        self._check_available("preparing an anchor")
        validate_anchor(size, root)
        latest = self._latest.get(log_id_hash(log_id), 0)
        if size <= latest:
            raise AnchorRefusedError(log_id, "SizeNotGrowing", latest, size)
        if nonce is None:
            nonce = self.account_nonce(latest=False)
        fees = self._fees_now(fees)
        raw = json.dumps(
            {
                "logId": log_id,
                "size": size,
                "root": root.hex(),
                "nonce": nonce,
                "maxFee": fees.max_fee,
                "tip": fees.tip,
            },
            sort_keys=True,
        ).encode()
        return SignedAnchorTx(
            log_id=log_id, size=size, root=bytes(root), nonce=nonce, tx_hash=keccak(raw), raw=raw
        )

    def broadcast(self, tx: SignedAnchorTx) -> None:
        """Raises AnchorError when the nonce is spent by (or queued for) another
        transaction without better fees, ChainUnavailableError when down or a reply is
        "lost"."""
        self._check_available("eth_sendRawTransaction")
        known = tx.tx_hash in self._receipts or tx.tx_hash in self._mempool
        if not known:
            queued = [q for q in self._mempool.values() if q.nonce == tx.nonce]
            taken = tx.nonce < self._mined_nonce or any(
                not self._outbids(q.raw, tx.raw) for q in queued
            )
            if taken:
                raise AnchorError(
                    f"the node refused anchor tx 0x{tx.tx_hash.hex()}: nonce {tx.nonce} "
                    "is already used by another transaction"
                )
            for replaced in queued:
                del self._mempool[replaced.tx_hash]
            self._mempool[tx.tx_hash] = tx
        if self.auto_mine:
            self.mine()
        if not known and self.lose_broadcast_replies > 0:
            self.lose_broadcast_replies -= 1
            raise ChainUnavailableError(MEMORY_RPC_URL, "eth_sendRawTransaction: timed out")

    def mine(self) -> list[AnchorReceipt]:
        """Mine every queued transaction whose nonce is next and whose maxFee covers the base
        fee, one block each."""
        mined: list[AnchorReceipt] = []
        while True:
            ready = [
                tx
                for tx in self._mempool.values()
                if tx.nonce == self._mined_nonce and self._affordable(tx.raw)
            ]
            if not ready:
                return mined
            mined.append(self._execute(ready[0]))

    def _execute(self, tx: SignedAnchorTx) -> AnchorReceipt:
        del self._mempool[tx.tx_hash]
        block_hash = self._new_block()
        self._mined_nonce += 1
        key = log_id_hash(tx.log_id)
        latest = self._latest.get(key, 0)
        ok = tx.size > latest
        if ok:
            self._latest[key] = tx.size
            self._roots[(key, tx.size)] = tx.root
            self._events.append(
                OnChainAnchor(key, tx.size, tx.root, self._block_number, tx.tx_hash)
            )
        execution = (
            MEMORY_EXEC_GAS_REVERTED
            if not ok
            else MEMORY_EXEC_GAS_FIRST_ANCHOR
            if latest == 0
            else MEMORY_EXEC_GAS_LATER_ANCHOR
        )
        gas = intrinsic_gas(anchor_calldata(tx.log_id, tx.size, tx.root)) + execution
        receipt = AnchorReceipt(tx.tx_hash, self._block_number, ok, gas, block_hash)
        self._receipts[tx.tx_hash] = receipt
        return receipt

    def receipt(self, tx_hash: bytes) -> AnchorReceipt | None:
        """(With `auto_mine`, what the mempool holds is mined first, as a node would.)"""
        self._check_available("eth_getTransactionReceipt")
        if self.auto_mine:
            self.mine()
        return self._receipts.get(tx_hash)

    def wait_for_receipt(self, tx_hash: bytes, timeout_s: float) -> AnchorReceipt | None:
        return poll_receipt(self.receipt, tx_hash, timeout_s)

    def account_nonce(self, latest: bool) -> int:
        self._check_available("eth_getTransactionCount")
        return self._mined_nonce if latest else self._mined_nonce + len(self._mempool)

    def nonce_of(self, address: str, latest: bool) -> int:
        return self.account_nonce(latest) if address == MEMORY_OPERATOR_ADDRESS else 0

    def knows(self, tx_hash: bytes) -> bool:
        self._check_available("eth_getTransactionByHash")
        return tx_hash in self._mempool or tx_hash in self._receipts

    def anchors(self, log_id: str) -> list[OnChainAnchor]:
        self._check_available("eth_getLogs")
        key = log_id_hash(log_id)
        return [event for event in self._events if event.log_id_hash == key]

    def block_number(self) -> int:
        self._check_available("eth_blockNumber")
        return self._block_number

    def mine_empty(self, blocks: int = 1) -> None:
        """Mine `blocks` empty blocks (confirmations pile up)."""
        for _ in range(blocks):
            self._new_block()

    def rewind(self, block: int) -> None:
        """Forget every block after `block` (one transaction per block here)."""
        self._receipts = {h: r for h, r in self._receipts.items() if r.block_number <= block}
        self._events = [e for e in self._events if e.block_number <= block]
        self._mempool.clear()
        self._latest = {}
        self._roots = {}
        for event in self._events:
            self._latest[event.log_id_hash] = event.size
            self._roots[(event.log_id_hash, event.size)] = event.root
        self._mined_nonce = len(self._receipts)
        self._forget_blocks_after(block)


def memory_fees_of(raw: bytes) -> Fees | None:
    """The fees the in-memory chains sign into their JSON "raw" bytes (pure)."""
    try:
        data = json.loads(raw)
        return Fees(int(data["maxFee"]), int(data["tip"]))
    except (ValueError, KeyError, TypeError):
        return None
