"""Skill folders: a manifest written as files, and the skills accord ships that way.

A folder holds `skill.json`, a manifest whose generator and python graders may name their code
by file (`"code_file": "generate.py"`) instead of carrying it; `load_skill_folder` reads each
such file (beside `skill.json`, never outside the folder) and puts its text in `code` and its
SHA-256 in `sha256`, which is the manifest that is declared and hashed.

`identity/skill_library/` holds the skills accord ships beyond the four built-in capabilities:
`sql`, `json-transform` and `python-function` (`library_manifests`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accord.identity.errors import ManifestError
from accord.identity.manifests import SkillManifest, code_sha256, parse_manifest

MANIFEST_FILE = "skill.json"
LIBRARY_DIR = Path(__file__).with_name("skill_library")
LIBRARY_FOLDERS = ("json_transform", "python_function", "sql", "summarise")
MAX_FILE_BYTES = 256 * 1024


def _read(folder: Path, name: object, path: str) -> str:
    if not isinstance(name, str) or "/" in name or "\\" in name or name in ("", ".", ".."):
        raise ManifestError(path, "must name a file beside skill.json")
    file = folder / name
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ManifestError(path, f"cannot read {file}: {exc.strerror}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise ManifestError(path, f"{file} is larger than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(path, f"{file} is not UTF-8") from exc


def _inline(folder: Path, part: dict[str, Any], path: str) -> None:
    if "code_file" in part:
        code = _read(folder, part.pop("code_file"), f"{path}.code_file")
        part["code"] = code
        part["sha256"] = code_sha256(code)


def folder_document(folder: Path) -> dict[str, Any]:
    """The manifest document a skill folder describes, its code files inlined and pinned.

    Raises ManifestError when `skill.json` or a code file cannot be read, or is not JSON.
    """
    text = _read(folder, MANIFEST_FILE, "$")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ManifestError("$", f"{folder / MANIFEST_FILE} is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ManifestError("$", "a manifest is a JSON object")
    exam = document.get("exam")
    if isinstance(exam, dict):
        _inline(folder, exam, "$.exam")
    graders = document.get("graders")
    if isinstance(graders, list):
        for index, grader in enumerate(graders):
            if isinstance(grader, dict):
                _inline(folder, grader, f"$.graders[{index}]")
    return document


def load_skill_folder(folder: Path) -> SkillManifest:
    """The manifest of a skill folder (see `folder_document`), checked by `parse_manifest`.

    Raises ManifestError naming what does not hold.
    """
    return parse_manifest(folder_document(folder))


def library_manifests() -> tuple[SkillManifest, ...]:
    """The skills accord ships as folders, in folder order. Raises ManifestError if one of
    them is broken (a bug in accord)."""
    return tuple(load_skill_folder(LIBRARY_DIR / name) for name in LIBRARY_FOLDERS)
