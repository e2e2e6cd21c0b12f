"""DID-auth registration: a presentation over a fresh challenge and the network's domain."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from accord.identity.errors import CredentialError, NonceError
from accord.identity.onboarding import REGISTERED_KIND, Onboarding, open_onboarding
from accord.identity.presentations import create_presentation
from accord.ledger.events import Entry
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer


@pytest.fixture
def onboarding(tmp_path: Path) -> Onboarding:
    return open_onboarding(Settings.from_env({"ACCORD_HOME": str(tmp_path / "home")}))


def _challenge(onboarding: Onboarding) -> str:
    from accord.identity.onboarding import REGISTRATION_CHALLENGE_TTL

    return onboarding.nonces.issue(
        onboarding.domain, onboarding.ledger.clock(), REGISTRATION_CHALLENGE_TTL
    )


def test_registration_logs_the_agents_own_signed_event_once(onboarding: Onboarding) -> None:
    agent = onboarding.registry.new_agent("ada", now=onboarding.ledger.clock())
    index = onboarding.register(agent)
    assert onboarding.register(agent) == index  # not twice
    entry = Entry.from_bytes(onboarding.ledger.store.entry(index).data)
    entry.verify()
    assert entry.event.kind == REGISTERED_KIND and entry.event.actor == agent.did
    assert entry.event.body["domain"] == onboarding.domain
    # its key is in the operator's home: the event says so, and so does the registry
    assert entry.event.body["custody"] == "hosted"
    assert onboarding.registration.custody(agent) == "hosted"


def test_onboarding_registers_first(onboarding: Onboarding) -> None:
    agent = onboarding.registry.new_agent("ada", now=onboarding.ledger.clock())
    onboarding.onboard(agent, ["arithmetic"], item_count=5)
    assert onboarding.registration_index(agent) is not None


def test_a_presentation_replayed_with_a_used_challenge_is_refused(onboarding: Onboarding) -> None:
    agent = onboarding.registry.new_agent("ada", now=onboarding.ledger.clock())
    signer = onboarding.registry.signer(agent)
    challenge = _challenge(onboarding)
    presentation = create_presentation(
        signer, [], challenge, onboarding.domain, onboarding.ledger.clock()
    )
    onboarding.admit(agent, presentation, challenge)
    size = onboarding.ledger.store.size()
    with pytest.raises(NonceError):
        onboarding.admit(agent, presentation, challenge)
    assert onboarding.ledger.store.size() == size  # nothing logged


def test_a_presentation_for_another_domain_is_refused(onboarding: Onboarding) -> None:
    agent = onboarding.registry.new_agent("ada", now=onboarding.ledger.clock())
    signer = onboarding.registry.signer(agent)
    challenge = _challenge(onboarding)
    elsewhere = create_presentation(
        signer, [], challenge, "urn:accord:network:other", onboarding.ledger.clock()
    )
    with pytest.raises(CredentialError) as refused:
        onboarding.admit(agent, elsewhere, challenge)
    assert refused.value.step == "authentication"
    assert onboarding.registration_index(agent) is None


def test_a_presentation_by_another_key_is_refused(onboarding: Onboarding) -> None:
    agent = onboarding.registry.new_agent("ada", now=onboarding.ledger.clock())
    with pytest.raises(CredentialError):
        onboarding.register(agent, holder=Ed25519Signer.generate())
    assert onboarding.registration_index(agent) is None


def test_a_presentation_of_another_agent_does_not_use_the_challenge_up(
    onboarding: Onboarding,
) -> None:
    agent = onboarding.registry.new_agent("ada", now=onboarding.ledger.clock())
    challenge = _challenge(onboarding)
    now = onboarding.ledger.clock()
    stranger = create_presentation(Ed25519Signer.generate(), [], challenge, onboarding.domain, now)
    with pytest.raises(CredentialError) as refused:
        onboarding.admit(agent, stranger, challenge)
    assert refused.value.step == "authentication"
    own = create_presentation(
        onboarding.registry.signer(agent), [], challenge, onboarding.domain, now
    )
    assert onboarding.admit(agent, own, challenge) == onboarding.registration_index(agent)


def test_a_challenge_works_once_under_concurrency(onboarding: Onboarding) -> None:
    agents = [
        onboarding.registry.new_agent(f"agent{n}", now=onboarding.ledger.clock()) for n in range(6)
    ]
    challenge = _challenge(onboarding)
    now = onboarding.ledger.clock()
    presentations = [
        create_presentation(onboarding.registry.signer(a), [], challenge, onboarding.domain, now)
        for a in agents
    ]
    admitted: list[int] = []
    refused: list[Exception] = []
    barrier = threading.Barrier(len(agents))

    def race(agent_index: int) -> None:
        barrier.wait()
        try:
            admitted.append(
                onboarding.admit(agents[agent_index], presentations[agent_index], challenge)
            )
        except NonceError as exc:
            refused.append(exc)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(len(agents))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 1 and len(refused) == len(agents) - 1


def test_a_registration_raced_by_another_process_is_refused_as_a_conflict(
    tmp_path: Path,
) -> None:
    """Two services on one database each checked that the agent is not registered yet and
    admit its presentations over two challenges: the log keeps the first, the second is a 409
    problem and nothing more is logged."""
    from accord.api.problems import domain_problem
    from accord.ledger.errors import AlreadyLoggedError

    settings = Settings.from_env({"ACCORD_HOME": str(tmp_path / "home")})
    here, there = open_onboarding(settings), open_onboarding(settings)
    agent = here.registry.new_agent("ada", now=here.ledger.clock())
    signer = here.registry.signer(agent)
    presentations = []
    for service in (here, there):
        challenge = _challenge(service)
        presentations.append(
            (
                create_presentation(signer, [], challenge, service.domain, service.ledger.clock()),
                challenge,
            )
        )
    index = here.admit(agent, *presentations[0])
    size = there.ledger.store.size()
    with pytest.raises(AlreadyLoggedError) as caught:
        there.admit(agent, *presentations[1])
    assert caught.value.index == index
    assert there.ledger.store.size() == size
    assert domain_problem(caught.value).status == 409
