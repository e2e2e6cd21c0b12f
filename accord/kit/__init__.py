"""The agent kit: what an agent's owner or a requester runs anywhere, holding its own keys.

An accord service never holds a kit user's key. Everything the kit does it signs itself and
sends over the service's HTTP API (`accord.client.AccordClient`); the service checks each
signature and logs the entry as it was signed.

    agent       `KitAgent`: register, sit exams, bind a payout account, bid, lead (`accord
                agent run`)
    leader      leading a team in the agent's own process, relaying its signed entries
    server      the agent's own HTTP service: /run, /sign, /accord/notify
    handlers    what does the work: reference, python, command, http, openai, a2a
    requester   `Requester`: posts tasks signed by its own did:key, deposits from its own
                account, reviews, withdraws refunds
    wallet      `Wallet`: an Ethereum account the user holds: deposits, escrow credit,
                withdraw()

Its errors of its own: two drawn under identity's tree (a handler is an agent's runtime), and
the wallet's under the market's (it moves escrowed money):

RegistryError
└── HandlerError   a handler spec that names nothing that can answer (handlers)
IdentityError
└── PreflightError the handler answered no practice item: no exam is started (practice)
MarketError
└── WalletError    the wallet refuses to sign, cannot read its key, or its transaction
    │              was not mined or reverted (wallet)
    └── AnswerError  an answer to a dispute the log shows the service would refuse: not
                     on the team, no such rejection, under its fee, an unbound account;
                     nothing sent (leader)

`Requester`, `Posted`, `Wallet`, `Sent` and `WalletError` are importable from here; nothing
is imported until it is used (the wallet brings web3).
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
