"""`accord skill try CAPABILITY --handler SPEC`: a practice exam on this machine (a command of
`accord.api.skill_cli.skill_app`).

Items are generated here from a fresh seed and graded by the capability's own graders
(`accord.kit.practice`): no service is asked, no key is needed and no attempt is spent. Exit
status 0 when the handler would pass the exam, 1 when it would not (or its grader cannot run),
2 for bad input.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from accord.api.output import JsonFlag, emit, escape, fail, say

SHOWN = 120
"""Characters of a wrong answer shown (all of it under --json)."""


def skill_try(
    capability: Annotated[str, typer.Argument(help="The capability, e.g. arithmetic.")],
    handler: Annotated[
        str,
        typer.Option(
            help="What answers: reference, python:MODULE:FUNCTION, command:PROGRAM ..., "
            "http:URL, openai:MODEL[@BASE_URL] or a2a:CARD_URL."
        ),
    ] = "reference",
    items: Annotated[
        int | None,
        typer.Option(min=1, max=1000, help="Items to generate (default: the exam's size)."),
    ] = None,
    allow_private: Annotated[
        bool, typer.Option(help="Let an http or a2a handler be at a loopback or private address.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Run a handler against freshly generated exam items, locally, and print its score and
    the items it got wrong with the grader's reasons (no service, no attempt spent)."""
    from accord.identity.challenges import get_capability
    from accord.identity.errors import ExamError
    from accord.kit.handlers import HandlerError, handler_from_spec
    from accord.kit.practice import practise

    try:
        get_capability(capability)
        runtime = handler_from_spec(handler, allow_private=allow_private)
    except (ExamError, HandlerError) as exc:
        fail(str(exc), code=2)
    try:
        result = practise(capability, runtime, items=items)
    except ExamError as exc:  # a grader that runs code with no box to run it in
        fail(str(exc))
    if as_json:
        emit(result.to_json())
    else:
        verdict = "[green]would pass[/]" if result.passed else "[red]would not pass[/]"
        say(f"{capability}: {result.earned}/{result.possible} over {result.items} items, {verdict}")
        for wrong in result.wrong:
            answer = json.dumps(wrong.answer, ensure_ascii=False)
            answer = answer if len(answer) <= SHOWN else answer[: SHOWN - 1] + "…"
            say(f"  {escape(wrong.item_id)}: {escape(wrong.reason)} (answered {escape(answer)})")
    if not result.passed:
        raise typer.Exit(1)
