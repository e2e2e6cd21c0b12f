"""Onboarding: exam an agent in each capability and issue a credential for each one it passes.

    onboard(agent, ["arithmetic", …], progress)
        register the agent if it has not (DID-auth, `accord.identity.registration`); for each
        capability: start an exam (operator commits), let the agent's runtime answer every
        item (each answer signed by the agent's key), grade and reveal; on a pass, issue a
        `CapabilityCredential` (`accord.identity.issuance`).

`Onboarding` is the one object the service, the CLI and the market hold; it ties together
the parts that each live in their own module and answers for them:

    identity.registration     DID-auth registration, local and remote agents
    identity.payout_accounts  payout account keys and their `payout.bound` bindings
    identity.issuance         credentials issued, stored, revoked and verified
    identity.status_lists     the revocation status list, published under every URL used
    identity.remote_signing   who signs for a team member (a key file or the agent itself)
    identity.skill_registry   skills declared on the log (`skill.declared`) and the shipped ones
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from accord.identity.agents import AgentRecord, AgentRegistry
from accord.identity.challenges import JSON, get_capability
from accord.identity.challenges.registry import require_builtin, set_capability_loader
from accord.identity.credentials import VerifiedCredential
from accord.identity.errors import ExamError
from accord.identity.exams import ExamResult, ExamService
from accord.identity.issuance import DEFAULT_VALIDITY, ISSUED_EVENT_KIND, CredentialIssuer
from accord.identity.payout_accounts import PAYOUT_BOUND_KIND, PayoutAccounts
from accord.identity.registration import REGISTERED_KIND, REGISTRATION_CHALLENGE_TTL, Registration
from accord.identity.remote_signing import EndpointSigner, member_signer
from accord.identity.runtimes import AgentRuntime
from accord.identity.skill_attempts import SkillAttempts
from accord.identity.skill_judge import judge_seat_from_env
from accord.identity.skill_registry import SkillRegistry
from accord.identity.status_lists import STATUS_LIST_PATH, StatusLists, status_list_url
from accord.ledger.events import Entry
from accord.ledger.service import Ledger
from accord.ledger.settings import DEFAULT_PUBLIC_URL, Settings
from accord.ledger.signing import Ed25519Signer, Signer

__all__ = [
    "ISSUED_EVENT_KIND",
    "PAYOUT_BOUND_KIND",
    "REGISTERED_KIND",
    "REGISTRATION_CHALLENGE_TTL",
    "STATUS_LIST_PATH",
    "CapabilityOutcome",
    "EndpointSigner",
    "Onboarding",
    "Progress",
    "open_onboarding",
    "status_list_url",
]

Progress = Callable[[str, int, int], None]
"""progress(capability, items answered, items in the exam)."""


@dataclass(frozen=True)
class CapabilityOutcome:
    """The result of one capability's exam, and the credential when it passed."""

    exam: ExamResult
    credential_id: str | None
    credential_path: Path | None
    answer_failures: int

    def to_json(self) -> dict[str, Any]:
        return {
            "capability": self.exam.capability,
            "exam_id": self.exam.exam_id,
            "earned": self.exam.earned,
            "possible": self.exam.possible,
            "items": self.exam.item_count,
            "passed": self.exam.passed,
            "credential_id": self.credential_id,
            "credential_file": None if self.credential_path is None else str(self.credential_path),
            "answer_failures": self.answer_failures,
        }


