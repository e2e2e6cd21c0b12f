"""Every expected failure of the ledger, under one root; and the root of accord's.

`AccordError` is the one root of every expected failure anywhere in accord (re-exported as
`accord.AccordError`); it lives here because every other package may import `ledger`:

    AccordError
    ├── LedgerError         ledger.errors (below)
    ├── IdentityError       identity.errors
    ├── MarketError         market.errors
    ├── CoordinatorError    coordinator.errors
    ├── AuditFailure        audit.checks: one audit checklist step does not hold
    ├── AuditUnchecked      audit.checks: a step held as far as it could be re-run here
    ├── AuditPending        audit.checks: a step holds so far; the rest is not due yet
    ├── ApiError            accord.client: a call to an accord service failed
    ├── FetchError          api.credential_check: a document could not be fetched as JSON
    └── AuthError           identity.http_signatures: a request's signature does not hold

The ledger's own:

    LedgerError
    ├── CanonicalizationError   a value cannot be put into RFC 8785 canonical JSON
    ├── MalformedError          bytes or JSON that do not parse into an event, entry or checkpoint
    ├── SignatureError          a signature does not verify, or a key id does not match its actor
    ├── SequenceError           an actor's seq does not grow
    ├── ProofError              an inclusion or consistency proof does not hold
    │   └── SealError               sealed bytes do not open to the commitment the log names
    ├── StoreError              the log database refused or lost a write
    ├── AlreadyLoggedError      a once-per-subject event kind is already logged for that subject
    ├── ChainError              anything on the chain side
    │   ├── ChainUnavailableError   the RPC endpoint does not answer
    │   ├── DeploymentError         a recorded contract is missing or has other code
    │   ├── FeesAboveCeilingError   the fee market is above ACCORD_MAX_FEE_GWEI; nothing was sent
    │   └── AnchorError             the registry refused an anchor, or a pending one is unresolved
    │       └── AnchorRefusedError  the registry refused one (ledger.chain; `reason` its error)
    ├── DevnetError             the managed anvil could not be started, found or stopped
    │   └── ChainMismatchError  the recorded RPC URL serves another chain (ledger.devnet)
    ├── HomeError               ACCORD_HOME cannot be (or, for a read, is not yet) accord's home
    ├── QueryError              a read view's filter, limit or cursor is not one it answers
    └── VerificationError       `ledger verify` found a step that does not hold

Every subclass of AccordError, wherever it is defined, is drawn in its package's tree (one
defined beside the code that raises it names its module there); `tests/ledger/test_error_root.py`
holds each drawing to the classes. Each subclass carries the offending value where there is
one, so a caller can report it without parsing the message.
"""

from __future__ import annotations


class AccordError(Exception):
    """Root of every expected failure in accord: catch this to catch them all."""


class LedgerError(AccordError):
    """Root of every expected ledger failure."""


class CanonicalizationError(LedgerError):
    """A value has no RFC 8785 form (a float, a non-string key, an out-of-range integer...)."""


class MalformedError(LedgerError):
    """Input does not parse into the structure it claims to be."""


class SignatureError(LedgerError):
    """A signature is invalid, or its key id does not belong to the event's actor."""


class SequenceError(LedgerError):
    """An actor's `seq` did not strictly grow."""

    def __init__(self, actor: str, seq: int, last_seq: int) -> None:
        super().__init__(f"seq {seq} for {actor} does not grow: the last one logged is {last_seq}")
        self.actor = actor
        self.seq = seq
        self.last_seq = last_seq


class ProofError(LedgerError):
    """A Merkle inclusion or consistency proof does not hold."""


class SealError(ProofError):
    """Sealed bytes do not open to the commitment the log names (`accord.ledger.sealing`)."""


class StoreError(LedgerError):
    """The log database refused a write or holds data the ledger cannot read."""


class AlreadyLoggedError(LedgerError):
    """An event of a kind logged at most once per subject is already in the log for that
    subject; nothing of the batch was written.

    `index` is the log index of the one already logged (None when the clash is inside the
    batch itself).
    """

    def __init__(self, kind: str, subject: str, index: int | None) -> None:
        where = f"at entry {index}" if index is not None else "twice in one batch"
        super().__init__(f"{kind} is already logged for {subject!r} ({where}); it is logged once")
        self.kind = kind
        self.subject = subject
        self.index = index


class QueryError(LedgerError):
    """A query of a read view (`accord.ledger.views`) names a filter value, limit or cursor it does
    not answer; `parameter` names the one (`state`, `limit`, `cursor`, ...)."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


class ChainError(LedgerError):
    """Root of chain-side failures."""


class ChainUnavailableError(ChainError):
    """The RPC endpoint does not answer; nothing was sent, retry once it is back."""

    def __init__(self, rpc_url: str, reason: str) -> None:
        super().__init__(
            f"the chain at {rpc_url} does not answer ({reason}); "
            "start it with `accord devnet up` or check ACCORD_RPC_URL"
        )
        self.rpc_url = rpc_url


class DeploymentError(ChainError):
    """A recorded deployment is missing on the chain or has different code."""


def gwei_text(wei: int) -> str:
    """Wei per gas as exact gwei for a message ("1.5", "0.000000001"), never through a float."""
    whole, fraction = divmod(wei, 10**9)
    return f"{whole}.{fraction:09d}".rstrip("0").rstrip(".")


class FeesAboveCeilingError(ChainError):
    """The fees a transaction needs now are above the configured ceiling (ACCORD_MAX_FEE_GWEI);
    nothing new was signed or sent. `needed` and `ceiling` are wei per gas."""

    def __init__(self, needed: int, ceiling: int, doing: str) -> None:
        super().__init__(
            f"fees above your ceiling: {doing} needs {gwei_text(needed)} gwei per gas, "
            f"ACCORD_MAX_FEE_GWEI allows {gwei_text(ceiling)}; raise it or wait for cheaper blocks"
        )
        self.needed = needed
        self.ceiling = ceiling


class AnchorError(ChainError):
    """The registry refused an anchor, or a pending anchor could not be reconciled."""


class DevnetError(LedgerError):
    """The managed anvil devnet could not be started, found or stopped."""


class HomeError(LedgerError):
    """ACCORD_HOME is not a private folder accord can use: a file, a path that cannot be
    created, another user's folder, one this user cannot write; or, for a read command, it does
    not exist yet (`missing`). `home` is the path."""

    def __init__(self, home: str, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.home = home
        self.missing = missing


class VerificationError(LedgerError):
    """A verification checklist step failed.

    `step` is the checklist number, `entry` the log index it failed on (or None).
    """

    def __init__(self, step: int, message: str, entry: int | None = None) -> None:
        where = f" at entry {entry}" if entry is not None else ""
        super().__init__(f"step {step}{where}: {message}")
        self.step = step
        self.entry = entry
        self.reason = message
