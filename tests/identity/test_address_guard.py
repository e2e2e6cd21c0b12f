"""Requests to agents go only to public addresses unless the operator allows private ones:
refused at registration (the registry, the CLI) and again at connect time, on the address the
host resolves to then; real sockets on 127.0.0.1, no mocks of the code under test."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from accord.identity.address_guard import (
    PrivateAddressRefused,
    PublicOnlyTransport,
    agent_client,
    check_endpoint_address,
    non_public_reason,
    parse_address,
    private_agents_allowed,
    resolve,
)
from accord.identity.agents import AgentRegistry, check_agent_spec
from accord.identity.errors import KeyStoreError, PrivateEndpointError, RegistryError
from accord.identity.onboarding import EndpointSigner, Onboarding, open_onboarding
from accord.identity.runtimes import AgentRuntimeError, HttpRuntime
from accord.ledger.settings import Settings
from tests.accord_cli import cli_environ, run_accord
from tests.stand_in import Handle, StandIn, json_reply, starter

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ITEM = {"item_id": "x", "capability": "arithmetic", "prompt": "p", "payload": {}}
SETTING = "ACCORD_ALLOW_PRIVATE_AGENTS"


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Callable[[Handle], StandIn]:
    return starter(request)


def _answering(
    path: str, headers: dict[str, str], body: bytes
) -> tuple[int, dict[str, str], bytes]:
    return json_reply(200, {"answer": 5})


def _onboarding(tmp_path: Path, *, allow_private: bool) -> Onboarding:
    environ = {"ACCORD_HOME": str(tmp_path / "home")}
    if allow_private:
        environ[SETTING] = "1"
    return open_onboarding(Settings.from_env(environ))


# -- which addresses are public ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("100.64.0.1", "not a globally routable"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff0e::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("::ffff:127.0.0.1", "IPv4-mapped"),
        ("::ffff:8.8.8.8", "IPv4-mapped"),
        ("2002:7f00:1::1", "6to4 address of 127.0.0.1"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
        ("64:ff9b::7f00:1", "reserved"),
    ],
)
def test_non_public_addresses_are_named(address: str, reason: str) -> None:
    found = non_public_reason(ipaddress.ip_address(address))
    assert found is not None and reason in found


@pytest.mark.parametrize("address", ["8.8.8.8", "93.184.216.34", "2606:4700::1111", "2a00:1450::1"])
def test_public_addresses_pass(address: str) -> None:
    assert non_public_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("agents.example.org", None),
    ],
)
def test_every_spelling_of_an_address_is_read(host: str, address: str | None) -> None:
    parsed = parse_address(host)
    assert (None if parsed is None else str(parsed)) == address


# -- at registration -----------------------------------------------------------------------------

REFUSED = [
    "http://127.0.0.1:8600/run",
    "http://169.254.169.254/",
    "http://10.0.0.1/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]:80/",
    "http://2130706433/",
    "http://localhost:9000/run",
    "https://agent.localhost/",
]


@pytest.mark.parametrize("endpoint", REFUSED)
def test_a_private_endpoint_is_refused_at_registration(tmp_path: Path, endpoint: str) -> None:
    onboarding = _onboarding(tmp_path, allow_private=False)
    with pytest.raises(PrivateEndpointError, match=f"{SETTING}=1") as raised:
        onboarding.registry.new_agent("svc", now=NOW, runtime="http", endpoint=endpoint)
    assert isinstance(raised.value, RegistryError)
    assert onboarding.registry.list() == []
    assert not onboarding.registry.key_path("svc").exists()
    with pytest.raises(PrivateEndpointError):
        HttpRuntime(endpoint)


def test_with_the_setting_a_private_endpoint_registers(tmp_path: Path) -> None:
    onboarding = _onboarding(tmp_path, allow_private=True)
    assert onboarding.registry.allow_private_agents
    for index, endpoint in enumerate(REFUSED):
        record = onboarding.registry.new_agent(
            f"svc-{index}", now=NOW, runtime="http", endpoint=endpoint
        )
        assert record.endpoint == endpoint
    check_endpoint_address("http://10.0.0.1/", allow_private=True)


def test_public_endpoints_and_model_servers_are_not_refused() -> None:
    assert check_agent_spec("a", "http", None, "https://agents.example.org/run") is None
    assert check_agent_spec("a", "http", None, "http://93.184.216.34:8080/run") is None
    # An `openai` endpoint is the operator's own model server: a local one is fine.
    assert check_agent_spec("a", "openai", None, "http://127.0.0.1:11434/v1", "llama3") is None


def test_the_setting_is_read_from_the_environment() -> None:
    assert not Settings.from_env({}).allow_private_agents
    assert Settings.from_env({SETTING: "1"}).allow_private_agents
    assert not Settings.from_env({SETTING: "0"}).allow_private_agents
    assert private_agents_allowed({SETTING: "yes"}) and not private_agents_allowed({})
    with pytest.raises(ValueError, match=SETTING):
        Settings.from_env({SETTING: "maybe"})


def _cli(home: Path, *args: str, allow: bool) -> subprocess.CompletedProcess[str]:
    """`accord ARGS` in a process of its own (forked from the tests' CLI zygote, which has
    imported accord once: tests/accord_cli.py), with SETTING set only when `allow`."""
    env = cli_environ(home)
    env.pop(SETTING, None)
    if allow:
        env[SETTING] = "1"
    return run_accord(env, *args)


def test_the_cli_refuses_a_private_endpoint_with_exit_2(tmp_path: Path) -> None:
    new = ("agent", "new", "svc", "--runtime", "http", "--endpoint", "http://169.254.169.254/")
    refused = _cli(tmp_path / "home", *new, allow=False)
    assert refused.returncode == 2, refused.stderr
    assert "link-local" in refused.stderr and f"{SETTING}=1" in refused.stderr
    allowed = _cli(tmp_path / "home", *new, allow=True)
    assert allowed.returncode == 0, allowed.stderr


# -- at connect time -----------------------------------------------------------------------------


def test_a_host_name_that_resolves_to_loopback_is_refused_when_connecting(
    serve: Callable[[Handle], StandIn],
) -> None:
    server = serve(_answering)
    # "localhost" resolves (through the system's resolver) to 127.0.0.1 and ::1.
    with (
        agent_client(5, allow_private=False) as client,
        pytest.raises(PrivateAddressRefused, match="loopback") as raised,
    ):
        client.post(f"http://localhost:{server.port}/run", json={"item": ITEM})
    assert SETTING in str(raised.value)
    assert server.requests == []  # nothing reached the server


def test_a_name_rebound_to_a_private_address_after_registration_is_refused(
    serve: Callable[[Handle], StandIn],
) -> None:
    """The endpoint's name passes registration (it names no address), then resolves to the
    loopback server: the runtime refuses to connect, not retriably."""
    server = serve(_answering)
    endpoint = f"http://agent.example.org:{server.port}/run"
    check_endpoint_address(endpoint, allow_private=False)  # a name: checked on connect
    rebound = PublicOnlyTransport(resolver=lambda host, port: ["127.0.0.1"])
    with (
        httpx.Client(transport=rebound, follow_redirects=False) as client,
        pytest.raises(PrivateAddressRefused, match=r"agent\.example\.org.*127\.0\.0\.1"),
    ):
        client.post(endpoint, json={"item": ITEM})
    runtime = HttpRuntime(endpoint, 5)  # the system resolver does not know the name at all
    with pytest.raises(AgentRuntimeError, match="cannot reach") as raised:
        runtime.answer(ITEM)
    assert raised.value.retriable
    assert server.requests == []


def test_the_request_goes_to_the_public_address_it_checked() -> None:
    """Only a public address is connected to; the Host header and TLS name stay the host's.
    (The inner transport is httpx's in-memory one: this sandbox has no public network.)"""
    sent: list[httpx.Request] = []

    def deliver(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"answer": 5})

    resolved = ["10.1.2.3", "::1", "93.184.216.34", "8.8.8.8"]
    transport = PublicOnlyTransport(
        resolver=lambda host, port: resolved, inner=httpx.MockTransport(deliver)
    )
    with httpx.Client(transport=transport) as client:
        reply = client.post("https://agents.example.org:8443/run", json={"item": ITEM})
    assert reply.json() == {"answer": 5}
    (request,) = sent
    assert request.url == "https://93.184.216.34:8443/run"
    assert request.headers["host"] == "agents.example.org:8443"
    assert request.extensions["sni_hostname"] == "agents.example.org"
    assert request.content == reply.request.content


