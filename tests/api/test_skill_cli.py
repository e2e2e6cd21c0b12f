"""`accord skill declare|list|show` in a subprocess with its own ACCORD_HOME (no chain)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from accord.identity.manifests import builtin_manifests, code_sha256, parse_manifest
from accord.identity.skill_folders import LIBRARY_DIR, load_skill_folder
from tests.accord_cli import AccordCli
from tests.identity.test_skill_manifests import manifest


@pytest.fixture
def accord(tmp_path: Path) -> AccordCli:
    return AccordCli(tmp_path / "home")


def test_declare_a_folder_then_list_and_show_it(accord: AccordCli, tmp_path: Path) -> None:
    accord.run("agent", "new", "bob")
    folder = tmp_path / "my-sql"
    shutil.copytree(LIBRARY_DIR / "sql", folder)
    document = json.loads((folder / "skill.json").read_text())
    document["name"] = "shop-sql"
    (folder / "skill.json").write_text(json.dumps(document))
    expected = load_skill_folder(folder)

    unregistered = accord.run("skill", "declare", str(folder), "--as", "bob", check=1)
    assert "has not registered" in unregistered.stderr
    accord.run("agent", "onboard", "bob", "--capability", "arithmetic", "--items", "2")
    declared = accord.json("skill", "declare", str(folder), "--as", "bob")
    assert declared["id"] == expected.skill_id
    assert declared["gates"]["gates"][-1] == "constant-answer"
    assert declared["declarer"] == accord.json("agent", "show", "bob")["did"]

    listed = accord.json("skill", "list")
    assert [row["id"] for row in listed[:1]] == [builtin_manifests()[0].skill_id]
    assert listed[-1]["id"] == expected.skill_id and listed[-1]["shipped"] is False
    shown = accord.json("skill", "show", expected.skill_id)
    assert shown["manifest"] == expected.to_json()
    human = accord.run("skill", "show", "arithmetic").stdout
    assert builtin_manifests()[0].skill_id in human and "shipped" in human
    accord.run("skill", "declare", str(folder), "--as", "bob", check=1)  # already declared


def test_a_manifest_an_empty_answer_passes_is_refused(accord: AccordCli, tmp_path: Path) -> None:
    accord.run("agent", "new", "bob")  # a home; the operator declares
    lenient = "def grade(input, expected, answer):\n    return True\n"
    document = manifest(
        graders=[{"kind": "python", "code": lenient, "sha256": code_sha256(lenient)}]
    )
    path = tmp_path / "lenient.json"
    path.write_text(json.dumps(document))
    before = accord.ledger_size()
    refused = accord.run("skill", "declare", str(path), check=2)
    assert "gate empty-answer" in refused.stderr
    assert accord.ledger_size() == before
    assert parse_manifest(document).skill_id not in {r["id"] for r in accord.json("skill", "list")}
    accord.run("skill", "show", "0" * 64, check=1)


def test_export_in_three_shapes(accord: AccordCli, tmp_path: Path) -> None:
    accord.run("agent", "new", "bob")
    sql = load_skill_folder(LIBRARY_DIR / "sql")
    assert accord.json("skill", "export", "sql", "--format", "a2a")["id"] == sql.skill_id
    tool = accord.json("skill", "export", sql.skill_id, "--format", "mcp")
    assert tool["inputSchema"] == sql.input_schema
    folder = tmp_path / "sql-export"
    accord.run("skill", "export", "sql", "--format", "folder", "--out", str(folder))
    assert (folder / "SKILL.md").read_text().startswith("---\nname: sql\n")
    assert load_skill_folder(folder).skill_id == sql.skill_id
    accord.run("skill", "export", "sql", "--format", "folder", check=2)
