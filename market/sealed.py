"""Sealed bids by commit-reveal: the commitment, the signed messages, and the admission checks.

During bidding an agent sends a signed `Commitment`: the SHA-256 of
JCS({"task", "bidder", "price", "salt"}) with the price in wei as a decimal string and the salt
(16 to 64 random bytes) in base64url. During revealing it sends a signed `Reveal` with the price
and salt. The commitment binds the task id and the bidder, and each signature covers the task id,
so a commitment or reveal cannot be replayed into another task or under another bidder.

`check_commitment` and `check_reveal` are numbered checklists that return None or raise
`BidRejected` with a stable `reason`:

- ``wrong-task``          signed for another task (a replay from another task)
- ``bad-signature``       the bidder's signature does not verify
- ``malformed``           not a well-formed commitment or reveal (see the classes)
- ``early`` / ``late``    outside the bidding window (commit) or the reveal window (reveal)
- ``not-eligible``        the bidder lacked valid credentials at commit time
- ``second-bid``          a second commitment, or a second reveal, from one bidder
- ``unknown-commitment``  a reveal with no commitment from that bidder
- ``mismatch``            a reveal that does not hash to the bidder's commitment
- ``over-budget``         a revealed price above the task's budget (a bidder checks its own
                          price before it commits: `check_within_budget`)

Windows are half-open: bidding is ``[bidding_opens, bidding_closes)``, revealing is
``[bidding_closes, reveal_closes)``. Nothing here reads a clock: `now` is passed in.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from accord.ledger.canonical import canonical_json
from accord.ledger.errors import MalformedError, SignatureError
from accord.ledger.signing import Signer, b64url, from_b64url, verify_signature
from accord.market.errors import BidRejected, TaskError
from accord.market.money import Wei
from accord.market.states import FINAL_STATES, TASK_STATES, TaskState

DIGEST_SIZE = 32
SIGNATURE_SIZE = 64
MIN_SALT_SIZE = 16
MAX_SALT_SIZE = 64
MAX_PRICE_DIGITS = 78  # 2**256 - 1 has 78 decimal digits

COMMITMENT_TYPE = "accord.bid.commitment"
REVEAL_TYPE = "accord.bid.reveal"

COMMIT_STATES: frozenset[TaskState] = frozenset({"bidding"})  # posted: no escrow yet, no bids
REVEAL_STATES: frozenset[TaskState] = frozenset({"bidding", "revealing"})

_DECIMAL = re.compile(r"^(0|[1-9][0-9]*)$")


def _malformed(message: str) -> BidRejected:
    return BidRejected("malformed", message)


def _check_did(bidder: object) -> None:
    if not isinstance(bidder, str) or not bidder.startswith("did:"):
        raise _malformed(f"the bidder must be a DID, not {bidder!r}")


def _check_task_id(task_id: object) -> None:
    if not isinstance(task_id, str) or not task_id:
        raise _malformed(f"the task id must be a non-empty string, not {task_id!r}")


def _check_price(price: object) -> None:
    if isinstance(price, bool) or not isinstance(price, int) or price < 0:
        raise _malformed(f"the price must be a whole, non-negative number of wei, not {price!r}")
    if len(str(price)) > MAX_PRICE_DIGITS:
        raise _malformed(f"the price has more than {MAX_PRICE_DIGITS} digits")


def _check_salt(salt: object) -> None:
    if not isinstance(salt, bytes) or not MIN_SALT_SIZE <= len(salt) <= MAX_SALT_SIZE:
        size = len(salt) if isinstance(salt, bytes) else type(salt).__name__
        raise _malformed(
            f"the salt must be {MIN_SALT_SIZE} to {MAX_SALT_SIZE} random bytes, not {size}"
        )


def _check_bytes(name: str, value: object, size: int) -> None:
    if not isinstance(value, bytes) or len(value) != size:
        raise _malformed(f"the {name} must be {size} bytes")


def commitment_hash(task_id: str, bidder_did: str, price: Wei, salt: bytes) -> bytes:
    """SHA-256 of JCS({"task", "bidder", "price": decimal string, "salt": base64url}).

    Raises BidRejected (``malformed``) for a salt outside 16 to 64 bytes, a negative or
    non-integer price, an empty task id or a bidder that is not a DID.
    """
    _check_task_id(task_id)
    _check_did(bidder_did)
    _check_price(price)
    _check_salt(salt)
    preimage = {"task": task_id, "bidder": bidder_did, "price": str(price), "salt": b64url(salt)}
    return hashlib.sha256(canonical_json(preimage)).digest()


def commitment_message(task_id: str, bidder: str, digest: bytes) -> bytes:
    """The bytes a bidder signs to commit: JCS({"type", "task", "bidder", "commitment"})."""
    return canonical_json(
        {"type": COMMITMENT_TYPE, "task": task_id, "bidder": bidder, "commitment": b64url(digest)}
    )


def reveal_message(task_id: str, bidder: str, price: Wei, salt: bytes) -> bytes:
    """The bytes a bidder signs to reveal: JCS({"type", "task", "bidder", "price", "salt"})."""
    return canonical_json(
        {
            "type": REVEAL_TYPE,
            "task": task_id,
            "bidder": bidder,
            "price": str(price),
            "salt": b64url(salt),
        }
    )


def _fields(body: object, keys: frozenset[str], what: str) -> dict[str, Any]:
    if not isinstance(body, dict) or set(body) != keys:
        raise _malformed(f"a {what} has exactly the fields {sorted(keys)}")
    for key in keys:
        if not isinstance(body[key], str):
            raise _malformed(f"{what} field {key!r} must be a string")
    return body


def _bytes_field(body: Mapping[str, str], key: str) -> bytes:
    try:
        return from_b64url(body[key])
    except MalformedError as exc:
        raise _malformed(f"field {key!r}: {exc}") from exc


def _price_field(text: str) -> Wei:
    if not _DECIMAL.fullmatch(text) or len(text) > MAX_PRICE_DIGITS:
        raise _malformed(f"the price must be wei as a decimal string, not {text!r}")
    return Wei(int(text))


@dataclass(frozen=True)
class Commitment:
    """A signed commitment to a sealed bid.

    Raises BidRejected (``malformed``) for an empty task id, a bidder that is not a DID, a
    digest that is not 32 bytes or a signature that is not 64 bytes.
    """

    task_id: str
    bidder: str
    digest: bytes
    signature: bytes

    _KEYS = frozenset({"task", "bidder", "commitment", "signature"})

    def __post_init__(self) -> None:
        _check_task_id(self.task_id)
        _check_did(self.bidder)
        _check_bytes("commitment", self.digest, DIGEST_SIZE)
        _check_bytes("signature", self.signature, SIGNATURE_SIZE)

    def message(self) -> bytes:
        """The signed bytes."""
        return commitment_message(self.task_id, self.bidder, self.digest)

    def to_json(self) -> dict[str, str]:
        return {
            "task": self.task_id,
            "bidder": self.bidder,
            "commitment": b64url(self.digest),
            "signature": b64url(self.signature),
        }

    @classmethod
    def from_json(cls, body: object) -> Commitment:
        """Parse an event body; raises BidRejected (``malformed``) on anything else."""
        fields = _fields(body, cls._KEYS, "commitment")
        return cls(
            fields["task"],
            fields["bidder"],
            _bytes_field(fields, "commitment"),
            _bytes_field(fields, "signature"),
        )


@dataclass(frozen=True)
class Reveal:
    """A signed reveal of a sealed bid.

    Raises BidRejected (``malformed``) for an empty task id, a bidder that is not a DID, a price
    that is not whole non-negative wei, a salt outside 16 to 64 bytes, or a signature that is
    not 64 bytes.
    """

    task_id: str
    bidder: str
    price: Wei
    salt: bytes
    signature: bytes

    _KEYS = frozenset({"task", "bidder", "price", "salt", "signature"})

    def __post_init__(self) -> None:
        _check_task_id(self.task_id)
        _check_did(self.bidder)
        _check_price(self.price)
        _check_salt(self.salt)
        _check_bytes("signature", self.signature, SIGNATURE_SIZE)

    def message(self) -> bytes:
        """The signed bytes."""
        return reveal_message(self.task_id, self.bidder, self.price, self.salt)

    def to_json(self) -> dict[str, str]:
        return {
            "task": self.task_id,
            "bidder": self.bidder,
            "price": str(self.price),
            "salt": b64url(self.salt),
            "signature": b64url(self.signature),
        }

    @classmethod
    def from_json(cls, body: object) -> Reveal:
        """Parse an event body; raises BidRejected (``malformed``) on anything else."""
        fields = _fields(body, cls._KEYS, "reveal")
        return cls(
            fields["task"],
            fields["bidder"],
            _price_field(fields["price"]),
            _bytes_field(fields, "salt"),
            _bytes_field(fields, "signature"),
        )


def commit_bid(signer: Signer, task_id: str, price: Wei, salt: bytes) -> Commitment:
    """The signed commitment of `signer` to bid `price` on `task_id` with `salt`."""
    digest = commitment_hash(task_id, signer.did, price, salt)
    signature = signer.sign(commitment_message(task_id, signer.did, digest))
    return Commitment(task_id, signer.did, digest, signature)


def reveal_bid(signer: Signer, task_id: str, price: Wei, salt: bytes) -> Reveal:
    """The signed reveal of `signer`'s bid of `price` on `task_id` with `salt`."""
    _check_price(price)
    _check_salt(salt)
    signature = signer.sign(reveal_message(task_id, signer.did, price, salt))
    return Reveal(task_id, signer.did, price, salt, signature)