def test_with_the_setting_loopback_is_reached(serve: Callable[[Handle], StandIn]) -> None:
    server = serve(_answering)
    assert HttpRuntime(server.url, 5, allow_private=True).answer(ITEM) == 5
    with agent_client(5, allow_private=True) as client:
        assert client.post(f"http://localhost:{server.port}/run").json() == {"answer": 5}


def _machine_name_resolving_privately() -> str:
    """This machine's host name, which resolves to a loopback or private address on any
    ordinary test machine (skipped where it does not)."""
    name = socket.gethostname()
    try:
        addresses = resolve(name, 80)
    except OSError:
        pytest.skip(f"the host name {name!r} does not resolve")
    if any(non_public_reason(ipaddress.ip_address(a.split("%")[0])) is None for a in addresses):
        pytest.skip(f"the host name {name!r} resolves to a public address")
    return name


def test_a_registered_name_that_resolves_privately_is_refused_not_retriably(
    tmp_path: Path, serve: Callable[[Handle], StandIn]
) -> None:
    server = serve(_answering)
    name = _machine_name_resolving_privately()
    onboarding = _onboarding(tmp_path, allow_private=False)
    record = onboarding.registry.new_agent(
        "svc", now=NOW, runtime="http", endpoint=f"http://{name}:{server.port}/run"
    )  # a name passes registration: it is checked on every connection
    runtime = onboarding.registry.runtime(record)
    with pytest.raises(AgentRuntimeError, match="refused to connect") as raised:
        runtime.answer(ITEM)
    assert not raised.value.retriable and SETTING in str(raised.value)
    assert server.requests == []
    (outcome,) = onboarding.onboard(record, ["arithmetic"], item_count=2)
    assert outcome.answer_failures == 2 and server.requests == []


def test_a_remote_signer_at_a_private_address_is_refused(
    serve: Callable[[Handle], StandIn],
) -> None:
    server = serve(lambda path, headers, body: json_reply(200, {"sig": "AA"}))
    signer = EndpointSigner("did:key:zRemote", f"http://localhost:{server.port}/run")
    with pytest.raises(KeyStoreError, match="refused to connect"):
        signer.sign(b"{}")
    assert server.requests == []


def test_the_registry_setting_reaches_the_remote_signer(tmp_path: Path) -> None:
    strict = AgentRegistry(_onboarding(tmp_path, allow_private=False).engine, tmp_path / "k")
    assert not strict.allow_private_agents
    onboarding = _onboarding(tmp_path / "open", allow_private=True)
    record = onboarding.registry.new_agent(
        "svc", now=NOW, runtime="http", endpoint="http://127.0.0.1:9/run"
    )
    onboarding.registry.key_path("svc").unlink()  # a remote agent: no key file here
    signer = onboarding.member_signer(record)
    assert isinstance(signer, EndpointSigner) and signer.allow_private
