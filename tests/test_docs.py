"""The README and docs/ say what the code does, and a newcomer reads the README in minutes.

- the generated pages (docs/cli.md, docs/api.md) are what scripts/gen_docs.py makes of the
  code now;
- every `accord` command line the README or a page shows is a command with those options;
- every `ACCORD_*` setting the code reads is in docs/configuration.md;
- every relative link leads to a file, and to a heading there when it names one;
- the README is short and walks each party's job with its commands.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import shlex
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer

from accord.api.cli import app

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
WRITTEN = [README, *sorted(p for p in DOCS.glob("*.md") if p.name not in ("cli.md", "api.md"))]
PRODUCT = ("accord", "api", "audit", "coordinator", "identity", "ledger", "market")


def _gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_pages_are_what_the_code_makes() -> None:
    assert _gen_docs().stale_pages() == [], "run python scripts/gen_docs.py and commit docs/"


def test_the_cli_page_lists_every_command_with_its_options() -> None:
    page = (DOCS / "cli.md").read_text()
    for path, command in _leaves(typer.main.get_command(app), ()):
        section = page.split(f"# accord {' '.join(path)}\n", 1)
        assert len(section) == 2, f"accord {' '.join(path)} is not in docs/cli.md"
        body = section[1].split("\n#", 1)[0]
        for param in command.params:
            if param.opts[0].startswith("-") and not getattr(param, "hidden", False):
                assert f"`{param.opts[0]}`" in body, (path, param.opts[0])


def _leaves(command: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    children = getattr(command, "commands", None)
    if children is None:
        return [(path, command)]
    return [leaf for name, child in children.items() for leaf in _leaves(child, (*path, name))]


def _shell_lines(text: str) -> list[str]:
    """The command lines of the ```sh blocks of `text`, continuations joined, comments cut."""
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            code = re.split(r"\s#\s|\s#$", " " + line, maxsplit=1)[0].strip()
            if code:
                lines.append(code)
    return lines


def _accord_commands(line: str) -> list[list[str]]:
    """Each `accord …` invocation on a shell line, as its words (brackets of optional parts
    dropped)."""
    invocations = []
    for piece in re.split(r"\s(?:\||&&|;)\s", line):
        words = shlex.split(piece.replace("[", " ").replace("]", " ").replace("…", "x"))
        if words and words[0] == "accord":
            invocations.append(words[1:])
    return invocations


@functools.cache
def _root() -> Any:
    return typer.main.get_command(app)


def _check_invocation(words: list[str]) -> str | None:
    """Why `accord WORDS` is not a command the CLI has, or None when it is."""
    command: Any = _root()
    path = []
    while getattr(command, "commands", None) is not None and words:
        if words[0] in ("--help", "--version"):
            return None
        if words[0] not in command.commands:
            return f"no command `accord {' '.join([*path, words[0]])}`"
        path.append(words[0])
        command = command.commands[words[0]]
        words = words[1:]
    if getattr(command, "commands", None) is not None:
        return f"`accord {' '.join(path)}` needs a subcommand"
    known = {name for param in command.params for name in (*param.opts, *param.secondary_opts)}
    known.add("--help")
    for word in words:
        if word.startswith("-") and len(word) > 1 and not word[1].isdigit():
            name = word.split("=", 1)[0]
            if name not in known:
                return f"`accord {' '.join(path)}` has no option {name}"
    return None


@pytest.mark.parametrize("page", WRITTEN, ids=lambda p: p.name)
def test_every_command_shown_is_one_the_cli_has(page: Path) -> None:
    wrong = [
        f"{line}: {why}"
        for line in _shell_lines(page.read_text())
        for words in _accord_commands(line)
        if (why := _check_invocation(words)) is not None
    ]
    assert wrong == []


def test_the_command_check_finds_a_wrong_command() -> None:
    assert _check_invocation(["task", "post", "--spec", "t.json"]) is None
    assert "no option --sever" in str(_check_invocation(["task", "post", "--sever", "u"]))
    assert "no command" in str(_check_invocation(["task", "poster"]))
    assert _accord_commands("accord task list | accord task show TASK") == [
        ["task", "list"],
        ["task", "show", "TASK"],
    ]


def _settings_read() -> set[str]:
    """Every ACCORD_* name the product code holds as a string."""
    names: set[str] = set()
    for package in PRODUCT:
        for source in (REPO / package).rglob("*.py"):
            if "node_modules" in source.parts:
                continue
            for node in ast.walk(ast.parse(source.read_text(), str(source))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    names.update(re.findall(r"^(ACCORD_[A-Z0-9_]+)$", node.value))
    return names


def test_every_setting_the_code_reads_is_documented() -> None:
    page = (DOCS / "configuration.md").read_text()
    read = _settings_read()
    assert {"ACCORD_HOME", "ACCORD_RPC_URL", "ACCORD_PUBLIC_RPC_URL"} <= read
    assert sorted(name for name in read if f"`{name}`" not in page) == []


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_every_relative_link_leads_somewhere() -> None:
    broken = []
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def test_the_readme_is_short_and_walks_each_partys_job() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250 and len(text.split()) <= 2500  # ten minutes' reading
    jobs = {
        "The operator": ["accord serve"],
        "An agent": ["accord key new", "accord agent run", "accord agent withdraw --server"],
        "A requester": ["accord task post", "--key", "--eth-key", "accord task withdraw"],
        "An auditor": ["accord audit TASK --server", "accord credential verify"],
    }
    sections = re.split(r"^### ", text, flags=re.M)
    for party, commands in jobs.items():
        [section] = [s for s in sections if s.startswith(party)]
        shown = " ".join(_shell_lines(section))
        for command in commands:
            assert command in shown, (party, command)
    for page in ("docs/cli.md", "docs/api.md", "docs/configuration.md", "docs/testnet.md"):
        assert f"]({page})" in text
