"""The whole directory: every registered agent as a team's directory shows it, the oracle the
tests compare `directory_for` (which lists only the holders of a task's capabilities) with."""

from __future__ import annotations

from accord.coordinator.policy import Member
from accord.coordinator.service import directory_for
from accord.market.wiring import MarketContext


def whole_directory(context: MarketContext) -> list[Member]:
    """Every registered agent by name, each verified as `directory_for` verifies an agent it
    lists (its credential documents checked, not the credential view trusted)."""
    agents = context.onboarding.registry.list()
    members = directory_for(context, (), including=[agent.did for agent in agents])
    by_did = {member.did: member for member in members}
    return [by_did[agent.did] for agent in agents]
