"""A built-in capability's skill id and its old name are one skill wherever the market takes a
capability: part specs, `GET /tasks?capability=`, discovery, bids' eligibility, reputation,
and what `GET /agents/{did}` and `accord agent show` answer (the name, with the id beside it).
Credentials and log entries keep the old name (old logs audit as before)."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from accord.identity.http_auth import AccordAuth
from accord.identity.manifests import resolve_builtin
from accord.market.reputation import DEFAULT_PRIOR_MEAN
from tests.accord_cli import cli_environ, run_accord
from tests.api.test_app import (
    FIGURES,
    SUM_RIGHT,
    build_world,
    commitment_json,
    post_task,
    reveal_json,
)


def test_a_built_in_skills_id_and_name_get_the_same_answers(tmp_path: Path) -> None:
    arithmetic = resolve_builtin("arithmetic")
    assert arithmetic is not None
    skill_id = arithmetic.skill_id
    world = build_world(tmp_path / "home", bidders=("ada",))
    client = TestClient(world.app())
    req, ada, carol = (world.signers[n] for n in ("req", "ada", "carol"))
    market = world.context.market

    # A part names the skill by its id; the spec (and the log) keep the old name.
    part = {"id": "sum", "capability": skill_id, "input": FIGURES}
    task = post_task(client, req, parts=[part], checks=[SUM_RIGHT])
    assert [p["capability"] for p in task["spec"]["parts"]] == ["arithmetic"]

    # Eligibility to bid, by id and by name: ada holds the credential, carol none.
    for did, expected in ((ada.did, True), (carol.did, False)):
        assert market.eligible(did, [skill_id]) is expected
        assert market.eligible(did, ["arithmetic"]) is expected
    assert market.credentialed(skill_id) == market.credentialed("arithmetic") == [ada.did]

    # ada wins, delivers and is paid twice: the second task's requester has paid before, so
    # it weighs in ada's reputation (`accord.market.reputation`: a requester's standing).
    for k in range(2):
        task_id = task["task_id"] if k == 0 else post_task(client, req)["task_id"]
        auth, price = AccordAuth(ada), 2 * 10**17
        bid = commitment_json(ada, task_id, price)
        assert client.post(f"/tasks/{task_id}/commitments", json=bid, auth=auth).status_code == 201
        world.clock.advance(31)
        shown = reveal_json(ada, task_id, price)
        assert client.post(f"/tasks/{task_id}/reveals", json=shown, auth=auth).status_code == 201
        world.clock.advance(31)
        for step, signer in (("award", req), ("run", ada), ("settle", req)):
            done = client.post(f"/tasks/{task_id}/{step}", auth=AccordAuth(signer))
            assert done.status_code == 200, done.text

    # Reputation by id and by name: the same, and not the prior (the record counts).
    by_id = market.reputations([ada.did, carol.did], [skill_id])
    assert by_id == market.reputations([ada.did, carol.did], ["arithmetic"])
    assert by_id[ada.did] != DEFAULT_PRIOR_MEAN and by_id[carol.did] == DEFAULT_PRIOR_MEAN

    # The task list and discovery filter by either.
    for path in ("/tasks", "/agents"):
        named = client.get(path, params={"capability": "arithmetic"})
        hashed = client.get(path, params={"capability": skill_id})
        assert named.status_code == hashed.status_code == 200, (named.text, hashed.text)
        assert named.json() and hashed.json() == named.json()
    listed = client.get("/tasks", params={"capability": skill_id}).json()
    assert len(listed) == 2 and listed[0]["task_id"] == task["task_id"]

    # The agent's credential rows: the old name (what the credential holds) and the id beside it.
    (row,) = client.get(f"/agents/{ada.did}").json()["credentials"]
    assert (row["capability"], row["skill_id"]) == ("arithmetic", skill_id)
    environ = cli_environ(world.settings.home)
    shown = run_accord(environ, "agent", "show", "ada", "--json")
    assert shown.returncode == 0, shown.stderr
    assert "arithmetic" in shown.stdout
    (cli_row,) = json.loads(shown.stdout)["credentials"]
    assert (cli_row["capability"], cli_row["skill_id"]) == ("arithmetic", skill_id)
    human = run_accord(environ, "agent", "show", "ada")
    assert f"arithmetic [{skill_id}]" in human.stdout, human.stdout + human.stderr
