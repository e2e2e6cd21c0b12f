"""An LLM policy: the leader's next message from an OpenAI-compatible chat model.

The prompts are template files in `coordinator/prompts/`, rendered strictly (`render`): a
placeholder without a value, or a value without a placeholder, is a `PromptError`, never a
silent substitution. The model answers one JSON object (`response_format` json_object), which
is parsed at this seam into a typed message and checked against the transition table:

    (1) the reply has content and was not cut off or refused
    (2) the content is one JSON object
    (3) sub-task ids are expanded to the sub-tasks the leader may assign, and a conclusion's
        summary gets the contributions reported so far (the model never restates them)
    (4) it is a message (`message_from_json`)
    (5) the leader speaks it, and abandons first what must be abandoned
    (6) `step` accepts it

Any failure is a `PolicyOutputError` (retriable): `LLMPolicy.decide` asks again, up to
`max_attempts` times, telling the model why its last answer was refused. The model is an
`accord.identity.chat.ChatModel`, which owns the transport (key, timeout, retries, JSON mode and its
fallback); its `ChatError` becomes a `PolicyCallError` here, retriable as the ChatError is (a
connection failure, a timeout, a rate limit or a 5xx), and its `ChatReplyError` (no choices, cut
off, a refusal) a refused answer, asked again like the others.

`leader_policy(name, model=…, endpoint=…)` is how a caller (the CLI, the API) picks the leader's
policy: "rule", or "llm" on any OpenAI-compatible endpoint (a key only for OpenAI's own API).
"""

from __future__ import annotations

import json
import os
import string
from collections.abc import Iterable, Mapping
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable

from accord.coordinator.conversation import (
    Abandon,
    AssignAsync,
    AssignSync,
    Conclude,
    Contribution,
    Conversation,
    ConversationState,
    Deliverable,
    Discuss,
    Message,
    Result,
    message_from_json,
    message_to_json,
    step,
)
from accord.coordinator.errors import IllegalMove, PolicyError, PolicyOutputError
from accord.coordinator.policy import Member, Policy, RulePolicy, TeamView
from accord.coordinator.work import JSON, SubTask
from accord.identity.chat import (
    ChatError,
    ChatMessage,
    ChatModel,
    ChatReplyError,
    openai_chat,
    snippet,
)
from accord.identity.errors import RegistryError
from accord.identity.runtimes import parse_json

PROMPTS_DIR: Traversable = files("coordinator") / "prompts"
"""The prompt templates shipped with the `coordinator` package (package data)."""
TEMPLATES = ("leader_system", "leader_turn", "leader_retry")
DEFAULT_MAX_ATTEMPTS = 3
MAX_REPLY_CHARS = 1 << 20
LEADER_KINDS = ("discuss", "assign_sync", "assign_async", "abandon", "conclude")

MODEL_VARIABLE = "ACCORD_LLM_MODEL"
POLICIES = ("rule", "llm")


class PromptError(PolicyError):
    """A prompt template and its values do not match (not retriable: a bug, not bad luck)."""

    retriable = False


