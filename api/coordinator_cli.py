"""`accord task run` and `accord conversation …`: the team at work, live and replayed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from accord.api.market_cli import (
    ServerOption,
    agent_names,
    open_market,
    read_market,
    remote,
    require_task,
    task_app,
)
from accord.api.output import JsonFlag, emit, escape, fail, plural, say
from accord.coordinator.errors import CoordinatorError, IllegalMove, PolicyError
from accord.identity.errors import IdentityError
from accord.ledger.errors import LedgerError
from accord.ledger.settings import Settings
from accord.market.errors import MarketError

if TYPE_CHECKING:
    from accord.coordinator.conversation import Conversation, Message
    from accord.market.service import Market
    from accord.market.wiring import MarketContext

conversation_app = typer.Typer(
    help="Team conversations: list them, replay one.", no_args_is_help=True
)


@contextmanager
def _market() -> Iterator[MarketContext]:
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        fail(str(exc), code=2)
    try:
        yield open_market(settings)
    except (CoordinatorError, MarketError, LedgerError, IdentityError) as exc:
        fail(str(exc))


@contextmanager
def _read() -> Iterator[Market]:
    """The market over the configured log, to read conversations: it creates no home, starts
    no devnet and reaches no chain. A conversation that does not replay is one line, exit 1."""
    with read_market() as market:
        try:
            yield market
        except CoordinatorError as exc:
            fail(str(exc))


def describe(message: Message, names: dict[str, str]) -> str:
    """One line for a message, naming agents by their registered names."""
    from accord.coordinator.conversation import (
        Abandon,
        AssignAsync,
        AssignSync,
        Conclude,
        Discuss,
        NoShow,
        Report,
    )

    def who(did: str | None) -> str:
        return "-" if did is None else names.get(did, did[:14] + "…")

    match message:
        case Discuss(text=text):
            body = f"says {text!r}"
        case AssignSync(assignee=assignee, task=task):
            body = f"assigns {task.sub_id} to {who(assignee)} and waits"
        case AssignAsync(assignments=assignments):
            pairs = ", ".join(f"{t.sub_id}→{who(a)}" for a, t in assignments)
            body = f"assigns {pairs} (async, triggers set)"
        case Report(result=result):
            if result.ok:
                by = sorted({who(c.agent) for c in result.contributions})
                count = len(result.contributions)
                body = f"reports {result.sub_id}: {plural(count, 'answer')} by {', '.join(by)}"
            else:
                body = f"reports {result.sub_id} failed: {result.error}"
        case Abandon(sub_id=sub_id, reason=reason):
            body = f"abandons {sub_id}: {reason}"
        case NoShow(sub_id=sub_id):
            body = f"declares a no-show for {sub_id}: its member did not answer in time"
        case Conclude(deliverable=deliverable):
            body = f"concludes: {deliverable.summary}"
    return f"{who(message.speaker)} {body}"


@task_app.command("run")
def task_run(
    task_id: str,
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds a member has per assignment.")
    ] = 30.0,
    depth: Annotated[int, typer.Option(min=0, max=4, help="How deep teams may nest.")] = 1,
    policy: Annotated[
        str, typer.Option(help="Who leads: 'rule' (deterministic) or 'llm' (a chat model).")
    ] = "rule",
    model: Annotated[
        str | None,
        typer.Option(help="The llm policy's model (default: ACCORD_LLM_MODEL)."),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            help="Any OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1 (default: "
            "OPENAI_BASE_URL, else OpenAI's API); it needs no key."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run the awarded task's team, with a live view of the conversation (turns numbered as
    `conversation show` numbers them: the turn each message was logged at, from t00)."""
    from accord.coordinator.llm_policy import leader_policy
    from accord.coordinator.runner import RunSettings
    from accord.coordinator.service import agent_names, run_awarded_task

    try:
        leader = leader_policy(policy, model=model, endpoint=endpoint)
    except PolicyError as exc:
        fail(str(exc), code=2)
    require_task(task_id)
    with _market() as context:
        names = agent_names(context)

        def show(conversation: Conversation, message: Message) -> None:
            if as_json:
                return
            indent = "  " * conversation.depth
            logged_turn = conversation.turn - 1  # `conversation` is the state after the move
            say(
                f"{indent}[dim]{conversation.conv_id} t{logged_turn:02d}[/] "
                f"{escape(describe(message, names))} [dim]→ {conversation.state}[/]"
            )

        conversation = run_awarded_task(
            context,
            task_id,
            policy=leader,
            settings=RunSettings(timeout_s=timeout, max_depth=depth),
            observer=show,
        )
        deliverable = conversation.deliverable
        assert deliverable is not None
    data = {
        "task_id": task_id,
        "conv_id": conversation.conv_id,
        "state": "delivered",
        "turns": conversation.turn,
        "deliverable": deliverable.to_json(),
    }
    if as_json:
        emit(data)
        return
    counts: dict[str, int] = {}
    for contribution in deliverable.contributions:
        name = names.get(contribution.agent, contribution.agent)
        counts[name] = counts.get(name, 0) + 1
    parts = ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))
    say(f"[green]✓[/] {task_id} delivered: {deliverable.summary} (contributions: {parts})")


