"""JSON-RPC over HTTP(S) for web3 on `http.client`: one keep-alive connection per thread.

web3's HTTPProvider sends each call through requests. On loopback that cost 1.7 ms of the
client's CPU per call (eth_blockNumber on anvil), where http.client costs 0.25 ms. Every chain
call accord makes pays it: anchoring, each escrow transaction's five or six calls, every audit.

What requests reads from the environment is still read the way requests reads it, once, when
the provider is made (`route_for`):
  * the endpoint's proxy (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY), or none under NO_PROXY;
  * the CA bundle (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE; else certifi's, as requests does);
  * credentials in the URL or in ~/.netrc for the endpoint's host.
An `http` endpoint behind a proxy is asked in absolute form; an `https` one through a CONNECT
tunnel, its certificate checked against the node's host name.

Errors: a connection that fails, times out or breaks is an OSError (which
`mapped_chain_errors` reports as ChainUnavailableError, as it did requests' errors); an HTTP
status other than 2xx, or an answer that is not HTTP, is `EndpointError`, an OSError too; an
answer that is no JSON is json.JSONDecodeError, as web3 raised it before. An https endpoint
behind an https proxy (TLS inside TLS) is refused when the provider is made.
"""

from __future__ import annotations

import base64
import http.client
import select
import ssl
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import certifi
import requests
from web3.providers.base import JSONBaseProvider
from web3.types import RPCEndpoint, RPCResponse

CACHED_METHODS = frozenset({"eth_chainId"})
"""Answers kept per provider: a node's chain id does not change under a running client, and
web3 asks it before each transaction it fills in."""


class EndpointError(OSError):
    """The endpoint (or its proxy) answered with an HTTP status other than 2xx, or with
    something that is not HTTP."""


@dataclass(frozen=True)
class Route:
    """Where a call to one endpoint goes, worked out once (`route_for`)."""

    host: str
    """The host (and `port`) the TCP connection goes to: the node's, or its proxy's."""
    port: int
    tls: bool
    """Whether that connection is TLS (to an https node without a proxy, or to an https proxy
    of an http node)."""
    target: str
    """The request target: the node's path, or its absolute URL through an http proxy."""
    tunnel: tuple[str, int] | None = None
    """The node's host and port, CONNECTed to through the proxy (an https node)."""
    headers: dict[str, str] = field(default_factory=dict)
    tunnel_headers: dict[str, str] = field(default_factory=dict)
    verify: str | bool = True
    """False (no check), or the CA bundle's path; True is certifi's."""


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def route_for(rpc_url: str) -> Route:
    """How to reach `rpc_url`, from the URL and what the environment says about it (proxy,
    NO_PROXY, CA bundle, a ~/.netrc login). Reads the environment and ~/.netrc; raises
    ValueError for a URL that is not http(s) or names no host, and for a proxy that is not
    http(s), or https for an https endpoint."""
    parts = urlsplit(rpc_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{rpc_url!r} is not an http(s) URL of a JSON-RPC endpoint")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    headers: dict[str, str] = {}
    if parts.username is not None:
        headers["Authorization"] = _basic(unquote(parts.username), unquote(parts.password or ""))
    else:
        login = requests.utils.get_netrc_auth(rpc_url)
        if login is not None:
            headers["Authorization"] = _basic(*login)
    settings = requests.Session().merge_environment_settings(rpc_url, {}, None, None, None)
    verify: str | bool = settings["verify"]
    proxy = requests.utils.select_proxy(rpc_url, settings["proxies"])
    if not proxy:
        return Route(parts.hostname, port, tls, path, headers=headers, verify=verify)
    if "://" not in proxy:
        proxy = "http://" + proxy
    via = urlsplit(proxy)
    if via.scheme not in ("http", "https") or not via.hostname:
        raise ValueError(f"the proxy {proxy!r} for {rpc_url!r} is not an http(s) proxy")
    proxy_tls = via.scheme == "https"
    proxy_port = via.port or (443 if proxy_tls else 80)
    proxy_headers: dict[str, str] = {}
    if via.username is not None:
        proxy_headers["Proxy-Authorization"] = _basic(
            unquote(via.username), unquote(via.password or "")
        )
    if tls:
        if proxy_tls:
            raise ValueError(
                f"the proxy {proxy!r} for {rpc_url!r} is https: TLS to the node inside TLS to "
                "its proxy is not supported; name an http proxy (its CONNECT tunnel still "
                "carries TLS to the node)"
            )
        return Route(
            via.hostname,
            proxy_port,
            False,
            path,
            tunnel=(parts.hostname, port),
            headers=headers,
            tunnel_headers=proxy_headers,
            verify=verify,
        )
    absolute = f"http://{parts.hostname}:{port}{path}"
    return Route(
        via.hostname, proxy_port, proxy_tls, absolute, headers={**headers, **proxy_headers}
    )


def _tls_context(verify: str | bool) -> ssl.SSLContext:
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=certifi.where() if verify is True else verify)


