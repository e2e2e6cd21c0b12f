"""Every capability an agent can be examined in, by name: the built-in ones, and declared
skills by their id once something has looked them up on the log (`remember_capability`).

The declared ones are a cache keyed by content hash: a skill id always names the same
manifest, so the cache can lack a skill (the caller loads it from the log first) but never
hold a wrong one."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import MappingProxyType

from accord.identity.challenges.arithmetic import ARITHMETIC
from accord.identity.challenges.base import Capability
from accord.identity.challenges.extraction import EXTRACTION
from accord.identity.challenges.python_tasks import PYTHON
from accord.identity.challenges.retrieval import RETRIEVAL
from accord.identity.errors import ExamError

SKILL_ID = re.compile(r"^[0-9a-f]{64}$")
_CAPABILITIES: tuple[Capability, ...] = (ARITHMETIC, PYTHON, EXTRACTION, RETRIEVAL)

REGISTRY: Mapping[str, Capability] = MappingProxyType({c.name: c for c in _CAPABILITIES})
"""Read-only: capability name → capability."""


_DECLARED: dict[str, Capability] = {}
_LOADERS: list[Callable[[str], Capability | None]] = []


def remember_capability(capability: Capability) -> None:
    """Make a declared skill findable by its id (its `name`)."""
    _DECLARED[capability.name] = capability


def set_capability_loader(loader: Callable[[str], Capability | None]) -> None:
    """Where `get_capability` looks for a declared skill it has not met yet (the log of the
    process's service); the latest one set is asked."""
    _LOADERS[:] = [loader]


def get_capability(name: str) -> Capability:
    """The capability called `name` (a declared skill: by its id, remembered or found by the
    loader). Raises ExamError if there is none."""
    found = REGISTRY.get(name) or _DECLARED.get(name)
    if found is None and _LOADERS and SKILL_ID.match(name):
        found = _LOADERS[0](name)
        if found is not None:
            remember_capability(found)
    if found is None:
        known = ", ".join(sorted(REGISTRY))
        raise ExamError(f"unknown capability {name!r} (known: {known}, and declared skills by id)")
    return found


def require_builtin(name: str) -> None:
    """Raises ExamError unless `name` is a built-in capability: a declared skill's exam is
    sat from a seed both sides fix (`POST /skills/{id}/attempts`), not by this exam service."""
    if name not in REGISTRY:
        raise ExamError(
            f"{name!r} is a declared skill: sit its exam at POST /skills/{name}/attempts"
        )