@conversation_app.command("list")
def conversation_list(
    task: Annotated[str | None, typer.Option(help="Only this task's conversations.")] = None,
    as_json: JsonFlag = False,
    server: ServerOption = None,
) -> None:
    """Every logged conversation: id, task, parent, state and members. A read: it starts no
    devnet and reaches no chain."""
    from accord.coordinator.service import conversation_ids, replay_conversation

    if server:
        with remote(server) as client:
            rows = []
            for row in client.conversations(task):
                if not row.pop("valid", True):
                    fail(str(IllegalMove(str(row.get("reason", "it does not replay")))))
                rows.append(row)
    else:
        if task is not None:
            require_task(task)
        with _read() as market:
            store = market.ledger.store
            records = [
                replay_conversation(store, conv_id) for conv_id in conversation_ids(store, task)
            ]
        rows = [record.to_json() for record in records]
    if as_json:
        emit(rows)
        return
    from rich.table import Table

    table = Table(title=plural(len(rows), "conversation"), title_justify="left")
    for column in ("id", "task", "parent", "depth", "state", "members", "turns"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            str(row["conv_id"]),
            str(row["task_id"]),
            str(row["parent"] or "-"),
            str(row["depth"]),
            str(row["state"]),
            str(len(row["members"])),
            str(row["turns"]),
        )
    say(table)


@conversation_app.command("show")
def conversation_show(conv_id: str, as_json: JsonFlag = False, server: ServerOption = None) -> None:
    """Replay a conversation through the state machine, message by message. A read: it
    starts no devnet and reaches no chain."""
    from accord.coordinator.conversation import message_from_json, message_to_json
    from accord.coordinator.service import replay_conversation

    if server:
        with remote(server) as client:
            data = client.conversation(conv_id)
            data.pop("opened_index", None)
            names = {str(a["did"]): str(a["name"]) for a in client.agents()}
    else:
        with _read() as market:
            record = replay_conversation(market.ledger.store, conv_id)
            names = agent_names(market.onboarding)
        data = {
            **record.to_json(),
            "answered": dict(record.conversation.answered),
            "messages": [
                {
                    "index": m.index,
                    "turn": m.turn,
                    "at": m.at,
                    "message": message_to_json(m.message),
                }
                for m in record.messages
            ],
        }
    if as_json:
        emit(data)
        return
    parent = data["parent"] or "-"
    say(
        f"[bold]{data['conv_id']}[/] for {data['task_id']} (depth {data['depth']}, parent {parent})"
    )
    for logged in data["messages"]:
        message = message_from_json(logged["message"])
        say(f"  t{logged['turn']:02d} #{logged['index']:<5} {escape(describe(message, names))}")
    say(f"state {data['state']}; every move checked against the transition table")
