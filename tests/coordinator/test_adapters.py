"""Agent adapters on real sub-tasks (exam items, graded by the capability's grader), against
real local servers and processes on 127.0.0.1 (no mocks). Team work goes through the same
runtimes as exams (`accord.identity.runtimes`); these tests drive them through
`AgentAdapter.run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.coordinator.adapters import (
    HttpAdapter,
    InProcessAdapter,
    RuntimeAdapter,
    reference_adapter,
    solve_task,
    work_item,
)
from accord.coordinator.agent_service import make_server, serve_in_thread, stop
from accord.coordinator.errors import AgentFailure, TeamError
from accord.coordinator.service import adapter_for
from accord.coordinator.work import AgentAdapter, SubTask
from accord.identity.agents import AgentRecord
from accord.identity.challenges import REGISTRY, ExamItem
from accord.identity.chat import OpenAIChat
from accord.identity.errors import RegistryError
from accord.identity.runtimes import ChatRuntime, CommandRuntime, run_url
from accord.ledger.devnet import find_free_port
from tests.stand_in import (
    API_KEY,
    Handle,
    Reply,
    StandIn,
    chat_server,
    completion,
    fixed,
    json_reply,
    starter,
)

SEED = b"accord-coordinator-adapter-tests-seed"
REPO = Path(__file__).resolve().parents[2]
DID = "did:example:agent-a"
SERVICE = [sys.executable, "-m", "accord.coordinator.agent_service"]


def _items(capability: str, n: int, salt: bytes = b"") -> list[ExamItem]:
    return REGISTRY[capability].generate(SEED + salt, n)


def _task(item: ExamItem, index: int = 0) -> SubTask:
    return SubTask(
        sub_id=f"sub-{item.capability}-{index}",
        capability=item.capability,
        instruction=f"Do the {item.capability} item.",
        item=item.for_agent(),
    )


def _work() -> list[ExamItem]:
    """Real sub-task items: arithmetic, extraction and retrieval, and one python item."""
    return [
        *_items("arithmetic", 3),
        *_items("extraction", 2),
        *_items("retrieval", 2),
        *_items("python", 1),
    ]


def _full_marks(adapter: AgentAdapter, items: list[ExamItem]) -> None:
    for index, item in enumerate(items):
        answer = adapter.run(_task(item, index))
        grade = REGISTRY[item.capability].grade(item, answer)
        assert grade.full_marks, (item.capability, grade.reason)


ARITH = _items("arithmetic", 1, b"/one")[0]


def _http(url: str, timeout: float) -> HttpAdapter:
    """An HTTP adapter for a test service on loopback (private agents allowed)."""
    return HttpAdapter(DID, url, timeout, allow_private=True)


# -- in-process ----------------------------------------------------------------------------------


def test_the_reference_adapter_gets_full_marks() -> None:
    _full_marks(reference_adapter(DID), _work())


def test_an_in_process_function_gets_the_sub_task() -> None:
    seen: list[SubTask] = []

    def agent(task: SubTask) -> Any:
        seen.append(task)
        return solve_task(task)

    task = _task(ARITH)
    adapter = InProcessAdapter(DID, agent, timeout=5)
    assert REGISTRY["arithmetic"].grade(ARITH, adapter.run(task)).full_marks
    assert seen == [task]


def test_a_hanging_in_process_function_fails_after_its_timeout() -> None:
    release = threading.Event()

    def hang(task: SubTask) -> Any:
        release.wait(10)
        return 1

    adapter = InProcessAdapter(DID, hang, timeout=0.2)
    started = time.monotonic()
    try:
        with pytest.raises(AgentFailure, match=r"longer than 0\.2 s") as raised:
            adapter.run(_task(ARITH))
    finally:
        release.set()
    assert time.monotonic() - started < 2
    assert raised.value.retriable and raised.value.agent == DID


def test_in_process_failures_are_agent_failures() -> None:
    def boom(task: SubTask) -> Any:
        raise RuntimeError("kaput")

    with pytest.raises(AgentFailure, match="kaput") as raised:
        InProcessAdapter(DID, boom, timeout=5).run(_task(ARITH))
    assert not raised.value.retriable

    def flaky(task: SubTask) -> Any:
        raise AgentFailure("someone", "busy", retriable=True)

    with pytest.raises(AgentFailure, match="busy") as raised:
        InProcessAdapter(DID, flaky, timeout=5).run(_task(ARITH))
    assert raised.value.retriable and raised.value.agent == DID

    with pytest.raises(AgentFailure, match="not JSON"):
        InProcessAdapter(DID, lambda task: {1, 2}, timeout=5).run(_task(ARITH))

    unknown = SubTask("s", "poetry", "Write.", {"capability": "poetry", "payload": {}})
    with pytest.raises(AgentFailure, match="no reference solver") as raised:
        reference_adapter(DID).run(unknown)
    assert not raised.value.retriable

    with pytest.raises(ValueError, match="timeout"):
        InProcessAdapter(DID, solve_task, timeout=0)


def test_the_work_item_is_exactly_what_an_exam_agent_sees() -> None:
    task = SubTask("s", "arithmetic", "Do it.", {**ARITH.for_agent(), "private": {"x": 1}})
    assert work_item(task) == ARITH.for_agent()
    bare = SubTask("s", "arithmetic", "Do it.", {"item_id": "i", "prompt": "p", "payload": {}})
    assert work_item(bare)["capability"] == "arithmetic"


# -- HTTP agent service --------------------------------------------------------------------------


@pytest.fixture
def service(request: pytest.FixtureRequest) -> Callable[..., str]:
    def start(**options: Any) -> str:
        server, thread = serve_in_thread(0, **options)
        request.addfinalizer(lambda: stop(server, thread))
        return server.url

    return start


def test_http_adapter_against_the_agent_service_gets_full_marks(
    service: Callable[..., str],
) -> None:
    url = service(did=DID)
    _full_marks(_http(url, timeout=10), _work())
    with httpx.Client() as client:
        health = client.get(url + "/health")
        exam_style = client.post(url + "/run", json={"item": ARITH.for_agent()})
    assert health.json() == {"status": "ok", "did": DID}
    assert REGISTRY["arithmetic"].grade(ARITH, exam_style.json()["answer"]).full_marks


def test_run_url_adds_the_run_path() -> None:
    assert run_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/run"
    assert run_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/run"
    assert run_url("http://h:1/agents/run") == "http://h:1/agents/run"
    for bad in ("ftp://h/x", "http://user:pw@h/", "nonsense"):
        with pytest.raises(RegistryError):
            run_url(bad)


def test_the_service_speaks_only_the_item_format(service: Callable[..., str]) -> None:
    url = service()
    with httpx.Client() as client:
        old = client.post(url + "/run", json={"task": _task(ARITH).to_json()})
        item = client.post(url + "/run", json={"item": ARITH.for_agent()})
    assert old.status_code == 400 and "item" in old.json()["error"]
    assert REGISTRY["arithmetic"].grade(ARITH, item.json()["answer"]).full_marks


def test_the_service_answers_json_nested_too_deep_with_400(service: Callable[..., str]) -> None:
    url = service()
    deep = b"[" * 100_000 + b"]" * 100_000
    with httpx.Client() as client:
        refused = client.post(url + "/run", content=deep)
        item = client.post(url + "/run", json={"item": ARITH.for_agent()})
    assert refused.status_code == 400 and "too deep" in refused.json()["error"]
    assert item.status_code == 200  # the service lives on


def test_the_service_refuses_non_loopback_hosts_unless_named() -> None:
    with pytest.raises(ValueError, match="non-loopback"):
        make_server(0, host="0.0.0.0")
    done = subprocess.run(
        [*SERVICE, "--port", "0", "--host", "127.0.0.1", "--fail-rate", "2"],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2 and "fail_rate" in done.stderr


def test_failing_service_is_a_retriable_failure(service: Callable[..., str]) -> None:
    url = service(fail_rate=1.0)
    with pytest.raises(AgentFailure, match="HTTP 500") as raised:
        _http(url, timeout=5).run(_task(ARITH))
    assert raised.value.retriable and raised.value.agent == DID


def test_a_bad_request_is_not_retriable(service: Callable[..., str]) -> None:
    url = service()
    broken = SubTask("s", "poetry", "Write.", {"capability": "poetry", "payload": {}})
    with pytest.raises(AgentFailure, match="HTTP 422") as raised:
        _http(url, timeout=5).run(broken)
    assert not raised.value.retriable


def test_a_slow_service_times_out_retriably(service: Callable[..., str]) -> None:
    url = service(delay=5.0)
    started = time.monotonic()
    with pytest.raises(AgentFailure, match=r"within 0\.3 s") as raised:
        _http(url, timeout=0.3).run(_task(ARITH))
    assert raised.value.retriable and time.monotonic() - started < 2


def test_an_absent_service_is_retriable() -> None:
    url = f"http://127.0.0.1:{find_free_port('127.0.0.1')}"
    with pytest.raises(AgentFailure, match="cannot reach") as raised:
        _http(url, timeout=2).run(_task(ARITH))
    assert raised.value.retriable


@pytest.fixture
def stand_in(request: pytest.FixtureRequest) -> Callable[[Handle], StandIn]:
    return starter(request)


def _json(status: int, value: Any) -> Reply:
    return json_reply(status, value)


def _status(status: int, value: Any) -> Handle:
    return fixed(json_reply(status, value))


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        ((200, {}, b"<html>garbage</html>"), "not answer with JSON"),
        (_json(200, {"result": 5}), 'no "answer"'),
        (_json(200, [5]), 'no "answer"'),
        ((200, {}, b"x" * ((1 << 20) + 10)), "more than 1 MiB"),
        (_json(404, {"error": "nope"}), "HTTP 404"),
        ((302, {"Location": "http://example.com/"}, b""), "redirect"),
    ],
)
def test_garbage_from_a_service_is_not_retriable(
    stand_in: Callable[[Handle], StandIn], reply: Reply, match: str
) -> None:
    server = stand_in(lambda path, headers, body: reply)
    with pytest.raises(AgentFailure, match=match) as raised:
        _http(server.url, timeout=5).run(_task(ARITH))
    assert not raised.value.retriable
    path, _, body = server.requests[0]
    assert path == "/run" and json.loads(body) == {"item": ARITH.for_agent()}


def test_429_and_503_are_retriable(stand_in: Callable[[Handle], StandIn]) -> None:
    for status in (429, 503):
        server = stand_in(_status(status, {"error": "busy"}))
        with pytest.raises(AgentFailure, match=f"HTTP {status}") as raised:
            _http(server.url, timeout=5).run(_task(ARITH))
        assert raised.value.retriable


# -- agents as separate HTTP processes -----------------------------------------------------------


def _wait_healthy(url: str, process: subprocess.Popen[str], deadline: float) -> None:
    with httpx.Client(timeout=1) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"the agent service exited {process.returncode}")
            try:
                if client.get(url + "/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise AssertionError(f"the agent service at {url} never became healthy")


@pytest.fixture
def agent_processes(request: pytest.FixtureRequest) -> Callable[..., list[tuple[str, str]]]:
    """Start agent services as separate processes; always terminated afterwards."""
    processes: list[subprocess.Popen[str]] = []

    def finish() -> None:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()

    request.addfinalizer(finish)

    def start(count: int, *extra: str) -> list[tuple[str, str]]:
        agents: list[tuple[str, str]] = []
        for index in range(count):
            port = find_free_port("127.0.0.1")
            did = f"did:example:agent-{index}"
            process = subprocess.Popen(
                [*SERVICE, "--port", str(port), "--did", did, *extra],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            processes.append(process)
            agents.append((did, f"http://127.0.0.1:{port}"))
        deadline = time.monotonic() + 20
        for (_, url), process in zip(agents, processes[-count:], strict=True):
            _wait_healthy(url, process, deadline)
        return agents

    start.processes = processes  # type: ignore[attr-defined]
    return start


def test_agents_as_separate_http_processes_complete_a_task_together(
    agent_processes: Callable[..., list[tuple[str, str]]],
) -> None:
    agents = agent_processes(3)
    adapters = [HttpAdapter(did, url, timeout=10, allow_private=True) for did, url in agents]
    items = _work()
    answers: dict[int, Any] = {}

    def run(index: int, item: ExamItem) -> None:
        answers[index] = adapters[index % len(adapters)].run(_task(item, index))

    threads = [threading.Thread(target=run, args=pair) for pair in enumerate(items)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(answers) == list(range(len(items)))
    for index, item in enumerate(items):
        grade = REGISTRY[item.capability].grade(item, answers[index])
        assert grade.full_marks, (item.capability, grade.reason)
    with httpx.Client() as client:
        reported = {client.get(url + "/health").json()["did"] for _, url in agents}
    assert reported == {did for did, _ in agents}
    # SIGTERM stops each service cleanly.
    processes: list[subprocess.Popen[str]] = agent_processes.processes  # type: ignore[attr-defined]
    for process in processes:
        process.terminate()
    for process in processes:
        out, _ = process.communicate(timeout=10)
        assert process.returncode == 0 and out.startswith("listening on http://127.0.0.1:")


def test_a_delayed_service_process_times_out(
    agent_processes: Callable[..., list[tuple[str, str]]],
) -> None:
    ((did, url),) = agent_processes(1, "--delay", "5")
    with pytest.raises(AgentFailure, match="did not answer") as raised:
        HttpAdapter(did, url, timeout=0.5, allow_private=True).run(_task(ARITH))
    assert raised.value.retriable and raised.value.agent == did


# -- subprocess ----------------------------------------------------------------------------------


def _command(
    argv: Sequence[str], timeout: float, env: dict[str, str] | None = None
) -> RuntimeAdapter:
    return RuntimeAdapter(DID, CommandRuntime(argv, timeout, env))


def test_the_subprocess_adapter_gets_full_marks() -> None:
    adapter = _command([*SERVICE, "--stdio"], timeout=20, env=_env())
    _full_marks(adapter, [*_items("arithmetic", 1), *_items("extraction", 1), *_items("python", 1)])


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _script(tmp_path: Path, source: str) -> list[str]:
    path = tmp_path / "agent.py"
    path.write_text(source)
    return [sys.executable, str(path)]


def test_a_hanging_subprocess_is_killed_with_its_group(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    argv = _script(
        tmp_path,
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(30)\n",
    )
    started = time.monotonic()
    with pytest.raises(AgentFailure, match=r"longer than 1 s") as raised:
        _command(argv, timeout=1).run(_task(ARITH))
    assert raised.value.retriable and time.monotonic() - started < 5
    child = int(marker.read_text())
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        # A killed child of a killed parent is reaped by init; until then it may be a zombie.
        if Path(f"/proc/{child}/stat").exists():
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                break
        time.sleep(0.05)
    else:
        raise AssertionError("the agent's child process survived")


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("print('not json')", "did not print JSON"),
        ("import sys; sys.stderr.write('bad\\n'); sys.exit(3)", "exited 3: bad"),
    ],
)
def test_subprocess_garbage_is_not_retriable(tmp_path: Path, source: str, match: str) -> None:
    with pytest.raises(AgentFailure, match=match) as raised:
        _command(_script(tmp_path, source), timeout=10).run(_task(ARITH))
    assert not raised.value.retriable


def test_a_missing_program_is_an_agent_failure(tmp_path: Path) -> None:
    with pytest.raises(AgentFailure, match="cannot run"):
        _command([str(tmp_path / "nope")], timeout=5).run(_task(ARITH))


def test_the_subprocess_reads_the_item_as_an_exam_agent_does(tmp_path: Path) -> None:
    argv = _script(tmp_path, "import json, sys; print(json.dumps(json.load(sys.stdin)))")
    assert _command(argv, timeout=10).run(_task(ARITH)) == ARITH.for_agent()
    with pytest.raises(ValueError, match="program"):
        CommandRuntime([], 10)
    with pytest.raises(ValueError, match="timeout"):
        CommandRuntime(argv, 0)


# -- OpenAI-compatible model ---------------------------------------------------------------------


def _reference_model(seen: dict[str, Any], request: dict[str, Any]) -> str:
    task = SubTask("?", seen["capability"], "", seen)
    return json.dumps({"answer": solve_task(task)})


def _model(url: str, key: str = API_KEY, timeout: float = 5, **options: Any) -> RuntimeAdapter:
    """A RuntimeAdapter for model "m" at `url`; `validate` goes to the runtime, the rest to
    OpenAIChat."""
    validate = options.pop("validate", None)
    chat = OpenAIChat("m", base_url=url, api_key=key, timeout=timeout, **options)
    return RuntimeAdapter(DID, ChatRuntime(chat, validate))


def test_the_openai_adapter_gets_full_marks(stand_in: Callable[[Handle], StandIn]) -> None:
    server = stand_in(chat_server(_reference_model))
    runtime = ChatRuntime(OpenAIChat("local-model", base_url=server.url + "/v1", api_key=API_KEY))
    items = [*_items("arithmetic", 2), *_items("extraction", 1), *_items("retrieval", 1)]
    _full_marks(RuntimeAdapter(DID, runtime), items)
    assert len(server.requests) == len(items)
    assert json.loads(server.requests[0][2])["model"] == "local-model"


@pytest.mark.parametrize(
    "content", ["not json {", '{"answer": 5, "why": "because"}', "[5]", '{"answer": NaN}', ""]
)
def test_a_malformed_model_answer_is_an_agent_failure(
    stand_in: Callable[[Handle], StandIn], content: str
) -> None:
    server = stand_in(chat_server(lambda seen, request: content))
    with pytest.raises(AgentFailure, match="model") as raised:
        _model(server.url + "/v1").run(_task(ARITH))
    assert not raised.value.retriable and raised.value.agent == DID
    assert "(retriable)" not in str(raised.value)


def test_model_server_failures_have_the_right_retriable(
    stand_in: Callable[[Handle], StandIn],
) -> None:
    for status in (429, 503):
        server = stand_in(_status(status, {"error": {}}))
        with pytest.raises(AgentFailure, match=f"HTTP {status}") as raised:
            _model(server.url + "/v1", retries=0).run(_task(ARITH))
        assert raised.value.retriable and not raised.value.reason.endswith("(retriable)")

    refused = stand_in(chat_server(_reference_model))
    with pytest.raises(AgentFailure, match="HTTP 401") as raised:
        _model(refused.url + "/v1", key="wrong").run(_task(ARITH))
    assert not raised.value.retriable

    dead = f"http://127.0.0.1:{find_free_port('127.0.0.1')}/v1"
    with pytest.raises(AgentFailure, match="cannot reach") as raised:
        _model(dead, timeout=2, retries=0).run(_task(ARITH))
    assert raised.value.retriable

    def slow(path: str, headers: dict[str, str], body: bytes) -> Reply:
        hanging.release.wait(10)
        return json_reply(200, completion("m", '{"answer": 5}'))

    hanging = stand_in(slow)
    with pytest.raises(AgentFailure, match=r"within 0\.3 s") as raised:
        _model(hanging.url + "/v1", timeout=0.3, retries=0).run(_task(ARITH))
    assert raised.value.retriable


def test_a_model_answer_refused_twice_is_a_final_agent_failure(
    stand_in: Callable[[Handle], StandIn],
) -> None:
    def only_numbers(capability: str, answer: Any) -> None:
        if not isinstance(answer, int | float):
            raise ValueError(f"{capability} answers are numbers")

    server = stand_in(chat_server(lambda seen, request: '{"answer": "many"}'))
    with pytest.raises(AgentFailure, match="refused twice") as raised:
        _model(server.url + "/v1", validate=only_numbers).run(_task(ARITH))
    assert not raised.value.retriable and len(server.requests) == 2


# -- adapter_for: an agent's record to its adapter -----------------------------------------------


def _record(runtime: str, **fields: Any) -> AgentRecord:
    return AgentRecord(
        "bob", DID, runtime, fields.pop("command", None), "2026-03-01T12:00:00Z", **fields
    )


def test_adapter_for_runs_every_runtime_through_the_one_seam(
    service: Callable[..., str], tmp_path: Path, stand_in: Callable[[Handle], StandIn]
) -> None:
    assert (
        REGISTRY["arithmetic"]
        .grade(ARITH, adapter_for(_record("reference"), 5).run(_task(ARITH)))
        .full_marks
    )
    url = service(did=DID)
    http = adapter_for(_record("http", endpoint=url), 5, allow_private_agents=True)
    assert isinstance(http, RuntimeAdapter)
    assert REGISTRY["arithmetic"].grade(ARITH, http.run(_task(ARITH))).full_marks
    echo = _script(tmp_path, "import json, sys; print(json.dumps(json.load(sys.stdin)))")
    command = adapter_for(_record("command", command=" ".join(echo)), 5)
    assert command.run(_task(ARITH)) == ARITH.for_agent()
    model = stand_in(chat_server(_reference_model, api_key=None))
    llm = adapter_for(_record("openai", model="m", endpoint=model.url + "/v1"), 5)
    assert REGISTRY["arithmetic"].grade(ARITH, llm.run(_task(ARITH))).full_marks
    guess = adapter_for(_record("random"), 5).run(_task(ARITH))
    assert guess is not None


def test_adapter_for_refuses_a_private_endpoint_unless_allowed(
    service: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = service(did=DID)
    monkeypatch.delenv("ACCORD_ALLOW_PRIVATE_AGENTS", raising=False)
    with pytest.raises(TeamError, match="ACCORD_ALLOW_PRIVATE_AGENTS"):
        adapter_for(_record("http", endpoint=url), 5)
    with pytest.raises(TeamError, match="loopback"):
        adapter_for(_record("http", endpoint=url), 5, allow_private_agents=False)
    monkeypatch.setenv("ACCORD_ALLOW_PRIVATE_AGENTS", "1")
    assert (
        REGISTRY["arithmetic"]
        .grade(ARITH, adapter_for(_record("http", endpoint=url), 5).run(_task(ARITH)))
        .full_marks
    )
    with pytest.raises(TeamError, match="needs --endpoint"):
        adapter_for(_record("http"), 5)
