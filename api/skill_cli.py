"""`accord skill declare|list|show`: skill manifests in this home's log
(`accord.identity.skill_registry`).

`declare` takes a manifest file (JSON) or a skill folder (`skill.json` with its code files,
`accord.identity.skill_folders`), checks the manifest rules, runs its validity gates in the box
and logs its `skill.declared` entry, signed by the operator or, with `--as`, by a hosted agent
of this home (a self-custody agent declares through the API, `POST /skills`, with its own
entry). Exit status 0 success, 1 a refusal the message explains, 2 bad input (a broken rule or
a failed gate: nothing is logged).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from accord.api.identity_cli import _errors, _onboarding
from accord.api.market_cli import OwnKeyOption, ServerOption, remote, signed_remote
from accord.api.output import JsonFlag, emit, fail, say
from accord.api.skill_try_cli import skill_try
from accord.identity.errors import GateFailed, ManifestError
from accord.identity.skill_folders import MANIFEST_FILE, folder_document

skill_app = typer.Typer(help="Skills: manifests named by their hash.", no_args_is_help=True)


def _document(path: Path) -> Any:
    """The manifest at `path`: a folder's (inlined), or a JSON file's. Exits 2 when unreadable."""
    try:
        if path.is_dir():
            return folder_document(path)
        return json.loads(path.read_text(encoding="utf-8"))
    except ManifestError as exc:
        fail(str(exc), code=2)
    except (OSError, ValueError) as exc:
        fail(f"cannot read a manifest from {path}: {exc}", code=2)


def _declare_remote(server: str, key: Path | None, document: Any, as_json: bool) -> None:
    """Declare at the service at `server`, with an entry signed by the did:key in `key`."""
    from accord.identity.manifests import skill_id
    from accord.identity.skill_registry import SKILL_DECLARED_KIND

    try:
        named = skill_id(document) if isinstance(document, dict) else ""
    except ManifestError as exc:
        fail(str(exc), code=2)
    with signed_remote(server, key, "a declaration") as client:
        entry = client.entry(SKILL_DECLARED_KIND, named, {"skill_id": named, "manifest": document})
        declared = client.post("/skills", {"entry": entry})
    if as_json:
        emit(declared)
        return
    say(f"[green]✓[/] declared {declared['name']} {declared['version']}: {declared['id']}")


@skill_app.command("declare")
def skill_declare(
    path: Annotated[
        Path, typer.Argument(help=f"A manifest (JSON) or a skill folder holding {MANIFEST_FILE}.")
    ],
    as_agent: Annotated[
        str | None, typer.Option("--as", help="Declare as this hosted agent (default: operator).")
    ] = None,
    server: ServerOption = None,
    key: OwnKeyOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Check a manifest, run its validity gates in the box, and log its declaration: in this
    home, or with --server at a service, signed by your own --key (a registered did:key)."""
    document = _document(path)
    if server is not None:
        if as_agent is not None:
            fail("--as names a key the local store holds; with --server give --key FILE", 2)
        _declare_remote(server, key, document, as_json)
        return
    if key is not None:
        fail("--key goes with --server URL", 2)
    onboarding = _onboarding()
    with _errors():
        signer = (
            onboarding.ledger.operator
            if as_agent is None
            else onboarding.registry.signer(onboarding.registry.get(as_agent))
        )
        try:
            skill, report = onboarding.skills.declare(signer, document)
        except (ManifestError, GateFailed) as exc:
            fail(f"refused: {exc}", code=2)
    if as_json:
        emit({**skill.summary(), "gates": report.to_json()})
        return
    say(
        f"[green]✓[/] declared {skill.manifest.name} {skill.manifest.version}: "
        f"{skill.manifest.skill_id}"
    )
    say(f"  gates passed: {', '.join(report.gates)} (oracle {report.oracle_earned}/{report.items})")


