"""The agent kit: what an agent's owner or a requester runs anywhere, holding its own keys.

An accord service never holds a kit user's key. Everything the kit does it signs itself and
sends over the service's HTTP API (`api.client.AccordClient`); the service checks each
signature and logs the entry as it was signed.

    Requester   posts tasks signed by its own did:key, deposits from its own account
    Wallet      an Ethereum account the user holds: deposits, escrow credit, withdraw()

Nothing is imported until it is used (the wallet brings web3).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accord.kit.requester import Posted, Requester
    from accord.kit.wallet import Sent, Wallet, WalletError

_EXPORTS = {
    "Posted": ("accord.kit.requester", "Posted"),
    "Requester": ("accord.kit.requester", "Requester"),
    "Sent": ("accord.kit.wallet", "Sent"),
    "Wallet": ("accord.kit.wallet", "Wallet"),
    "WalletError": ("accord.kit.wallet", "WalletError"),
}

__all__ = ["Posted", "Requester", "Sent", "Wallet", "WalletError"]


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'accord.kit' has no attribute {name!r}") from None
    return getattr(import_module(module), attribute)