class PolicyCallError(PolicyError):
    """The model could not be asked: `retriable` when trying again later may succeed."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(f"{message} (retriable)" if retriable else message)
        self.retriable = retriable


# -- strict templates ----------------------------------------------------------------------------


def render(template: str, values: Mapping[str, str], name: str = "template") -> str:
    """Substitute `values` into a `string.Template` text, strictly.

    Raises PromptError for an invalid placeholder, a placeholder without a value, or a value
    without a placeholder.
    """
    tmpl = string.Template(template)
    if not tmpl.is_valid():
        raise PromptError(f"{name} has an invalid placeholder (write $$ for a dollar sign)")
    names = set(tmpl.get_identifiers())
    missing = sorted(names - set(values))
    if missing:
        raise PromptError(f"{name} needs a value for {', '.join(missing)}")
    unused = sorted(set(values) - names)
    if unused:
        raise PromptError(f"{name} has no placeholder for {', '.join(unused)}")
    return tmpl.substitute(values)


@cache
def load_template(name: str) -> str:
    """The text of `coordinator/prompts/<name>.txt`, read through importlib.resources.

    Raises PromptError when there is no such template, or the installed package lacks it.
    """
    if name not in TEMPLATES:
        raise PromptError(f"no prompt template {name!r}")
    try:
        return (PROMPTS_DIR / f"{name}.txt").read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptError(f"prompt template {name!r} is missing from the package: {exc}") from exc


def render_prompt(name: str, values: Mapping[str, str]) -> str:
    """Render the template `name` strictly. Raises PromptError."""
    return render(load_template(name), values, f"prompt {name}")


# -- what the leader may say now -----------------------------------------------------------------

_AFTER_RESULT: tuple[ConversationState, ...] = (
    "discussion",
    "sync_task_assign",
    "async_task_assign",
    "conclusion",
)


def expected_move(view: TeamView) -> tuple[str, tuple[ConversationState, ...]]:
    """The kind of message the leader sends now and the next states the table allows.

    Raises PolicyError when it is not the leader's turn.
    """
    c = view.conversation
    if view.abandon:
        sub_id = view.abandon[0]
        remaining = {k for k in c.triggers if k != sub_id}
        blocked = c.blocked_on is not None and c.blocked_on[0] != sub_id
        if remaining:
            return "abandon", ("pause_trigger",)
        return "abandon", _without_conclusion(_AFTER_RESULT, blocked)
    outstanding = bool(c.triggers) or c.blocked_on is not None
    match c.state:
        case "discussion":
            states = _AFTER_RESULT + (("pause_trigger",) if c.triggers else ())
            return "discuss", _without_conclusion(states, outstanding)
        case "sync_task_assign" if c.blocked_on is None:
            return "assign_sync", ("sync_task_assign",)
        case "async_task_assign":
            return "assign_async", (
                "discussion",
                "sync_task_assign",
                "async_task_assign",
                "pause_trigger",
            )
        case "conclusion":
            return "conclude", ("closed",)
    raise PolicyError(f"the leader does not speak in {c.state}")


def _without_conclusion(
    states: tuple[ConversationState, ...], outstanding: bool
) -> tuple[ConversationState, ...]:
    return tuple(s for s in states if s != "conclusion") if outstanding else states


_RULES = {
    "discuss": (
        "next_speaker is you, except for pause_trigger, where it is a member with a pending "
        "trigger."
    ),
    "assign_sync": (
        "Assign one sub-task, by id, to a member that holds its capability; next_speaker is "
        "that member, who reports next."
    ),
    "assign_async": (
        "Assign one or more sub-tasks, by id, each to a member that holds its capability. For "
        "pause_trigger, next_speaker is a member with a pending trigger; otherwise it is you."
    ),
    "abandon": (
        "The member of sub-task {sub_id} failed or timed out: abandon sub_id {sub_id}. For "
        "pause_trigger, next_speaker is a member with a pending trigger; otherwise it is you."
    ),
    "conclude": "next_state is closed and next_speaker is null.",
}


# -- the prompts ---------------------------------------------------------------------------------

_EXAMPLE_TASK = SubTask("<sub-task id>", "<capability>", "<instruction>", {})
_SUB_ID = "<sub-task id>"


def message_shapes(leader: str) -> str:
    """The JSON shape of each message kind the leader sends: `message_to_json`'s, with
    sub-tasks named by id and a conclusion's contributions left to the coordinator."""
    state: ConversationState = "discussion"
    who = "<DID>"
    examples: list[Message] = [
        Discuss(leader, "<what you say>", state, who),
        AssignSync(leader, who, _EXAMPLE_TASK, "sync_task_assign", "<the assignee's DID>"),
        AssignAsync(leader, ((who, _EXAMPLE_TASK),), state, who),
        Abandon(leader, _SUB_ID, "<why>", state, who),
        Conclude(leader, Deliverable("<a short summary of the outcome>", ())),
    ]
    lines = []
    for example in examples:
        shape = message_to_json(example)
        if isinstance(example, Discuss | AssignAsync | Abandon):
            shape["next_state"] = "<one of the next states allowed>"
        if "task" in shape:
            shape["task"] = _SUB_ID
        if "assignments" in shape:
            shape["assignments"] = [{"assignee": who, "task": _SUB_ID}]
        if isinstance(example, Conclude):
            shape["deliverable"] = {"summary": example.deliverable.summary}
        lines.append(f"{shape['kind']}:\n{json.dumps(shape, ensure_ascii=False)}")
    return "\n\n".join(lines)


def system_prompt(view: TeamView) -> str:
    c = view.conversation
    return render_prompt(
        "leader_system",
        {
            "title": view.title,
            "conversation": c.conv_id,
            "leader": c.leader,
            "description": view.description,
            "shapes": message_shapes(c.leader),
        },
    )


