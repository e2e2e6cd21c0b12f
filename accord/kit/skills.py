"""The skills a kit agent names, as a service publishes them, checked here before anything
relies on them.

    fetch_skill(client, "sql")          GET /skills/{ref}: the manifest, parsed here and held to
                                        its id (the hash of the bytes received), remembered so
                                        that `get_capability(id)` finds it in this process
    check_items(manifest, items)        the items a service hands out for an attempt are the
                                        skill's: its id, its instructions, inputs that fit its
                                        input schema
    regraded(manifest, ...)             the candidate's own re-grade of its attempt once the
                                        service revealed its nonce: "agrees", or why not

A skill's id is the SHA-256 of its manifest's RFC 8785 form, so a service cannot hand the kit a
manifest other than the one the id names: `fetch_skill` recomputes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from accord.client import AccordClient, ApiError
from accord.identity.challenges import JSON
from accord.identity.challenges.skills import ExactValidator
from accord.identity.errors import ExamError, SandboxUnavailable, SkillError, UnknownSkill
from accord.identity.manifests import SKILL_ID_PATTERN, SkillManifest, parse_manifest
from accord.identity.skill_capability import remember_skill
from accord.identity.skill_exams import regrade


def fetch_skill(client: AccordClient, ref: str) -> SkillManifest:
    """The skill `ref` names at the service (a skill id, or a name the service resolves: a
    shipped skill's), its manifest parsed here; a declared one is remembered in this process.

    Raises UnknownSkill when the service has no such skill (404), SkillError when what it
    sends is not a manifest or not the one its id (or `ref`, when an id) names, ApiError when
    the service cannot be asked.
    """
    try:
        shown = client.get(f"/skills/{quote(ref, safe='')}")
    except ApiError as exc:
        if exc.status == 404:
            raise UnknownSkill(f"the service has no skill {ref!r}") from exc
        raise
    try:
        manifest = parse_manifest(shown.get("manifest") if isinstance(shown, dict) else None)
    except SkillError as exc:
        raise SkillError(f"the service's skill {ref!r} is not a valid manifest: {exc}") from exc
    named = shown.get("id")
    if named != manifest.skill_id or (SKILL_ID_PATTERN.match(ref) and ref != manifest.skill_id):
        raise SkillError(
            f"the service's manifest for {ref!r} hashes to {manifest.skill_id}, not the id it "
            f"names ({named}): refused"
        )
    remember_skill(manifest)
    return manifest


def check_items(manifest: SkillManifest, items: Sequence[object]) -> None:
    """Hold the items a service handed out for an attempt at `manifest` to the skill: as many
    as its exam has, each of this skill (its `capability` the id), its `prompt` the manifest's
    instructions, its `payload` fitting the input schema.

    Raises SkillError naming the first item that is not.
    """
    if len(items) != manifest.item_count:
        raise SkillError(
            f"the service handed out {len(items)} items for {manifest.name}, whose exam has "
            f"{manifest.item_count}"
        )
    validator = ExactValidator(manifest.input_schema)
    for at, item in enumerate(items):
        if not isinstance(item, dict):
            raise SkillError(f"exam item {at} is not an object")
        if item.get("capability") != manifest.skill_id:
            raise SkillError(f"exam item {at} is not an item of skill {manifest.skill_id}")
        if item.get("prompt") != manifest.instructions:
            raise SkillError(f"exam item {at}'s prompt is not the skill's instructions")
        payload: JSON = item.get("payload")
        error = next(iter(validator.iter_errors(payload)), None)
        if error is not None:
            raise SkillError(f"exam item {at}'s input breaks the skill's input schema: {error}")


def regraded(
    manifest: SkillManifest,
    started: Mapping[str, Any],
    candidate_nonce: bytes,
    answers: Sequence[JSON],
    graded: Mapping[str, Any],
) -> str:
    """The candidate's own re-grade of its attempt (`started`: as `POST /skills/{id}/attempts`
    answered, with the commitment and attempt number; `graded`: as the answers' POST answered,
    with the revealed service nonce and the grades): its seed re-derived, the items made again
    and its `answers` graded in the box here. "agrees" when the service's grades are the
    re-grade's, "differs: WHY" when they are not (or the reveal does not match the
    commitment), "not here: WHY" when this machine has no box to re-grade in, or the skill
    has a model grader (its judge is the service's) or an item bank. Raises nothing.
    """
    if any(grader["kind"] == "model" for grader in manifest.graders):
        return "not here: a model grader's verdicts are its judge's, at the service"
    if manifest.exam["kind"] == "bank":
        return "not here: a bank's items are the service's until it reveals them"
    try:
        grades = regrade(
            manifest,
            str(started["commitment"]),
            bytes.fromhex(str(graded["service_nonce"])),
            candidate_nonce,
            int(started["attempt"]),
            answers,
        )
    except SandboxUnavailable as exc:
        return f"not here: {exc}"
    except (ExamError, SkillError, KeyError, TypeError, ValueError) as exc:
        return f"differs: {exc}"
    mine = [
        {"item_id": g.item_id, "earned": g.earned, "possible": g.possible, "reason": g.reason}
        for g in grades
    ]
    if mine != graded.get("grades"):
        return "differs: the service's grades are not the re-grade's"
    return "agrees"
