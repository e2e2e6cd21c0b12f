"""No import cycles between accord's modules: each module's top-level imports (those run on
import; not the ones under `if TYPE_CHECKING:` nor inside functions) form a graph with no
cycle, so every package reads bottom-up and a pure core never drags in what imports it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("ledger", "identity", "market", "coordinator", "audit", "api")
"""accord's subpackages: each a folder at the repository's root, imported as accord.<name>
(pyproject.toml's package-dir maps them; tests/test_import_map.py checks the map)."""


def modules() -> dict[str, Path]:
    """Every module of accord by its import name, read from its folder."""
    found = {}
    for folder, prefix in [("accord", ()), *((name, ("accord",)) for name in SUBPACKAGES)]:
        for path in (ROOT / folder).rglob("*.py"):
            parts = (*prefix, *path.relative_to(ROOT).with_suffix("").parts)
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def top_level_imports(path: Path, name: str, known: set[str]) -> Iterator[str]:
    """The project modules `path` imports when it is imported."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    stack: list[ast.stmt] = list(ast.parse(path.read_text()).body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and not _is_type_checking(node):
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                stack.extend(handler.body)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield from _known(alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                yield from _known(f"{base}.{alias.name}", known) or _known(base, known)


def _known(name: str, known: set[str]) -> list[str]:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return [name] if name else []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back() -> None:
    found = modules()
    known = set(found)
    graph = {
        name: {m for m in top_level_imports(path, name, known) if m != name}
        for name, path in found.items()
    }
    # a package's __init__ re-exporting its modules is not a cycle through them
    for name in list(graph):
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    assert "accord.ledger.errors" in graph["accord.ledger.log"]  # the walk sees imports
    assert cycles(graph) == []


def bare_imports(path: Path) -> Iterator[str]:
    """Imports in `path` of a subpackage by its folder's name (`ledger...`, not
    `accord.ledger...`): they would load a second copy of the module beside accord's."""
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        for name in names:
            if name.split(".")[0] in SUBPACKAGES:
                yield f"{path.relative_to(ROOT)}:{node.lineno}: {name}"


def test_every_import_is_of_accord() -> None:
    folders = ("accord", *SUBPACKAGES, "tests", "scripts", "examples")
    paths = [path for folder in folders for path in (ROOT / folder).rglob("*.py")]
    assert len(paths) > 200
    assert [found for path in paths for found in bare_imports(path)] == []


def all_imports(path: Path, name: str) -> Iterator[str]:
    """Every module `path` names in an import, wherever it sits (top level, inside a function,
    under `if TYPE_CHECKING:`), relative imports resolved against `name`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield from (f"{base}.{alias.name}" for alias in node.names)


def test_the_kit_and_the_client_never_climb_to_the_server() -> None:
    """The agent kit (`accord.kit`) and the HTTP client (`accord.client`) sit below `api/`: the
    CLI and the service import them, they import nothing of `accord.api`, not even lazily."""
    found = modules()
    below = {name: path for name, path in found.items() if name.startswith("accord.kit")}
    below["accord.client"] = found["accord.client"]
    assert len(below) > 5
    climbs = [
        f"{path.relative_to(ROOT)}: {imported}"
        for name, path in below.items()
        for imported in all_imports(path, name)
        if imported == "accord.api" or imported.startswith("accord.api.")
    ]
    assert climbs == []


def test_the_log_s_parts_import_the_store_nowhere() -> None:
    """`accord.ledger.store.LogStore` composes the log's parts (the database, the log, the
    proofs, the views, the migration); none of them imports it back, not even lazily or for
    its types (the views' `reading` takes any `ViewReader`)."""
    found = modules()
    parts = ["database", "log", "proofs", "views", "tile_migration"]
    climbs = [
        f"{part}: {imported}"
        for part in parts
        for imported in all_imports(found[f"accord.ledger.{part}"], f"accord.ledger.{part}")
        if imported == "accord.ledger.store" or imported.startswith("accord.ledger.store.")
    ]
    assert climbs == []