def turn_prompt(view: TeamView) -> str:
    """What the leader sees this turn. Payloads and answers appear only by sub-task id."""
    c = view.conversation
    kind, next_states = expected_move(view)
    rules = _RULES[kind].format(sub_id=view.abandon[0] if view.abandon else "")
    return render_prompt(
        "leader_turn",
        {
            "turn": str(c.turn + 1),
            "max_turns": str(c.max_turns),
            "state": c.state,
            "speaker": str(c.speaker),
            "team": _lines(_member_line(view, m) for m in view.team),
            "outstanding": _lines(_outstanding(c)),
            "results": _lines(_result_line(r) for r in c.results),
            "unassigned": _lines(
                f"- {t.sub_id} ({t.capability}): {t.instruction} [item: {t.sub_id}]"
                for t in view.unassigned
            ),
            "kind": kind,
            "next_states": ", ".join(next_states),
            "rules": rules,
        },
    )


def retry_prompt(error: PolicyOutputError, view: TeamView) -> str:
    kind, _ = expected_move(view)
    return render_prompt("leader_retry", {"error": str(error), "kind": kind})


def _lines(lines: Iterable[str]) -> str:
    text = "\n".join(lines)
    return text or "- none"


def _member_line(view: TeamView, member: Member) -> str:
    did = member.did
    role = " (leader, you)" if did == view.conversation.leader else ""
    failed = sorted(k for k, dids in view.failed_by.items() if did in dids)
    failures = f"; failed {', '.join(failed)}" if failed else ""
    return (
        f"- {member.did} {member.name}{role}: {', '.join(member.capabilities) or 'no capability'};"
        f" reputation {member.reputation}{failures}"
    )


def _outstanding(c: Conversation) -> list[str]:
    lines = []
    if c.blocked_on is not None:
        sub_id, assignee = c.blocked_on
        lines.append(f"- {sub_id} with {assignee} (sync: the team waits for it)")
    lines.extend(f"- {sub_id} with {who} (async trigger)" for sub_id, who in c.triggers.items())
    return lines


def _result_line(result: Result) -> str:
    """A result by its sub-task id and who did it; the answer itself is not restated."""
    if result.ok:
        agents = ", ".join(sorted({x.agent for x in result.contributions}))
        return f"- {result.sub_id}: done by {agents}"
    return f"- {result.sub_id}: failed ({result.error or 'no reason'})"


# -- parsing the model's answer at the seam ------------------------------------------------------


def parse_decision(content: str | None, view: TeamView) -> Message:
    """The leader's message in a model's reply (checklist in the module docstring).

    Raises PolicyOutputError (retriable) for anything that is not a legal leader message now.
    """
    c = view.conversation
    # (1) content
    if content is None or not content.strip():
        raise PolicyOutputError("the reply has no content")
    if len(content) > MAX_REPLY_CHARS:
        raise PolicyOutputError("the reply is longer than 1 MiB")
    # (2) one JSON object
    try:
        value = parse_json(content)
    except ValueError as exc:
        raise PolicyOutputError(f"the reply is not JSON ({exc}): {snippet(content)}") from exc
    if not isinstance(value, dict):
        raise PolicyOutputError(f"the reply is not a JSON object: {snippet(content)}")
    # (3) expand ids
    value = _expand(value, view)
    # (4) a message
    try:
        message = message_from_json(value)
    except IllegalMove as exc:
        raise PolicyOutputError(f"the reply is not a message: {exc.reason}") from exc
    # (5) the leader speaks, abandoning first what must be
    if message.speaker != c.leader:
        raise PolicyOutputError(f"you speak only as the leader {c.leader}, not {message.speaker}")
    if view.abandon and not (isinstance(message, Abandon) and message.sub_id == view.abandon[0]):
        raise PolicyOutputError(f"abandon sub-task {view.abandon[0]} first")
    # (6) the table
    try:
        step(c, message)
    except IllegalMove as exc:
        raise PolicyOutputError(f"the move is refused: {exc.reason}") from exc
    return message


