"""A small typed client of the accord service, for the CLI's `--server URL` and for scripts.

    with AccordClient("http://127.0.0.1:8600") as client:
        for task in client.tasks():
            ...

Reads are plain GETs; with a `signer`, every request is signed
(`accord.identity.http_auth.AccordAuth`), as the mutating routes require. Every failure (the service
unreachable, a problem+json answer, a body that is not JSON) is raised as one `ApiError` whose
message a person can act on. A read the service rate-limits (429) is asked again after the pause
its Retry-After names, for at most `rate_limit_wait` seconds in all (`retry_after`); a write is
not (its caller decides whether sending it again is safe).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, cast
from urllib.parse import quote

import httpx

from accord.identity.http_auth import AccordAuth
from accord.identity.tls import tls_context
from accord.ledger.errors import AccordError
from accord.ledger.events import parse_time
from accord.ledger.fast_entries import make_entry
from accord.ledger.signing import Signer

SERVER_ENV = "ACCORD_SERVER"
NEXT_CURSOR_HEADER = "Accord-Next-Cursor"
"""The header of a paged list's answer that holds the next page's cursor
(`accord.api.routes.deps`)."""
DEFAULT_TIMEOUT = 30.0
RATE_LIMIT_WAIT_S = 60.0
"""How long in all a rate-limited (429) read waits for the service before it is an error."""

JsonObject = dict[str, Any]


def retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float:
    """The seconds a 429 answer's Retry-After asks to wait (delta-seconds or an HTTP date,
    RFC 9110 10.2.3); 1 when it is absent or unreadable, never below 0."""
    value = headers.get("Retry-After", "").strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return 1.0
    return max(0.0, when - (time.time() if now is None else now))


class ApiError(AccordError):
    """A call to the service failed; `status` is the HTTP status (None: no answer at all)."""

    def __init__(self, message: str, status: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def _segment(value: str) -> str:
    return quote(value, safe="")


class AccordClient:
    """The service at `base_url`; with `signer`, each request is signed as that DID."""

    def __init__(
        self,
        base_url: str,
        *,
        signer: Signer | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        rate_limit_wait: float = RATE_LIMIT_WAIT_S,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ApiError(f"the server URL {base_url!r} must start with http:// or https://")
        self.base_url = base_url.rstrip("/")
        self.signer = signer
        self.rate_limit_wait = rate_limit_wait
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            auth=AccordAuth(signer) if signer is not None else None,
            transport=transport,
            headers={"Accept": "application/json"},
            verify=tls_context(),  # one per process, not one per client (identity/tls.py)
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AccordClient | None:
        """A client of `$ACCORD_SERVER`, or None when it is not set."""
        url = (env if env is not None else os.environ).get(SERVER_ENV)
        return cls(url) if url else None

    def __enter__(self) -> AccordClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- the calls ------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """The JSON answer of one call (`headers` added to it). Raises ApiError."""
        response = self._send(method, path, params=params, json=json, headers=headers)
        return self._json(method, path, response)

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """The answer of one call, when it is not an error; a rate-limited read is asked
        again as its Retry-After says, within `rate_limit_wait`. Raises ApiError."""
        where = f"{method} {self.base_url}{path}"
        waited = 0.0
        while True:
            try:
                response = self._http.request(
                    method, path, params=params, json=json, headers=headers
                )
            except httpx.TimeoutException as exc:
                raise ApiError(f"{where}: the service did not answer in time ({exc})") from exc
            except httpx.HTTPError as exc:
                raise ApiError(
                    f"cannot reach the accord service at {self.base_url}: {exc} "
                    f"(is `accord serve` running there? check --server / ${SERVER_ENV})"
                ) from exc
            if response.status_code == 429 and method == "GET":
                pause = retry_after(response.headers)
                if waited + pause <= self.rate_limit_wait:
                    time.sleep(pause)
                    waited += pause
                    continue
            if response.is_error:
                raise _problem(where, response)
            return response

    def _json(self, method: str, path: str, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise ApiError(
                f"{method} {self.base_url}{path}: the answer is not JSON "
                f"(is {self.base_url} an accord service?)",
                response.status_code,
            ) from exc

    def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def request_text(self, path: str) -> str:
        """The text of a GET that answers text (a task's input file). Raises ApiError."""
        return self._send("GET", path).text

    def post_bytes(self, path: str, data: bytes) -> Any:
        """The JSON answer of a signed POST of raw bytes. Raises ApiError."""
        where = f"POST {self.base_url}{path}"
        try:
            response = self._http.post(path, content=data)
        except httpx.HTTPError as exc:
            raise ApiError(f"{where}: {exc}") from exc
        if response.is_error:
            raise _problem(where, response)
        return self._json("POST", path, response)

    def post(self, path: str, body: Any = None) -> Any:
        """The JSON answer of a signed POST. Raises ApiError."""
        return self.request("POST", path, json=body)

    def entry(self, kind: str, subject: str, body: Mapping[str, Any]) -> JsonObject:
        """A ledger entry of the client's own signer, with the seq the service says comes
        next (`GET /agents/{did}/next-seq`) and the service's time (its clock decides the
        windows, not this machine's), signed here: the JSON a route that logs a
        party's own event takes. Raises ApiError (no signer, or the service unreachable)."""
        if self.signer is None:
            raise ApiError("signing a ledger entry needs a client with a signer")
        info = cast(JsonObject, self.get(f"/agents/{_segment(self.signer.did)}/next-seq"))
        entry = make_entry(
            self.signer,
            kind=kind,
            seq=int(info["seq"]),
            at=parse_time(str(info["server_time"])),
            subject=subject,
            body=dict(body),
        )
        return entry.to_json()

    def health(self) -> JsonObject:
        return cast(JsonObject, self.get("/health"))

    def task_page(
        self,
        *,
        state: str | None = None,
        capability: str | None = None,
        requester: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> tuple[list[JsonObject], str | None]:
        """One page of `GET /tasks` (see `Market.list_tasks`) and the next page's cursor (None
        on the last). Raises ApiError (422 for a bad filter, limit or cursor)."""
        given = {
            "state": state,
            "capability": capability,
            "requester": requester,
            "limit": limit,
            "cursor": cursor,
        }
        params = {key: value for key, value in given.items() if value is not None}
        response = self._send("GET", "/tasks", params=params)
        rows = cast(list[JsonObject], self._json("GET", "/tasks", response))
        return rows, response.headers.get(NEXT_CURSOR_HEADER)

    def tasks(
        self,
        *,
        state: str | None = None,
        capability: str | None = None,
        requester: str | None = None,
    ) -> list[JsonObject]:
        """Every task matching the filters, following the pages. Raises ApiError."""
        rows: list[JsonObject] = []
        cursor: str | None = None
        while True:
            page, cursor = self.task_page(
                state=state, capability=capability, requester=requester, limit=200, cursor=cursor
            )
            rows.extend(page)
            if cursor is None:
                return rows

    def task(self, task_id: str) -> JsonObject:
        return cast(JsonObject, self.get(f"/tasks/{_segment(task_id)}"))

    def bids(self, task_id: str) -> list[JsonObject]:
        return cast(list[JsonObject], self.get(f"/tasks/{_segment(task_id)}/bids"))

    def post_task(self, spec: Mapping[str, Any]) -> JsonObject:
        """Post a task spec (the client's signer is the requester)."""
        return cast(JsonObject, self.request("POST", "/tasks", json=dict(spec)))

    def upload_file(self, data: bytes) -> str:
        """Store a file a task input references; returns its sha256 (signed)."""
        return str(self.post_bytes("/files", data)["sha256"])

    def deliverable(self, task_id: str) -> JsonObject:
        """The delivered work (signed: the requester, the team or the operator)."""
        return cast(JsonObject, self.get(f"/tasks/{_segment(task_id)}/deliverable"))

    def review(
        self, task_id: str, check: str, verdict: str, reason: str | None = None
    ) -> JsonObject:
        """The requester's verdict on a review check (a rejection needs a `reason`)."""
        body: dict[str, str] = {"check": check, "verdict": verdict}
        if reason is not None:
            body["reason"] = reason
        return cast(
            JsonObject,
            self.request("POST", f"/tasks/{_segment(task_id)}/reviews", json=body),
        )

    def agents(self) -> list[JsonObject]:
        return cast(list[JsonObject], self.get("/agents"))

    def conversations(self, task_id: str | None = None) -> list[JsonObject]:
        params = {"task": task_id} if task_id is not None else None
        return cast(list[JsonObject], self.get("/conversations", params))

    def conversation(self, conv_id: str) -> JsonObject:
        return cast(JsonObject, self.get(f"/conversations/{_segment(conv_id)}"))

    def checkpoints(self) -> JsonObject:
        return cast(JsonObject, self.get("/ledger/checkpoints"))

    def commit(self, task_id: str, commitment: Mapping[str, str]) -> JsonObject:
        """Send a signed sealed-bid commitment (the client's signer must be the bidder)."""
        return cast(
            JsonObject,
            self.request("POST", f"/tasks/{_segment(task_id)}/commitments", json=dict(commitment)),
        )


def _problem(where: str, response: httpx.Response) -> ApiError:
    """One message out of a problem+json answer (or of whatever else came back)."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "detail" in body:
        title = body.get("title") or response.reason_phrase
        reason = body.get("reason")
        message = f"{title} ({status}): {body['detail']}"
        if status == 429 and "Retry-After" in response.headers:
            message += f" (retry after {response.headers['Retry-After']} s)"
        return ApiError(message, status, reason if isinstance(reason, str) else None)
    text = response.text.strip().replace("\n", " ")[:200]
    return ApiError(f"{where}: HTTP {status} {response.reason_phrase}: {text}", status)