@skill_app.command("list")
def skill_list(as_json: JsonFlag = False, server: ServerOption = None) -> None:
    """The shipped skills, then the declared ones in the order they were declared."""
    rows: list[dict[str, Any]]
    if server is not None:
        with remote(server) as client:
            rows = client.get("/skills")
    else:
        onboarding = _onboarding(read=True)
        with _errors():
            rows = [skill.summary() for skill in onboarding.skills.page()]
    if as_json:
        emit(rows)
        return
    from rich.table import Table

    table = Table(title="skills", title_justify="left")
    for column in ("name", "version", "id", "declarer", "exam"):
        table.add_column(column, overflow="fold")
    for row in rows:
        declarer = "shipped" if row["shipped"] else str(row["declarer"])
        exam = f"{row['exam']['kind']}, {row['exam']['items']} items, {row['exam']['threshold']}"
        table.add_row(row["name"], row["version"], row["id"], declarer, exam)
    say(table)


@skill_app.command("show")
def skill_show(
    skill: Annotated[str, typer.Argument(help="A skill id (a shipped skill: its name too).")],
    as_json: JsonFlag = False,
    server: ServerOption = None,
) -> None:
    """One skill, its whole manifest and its exam→field agreement."""
    from accord.api.routes.skills import logged_agreement

    shown: dict[str, Any]
    if server is not None:
        with remote(server) as client:
            shown = client.get(f"/skills/{skill}")
    else:
        onboarding = _onboarding(read=True)
        with _errors():
            found = onboarding.skills.get(skill)
            shown = {
                **found.to_json(),
                "agreement": logged_agreement(onboarding.ledger.store, found),
            }
    if as_json:
        emit(shown)
        return
    agreement = shown["agreement"]
    say(f"[bold]{shown['name']}[/] {shown['version']}  {shown['id']}")
    say(str(shown["description"]), markup=False)
    say(f"  declared by {'the operator (shipped)' if shown['shipped'] else shown['declarer']}")
    say(f"  exam: {shown['exam']['kind']}, {shown['exam']['items']} items, pass at "
        f"{shown['exam']['threshold']}; graders: {', '.join(shown['graders'])}")  # fmt: skip
    if shown["supersedes"]:
        say(f"  supersedes {shown['supersedes']}")
    say(
        f"  exam→field: {agreement['holders_with_real_parts']} of {len(agreement['holders'])} "
        f"holders did real parts; exam mean {agreement['exam_mean']}, real parts' mean "
        f"{agreement['field_mean']}"
    )
    say(str(shown["manifest"]["instructions"]), markup=False)


@skill_app.command("export")
def skill_export(
    skill: Annotated[str, typer.Argument(help="A skill id (a shipped skill: its name too).")],
    shape: Annotated[
        str, typer.Option("--format", help="a2a (AgentSkill), mcp (tool) or folder (SKILL.md).")
    ] = "a2a",
    out: Annotated[
        Path | None, typer.Option(help="For --format folder: the folder to write (made new).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The skill in another ecosystem's shape: printed as JSON, or a folder written."""
    from accord.identity.skill_exports import a2a_skill, mcp_tool, skill_folder

    if shape not in ("a2a", "mcp", "folder"):
        fail(f"--format must be a2a, mcp or folder, not {shape!r}", code=2)
    if shape == "folder" and out is None:
        fail("--format folder needs --out FOLDER", code=2)
    onboarding = _onboarding(read=True)
    with _errors():
        manifest = onboarding.skills.get(skill).manifest
    if shape == "a2a":
        emit(a2a_skill(manifest))
        return
    if shape == "mcp":
        emit(mcp_tool(manifest))
        return
    assert out is not None
    files = skill_folder(manifest)
    try:
        out.mkdir(parents=True, exist_ok=False)
        for name, text in files.items():
            (out / name).write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write the folder {out}: {exc}", code=2)
    if as_json:
        emit({"folder": str(out), "files": sorted(files)})
        return
    say(f"wrote {out}: declare it with `accord skill declare {out}`")


skill_app.command("try")(skill_try)
