"""The import map of the checkout as git tracks it: every package of accord, where its folder is,
and which packages it imports, read from the tracked files alone (no import, no link followed).

`accord.<name>` reaches its folder through pyproject.toml's `[tool.setuptools.package-dir]`,
the one mapping the wheel, the editable install and scripts/typecheck.py follow, so the map
resolves imports the same way. The floors (DESIGN.md, "Packages"; docs/development.md,
"Layout"), bottom to top: ledger; identity; market; coordinator; audit; the agent kit; api;
the library's front door (`accord/__init__.py`, `accord/_home.py`). An import may go down or
stay on its floor, never up; between packages there is no circle. Every import counts: those
under `if TYPE_CHECKING:` and inside functions too (a circle hidden from the interpreter is
still one for a reader). The process helpers (`accord/_process.py`, `_bls.py`, `_stack.py`)
import no floor and are the floor under them all.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

from tests.test_import_cycles import cycles

ROOT = Path(__file__).resolve().parents[1]

FLOORS: tuple[tuple[str, ...], ...] = (
    ("process",),  # accord/_process.py, _bls.py, _stack.py: how a process of accord starts
    ("ledger",),
    ("identity",),
    ("client",),  # accord/client.py: the HTTP client of a service, under the kit, audit and CLI
    ("market",),
    ("coordinator",),
    ("audit",),
    ("kit",),
    ("api",),
    ("library",),  # accord/__init__.py and accord/_home.py: what `import accord` offers
)
"""Bottom to top. A package may import its own floor and those below."""

ROOMS_OF_ACCORD_FILES = {
    "accord._process": "process",
    "accord._bls": "process",
    "accord._stack": "process",
    "accord._home": "library",
    "accord.client": "client",
    "accord": "library",
}
"""The modules directly in accord/, by the floor each belongs to."""

KNOWN_UPWARD: dict[tuple[str, str], str] = {}
"""Arrows up that the map still shows, each with the work that removes it. The test fails when
a new one appears and when one listed here is gone (then delete its line)."""


@dataclass(frozen=True)
class Arrow:
    """One import of another package: who, whom, and where."""

    source: str
    target: str
    where: str


def package_dirs() -> dict[str, PurePosixPath]:
    """accord and each subpackage, by import name, with the folder pyproject.toml maps it to."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {
        "accord": PurePosixPath("accord"),
        **{name: PurePosixPath(folder) for name, folder in setuptools["package-dir"].items()},
    }


