"""The judge seat of model-graded skills: the configured judge model, a recorder of its choices
for the log, and their replay for the audit.

Configuration, the same as the market's judge checks (`accord.market.check_io`):
ACCORD_JUDGE_URL (an OpenAI-compatible base URL), ACCORD_JUDGE_MODEL (default "judge"), and
ACCORD_JUDGE_KEY or OPENAI_API_KEY (optional: local servers need none). The judge is asked
through the `openai` client at temperature 0 in JSON mode and answers `{"choice": "A"}`.

A judge's choice is not something anyone can recompute, so the service logs each one
(`skill.attempt.graded` body `judge`: its identity and its choices in the order asked) and the
audit re-grades an attempt with those choices replayed (`ReplayedJudge`): the seed, the
items, every other grader and the score are recomputed; the judge's word is taken as logged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from accord.identity.chat import ChatError, ChatModel, ChatReplyError, OpenAIChat
from accord.identity.errors import JudgeUnavailable, SkillError
from accord.identity.graders import JudgeSeat

JUDGE_TIMEOUT_S = 60.0
JUDGE_ATTEMPTS = 3
MAX_CHOICE_CHARS = 20


class ChatJudge:
    """Asks a chat model for a grader's choice."""

    def __init__(self, chat: ChatModel) -> None:
        self.chat = chat

    def choose(self, prompt: str) -> str:
        """The choice the model names in `{"choice": ...}`, or "" for a reply that names none
        (which no grader lists, so the item is not earned).

        Raises JudgeUnavailable when the model cannot be asked (its retries spent): nothing is
        graded then, and the candidate may answer again.
        """
        try:
            reply = self.chat.complete(
                [{"role": "user", "content": prompt}], json_mode=True, temperature=0
            )
        except ChatReplyError:
            return ""
        except ChatError as exc:
            raise JudgeUnavailable(
                f"the judge model {self.chat.model} could not be asked ({exc.reason}); "
                "nothing was graded: answer again when it answers"
            ) from exc
        try:
            value = json.loads(reply.content)
        except ValueError:
            return ""
        choice = value.get("choice") if isinstance(value, dict) else None
        return choice if isinstance(choice, str) and len(choice) <= MAX_CHOICE_CHARS else ""


def judge_seat_from_env(environ: Mapping[str, str] | None = None) -> JudgeSeat | None:
    """The judge seat ACCORD_JUDGE_URL configures (its identity "MODEL at URL"), or None when
    it is not set. Raises RegistryError for a URL that is not http(s) with a host."""
    env = os.environ if environ is None else environ
    url = env.get("ACCORD_JUDGE_URL")
    if not url:
        return None
    model = env.get("ACCORD_JUDGE_MODEL") or "judge"
    chat = OpenAIChat(
        model,
        base_url=url,
        api_key=env.get("ACCORD_JUDGE_KEY") or env.get("OPENAI_API_KEY"),
        timeout=JUDGE_TIMEOUT_S,
        retries=JUDGE_ATTEMPTS - 1,
    )
    return JudgeSeat(f"{model} at {url}", ChatJudge(chat).choose)


class RecordingJudge:
    """A judge seat that keeps each choice `seat` makes, in the order it was asked."""

    def __init__(self, seat: JudgeSeat) -> None:
        self.identity = seat.identity
        self.choices: list[str] = []
        self._ask = seat.ask

    def ask(self, prompt: str) -> str:
        choice = self._ask(prompt)
        self.choices.append(choice)
        return choice

    @property
    def seat(self) -> JudgeSeat:
        return JudgeSeat(self.identity, self.ask)

    def record(self) -> dict[str, Any]:
        """What the graded entry logs: `{"identity", "choices"}`."""
        return {"identity": self.identity, "choices": list(self.choices)}


class ReplayedJudge:
    """The audit's judge seat: the logged choices, handed out in the order they were made."""

    def __init__(self, record: object) -> None:
        """Raises SkillError for a record that is not `{"identity": str, "choices": [str]}`."""
        if not isinstance(record, Mapping):
            raise SkillError("a model-graded attempt logs no judge record")
        identity, choices = record.get("identity"), record.get("choices")
        if not isinstance(identity, str) or not identity:
            raise SkillError("the judge record names no judge")
        if not isinstance(choices, Sequence) or isinstance(choices, str):
            raise SkillError("the judge record lists no choices")
        if not all(isinstance(c, str) for c in choices):
            raise SkillError("a judge's choice is text")
        self.identity = identity
        self._choices = [str(c) for c in choices]
        self._next = 0

    def ask(self, prompt: str) -> str:
        """Raises SkillError when the re-grade asks more often than the judge was asked."""
        if self._next >= len(self._choices):
            raise SkillError("the re-grade asks the judge more often than the log says it was")
        choice = self._choices[self._next]
        self._next += 1
        return choice

    @property
    def seat(self) -> JudgeSeat:
        return JudgeSeat(self.identity, self.ask)

    def check_spent(self) -> None:
        """Raises SkillError when the log holds choices the re-grade never asked for."""
        if self._next != len(self._choices):
            raise SkillError(
                f"the log holds {len(self._choices)} judge choices; the re-grade asked "
                f"for {self._next}"
            )
