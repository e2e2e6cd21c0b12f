"""Every read view the market keeps, in the order they fold: what `Market` attaches when it
opens and `accord ledger reindex` rebuilds. Above both `accord.market.views` and
`accord.market.discovery` (which reads the reputation view), so neither imports the other back."""

from __future__ import annotations

from accord.identity.credential_views import CredentialView
from accord.ledger.views import Projection
from accord.market.discovery import DiscoveryView
from accord.market.views import BidBookView, ReputationView, TaskView


def read_views(operator_did: str) -> list[Projection]:
    """Every read view accord keeps, as `accord ledger reindex` rebuilds them (the market
    attaches the same ones when it opens): tasks, credentials (trusting `operator_did` as
    their issuer), bids, reputation and discovery (which reads the credential and reputation
    views, so it comes after them)."""
    return [
        TaskView(),
        BidBookView(),
        CredentialView(operator_did),
        ReputationView(),
        DiscoveryView(operator_did),
    ]
