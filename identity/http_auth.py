"""httpx authentication by RFC 9421 signatures (the rules are `accord.identity.http_signatures`).

One class, for both directions:

    AccordAuth(signer)                  signs a request to the accord service as its caller
                                        (tag "accord"): what clients, agents and requesters use
    AccordAuth(operator, tag=CALL_TAG)  signs a call accord makes to an agent as the operator
                                        (tag "accord-call"): what `accord.identity.address_guard.
                                        agent_client` adds when it is given the operator's key
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

import httpx

from accord.identity.http_signatures import CALL_TAG, TAG, sign_request
from accord.ledger.signing import Signer

__all__ = ["CALL_TAG", "TAG", "AccordAuth"]

_Request = TypeVar("_Request", bound=Any)


class AccordAuth(httpx.Auth):
    """httpx authentication that signs every request as `signer` with tag `tag` (see
    `accord.identity.http_signatures.sign_request`)."""

    requires_request_body = True

    def __init__(self, signer: Signer, *, tag: str = TAG) -> None:
        self.signer = signer
        self.tag = tag

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        yield self(request)

    def __call__(self, request: _Request) -> _Request:
        """Sign one request in place (also usable as a plain callable auth, for clients
        built on an httpx-compatible package such as Starlette's TestClient)."""
        request.headers.update(
            sign_request(
                self.signer,
                request.method,
                str(request.url),
                request.content,
                content_type=request.headers.get("content-type"),
                tag=self.tag,
            )
        )
        return request