def tracked(pattern: str = "*.py") -> list[PurePosixPath]:
    """The files git tracks that match `pattern`, as in a fresh clone."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", pattern],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [PurePosixPath(name) for name in listed.split("\0") if name]


def module_name(path: PurePosixPath, dirs: dict[str, PurePosixPath]) -> str | None:
    """The import name of a tracked file, by the deepest mapped folder holding it (None: not
    accord's)."""
    for package, folder in sorted(dirs.items(), key=lambda item: -len(item[1].parts)):
        if path.parts[: len(folder.parts)] == folder.parts:
            parts = path.relative_to(folder).with_suffix("").parts
            return ".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))
    return None


def room(module: str) -> str:
    """The package (the floor's name) a module of accord belongs to."""
    if module in ROOMS_OF_ACCORD_FILES:
        return ROOMS_OF_ACCORD_FILES[module]
    return module.split(".")[1]


def imports(path: PurePosixPath, module: str) -> list[tuple[str, int]]:
    """Every module path `path` imports, relative imports resolved, with its line."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse((ROOT / path).read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def accord_module(name: str, known: set[str]) -> str | None:
    """The module of accord an imported name lands in (`accord.ledger.store.LogStore` ->
    `accord.ledger.store`), None for another project's."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_map() -> tuple[dict[str, str], list[Arrow]]:
    """The modules of accord in the tracked tree (name -> file) and the arrows between
    packages."""
    dirs = package_dirs()
    modules = {}
    for path in tracked():
        name = module_name(path, dirs)
        if name is not None:
            modules[name] = str(path)
    known = set(modules)
    arrows = []
    for name, file in sorted(modules.items()):
        for imported, line in imports(PurePosixPath(file), name):
            target = accord_module(imported, known)
            if target is not None and room(target) != room(name):
                arrows.append(Arrow(room(name), room(target), f"{file}:{line}"))
    return modules, arrows


def render(modules: dict[str, str], arrows: list[Arrow]) -> str:
    """The map, top floor first: each package, its folder and files, and whom it imports."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for arrow in arrows:
        counts[arrow.source][arrow.target] += 1
    files: dict[str, list[str]] = defaultdict(list)
    for name, file in modules.items():
        files[room(name)].append(file)
    lines = []
    for floor in reversed(FLOORS):
        for package in floor:
            folders = sorted({str(PurePosixPath(f).parent).split("/")[0] for f in files[package]})
            out = ", ".join(f"{t} ({n})" for t, n in sorted(counts[package].items())) or "nothing"
            lines.append(f"{package:12} {len(files[package]):3} files in {', '.join(folders)}/")
            lines.append(f"{'':12} -> {out}")
    return "\n".join(lines)


def floor_of(package: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if package in floor)


def test_no_link_is_tracked() -> None:
    """A tracked symlink is a text file on a Windows checkout and a second path to every file
    behind it: the folders are mapped by package-dir, never linked."""
    staged = subprocess.run(
        ["git", "ls-files", "-s", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    links = [entry.split("\t", 1)[1] for entry in staged.split("\0") if entry.startswith("120000")]
    assert links == []


def test_every_package_folder_is_mapped_and_built() -> None:
    """Every tracked package folder at the root is accord's (mapped by package-dir) or the
    tests', and every package of accord is one the wheel builds."""
    dirs = package_dirs()
    roots = {str(path.parts[0]) for path in tracked("*/__init__.py")}
    mapped = {folder.parts[0] for folder in dirs.values()}
    assert roots - mapped == {"tests"}, "a package folder pyproject.toml does not map"
    built = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    packages = {module_name(path, dirs) for path in tracked("**/__init__.py")} - {None}
    assert packages <= built, f"packages the wheel would leave out: {sorted(packages - built)}"


def test_the_map_has_every_package_and_no_arrow_up_nor_circle() -> None:
    modules, arrows = import_map()
    picture = render(modules, arrows)
    rooms = {room(name) for name in modules}
    expected = {package for floor in FLOORS for package in floor}
    assert rooms == expected, f"packages in the tracked tree: {sorted(rooms)}\n{picture}"
    # the map sees through the mapping: the DESIGN's arrows are there
    pairs = {(arrow.source, arrow.target) for arrow in arrows}
    for pair in [("identity", "ledger"), ("market", "identity"), ("coordinator", "market")]:
        assert pair in pairs, f"no arrow {pair[0]} -> {pair[1]}:\n{picture}"

    upward: dict[tuple[str, str], list[str]] = defaultdict(list)
    for arrow in arrows:
        if floor_of(arrow.target) > floor_of(arrow.source):
            upward[(arrow.source, arrow.target)].append(arrow.where)
    new = {pair: where for pair, where in upward.items() if pair not in KNOWN_UPWARD}
    gone = sorted(set(KNOWN_UPWARD) - set(upward))
    assert not new, f"imports up a floor: {dict(new)}\n\nthe map, top floor first:\n{picture}"
    assert not gone, f"gone from the map, delete them from KNOWN_UPWARD: {gone}\n{picture}"

    graph: dict[str, set[str]] = defaultdict(set)
    for arrow in arrows:
        if (arrow.source, arrow.target) not in KNOWN_UPWARD:
            graph[arrow.source].add(arrow.target)
    assert cycles(graph) == [], f"packages importing each other:\n{picture}"


def test_product_code_imports_no_tests_nor_scripts() -> None:
    dirs = package_dirs()
    found = [
        f"{path}:{line}: {name}"
        for path in tracked()
        if (module := module_name(path, dirs)) is not None
        for name, line in imports(path, module)
        if name.split(".")[0] in ("tests", "scripts")
    ]
    assert found == []


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("ledger/store.py", "accord.ledger.store"),
        ("ledger/chain/__init__.py", "accord.ledger.chain"),
        ("accord/kit/agent.py", "accord.kit.agent"),
        ("accord/__init__.py", "accord"),
        ("tests/test_import_map.py", None),
        ("scripts/typecheck.py", None),
    ],
)
def test_a_file_is_named_as_it_imports(path: str, expected: str | None) -> None:
    assert module_name(PurePosixPath(path), package_dirs()) == expected


def test_mypy_is_handed_every_module_under_its_import_name() -> None:
    """scripts/typecheck.py (`make lint`) names each file as the map does: mypy checks
    `ledger/store.py` as `accord.ledger.store`, not as a top-level `ledger.store`."""
    spec = importlib.util.spec_from_file_location("typecheck", ROOT / "scripts" / "typecheck.py")
    assert spec is not None and spec.loader is not None
    typecheck = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(typecheck)
    handed = {source.module: source.path for source in typecheck.sources()}
    modules, _ = import_map()
    assert {name: handed.get(name) for name in modules} == modules
    assert handed["accord.ledger.store"] == "ledger/store.py"
    assert not [name for name in handed if not name.startswith("accord")]
