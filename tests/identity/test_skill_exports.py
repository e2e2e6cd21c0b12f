"""A skill exported as an A2A AgentSkill, an MCP tool and an Agent Skills folder; the folder
declares back to the same skill id."""

from __future__ import annotations

from pathlib import Path

import pytest
from a2a.types import AgentSkill
from google.protobuf.json_format import ParseDict
from jsonschema import Draft202012Validator

from accord.identity.manifests import SkillManifest, builtin_manifests
from accord.identity.skill_exports import a2a_skill, mcp_tool, skill_folder
from accord.identity.skill_folders import library_manifests, load_skill_folder

SHIPPED = [*builtin_manifests(), *library_manifests()]


@pytest.mark.parametrize("manifest", SHIPPED, ids=lambda m: m.name)
def test_the_exports_name_the_skill_id_and_carry_its_schemas(manifest: SkillManifest) -> None:
    skill = a2a_skill(manifest)
    assert skill["id"] == manifest.skill_id
    ParseDict(skill, AgentSkill(), ignore_unknown_fields=False)  # the A2A SDK's own type
    tool = mcp_tool(manifest)
    assert tool["name"] == manifest.name and tool["_meta"]["accord/skill_id"] == manifest.skill_id
    Draft202012Validator.check_schema(tool["inputSchema"])
    assert (tool["inputSchema"], tool["outputSchema"]) == (
        manifest.input_schema,
        manifest.output_schema,
    )


@pytest.mark.parametrize("manifest", SHIPPED, ids=lambda m: m.name)
def test_a_folder_reads_back_to_the_same_skill(manifest: SkillManifest, tmp_path: Path) -> None:
    files = skill_folder(manifest)
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    skill_md = files["SKILL.md"]
    front = skill_md.split("---\n")[1]
    assert f"name: {manifest.name}\n" in front
    assert f"accord-skill-id: {manifest.skill_id}" in front
    assert load_skill_folder(tmp_path).skill_id == manifest.skill_id
    if manifest.builtin is None:
        assert "generate.py" in files and '"code"' not in files["skill.json"]
