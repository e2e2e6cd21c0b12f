"""Every capability an agent can be examined in, by name."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from accord.identity.challenges.arithmetic import ARITHMETIC
from accord.identity.challenges.base import Capability
from accord.identity.challenges.extraction import EXTRACTION
from accord.identity.challenges.python_tasks import PYTHON
from accord.identity.challenges.retrieval import RETRIEVAL
from accord.identity.errors import ExamError

_CAPABILITIES: tuple[Capability, ...] = (ARITHMETIC, PYTHON, EXTRACTION, RETRIEVAL)

REGISTRY: Mapping[str, Capability] = MappingProxyType({c.name: c for c in _CAPABILITIES})
"""Read-only: capability name → capability."""


def get_capability(name: str) -> Capability:
    """The capability called `name`. Raises ExamError if there is none."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise ExamError(f"unknown capability {name!r} (known: {known})") from None