class _Open:
    """The connections a provider has open, in every thread. Whatever is still open when the
    provider is collected is closed then (`weakref.finalize`), so no socket of it is ever left
    to the garbage collector (a ResourceWarning), whatever cycle the provider was part of."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connections: set[http.client.HTTPConnection] = set()

    def add(self, connection: http.client.HTTPConnection) -> None:
        with self.lock:
            self.connections.add(connection)

    def close(self, connection: http.client.HTTPConnection) -> None:
        with self.lock:
            self.connections.discard(connection)
        connection.close()

    def close_all(self) -> None:
        with self.lock:
            left, self.connections = self.connections, set()
        for connection in left:
            connection.close()


class _Held:
    """A thread's connection, closed when the thread ends (its thread-local data goes)."""

    __slots__ = ("connection", "open")

    def __init__(self, open_: _Open) -> None:
        self.connection: http.client.HTTPConnection | None = None
        self.open = open_

    def drop(self) -> None:
        if self.connection is not None:
            self.open.close(self.connection)
            self.connection = None

    def __del__(self) -> None:
        self.drop()


class EndpointProvider(JSONBaseProvider):
    """web3's provider for one JSON-RPC endpoint over HTTP(S): requests go out on one
    keep-alive `http.client` connection per thread, along the `Route` worked out when the
    provider is made. No retries: a down node must be reported at once (the anchoring service
    retries by itself). Constructing it reads the environment (`route_for`), no network I/O.
    Raises ValueError for a URL that is not http(s)."""

    def __init__(self, rpc_url: str, timeout_s: float) -> None:
        super().__init__()
        self.endpoint_uri = rpc_url
        self.route = route_for(rpc_url)
        self._timeout_s = timeout_s
        self._headers = {"Content-Type": "application/json", **self.route.headers}
        needs_tls = self.route.tls or self.route.tunnel is not None
        self._tls = _tls_context(self.route.verify) if needs_tls else None
        self._local = threading.local()
        self._open = _Open()
        weakref.finalize(self, self._open.close_all)
        self._cached: dict[str, RPCResponse] = {}

    def make_request(self, method: RPCEndpoint, params: Any) -> RPCResponse:
        """One call's decoded answer (a JSON-RPC error is in it, not raised). Raises OSError
        (EndpointError included) when the exchange fails, json.JSONDecodeError or
        UnicodeDecodeError for an answer that is not JSON."""
        cached = self._cached.get(method)
        if cached is not None:
            return cached
        raw = self.post(self.encode_rpc_request(method, params))
        answer = self.decode_rpc_response(raw)
        if method in CACHED_METHODS and isinstance(answer, dict) and "result" in answer:
            self._cached[method] = answer
        return answer

    def post(self, body: bytes) -> bytes:
        """POST `body` to the endpoint; the answer's body. Raises OSError as `make_request`."""
        connection = self._connection()
        try:
            connection.request("POST", self.route.target, body, self._headers)
            response = connection.getresponse()
            answer = response.read()
        except BaseException as exc:
            self._held().drop()  # half a request or answer is on it: never reuse it
            if isinstance(exc, http.client.HTTPException) and not isinstance(exc, OSError):
                raise EndpointError(f"{self.endpoint_uri} answered no HTTP: {exc!r}"[:300]) from exc
            raise
        if response.will_close:
            self._held().drop()
        if not 200 <= response.status < 300:
            raise EndpointError(f"HTTP {response.status} {response.reason}".strip())
        return answer

    def _connection(self) -> http.client.HTTPConnection:
        """This thread's connection, a new one when it has none or the peer closed it."""
        held = self._held()
        if held.connection is not None and _closed_by_peer(held.connection):
            held.drop()
        if held.connection is None:
            held.connection = self._connect()
            self._open.add(held.connection)
        return held.connection

    def _held(self) -> _Held:
        held: _Held | None = getattr(self._local, "held", None)
        if held is None:
            held = self._local.held = _Held(self._open)
        return held

    def _connect(self) -> http.client.HTTPConnection:
        route = self.route
        connection: http.client.HTTPConnection
        if route.tunnel is not None:  # CONNECT through the proxy, then TLS to the node
            connection = http.client.HTTPSConnection(
                route.host, route.port, timeout=self._timeout_s, context=self._tls
            )
            connection.set_tunnel(*route.tunnel, headers=route.tunnel_headers)
        elif route.tls:
            connection = http.client.HTTPSConnection(
                route.host, route.port, timeout=self._timeout_s, context=self._tls
            )
        else:
            connection = http.client.HTTPConnection(route.host, route.port, timeout=self._timeout_s)
        return connection


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive connection was closed by the other end (its socket reads
    as ready: end of file, or bytes nobody asked for). A connection not yet open is fine."""
    sock = connection.sock
    if sock is None:
        return False
    # poll, not select: select refuses descriptors above 1024, which a busy service reaches,
    # and every call would then open a new connection
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
