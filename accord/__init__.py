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
`import accord` is cheap, and it changes nothing of the host's process (no import hook, no
recursion limit: the `accord` command and the service set those up, `accord._process`).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    __version__: str

    from accord._home import Home, open_home
    from accord.audit.checks import AuditReport
    from accord.client import AccordClient as Client
    from accord.coordinator.errors import CoordinatorError
    from accord.identity.errors import IdentityError
    from accord.ledger.errors import AccordError, LedgerError
    from accord.ledger.settings import Settings
    from accord.market.deliverable import Deliverable, DeliveredPart
    from accord.market.errors import MarketError
    from accord.market.money import Wei, format_eth, parse_amount
    from accord.market.tasks import Task, TaskSpec
    from accord.market.views import TaskPage

_EXPORTS = {
    "Home": ("accord._home", "Home"),
    "open_home": ("accord._home", "open_home"),
    "Client": ("accord.client", "AccordClient"),
    "Settings": ("accord.ledger.settings", "Settings"),
    "TaskSpec": ("accord.market.tasks", "TaskSpec"),
    "Task": ("accord.market.tasks", "Task"),
    "TaskPage": ("accord.market.views", "TaskPage"),
    "Deliverable": ("accord.market.deliverable", "Deliverable"),
    "DeliveredPart": ("accord.market.deliverable", "DeliveredPart"),
    "AuditReport": ("accord.audit.checks", "AuditReport"),
    "Wei": ("accord.market.money", "Wei"),
    "parse_amount": ("accord.market.money", "parse_amount"),
    "format_eth": ("accord.market.money", "format_eth"),
    "AccordError": ("accord.ledger.errors", "AccordError"),
    "LedgerError": ("accord.ledger.errors", "LedgerError"),
    "IdentityError": ("accord.identity.errors", "IdentityError"),
    "MarketError": ("accord.market.errors", "MarketError"),
    "CoordinatorError": ("accord.coordinator.errors", "CoordinatorError"),
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


def _version() -> str:
    """The installed distribution's version (importlib.metadata, some 30 ms of start-up: read
    when asked for, not at import)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("accord")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    """The public names, imported on first use (`__version__` too)."""
    if name == "__version__":
        globals()[name] = value = _version()
        return value
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'accord' has no attribute {name!r}") from None
    value = getattr(import_module(module), attribute)
    globals()[name] = value
    return value
