"""Every expected failure of the market, under one root; that root derives from
`AccordError` (ledger.errors), the root of every expected failure in accord.

AccordError
└── MarketError
    ├── AmountError             an amount is not a whole number of wei, negative, or unparseable
    ├── LimitError              an amount or a window beyond what the chain or the market accepts
    ├── TaskError               a task is malformed, unknown, or not in the state an action needs
    │   ├── TransitionError     a lifecycle transition the state machine does not allow
    │   ├── IdempotencyConflict an idempotency key already posted another task
    │   ├── PanelError          a panel cannot be drawn or a vote is malformed (market.panel)
    │   └── WorkError           a part, check or file of a task spec is invalid (`path` names it)
    ├── BidRejected             a commitment or reveal is refused; `reason` is a stable code
    ├── AuctionError            an auction cannot be cleared (windows still open, nothing to clear)
    │   └── InvalidBidError     a bid the auction must refuse (over budget, a second bid, malformed)
    ├── ReputationError         reputation inputs out of range
    ├── EscrowError             the escrow contract refused or contradicts the market's record
    │   ├── EscrowRefusedError  the contract refuses an action (market.escrow.values; `reason`)
    │   ├── EscrowTxRejectedError  the node refused a signed transaction it does not know
    │   ├── EscrowPendingError  the account has an unresolved escrow transaction
    │   └── DepositRefused      the chain would refuse the requester's deposit (before posting)
    ├── BlobError               a stored file is missing or altered, or the store is away
    │   │                       (market.blobs, as are its subclasses)
    │   ├── MissingBlob         no file is stored under this sha256
    │   └── QuotaExceeded       an upload over a quota (`limit`, `retry_after`)
    └── SettlementError         Shapley values or a wei split cannot be computed from these inputs
        └── SettlementWaits     a check cannot be decided yet (a review window open, a judge down)
"""

from __future__ import annotations

from accord.ledger.errors import AccordError


class MarketError(AccordError):
    """Root of every expected market failure."""


class AmountError(MarketError):
    """An amount is not a whole, non-negative number of wei, or cannot be parsed."""


class LimitError(MarketError):
    """An amount above what a chain account can hold, or a window beyond the market's limits.

    `limit` is the bound that was exceeded (wei, or seconds)."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class TaskError(MarketError):
    """A task is malformed, unknown, or not in the state the action needs."""


class TransitionError(TaskError):
    """The task lifecycle does not allow this transition."""

    def __init__(self, task_id: str, state: str, action: str) -> None:
        super().__init__(f"task {task_id} is {state}: it cannot be {action}")
        self.task_id = task_id
        self.state = state
        self.action = action


class IdempotencyConflict(TaskError):
    """The requester's idempotency key already posted a task with another spec; `task_id`
    is that task."""

    def __init__(self, key: str, task_id: str) -> None:
        super().__init__(
            f"idempotency key {key!r} already posted {task_id} with another spec: "
            "use a new key for a new task"
        )
        self.key = key
        self.task_id = task_id


class WorkError(TaskError):
    """A part, check or file of a task spec is invalid; `path` is the JSON path that names it
    (`$.parts[1].input.figures[0]`), or `$` when the problem is the spec as a whole."""

    def __init__(self, message: str, *, path: str = "$") -> None:
        super().__init__(message)
        self.path = path


class BidRejected(MarketError):
    """A commitment or reveal is refused.

    `reason` is one of: not-eligible, own-task, second-bid, late, early, over-budget,
    mismatch, wrong-task, bad-signature, unknown-commitment, malformed.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


class AuctionError(MarketError):
    """An auction cannot be cleared now."""


class EscrowError(MarketError):
    """The escrow contract refused an action or holds something the market did not expect."""


class DepositRefused(EscrowError):
    """A posting whose deposit the chain would refuse (too little money for the budget and
    its gas, or the contract refusing it): nothing was logged or sent. `address` is the
    account that pays, `amount` the budget in wei it must deposit (gas on top)."""

    def __init__(self, message: str, *, address: str, amount: int) -> None:
        super().__init__(message)
        self.address = address
        self.amount = amount


class InvalidBidError(AuctionError):
    """A revealed bid handed to the auction is not admissible (`reason`: over-budget,
    malformed, second-bid); the reveal checks should have refused it earlier."""

    def __init__(self, bidder: str, reason: str, message: str) -> None:
        super().__init__(f"{reason}: bid of {bidder}: {message}")
        self.bidder = bidder
        self.reason = reason


class ReputationError(MarketError):
    """Reputation inputs are out of range (a quality outside [0, 1], a non-positive prior)."""


class SettlementError(MarketError):
    """Shapley values or a wei split cannot be computed: no players, a duplicate player, a
    coalition value that is not an exact number, a negative amount, or a sampling budget too
    small to state a bound."""


class SettlementWaits(SettlementError):
    """A check cannot be decided yet: a review window is still open, or the judge model could
    not be reached. Nobody is paid on a guess; settling again later continues."""
