"""Every expected failure of identity, under one root; that root derives from
`AccordError` (ledger.errors), the root of every expected failure in accord.

AccordError
└── IdentityError
    ├── KeyStoreError           a key file is missing, unreadable or not private
    ├── CredentialError         a credential or presentation fails a verification step
    │                           (`step` names the checklist step, `reason` says why)
    ├── ProofFormatError        a document or proof is malformed before any check can run
    ├── NonceError              a DID-auth challenge nonce is unknown, expired or used
    ├── BindingError            a payout-address binding lacks or fails one of its signatures
    ├── JwsError                a JWS is malformed or does not verify (`reason` says why)
    ├── ExamError               an exam cannot be started, answered or graded
    │   ├── RateLimitedError    too many attempts; `retry_after` seconds
    │   ├── DeadlineError       an answer came after its item's deadline
    │   ├── ExamConflict        the exam is already graded, or its answers kept changing
    │   │                       while it was graded (409: the state, not the request)
    │   ├── SandboxUnavailable  the box for strangers' code cannot be made here
    │   ├── AgentRuntimeError   an agent's runtime got no usable answer (identity.runtimes;
    │   │                       `retriable`)
    │   └── SchemaViolation     a skill's input or output breaks its JSON Schema (`path`, `reason`)
    ├── ChatError               a chat model could not be asked (identity.chat; `retriable`)
    │   └── ChatReplyError      it answered, but with no usable reply (none, cut off, a refusal)
    ├── SkillError              a skill manifest cannot be declared, found or examined
    │   ├── ManifestError       a manifest breaks the manifest rules (`path`, `reason`)
    │   ├── GateFailed          a manifest's exam measures nothing (`gate` names the gate)
    │   ├── JudgeUnavailable    a model-graded skill's judge could not be asked
    │   └── UnknownSkill        no skill has that id (or built-in name)
    └── RegistryError           an agent or credential name/id is invalid, taken or unknown
        ├── PrivateEndpointError  an agent endpoint at a loopback, link-local or private address
        └── AgentCardError      an A2A agent card cannot be fetched, read or verified

A signed HTTP request that does not hold raises `AuthError` instead, a root of its own under
`AccordError` drawn with its subclasses in `accord.identity.http_signatures`.
"""

from __future__ import annotations

from accord.ledger.errors import AccordError


class IdentityError(AccordError):
    """Root of every expected identity failure."""


class KeyStoreError(IdentityError):
    """A key file is missing, unreadable, or readable by others."""


class CredentialError(IdentityError):
    """A verification checklist step failed; `step` is its name, `reason` the detail."""

    def __init__(self, step: str, reason: str) -> None:
        super().__init__(f"{step}: {reason}")
        self.step = step
        self.reason = reason


class ProofFormatError(IdentityError):
    """A document or proof is malformed (missing fields, bad encodings)."""


class NonceError(IdentityError):
    """A challenge nonce is unknown, expired, for another domain, or already used."""


class BindingError(IdentityError):
    """A payout-address binding is missing a signature or one does not verify."""


class JwsError(IdentityError):
    """A JWS (RFC 7515) is malformed, uses an algorithm or key that is not accepted, or its
    signature does not verify; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ExamError(IdentityError):
    """An exam cannot be started, answered or graded."""


class RateLimitedError(ExamError):
    """Too many exam attempts; try again after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class DeadlineError(ExamError):
    """An answer arrived after its item's deadline."""


class ExamConflict(ExamError):
    """The exam is already graded, or its answers kept changing while it was graded: the
    request was well formed, but the exam's state refuses it now."""


class SandboxUnavailable(ExamError):
    """The box that runs strangers' code cannot be made here (bubblewrap or libseccomp is
    missing, user namespaces are off, `ACCORD_SANDBOX` names no mode); nothing ran unboxed."""


class SchemaViolation(ExamError):
    """A capability's input or output does not validate against its JSON Schema.

    `path` is the JSON path of the offending value (`$` for the whole document, `$.figures[2]`
    inside it) and `reason` says what is wrong with it.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class ChatError(IdentityError):
    """A chat model could not be asked (`accord.identity.chat`).

    `retriable` is True when asking again later may succeed (the server could not be reached,
    timed out, rate-limited or failed on its side: 408, 409, 429, 5xx), False when it refused
    the request (another HTTP status). `reason` is the message without the "(retriable)" mark.
    """

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(f"{message} (retriable)" if retriable else message)
        self.reason = message
        self.retriable = retriable


class ChatReplyError(ChatError):
    """A chat model answered, but its reply cannot be used: it has no choices, was cut off at
    the length limit, or is a refusal. Not retriable: the same request gets the same kind of
    reply; a caller may ask differently (say why, and ask again)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


class SkillError(IdentityError):
    """A skill manifest cannot be declared, found or examined (`accord.identity.manifests`)."""


class ManifestError(SkillError):
    """A manifest breaks a manifest rule: `path` is the JSON path of the offending value
    (`$.graders[1].pattern`), `reason` what is wrong there."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class GateFailed(SkillError):
    """A validity gate refused a manifest at declaration: `gate` is one of `bank`,
    `empty-answer`, `constant-answer`, `oracle`, `pinned-code`, `deterministic`, `judge`;
    `reason` says how."""

    def __init__(self, gate: str, reason: str) -> None:
        super().__init__(f"gate {gate}: {reason}")
        self.gate = gate
        self.reason = reason


class JudgeUnavailable(SkillError):
    """A model-graded skill's judge could not be asked: nothing was graded."""


class UnknownSkill(SkillError):
    """No skill is declared with that id, and no built-in skill has that name."""


class RegistryError(IdentityError):
    """An agent or credential name or id is invalid, already taken, or unknown."""


class PrivateEndpointError(RegistryError):
    """An agent endpoint names a loopback, link-local, private or otherwise non-public address
    while the operator has not allowed private agents (ACCORD_ALLOW_PRIVATE_AGENTS)."""


class AgentCardError(RegistryError):
    """An A2A agent card cannot be fetched or read, names no interface accord can use, or its
    signature is missing or does not verify (the message says which)."""
