"""Telling the winner: when the service awards a task by itself (`accord.market.lifecycle`), a
winner that keeps its own key and has an endpoint hears of it at once, instead of at its next poll.

    POST {the origin of the agent's endpoint}/accord/notify
    {"event": "task.awarded", "task_id": "...", "winner": "did:key:...", "index": N}

`index` is the log index of the `task.awarded` entry (the agent can fetch it and check it).
The request is signed by the operator's key (RFC 9421, tag "accord-call"), so the agent can
tell it from anyone's with `accord.identity.http_signatures.verify_accord_call`. It goes through
`accord.identity.address_guard.agent_client`: no redirect followed, and no private address unless
the service allows private agents.

A notice is a courtesy, not a step of the lifecycle: it is sent from a daemon thread with a
short timeout, and a failure (the agent away, a refusal, a private address) is logged and
otherwise ignored; the agent also polls. Hosted agents (their keys in the operator's home)
and agents without an endpoint are not told.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from accord.identity.address_guard import agent_client
from accord.identity.registration import SELF
from accord.ledger.errors import AccordError
from accord.ledger.signing import Signer
from accord.market.tasks import TASK_AWARDED

if TYPE_CHECKING:
    from accord.market.wiring import MarketContext

NOTIFY_PATH = "/accord/notify"
NOTIFY_TIMEOUT = 5.0
"""Seconds a notice may take, connection included."""

log = logging.getLogger("accord.notices")


@dataclass(frozen=True)
class Notice:
    """One notice to send: where, and the JSON body."""

    url: str
    body: dict[str, Any]


def notify_url(endpoint: str) -> str:
    """Where an agent takes notices: its endpoint's origin + `/accord/notify`."""
    parts = urlsplit(endpoint)
    return urlunsplit((parts.scheme, parts.netloc, NOTIFY_PATH, "", ""))


def award_notice(context: MarketContext, task_id: str) -> Notice | None:
    """The notice telling `task_id`'s winner it won, or None when there is nobody to tell:
    no winner (the task expired), a winner this service holds the key of (hosted), or one
    without an endpoint.

    Raises what reading the task, the registry and the log raises (AccordError).
    """
    market = context.market
    task = market.task(task_id)
    if task.winner is None:
        return None
    onboarding = context.onboarding
    agent = onboarding.registry.get(task.winner)
    if agent.endpoint is None or onboarding.registration.custody(agent) != SELF:
        return None
    index = market.ledger.store.once_logged(TASK_AWARDED, task_id)
    body = {"event": TASK_AWARDED, "task_id": task_id, "winner": task.winner, "index": index}
    return Notice(notify_url(agent.endpoint), body)


def send_notice(
    notice: Notice,
    *,
    operator: Signer | None,
    allow_private: bool,
    timeout: float = NOTIFY_TIMEOUT,
) -> bool:
    """POST `notice`, signed by `operator`; True when the agent took it (a 2xx reply). Never
    raises for the agent's failure: it is logged (a warning) and False returned."""
    try:
        with agent_client(timeout, allow_private=allow_private, operator=operator) as client:
            response = client.post(notice.url, json=notice.body)
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        log.warning("could not tell %s at %s: %s", notice.body["winner"], notice.url, exc)
        return False
    if not 200 <= response.status_code < 300:
        log.warning(
            "%s at %s did not take the notice: HTTP %s %s",
            notice.body["winner"],
            notice.url,
            response.status_code,
            response.text[:200],
        )
        return False
    log.info("told %s it won %s", notice.body["winner"], notice.body["task_id"])
    return True


def tell_winner(
    context: MarketContext, task_id: str, *, timeout: float = NOTIFY_TIMEOUT
) -> threading.Thread | None:
    """Tell `task_id`'s winner it won (`award_notice`), signed by the operator, from a daemon
    thread (returned, for a caller that wants to wait; None when nobody is told). Never
    raises for an expected failure: a task or agent that cannot be read is logged."""
    try:
        notice = award_notice(context, task_id)
    except AccordError as exc:
        log.warning("cannot tell the winner of %s: %s", task_id, exc)
        return None
    if notice is None:
        return None
    registry = context.onboarding.registry
    thread = threading.Thread(
        target=send_notice,
        args=(notice,),
        kwargs={
            "operator": context.market.ledger.operator,
            "allow_private": registry.allow_private_agents,
            "timeout": timeout,
        },
        name=f"accord-notice-{task_id}",
        daemon=True,
    )
    thread.start()
    return thread


__all__ = [
    "NOTIFY_PATH",
    "NOTIFY_TIMEOUT",
    "Notice",
    "award_notice",
    "notify_url",
    "send_notice",
    "tell_winner",
]