@dataclass(frozen=True)
class SealedTerms:
    """What the bid checks need to know about a task.

    Raises TaskError for an empty task id, a budget below 1 wei, an unknown state, a naive
    datetime, or windows out of order (`bidding_opens ≤ bidding_closes ≤ reveal_closes`).
    """

    task_id: str
    budget: Wei
    state: TaskState
    bidding_opens: datetime
    bidding_closes: datetime
    reveal_closes: datetime
    requester: str = ""
    """The DID that posted the task: it may not bid on it."""

    def __post_init__(self) -> None:
        if not isinstance(self.task_id, str) or not self.task_id:
            raise TaskError(f"a task id must be a non-empty string, not {self.task_id!r}")
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 1:
            raise TaskError(f"a budget must be a whole number of wei ≥ 1, not {self.budget!r}")
        if self.state not in TASK_STATES:
            raise TaskError(f"unknown task state {self.state!r}")
        moments = (self.bidding_opens, self.bidding_closes, self.reveal_closes)
        if any(not isinstance(m, datetime) or m.tzinfo is None for m in moments):
            raise TaskError("the windows must be datetimes that carry their time zone")
        if not self.bidding_opens <= self.bidding_closes <= self.reveal_closes:
            raise TaskError("windows out of order: want opens ≤ bidding closes ≤ reveal closes")


