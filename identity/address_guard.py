"""Where accord may send requests to agents: public addresses only, unless the operator says so.

An agent's endpoint comes from outside (a remote agent registers its own), so a request to it
must not become a request into the operator's own network: loopback (127.0.0.1, ::1),
link-local (169.254.169.254, a cloud's metadata service), private (10/8, 192.168/16, fc00::/7),
multicast, reserved and unspecified addresses, and IPv6 forms that wrap them (IPv4-mapped,
6to4, Teredo), are refused unless the operator sets ACCORD_ALLOW_PRIVATE_AGENTS=1
(`Settings.allow_private_agents`), which a local demo and the tests do.

Two checks, for two moments:

    check_endpoint_address   at registration, pure: an endpoint whose host is an address
                             literal (any spelling `inet_aton` reads) or a `localhost` name
    PublicOnlyTransport      at connect time, for every request: resolves the host, refuses
                             every non-public address, and connects to the address it checked
                             (so a name that resolves elsewhere later, DNS rebinding, gets
                             no further than a check made at registration would let it)

`agent_client` is the httpx client every request to an agent goes through; it never follows
redirects and ignores proxy variables. Given the operator's key, it signs every request
(RFC 9421, tag "accord-call": `accord.identity.http_signatures`), so the agent can tell a call from
accord from anyone else's (`accord.identity.http_signatures.verify_accord_call`). `check_url` is the
shape every endpoint must have first: an absolute http(s) URL with a host and no credentials.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlsplit

import httpx

from accord.identity.errors import PrivateEndpointError, RegistryError
from accord.identity.http_auth import AccordAuth
from accord.identity.http_signatures import CALL_TAG
from accord.identity.tls import tls_context
from accord.ledger.settings import ALLOW_PRIVATE_AGENTS, env_flag
from accord.ledger.signing import Signer

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]
"""`(host, port) -> addresses`: what a host name resolves to, as address strings."""

SETTING_HINT = (
    f"agents are reached only at public addresses unless the operator sets {ALLOW_PRIVATE_AGENTS}=1"
)

_NON_PUBLIC = (
    ("is_unspecified", "the unspecified address"),
    ("is_loopback", "a loopback address"),
    ("is_link_local", "a link-local address"),
    ("is_multicast", "a multicast address"),
    ("is_reserved", "a reserved address"),
    ("is_private", "a private address"),
)


def private_agents_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ACCORD_ALLOW_PRIVATE_AGENTS is on in `environ` (default `os.environ`).

    Raises ValueError for a value that is neither on nor off.
    """
    return env_flag(os.environ if environ is None else environ, ALLOW_PRIVATE_AGENTS)


def non_public_reason(address: IPAddress) -> str | None:
    """Why `address` is not a public address an agent may be reached at, or None if it is."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return f"an IPv4-mapped address (of {address.ipv4_mapped})"
        if address.sixtofour is not None and non_public_reason(address.sixtofour):
            return f"a 6to4 address of {address.sixtofour}"
        if address.teredo is not None:
            return "a Teredo address"
    for attribute, reason in _NON_PUBLIC:
        if getattr(address, attribute):
            return reason
    if not address.is_global:
        return "not a globally routable address"
    return None


def parse_address(host: str) -> IPAddress | None:
    """`host` as an IP address if it is one in any spelling a resolver would accept
    (`::1`, `127.0.0.1`, `2130706433`, `0x7f.1`), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):
        return None


