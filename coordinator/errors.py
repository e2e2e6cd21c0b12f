"""Every expected failure of the coordinator, under one root; that root derives from
`AccordError` (ledger.errors), the root of every expected failure in accord.

AccordError
└── CoordinatorError
    ├── IllegalMove            a message the conversation's transition table refuses (`reason`)
    ├── TeamError              no team can be formed: nobody holds a needed capability, depth limit
    ├── AgentFailure           an agent adapter failed or timed out on a sub-task (`retriable`)
    ├── WorkRefused            a self-custody winner's relayed entry the service does not log
    │                          (contract_work; `status`)
    └── PolicyError            a policy could not decide
        ├── PolicyOutputError  an LLM's output did not parse into a typed message (retriable)
        ├── PromptError        a prompt template and its values do not match (llm_policy)
        └── PolicyCallError    the model could not be asked (llm_policy; `retriable`)
"""

from __future__ import annotations

from accord.ledger.errors import AccordError


class CoordinatorError(AccordError):
    """Root of every expected coordinator failure."""


class IllegalMove(CoordinatorError):
    """The transition table refuses a message; `reason` says which rule."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TeamError(CoordinatorError):
    """A team cannot be formed (nobody credentialed for a need, or the depth limit)."""


class AgentFailure(CoordinatorError):
    """An agent could not do a sub-task: it failed, answered garbage, or timed out."""

    def __init__(self, agent: str, reason: str, *, retriable: bool = False) -> None:
        super().__init__(f"{agent}: {reason}")
        self.agent = agent
        self.reason = reason
        self.retriable = retriable


class PolicyError(CoordinatorError):
    """A policy could not decide what to say."""


class PolicyOutputError(PolicyError):
    """A model's output did not parse into a typed message; asking again may succeed."""

    retriable = True