def _check_signature(bidder: str, message: bytes, signature: bytes, what: str) -> None:
    try:
        verify_signature(bidder, message, signature)
    except SignatureError as exc:
        raise BidRejected("bad-signature", f"the {what} is not signed by {bidder}") from exc
    except MalformedError as exc:
        raise _malformed(f"the bidder {bidder!r} is not a did:key: {exc}") from exc


def verify_commitment_signature(commitment: Commitment) -> None:
    """Raises BidRejected (``bad-signature``) unless the bidder signed the commitment."""
    _check_signature(commitment.bidder, commitment.message(), commitment.signature, "commitment")


def verify_reveal_signature(reveal: Reveal) -> None:
    """Raises BidRejected (``bad-signature``) unless the bidder signed the reveal."""
    _check_signature(reveal.bidder, reveal.message(), reveal.signature, "reveal")


def check_commitment(
    commitment: Commitment,
    *,
    terms: SealedTerms,
    committed: Collection[str],
    eligible: bool,
    now: datetime,
) -> None:
    """Admit a commitment or raise BidRejected.

    `committed` holds the bidders already admitted for this task; `eligible` is whether the
    bidder held valid, unrevoked credentials for every required capability at `now`.
    """
    bidder = commitment.bidder
    # (1): signed for this task (a commitment from another task is a replay)
    if commitment.task_id != terms.task_id:
        raise BidRejected(
            "wrong-task", f"the commitment is for task {commitment.task_id}, not {terms.task_id}"
        )
    # (2): signed by the bidder
    _check_signature(bidder, commitment.message(), commitment.signature, "commitment")
    # (3): not the task's own requester (it would be paid, and rated, for its own work)
    if terms.requester and bidder == terms.requester:
        raise BidRejected("own-task", f"{bidder} posted task {terms.task_id} and may not bid on it")
    # (4): inside the bidding window (which opens once the budget is escrowed)
    if terms.state == "posted":
        raise BidRejected(
            "early", f"task {terms.task_id} is not escrowed yet: bidding has not opened"
        )
    if terms.state in FINAL_STATES:
        raise BidRejected(
            "late", f"bidding on task {terms.task_id} has closed: it is {terms.state}"
        )
    if terms.state not in COMMIT_STATES or now >= terms.bidding_closes:
        raise BidRejected("late", f"bidding on task {terms.task_id} has closed")
    if now < terms.bidding_opens:
        raise BidRejected("early", f"bidding on task {terms.task_id} has not opened yet")
    # (5): credentialed for every required capability
    if not eligible:
        raise BidRejected(
            "not-eligible",
            f"{bidder} holds no valid credentials for every capability task "
            f"{terms.task_id} requires",
        )
    # (6): one commitment per bidder
    if bidder in committed:
        raise BidRejected("second-bid", f"{bidder} has already committed to task {terms.task_id}")


