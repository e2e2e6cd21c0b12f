"""No import cycles between accord's modules: each module's top-level imports (those run on
import; not the ones under `if TYPE_CHECKING:` nor inside functions) form a graph with no
cycle, so every package reads bottom-up and a pure core never drags in what imports it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("accord", "ledger", "identity", "market", "coordinator", "audit", "api")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
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
    assert cycles(graph) == []
