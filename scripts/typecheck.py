"""mypy over accord, every module under its import name (`make lint`).

    .venv/bin/python scripts/typecheck.py [MYPY OPTIONS]

accord's subpackages live in folders at the repository's root (`ledger/`, `market/`, ...) and
import as `accord.ledger`, `accord.market`, ...: pyproject.toml's `[tool.setuptools.package-dir]`
says which folder is which package, and the wheel and the editable install follow it. mypy names
a file by its folder (`ledger/store.py` would be `ledger.store`) and cannot follow the editable
install's import hook, so this runs mypy's own build over every module of accord with its name
given (`accord.ledger.store` from `ledger/store.py`), with pyproject.toml's `[tool.mypy]`
options: errors name the real files, each file is checked once, and a new module is checked
without reinstalling. Exit status as mypy's: 0 clean, 1 errors, 2 a blocking error.
"""

from __future__ import annotations

import os
import sys
import time
import tomllib
from pathlib import Path

from mypy import util
from mypy.fscache import FileSystemCache
from mypy.main import process_options, run_build
from mypy.modulefinder import BuildSource

REPO = Path(__file__).resolve().parents[1]


def package_folders(repo: Path = REPO) -> dict[str, Path]:
    """accord and each subpackage pyproject.toml maps, by import name, with its folder."""
    config = tomllib.loads((repo / "pyproject.toml").read_text())
    mapped: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return {"accord": repo / "accord", **{name: repo / folder for name, folder in mapped.items()}}


def sources(repo: Path = REPO) -> list[BuildSource]:
    """Every module of accord, named as it imports (`accord.ledger.store`), at its real path."""
    found = []
    for package, folder in package_folders(repo).items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))
            found.append(BuildSource(path.relative_to(repo).as_posix(), name))
    return found


def main(argv: list[str]) -> int:
    """Run mypy from the repository's root (the files are named from it, and pyproject.toml is
    read there; a relative path in `argv` is too); returns mypy's exit status."""
    os.chdir(REPO)
    modules = sources()
    fscache = FileSystemCache()
    # mypy parses its options (pyproject.toml's [tool.mypy] and argv) with the files as targets,
    # then checks them under the names given here rather than the ones it would guess.
    _, options = process_options(
        [*argv, *(source.path or "" for source in modules)], fscache=fscache
    )
    formatter = util.FancyFormatter(sys.stdout, sys.stderr, options.hide_error_codes)
    _, messages, blockers = run_build(
        modules, options, fscache, time.time(), sys.stdout, sys.stderr
    )
    errors, notes, files = util.count_stats(messages)
    if errors:
        print(formatter.format_error(errors, files, len(modules), blockers=blockers))
    else:
        print(formatter.format_success(len(modules), options.color_output))
    return 2 if blockers else 1 if messages and notes < len(messages) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