def check_reveal(
    reveal: Reveal,
    *,
    terms: SealedTerms,
    commitments: Mapping[str, Commitment],
    revealed: Collection[str],
    now: datetime,
) -> None:
    """Admit a reveal or raise BidRejected.

    `commitments` maps each bidder to its admitted commitment for this task; `revealed` holds
    the bidders whose reveal was already admitted.
    """
    bidder = reveal.bidder
    # (1): signed for this task (a reveal from another task is a replay)
    if reveal.task_id != terms.task_id:
        raise BidRejected(
            "wrong-task", f"the reveal is for task {reveal.task_id}, not {terms.task_id}"
        )
    # (2): signed by the bidder
    _check_signature(bidder, reveal.message(), reveal.signature, "reveal")
    # (3): inside the reveal window
    if terms.state in FINAL_STATES:
        raise BidRejected(
            "late", f"the reveal window of task {terms.task_id} has closed: it is {terms.state}"
        )
    if terms.state == "posted" or now < terms.bidding_closes:
        raise BidRejected("early", f"the reveal window of task {terms.task_id} is not open yet")
    if terms.state not in REVEAL_STATES or now >= terms.reveal_closes:
        raise BidRejected("late", f"the reveal window of task {terms.task_id} has closed")
    # (4): there is a commitment to reveal
    commitment = commitments.get(bidder)
    if commitment is None:
        raise BidRejected(
            "unknown-commitment", f"{bidder} made no commitment to task {terms.task_id}"
        )
    # (5): one reveal per bidder
    if bidder in revealed:
        raise BidRejected("second-bid", f"{bidder} has already revealed on task {terms.task_id}")
    # (6): it opens the commitment (which binds the task id, the bidder, the price and salt)
    if commitment_hash(terms.task_id, bidder, reveal.price, reveal.salt) != commitment.digest:
        raise BidRejected(
            "mismatch",
            f"the price and salt do not open {bidder}'s commitment to task {terms.task_id}",
        )
    # (7): within the budget
    check_within_budget(terms.task_id, reveal.price, terms.budget)


def check_within_budget(task_id: str, price: Wei, budget: Wei) -> None:
    """Raises BidRejected (``over-budget``) when `price` exceeds the task's `budget`.

    The market checks it at the reveal (step 7 of `check_reveal`): the commitment is a hash,
    so nobody but the bidder knows the price before then. A bidder checks its own price with
    it before committing (`accord bid commit`, `Home.bid`), so an over-budget bid is refused
    before it is sent rather than forfeited at the reveal.
    """
    if price > budget:
        raise BidRejected(
            "over-budget",
            f"price {price} wei exceeds the budget of task {task_id} ({budget} wei)",
        )


def forfeited(commitments: Iterable[Commitment], reveals: Iterable[Reveal]) -> list[str]:
    """Bidders who committed and never revealed, in commitment order.

    `reveals` should hold only admitted reveals: a rejected reveal leaves its commitment
    forfeited.
    """
    revealed = {reveal.bidder for reveal in reveals}
    seen: set[str] = set()
    result: list[str] = []
    for commitment in commitments:
        if commitment.bidder not in revealed and commitment.bidder not in seen:
            result.append(commitment.bidder)
        seen.add(commitment.bidder)
    return result
