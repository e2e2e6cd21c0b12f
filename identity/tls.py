"""One TLS client context per process for accord's HTTP clients, instead of one per client.

httpx builds an `ssl.SSLContext` for every Client and HTTPTransport it is not handed one (for
http:// URLs too), and building one loads a CA bundle: 42 ms of CPU with certifi's here, 60 ms
for a whole `httpx.Client()`. accord makes a client for each call to an agent, each
`AccordClient` and each model client, so a team's task paid that dozens of times.

`tls_context(trust_env)` is the context httpx would build (`httpx.create_ssl_context`: the
bundle named by SSL_CERT_FILE or SSL_CERT_DIR when `trust_env`, else certifi's), built at the
first client of the process and shared after: an SSLContext is safe to share between threads,
and accord's clients all speak HTTP/1.1 (httpcore sets that ALPN on it per connection). The
environment's CA settings are read once, as the chain's transport reads its own once per
endpoint (ledger/chain/transport.py).
"""

from __future__ import annotations

import ssl
from functools import cache

import httpx


@cache
def tls_context(trust_env: bool = True) -> ssl.SSLContext:
    """The process's TLS context for clients with `trust_env` (built on the first call).
    Raises what `ssl` raises for a CA bundle it cannot read (OSError, ssl.SSLError)."""
    return httpx.create_ssl_context(trust_env=trust_env)
