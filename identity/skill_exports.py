"""A skill in the ecosystem's shapes: an A2A `AgentSkill`, an MCP tool definition, and an
Agent Skills folder (`SKILL.md` with the manifest and its exam files). Pure.

    a2a_skill(manifest)      {"id": <skill id>, "name", "description", "tags", "examples",
                              "inputModes", "outputModes"}: A2A's AgentSkill, a claim only (the
                              credential is what shows it was examined)
    mcp_tool(manifest)       {"name", "title", "description", "inputSchema", "outputSchema",
                              "_meta": {"accord/skill_id": ...}}: MCP's tool definition, the
                              schemas as they are (JSON Schema 2020-12)
    skill_folder(manifest)   file name -> text: `SKILL.md` (front matter `name`, `description`,
                              `metadata`; the instructions and schemas as its body), `skill.json`
                              (the manifest, its code named by file) and each code file.
                              `accord skill declare FOLDER` reads it back to the same skill id.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from accord.identity.manifests import SkillManifest

JSON_MODES = ["application/json"]
SKILL_MD = "SKILL.md"
GENERATOR_FILE = "generate.py"


def a2a_skill(manifest: SkillManifest) -> dict[str, Any]:
    """The manifest as an A2A `AgentSkill` whose id is the skill id."""
    return {
        "id": manifest.skill_id,
        "name": manifest.name,
        "description": manifest.description,
        "tags": ["accord-skill", manifest.name, f"version:{manifest.version}"],
        "examples": [manifest.instructions],
        "inputModes": list(JSON_MODES),
        "outputModes": list(JSON_MODES),
    }


def mcp_tool(manifest: SkillManifest) -> dict[str, Any]:
    """The manifest as an MCP tool definition (its schemas as input and output schema)."""
    return {
        "name": manifest.name,
        "title": f"{manifest.name} {manifest.version}",
        "description": f"{manifest.description}\n\n{manifest.instructions}",
        "inputSchema": manifest.input_schema,
        "outputSchema": manifest.output_schema,
        "_meta": {"accord/skill_id": manifest.skill_id, "accord/version": manifest.version},
    }


def _front_matter_text(value: str) -> str:
    """A YAML scalar for `value`: JSON's double-quoted string is valid YAML."""
    return json.dumps(value, ensure_ascii=False)


def skill_folder(manifest: SkillManifest) -> dict[str, str]:
    """The files of an Agent Skills folder for the manifest (see the module's docstring)."""
    document = manifest.to_json()
    files: dict[str, str] = {}
    exam = document["exam"]
    assert isinstance(exam, dict)
    if "code" in exam:
        files[GENERATOR_FILE] = str(exam.pop("code"))
        exam.pop("sha256", None)
        exam["code_file"] = GENERATOR_FILE
    graders = document["graders"]
    assert isinstance(graders, list)
    for index, grader in enumerate(graders):
        if isinstance(grader, dict) and "code" in grader:
            name = f"grader_{index}.py"
            files[name] = str(grader.pop("code"))
            grader.pop("sha256", None)
            grader["code_file"] = name
    files["skill.json"] = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    schemas = {
        "input": copy.deepcopy(manifest.input_schema),
        "output": copy.deepcopy(manifest.output_schema),
    }
    files[SKILL_MD] = "\n".join(
        [
            "---",
            f"name: {manifest.name}",
            f"description: {_front_matter_text(manifest.description)}",
            "metadata:",
            f"  version: {_front_matter_text(manifest.version)}",
            f"  accord-skill-id: {manifest.skill_id}",
            "---",
            "",
            f"# {manifest.name}",
            "",
            manifest.instructions,
            "",
            "## Input schema",
            "",
            "```json",
            json.dumps(schemas["input"], indent=2, ensure_ascii=False),
            "```",
            "",
            "## Output schema",
            "",
            "```json",
            json.dumps(schemas["output"], indent=2, ensure_ascii=False),
            "```",
            "",
            f"The exam ({manifest.exam['kind']}, {manifest.item_count} items, pass at "
            f"{manifest.threshold}) and its graders are in `skill.json`; declare this folder "
            "with `accord skill declare`.",
            "",
        ]
    )
    return files
