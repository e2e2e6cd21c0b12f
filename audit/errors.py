"""The audit package's errors: what an auditor outside the service meets before any check runs.

`AuditFailure`, `AuditUnchecked` and `AuditPending` (a step that does not hold, could not be
re-run, or is not due yet) live with the checklist in `accord.audit.checks`, under the root.

    LedgerError
    └── PublishedLogError   what the service publishes cannot be read as a log
"""

from __future__ import annotations

from accord.ledger.errors import LedgerError


class PublishedLogError(LedgerError):
    """What the service publishes cannot be read as a log: it does not answer, or its answer
    is not the shape `GET /ledger/entries`, `/ledger/checkpoints` or `/chain` gives. (An answer
    of the right shape whose content does not hold is reported by the checklist instead.)"""