class Onboarding:
    """Registration, payout bindings, exams, credentials and revocation over one ledger and
    one credentials folder: a facade over `Registration`, `PayoutAccounts`,
    `CredentialIssuer` and `StatusLists`, which do the work.

    Raises RegistryError when its tables cannot be prepared.
    """

    def __init__(
        self,
        ledger: Ledger,
        registry: AgentRegistry,
        exams: ExamService,
        credentials_dir: Path,
        *,
        valid_for: timedelta = DEFAULT_VALIDITY,
        public_url: str = DEFAULT_PUBLIC_URL,
    ) -> None:
        self.ledger = ledger
        self.registry = registry
        self.exams = exams
        self.credentials_dir = credentials_dir
        self.engine: Engine = ledger.store.engine
        self.status_lists = StatusLists(ledger, status_list_url(public_url), credentials_dir)
        self.issuer = CredentialIssuer(
            ledger, self.status_lists, credentials_dir, valid_for=valid_for
        )
        self.registration = Registration(ledger, registry, self.status_lists.status_lookup)
        self.payouts = PayoutAccounts(ledger, registry)
        self.domain = self.registration.domain
        self.nonces = self.registration.nonces
        # model-graded skills are offered, examined and declared only with a judge
        self.skills = SkillRegistry(ledger, self._has_registered, judge=judge_seat_from_env())
        set_capability_loader(self.skills.capability_of)  # parts and checks name skill ids
        self.skill_attempts = SkillAttempts(ledger, self.skills, self.issuer)

    @property
    def operator_did(self) -> str:
        return self.ledger.operator.did

    @property
    def status_list_url(self) -> str:
        """The URL new credentials name for their status list."""
        return self.status_lists.url

    # -- registration (DID-auth): identity.registration --

    def _has_registered(self, did: str) -> bool:
        """Whether `did` has an `agent.registered` entry of its own."""
        return bool(self.ledger.store.find(kind=REGISTERED_KIND, actor=did, limit=1))

    def registration_index(self, agent: AgentRecord) -> int | None:
        """See `Registration.registration_index`."""
        return self.registration.registration_index(agent)

    def register(self, agent: AgentRecord, *, holder: Ed25519Signer | None = None) -> int:
        """See `Registration.register`."""
        return self.registration.register(agent, holder=holder)

    def admit(self, agent: AgentRecord, presentation: dict[str, Any], challenge: str) -> int:
        """See `Registration.admit`."""
        return self.registration.admit(agent, presentation, challenge)

    def admit_remote(
        self,
        name: str,
        endpoint: str,
        presentation: dict[str, Any],
        challenge: str,
        entry: Entry,
    ) -> tuple[AgentRecord, int]:
        """See `Registration.admit_remote`."""
        return self.registration.admit_remote(name, endpoint, presentation, challenge, entry)

    # -- payout address: identity.payout_accounts --

    def payout_address(self, did: str, chain_id: int) -> str | None:
        """See `PayoutAccounts.payout_address`."""
        return self.payouts.payout_address(did, chain_id)

    def bind_payout(self, agent: AgentRecord, chain_id: int) -> str:
        """See `PayoutAccounts.bind_payout`."""
        return self.payouts.bind_payout(agent, chain_id)

    def payout_key(self, agent: AgentRecord) -> str:
        """See `PayoutAccounts.payout_key`."""
        return self.payouts.payout_key(agent)

    def bind_payout_signed(self, agent: AgentRecord, entry: Entry, chain_id: int) -> str:
        """See `PayoutAccounts.bind_payout_signed`."""
        return self.payouts.bind_payout_signed(agent, entry, chain_id)

    # -- team members: identity.remote_signing --

    def member_signer(
        self, agent: AgentRecord, openings: Callable[[str], bytes | None] | None = None
    ) -> Signer:
        """See `accord.identity.remote_signing.member_signer`."""
        return member_signer(self.registry, agent, openings)

    # -- onboarding --

    def onboard(
        self,
        agent: AgentRecord,
        capabilities: Sequence[str],
        progress: Progress | None = None,
        *,
        runtime: AgentRuntime | None = None,
        item_count: int | None = None,
    ) -> list[CapabilityOutcome]:
        """Exam `agent` in each capability, in order, with its runtime (or `runtime`).

        An item the runtime cannot answer (it raises ExamError) is left unanswered. Raises
        ExamError for an unknown capability or a declared skill (examined from a committed
        seed, `identity.skill_attempts`; checked for all before anything starts),
        RateLimitedError, KeyStoreError for the agent's key, and what the ledger raises. An
        agent that has not registered is registered first (DID-auth, see `register`).
        """
        if not capabilities:
            raise ExamError("name at least one capability")
        for name in capabilities:
            get_capability(name)
            require_builtin(name)
        signer = self.registry.signer(agent)
        answer_with = runtime or self.registry.runtime(agent)
        self.register(agent)
        outcomes = []
        for name in capabilities:
            session = self.exams.start(agent.did, name, item_count)
            total = len(session.items)
            failures = 0
            if progress is not None:
                progress(name, 0, total)
            for done, item in enumerate(session.items, start=1):
                try:
                    answer: JSON = answer_with.answer(item)
                    self.exams.answer(signer, session.exam_id, str(item["item_id"]), answer)
                except ExamError:
                    failures += 1
                if progress is not None:
                    progress(name, done, total)
            outcomes.append(self.grade_and_issue(session.exam_id, answer_failures=failures))
        return outcomes

    def grade_and_issue(
        self,
        exam_id: str,
        *,
        answer_failures: int = 0,
        lock: AbstractContextManager[Any] | None = None,
    ) -> CapabilityOutcome:
        """Grade an exam whose answers were logged (by the agent itself, or by `onboard`, which
        counts the items its runtime could not answer) and, on a pass, issue the credential.
        `lock` (the service's write lock) is held only to log the grades and issue, never
        while the answers are graded (`ExamService.grade`). Raises what `ExamService.grade`
        and `CredentialIssuer.issue` raise."""
        issued: list[tuple[str, Path]] = []

        def issue(result: ExamResult) -> None:
            if result.passed:
                issued.append(self.issuer.issue(result))

        result = self.exams.grade(exam_id, lock=lock, then=issue)
        credential_id, path = issued[0] if issued else (None, None)
        return CapabilityOutcome(result, credential_id, path, answer_failures)

    # -- credentials: identity.issuance and identity.status_lists --

    def credential(self, credential_id: str) -> dict[str, Any]:
        """See `CredentialIssuer.credential`."""
        return self.issuer.credential(credential_id)

    def holder_count(self, capability: str) -> int:
        """See `CredentialIssuer.holder_count`."""
        return self.issuer.holder_count(capability)

    def credentials_of(self, agent_did: str) -> list[dict[str, Any]]:
        """See `CredentialIssuer.credentials_of`."""
        return self.issuer.credentials_of(agent_did)

    def revoke(
        self, credential_id: str, reason: str, *, evidence: Mapping[str, Any] | None = None
    ) -> int:
        """See `CredentialIssuer.revoke`."""
        return self.issuer.revoke(credential_id, reason, evidence=evidence)

    def verify(
        self,
        document: Any,
        *,
        now: datetime | None = None,
        holder_did: str | None = None,
        capability: str | None = None,
    ) -> VerifiedCredential:
        """See `CredentialIssuer.verify`."""
        return self.issuer.verify(document, now=now, holder_did=holder_did, capability=capability)

    def status_lookup(self, url: str) -> dict[str, Any]:
        """See `StatusLists.status_lookup`."""
        return self.status_lists.status_lookup(url)

    def status_list_at(self, path: str) -> dict[str, Any]:
        """See `StatusLists.status_list_at`."""
        return self.status_lists.status_list_at(path)


def open_onboarding(settings: Settings, ledger: Ledger | None = None) -> Onboarding:
    """Onboarding over the configured store and keys; the ledger is opened without a chain
    unless one is given. Raises StoreError, RegistryError, ExamError."""
    if ledger is None:
        from accord.ledger.wiring import open_ledger  # the chain client: imported only when needed

        ledger = open_ledger(settings)
    registry = AgentRegistry(
        ledger.store.engine,
        settings.keys_dir,
        allow_private_agents=settings.allow_private_agents,
        operator=ledger.operator,  # signs every request to an agent
    )
    return Onboarding(
        ledger,
        registry,
        ExamService(ledger),
        settings.home / "credentials",
        public_url=settings.public_url,
    )
