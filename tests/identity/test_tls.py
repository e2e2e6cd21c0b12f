"""accord's HTTP clients share one TLS context per process (identity/tls.py): building one
loads a CA bundle (42 ms of CPU here), and httpx builds one for every client it is not handed
one, http:// URLs included."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from accord.client import AccordClient
from accord.identity.address_guard import agent_client
from accord.identity.chat import OpenAIChat
from accord.identity.tls import tls_context


@pytest.fixture
def bundle_loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every CA bundle an SSLContext loads from now on (the real load still happens)."""
    loads: list[str] = []
    real = ssl.SSLContext.load_verify_locations

    def counted(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(str(args or kwargs))
        real(context, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    yield loads


def test_clients_load_the_ca_bundle_once_per_process(bundle_loads: list[str]) -> None:
    for _ in range(5):
        AccordClient("http://127.0.0.1:9").close()
        agent_client(5.0, allow_private=True).close()
        agent_client(5.0, allow_private=False).close()
        OpenAIChat("m", base_url="http://127.0.0.1:9/v1")._client().close()
    assert len(bundle_loads) <= 2  # at most once with the environment's settings, once without


def test_the_shared_context_checks_certificates_and_host_names() -> None:
    for trust_env in (True, False):
        context = tls_context(trust_env)
        assert context is tls_context(trust_env)
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