def _expand(value: dict[str, JSON], view: TeamView) -> dict[str, JSON]:
    kind = value.get("kind")
    if kind == "assign_sync" and "task" in value:
        return {**value, "task": _task(value["task"], view).to_json()}
    if kind == "assign_async" and isinstance(value.get("assignments"), list):
        assignments = []
        for pair in value["assignments"]:
            if not isinstance(pair, dict) or "task" not in pair:
                raise PolicyOutputError(f"an assignment is not {{assignee, task}}: {pair!r:.200}")
            assignments.append({**pair, "task": _task(pair["task"], view).to_json()})
        return {**value, "assignments": assignments}
    if kind == "conclude" and isinstance(value.get("deliverable"), dict):
        deliverable = value["deliverable"]
        if "contributions" not in deliverable:
            reported = [x.to_json() for x in _contributions(view.conversation)]
            return {**value, "deliverable": {**deliverable, "contributions": reported}}
    return value


def _task(ref: JSON, view: TeamView) -> SubTask:
    """The unassigned sub-task a reference names (its id, or an object with its `sub_id`)."""
    sub_id = ref.get("sub_id") if isinstance(ref, dict) else ref
    for task in view.unassigned:
        if task.sub_id == sub_id:
            return task
    known = ", ".join(t.sub_id for t in view.unassigned) or "none"
    raise PolicyOutputError(f"{sub_id!r:.100} is not an unassigned sub-task (they are: {known})")


def _contributions(c: Conversation) -> tuple[Contribution, ...]:
    return tuple(x for result in c.results if result.ok for x in result.contributions)


# -- the policy ----------------------------------------------------------------------------------


class LLMPolicy:
    """The leader's decisions from a chat model (`accord.identity.chat.ChatModel`), each asked in
    JSON mode, up to `max_attempts` times. Raises PolicyError for `max_attempts` below 1."""

    def __init__(self, chat: ChatModel, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        if max_attempts < 1:
            raise PolicyError("max_attempts must be at least 1")
        self.chat = chat
        self.max_attempts = max_attempts

    def decide(self, view: TeamView) -> Message:
        """The leader's next message.

        Raises PolicyOutputError (retriable) when every attempt's answer was refused,
        PolicyCallError when the model cannot be asked, PolicyError when it is not the
        leader's turn, PromptError when a template is broken.
        """
        messages: list[ChatMessage] = [
            {"role": "system", "content": system_prompt(view)},
            {"role": "user", "content": turn_prompt(view)},
        ]
        error: PolicyOutputError | None = None
        for _ in range(self.max_attempts):
            content: str | None = None
            try:
                content = self._ask(messages)
                return parse_decision(content, view)
            except PolicyOutputError as exc:
                error = exc
            messages.append({"role": "assistant", "content": content or ""})
            messages.append({"role": "user", "content": retry_prompt(error, view)})
        assert error is not None
        raise error

    def _ask(self, messages: list[ChatMessage]) -> str:
        """One reply's text. Raises PolicyCallError or PolicyOutputError."""
        try:
            return self.chat.complete(messages, json_mode=True).content
        except ChatReplyError as exc:
            raise PolicyOutputError(exc.reason) from exc
        except ChatError as exc:
            raise PolicyCallError(exc.reason, retriable=exc.retriable) from exc


def leader_policy(
    name: str,
    *,
    model: str | None = None,
    endpoint: str | None = None,
    environ: Mapping[str, str] = os.environ,
    allow_private: bool | None = None,
) -> Policy:
    """The leader's policy called `name`: "rule" (the deterministic default) or "llm", the
    model `model` (else ACCORD_LLM_MODEL) at `endpoint` (else OPENAI_BASE_URL, else OpenAI's
    API; `accord.identity.chat.openai_chat`). `allow_private`, when given, sends every request
    through `accord.identity.address_guard.agent_client` (a base URL that came from outside: public
    addresses only unless it is True).

    Raises PolicyError for an unknown name, a model or endpoint given to the rule policy, an
    LLM policy without a model, a base URL that is not http(s), or OpenAI's API without
    OPENAI_API_KEY.
    """
    if name == "rule":
        if model is not None or endpoint is not None:
            raise PolicyError("a model and an endpoint are for the llm policy, not the rule policy")
        return RulePolicy()
    if name != "llm":
        raise PolicyError(f"unknown policy {name!r} (one of {', '.join(POLICIES)})")
    chosen = model or environ.get(MODEL_VARIABLE) or None
    if chosen is None:
        raise PolicyError(f"the llm policy needs a model (--model or {MODEL_VARIABLE})")
    try:
        chat = openai_chat(
            chosen,
            endpoint=endpoint,
            environ=environ,
            who="the LLM policy",
            allow_private=allow_private,
        )
    except (RegistryError, ValueError) as exc:
        raise PolicyError(str(exc)) from exc
    return LLMPolicy(chat)
