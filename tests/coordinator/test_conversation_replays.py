"""A relayed conversation is replayed on from the last state this process verified
(`accord.coordinator.service.ConversationReplays`, which `contract_work` admits each relayed
entry against): relaying n messages reads each entry from the store once, not the whole
conversation again for each message (quadratic). Reads are counted, not timed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accord.coordinator.conversation import (
    CONVERSATION_MESSAGE,
    CONVERSATION_OPENED,
    Discuss,
    message_to_json,
)
from accord.coordinator.errors import IllegalMove
from accord.coordinator.service import ConversationReplays, replay_conversation, replays_of
from accord.ledger.service import Ledger
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer
from accord.ledger.wiring import open_ledger, prepare_home

MESSAGES = 40


class World:
    """A real SQLite log holding one conversation of two members, and a count of the entries
    the store's reads return."""

    def __init__(self, home: Path) -> None:
        settings = Settings.from_env({"ACCORD_HOME": str(home)})
        prepare_home(settings)
        self.ledger: Ledger = open_ledger(settings)
        self.leader, self.member = Ed25519Signer.generate(), Ed25519Signer.generate()
        self.ledger.append(
            self.leader,
            CONVERSATION_OPENED,
            subject="conv-1",
            body={
                "task": "task-1",
                "leader": self.leader.did,
                "members": [self.leader.did, self.member.did],
                "parent": None,
                "depth": 0,
                "max_turns": 2 * MESSAGES,
                "title": "a long talk",
            },
        )
        self.read = 0
        find: Callable[..., Any] = self.ledger.store.find

        def counting_find(**query: Any) -> Any:
            found = find(**query)
            self.read += len(found)
            return found

        self.ledger.store.find = counting_find  # type: ignore[method-assign]

    def say(self, turn: int, *, speaker: Ed25519Signer | None = None) -> None:
        """Turn `turn`'s message: the leader on even turns, the member on odd ones."""
        mine, theirs = (self.leader, self.member) if turn % 2 == 0 else (self.member, self.leader)
        message = Discuss(mine.did, f"point {turn}", "discussion", theirs.did)
        body = {"conversation": "conv-1", "turn": turn, "message": message_to_json(message)}
        self.ledger.append(speaker or mine, CONVERSATION_MESSAGE, subject="conv-1", body=body)


def test_relaying_n_messages_reads_each_entry_once(tmp_path: Path) -> None:
    world = World(tmp_path / "home")
    replays = ConversationReplays(world.ledger.store)
    for turn in range(MESSAGES):
        assert replays.replay("conv-1").conversation.turn == turn  # what the relay checks
        world.say(turn)
    last = replays.replay("conv-1")
    assert world.read == 1 + MESSAGES  # the opening and each message, once
    world.read = 0
    full = replay_conversation(world.ledger.store, "conv-1")
    assert world.read == 1 + MESSAGES  # what every relayed message once cost
    assert last == full
    assert [m.turn for m in last.messages] == list(range(MESSAGES))


def test_a_bad_entry_is_refused_and_the_verified_state_kept(tmp_path: Path) -> None:
    """An entry that does not replay (signed by another than its speaker) is refused each time
    it is read, never folded into the kept state."""
    world = World(tmp_path / "home")
    replays = replays_of(world.ledger.store)
    assert replays is replays_of(world.ledger.store)  # one per store and process
    world.say(0)
    assert replays.replay("conv-1").conversation.turn == 1
    world.say(1, speaker=world.leader)  # the member's message, signed by the leader
    for _ in range(2):
        with pytest.raises(IllegalMove, match="not its speaker"):
            replays.replay("conv-1")
