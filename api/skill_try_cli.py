"""`accord skill try SKILL --handler SPEC`: a practice exam on this machine (a command of
`accord.api.skill_cli.skill_app`).

SKILL is a built-in capability (by name or skill id), a skill accord ships (by name or id), a
declared skill's id with `--server URL` (its manifest fetched and held to its id,
`accord.kit.skills.fetch_skill`), or a manifest file or skill folder of your own, not yet
declared. Items are generated here from a fresh seed and graded by the skill's own graders
(`accord.kit.practice`; a declared skill's generator and graders run in the box): no attempt
is spent and no key is needed. Exit status 0 when the handler would pass the exam, 1 when it
would not (or its generator or grader cannot run), 2 for bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from accord.api.market_cli import ServerOption, remote
from accord.api.output import JsonFlag, emit, escape, fail, say

SHOWN = 120
"""Characters of a wrong answer shown (all of it under --json)."""


def _practised(skill: str, server: str | None) -> tuple[str, str]:
    """The capability key `practise` takes for `skill` (made findable by `get_capability`),
    and the name to show. Exits 2 when nothing names it."""
    from accord.identity.challenges import REGISTRY
    from accord.identity.errors import SkillError
    from accord.identity.manifests import builtin_name, parse_manifest
    from accord.identity.skill_capability import remember_skill
    from accord.identity.skill_folders import folder_document, library_manifests
    from accord.kit.skills import fetch_skill

    if builtin_name(skill) in REGISTRY:
        return builtin_name(skill), builtin_name(skill)
    for manifest in library_manifests():
        if skill in (manifest.name, manifest.skill_id):
            remember_skill(manifest)
            return manifest.skill_id, manifest.name
    path = Path(skill)
    try:
        if path.exists():
            document = (
                folder_document(path)
                if path.is_dir()
                else json.loads(path.read_text(encoding="utf-8"))
            )
            manifest = parse_manifest(document)
            remember_skill(manifest)
            return manifest.skill_id, manifest.name
        if server is not None:
            with remote(server) as client:
                manifest = fetch_skill(client, skill)
            return manifest.skill_id, manifest.name
    except (SkillError, OSError, ValueError) as exc:
        fail(str(exc), code=2)
    fail(
        f"unknown capability or skill {skill!r}: name a built-in capability or a shipped "
        "skill, a manifest file or skill folder, or a declared skill's id with --server URL",
        code=2,
    )


def skill_try(
    skill: Annotated[
        str,
        typer.Argument(
            help="A capability or shipped skill (name or id), a declared skill's id (with "
            "--server), or a manifest file or skill folder."
        ),
    ],
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
    server: ServerOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Run a handler against freshly generated exam items, locally, and print its score and
    the items it got wrong with the grader's reasons (no attempt spent)."""
    from accord.identity.errors import ExamError, SkillError
    from accord.kit.handlers import HandlerError, handler_from_spec
    from accord.kit.practice import practise

    capability, name = _practised(skill, server)
    try:
        runtime = handler_from_spec(handler, allow_private=allow_private)
    except HandlerError as exc:
        fail(str(exc), code=2)
    try:
        result = practise(capability, runtime, items=items)
    except (ExamError, SkillError) as exc:  # a generator or grader with no box to run in
        fail(str(exc))
    if as_json:
        emit({**result.to_json(), "name": name})
    else:
        verdict = "[green]would pass[/]" if result.passed else "[red]would not pass[/]"
        say(
            f"{escape(name)}: {result.earned}/{result.possible} over {result.items} items, "
            f"{verdict}"
        )
        for wrong in result.wrong:
            answer = json.dumps(wrong.answer, ensure_ascii=False)
            answer = answer if len(answer) <= SHOWN else answer[: SHOWN - 1] + "…"
            say(f"  {escape(wrong.item_id)}: {escape(wrong.reason)} (answered {escape(answer)})")
    if not result.passed:
        raise typer.Exit(1)
