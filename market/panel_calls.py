"""Calling a dispute's panelists in their own processes: a POST to each agent's `/panel`
(its endpoint's origin), signed by the operator (RFC 9421, as notices are), answered with the
panelist's own signed entry (`{"entry": ...}`): its commitment, then its vote. A panelist
that cannot be reached, or answers anything else, is left to the commit window and its
replacement (`accord.market.disputes.ask_panel`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from accord.identity.address_guard import agent_client
from accord.identity.onboarding import Onboarding
from accord.identity.registration import SELF
from accord.ledger.errors import AccordError
from accord.ledger.signing import Signer

PANEL_PATH = "/panel"
PANEL_CALL_TIMEOUT = 30.0
"""Seconds a panelist may take to answer one call (its evaluation included)."""

log = logging.getLogger("accord.panel")

Call = Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None]


def panel_url(endpoint: str) -> str:
    """Where an agent answers panel calls: its endpoint's origin + `/panel`."""
    parts = urlsplit(endpoint)
    return urlunsplit((parts.scheme, parts.netloc, PANEL_PATH, "", ""))


def panelist_caller(
    onboarding: Onboarding, operator: Signer, *, timeout: float = PANEL_CALL_TIMEOUT
) -> Call:
    """`call(did, request)` for `ask_panel`: the panelist's signed entry, or None (logged)
    when it has no endpoint, is not self-custody, cannot be reached or answers no entry."""
    registry = onboarding.registry

    def call(did: str, request: Mapping[str, Any]) -> Mapping[str, Any] | None:
        try:
            agent = registry.get(did)
            if agent.endpoint is None or onboarding.registration.custody(agent) != SELF:
                return None
            url = panel_url(agent.endpoint)
        except AccordError as exc:
            log.warning("cannot call panelist %s: %s", did, exc)
            return None
        try:
            with agent_client(
                timeout, allow_private=registry.allow_private_agents, operator=operator
            ) as client:
                response = client.post(url, json=dict(request))
            answer = response.json() if 200 <= response.status_code < 300 else None
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            log.warning("panelist %s at %s did not answer: %s", did, url, exc)
            return None
        entry = answer.get("entry") if isinstance(answer, dict) else None
        if not isinstance(entry, dict):
            log.warning(
                "panelist %s at %s answered no entry (HTTP %s)", did, url, response.status_code
            )
            return None
        return entry

    return call
