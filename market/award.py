"""The award as the log determines it: the admitted bids of a task, read back from its
`bid.committed` and `bid.revealed` events (`BidBook`), and the auction cleared from them
again, every bid re-checked (`replay_award`). Pure: the market awards by exactly this, and an
auditor replays exactly this from the log's verified events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from accord.ledger.events import Event
from accord.market import sealed
from accord.market.auction import AuctionOutcome, RevealedBid, clear_auction
from accord.market.errors import BidRejected
from accord.market.tasks import BID_COMMITTED, BID_REVEALED, Task


@dataclass(frozen=True)
class AdmittedCommitment:
    """A commitment the operator admitted: its ledger index and the bidder's exam score then."""

    index: int
    commitment: sealed.Commitment
    exam_score: Fraction


@dataclass(frozen=True)
class AdmittedReveal:
    index: int
    reveal: sealed.Reveal


@dataclass
class BidBook:
    """The admitted bids of one task, keyed by bidder, in log order."""

    commitments: dict[str, AdmittedCommitment] = field(default_factory=dict)
    reveals: dict[str, AdmittedReveal] = field(default_factory=dict)
    last_index: int = -1

    def add(self, index: int, event: Event) -> None:
        """Take one bid event. Raises BidRejected (malformed) for a body that is not a bid."""
        if event.kind == BID_COMMITTED:
            commitment = sealed.Commitment.from_json(event.body["commitment"])
            self.commitments[commitment.bidder] = AdmittedCommitment(
                index, commitment, Fraction(event.body["exam_score"])
            )
        elif event.kind == BID_REVEALED:
            reveal = sealed.Reveal.from_json(event.body["reveal"])
            self.reveals[reveal.bidder] = AdmittedReveal(index, reveal)
        self.last_index = index

    def copy(self) -> BidBook:
        return BidBook(dict(self.commitments), dict(self.reveals), self.last_index)


def replay_award(
    task: Task,
    commitments: Sequence[AdmittedCommitment],
    reveals: Sequence[AdmittedReveal],
    reputations: Mapping[str, Fraction],
) -> tuple[AuctionOutcome, list[str]]:
    """Clear `task`'s auction from its logged bids, checking again what admission checked:
    each commitment and reveal is signed by its bidder for this task, no bidder is the task's
    requester, each reveal opens its commitment and is within the budget. Pure: an auditor
    runs exactly this.

    Raises BidRejected when a logged bid does not hold (a log that was tampered with).
    """
    committed = {admitted.commitment.bidder: admitted for admitted in commitments}
    for admitted in commitments:
        commitment = admitted.commitment
        if commitment.task_id != task.task_id:
            raise BidRejected("wrong-task", f"entry {admitted.index} commits to another task")
        if commitment.bidder == task.requester:
            raise BidRejected("own-task", f"entry {admitted.index} is the requester's own bid")
        sealed.verify_commitment_signature(commitment)
    bids = []
    for shown in reveals:
        reveal = shown.reveal
        commitment_of = committed.get(reveal.bidder)
        if commitment_of is None:
            raise BidRejected("unknown-commitment", f"entry {shown.index} reveals no commitment")
        if reveal.task_id != task.task_id:
            raise BidRejected("wrong-task", f"entry {shown.index} reveals for another task")
        sealed.verify_reveal_signature(reveal)
        opened = sealed.commitment_hash(task.task_id, reveal.bidder, reveal.price, reveal.salt)
        if opened != commitment_of.commitment.digest:
            raise BidRejected("mismatch", f"entry {shown.index} does not open its commitment")
        bids.append(
            RevealedBid(
                bidder=reveal.bidder,
                price=reveal.price,
                reputation=reputations[reveal.bidder],
                exam_score=commitment_of.exam_score,
                committed_at_index=commitment_of.index,
            )
        )
    outcome = clear_auction(
        bids, budget=task.spec.budget, weights=task.spec.weights, rule=task.spec.rule
    )
    forfeits = sealed.forfeited((c.commitment for c in commitments), (r.reveal for r in reveals))
    return outcome, forfeits