def check_url(url: str, what: str = "--endpoint") -> str:
    """`url` if it is an absolute http or https URL with a host and no credentials in it.

    Raises RegistryError otherwise.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError as exc:
        raise RegistryError(f"{what} {url!r} is not a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise RegistryError(f"{what} {url!r} must be an http:// or https:// URL")
    if not parts.hostname:
        raise RegistryError(f"{what} {url!r} has no host")
    if parts.username is not None or parts.password is not None:
        raise RegistryError(f"{what} {url!r} must not carry credentials")
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise RegistryError(f"{what} {url!r} contains whitespace or control characters")
    return url


def check_endpoint_address(url: str, *, allow_private: bool, what: str = "--endpoint") -> None:
    """Refuse an agent endpoint whose host is a non-public address literal or a `localhost`
    name, unless `allow_private`. Host names are checked when they are connected to.

    Raises PrivateEndpointError naming the address and the setting.
    """
    if allow_private:
        return
    host = (urlsplit(url).hostname or "").rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        raise PrivateEndpointError(f"{what} {url!r} names a loopback host; {SETTING_HINT}")
    address = parse_address(host)
    if address is None:
        return
    reason = non_public_reason(address)
    if reason is not None:
        raise PrivateEndpointError(f"{what} {url!r} is {reason} ({address}); {SETTING_HINT}")


class PrivateAddressRefused(httpx.ConnectError):
    """A request to an agent was not sent: its host resolves only to non-public addresses."""


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to for a TCP connection, in the resolver's order.

    Raises OSError (socket.gaierror) when it does not resolve.
    """
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


class PublicOnlyTransport(httpx.BaseTransport):
    """An httpx transport that sends a request only to a public address of its host.

    For each request the host is resolved (`resolver`, default the system's), every address
    is checked with `non_public_reason`, and the request goes to the first public one: the
    URL names that address, the Host header and TLS server name stay the host's. `inner`
    (default an `httpx.HTTPTransport` ignoring the environment, on the process's TLS context:
    identity/tls.py) sends it.

    `handle_request` raises PrivateAddressRefused (an httpx.ConnectError) when no address is
    public, httpx.ConnectError when the host does not resolve, and what `inner` raises.
    """

    def __init__(
        self, *, resolver: Resolver = resolve, inner: httpx.BaseTransport | None = None
    ) -> None:
        self.resolver = resolver
        self.inner = inner if inner is not None else _direct_transport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        host = url.host
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            addresses = self.resolver(host, port)
        except OSError as exc:
            raise httpx.ConnectError(f"cannot resolve {host}: {exc}", request=request) from exc
        refused: list[str] = []
        for text in addresses:
            address = parse_address(text)
            reason = "not an IP address" if address is None else non_public_reason(address)
            if address is not None and reason is None:
                return self.inner.handle_request(_pinned(request, address))
            refused.append(f"{text} ({reason})")
        raise PrivateAddressRefused(
            f"refused to connect to {host}: it resolves to {', '.join(refused) or 'nothing'}; "
            + SETTING_HINT,
            request=request,
        )

    def close(self) -> None:
        self.inner.close()


def _pinned(request: httpx.Request, address: IPAddress) -> httpx.Request:
    """`request` sent to `address`: same headers (Host included), TLS checked for the host."""
    extensions = dict(request.extensions)
    if request.url.scheme == "https":
        extensions.setdefault("sni_hostname", request.url.host)
    return httpx.Request(
        request.method,
        request.url.copy_with(host=str(address)),
        headers=request.headers,
        stream=request.stream,
        extensions=extensions,
    )


def _direct_transport() -> httpx.HTTPTransport:
    """httpx's transport, the environment ignored, on the process's TLS context."""
    return httpx.HTTPTransport(trust_env=False, verify=tls_context(trust_env=False))


def agent_client(
    timeout: float,
    *,
    allow_private: bool,
    resolver: Resolver = resolve,
    operator: Signer | None = None,
) -> httpx.Client:
    """The httpx client for requests to agents: redirects never followed, proxy variables
    ignored, and, unless `allow_private`, only public addresses (`PublicOnlyTransport`).
    With `operator` (the operator's key) every request is signed by it, as a call from
    accord (RFC 9421, tag "accord-call", over the method, URL, body digest and content type).
    """
    transport: httpx.BaseTransport = (
        _direct_transport() if allow_private else PublicOnlyTransport(resolver=resolver)
    )
    auth = None if operator is None else AccordAuth(operator, tag=CALL_TAG)
    return httpx.Client(
        timeout=timeout, follow_redirects=False, trust_env=False, transport=transport, auth=auth
    )


__all__ = [
    "PrivateAddressRefused",
    "PublicOnlyTransport",
    "agent_client",
    "check_endpoint_address",
    "check_url",
    "non_public_reason",
    "parse_address",
    "private_agents_allowed",
    "resolve",
]
