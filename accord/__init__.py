"""accord as a library: one import to embed the trust and economics layer.

    import accord

    with accord.open_home("./.accord") as home:          # SQLite, a managed anvil devnet
        alice = home.new_agent("alice")                 # a did:key agent, reference runtime
        home.onboard(alice, ["arithmetic"])             # exam, then a credential
        task = home.post({...task spec...})             # parts, checks; budget escrowed
        home.bid(task.task_id, alice, "0.1eth")         # sealed: commit now...
        home.reveal_bids(task.task_id)                  # ...reveal once bidding has closed
        home.award(task.task_id); home.run(task.task_id)
        home.deliverable(task.task_id)                  # the requester's deliverable
        home.settle(task.task_id); home.audit(task.task_id).ok
        home.tasks(state="bidding", capability="arithmetic")   # a page; .next_cursor the next

`accord.Client(url, signer)` is the HTTP client of a remote `accord serve`. Everything here is
a thin layer over the packages (`ledger`, `identity`, `market`, `coordinator`, `audit`); their
errors all derive from `AccordError` (catch it to catch every expected failure) through the
package roots re-exported below. Nothing is imported until it is used, so
`import accord` is cheap.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accord._home import Home, open_home
    from api.client import AccordClient as Client
    from audit.checks import AuditReport
    from coordinator.errors import CoordinatorError
    from identity.errors import IdentityError
    from ledger.errors import AccordError, LedgerError
    from ledger.settings import Settings
    from market.deliverable import Deliverable, DeliveredPart
    from market.errors import MarketError
    from market.money import Wei, format_eth, parse_amount
    from market.tasks import Task, TaskSpec
    from market.views import TaskPage

try:
    __version__ = version("accord")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

_EXPORTS = {
    "Home": ("accord._home", "Home"),
    "open_home": ("accord._home", "open_home"),
    "Client": ("api.client", "AccordClient"),
    "Settings": ("ledger.settings", "Settings"),
    "TaskSpec": ("market.tasks", "TaskSpec"),
    "Task": ("market.tasks", "Task"),
    "TaskPage": ("market.views", "TaskPage"),
    "Deliverable": ("market.deliverable", "Deliverable"),
    "DeliveredPart": ("market.deliverable", "DeliveredPart"),
    "AuditReport": ("audit.checks", "AuditReport"),
    "Wei": ("market.money", "Wei"),
    "parse_amount": ("market.money", "parse_amount"),
    "format_eth": ("market.money", "format_eth"),
    "AccordError": ("ledger.errors", "AccordError"),
    "LedgerError": ("ledger.errors", "LedgerError"),
    "IdentityError": ("identity.errors", "IdentityError"),
    "MarketError": ("market.errors", "MarketError"),
    "CoordinatorError": ("coordinator.errors", "CoordinatorError"),
}

__all__ = [
    "AccordError",
    "AuditReport",
    "Client",
    "CoordinatorError",
    "Deliverable",
    "DeliveredPart",
    "Home",
    "IdentityError",
    "LedgerError",
    "MarketError",
    "Settings",
    "Task",
    "TaskPage",
    "TaskSpec",
    "Wei",
    "__version__",
    "format_eth",
    "open_home",
    "parse_amount",
]


def __getattr__(name: str) -> Any:
    """The public names, imported on first use."""
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'accord' has no attribute {name!r}") from None
    value = getattr(import_module(module), attribute)
    globals()[name] = value
    return value
