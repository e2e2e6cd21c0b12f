"""One root: every expected failure of accord derives from `AccordError`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import accord
from accord.ledger.errors import AccordError

ERROR_MODULES = (
    "accord.ledger.errors",
    "accord.identity.errors",
    "accord.market.errors",
    "accord.coordinator.errors",
)


@pytest.mark.parametrize("module_name", ERROR_MODULES)
def test_every_error_of_every_errors_module_is_an_accord_error(module_name: str) -> None:
    module = importlib.import_module(module_name)
    errors = [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == module_name
    ]
    assert errors
    for cls in errors:
        assert issubclass(cls, AccordError), cls


# -- the drawn trees -----------------------------------------------------------------------------

PACKAGES = ("accord", "ledger", "identity", "market", "coordinator", "audit", "api")
#: Where each package draws its errors (as a tree in the module's docstring). The first drawing
#: of `accord.ledger.errors` is the root's: the roots every package's errors hang from.
DRAWINGS = {
    "accord": ("accord.kit",),
    "ledger": ("accord.ledger.errors",),
    "identity": ("accord.identity.errors", "accord.identity.http_signatures"),
    "market": ("accord.market.errors",),
    "coordinator": ("accord.coordinator.errors",),
    "audit": ("accord.audit.errors",),
    "api": (),
}
_CONNECTORS = ("├── ", "└── ")


def drawn_parents(text: str) -> dict[str, str | None]:
    """Each class a docstring's trees draw, by name, and the one drawn above it (None for a
    tree's top). A tree is a line holding one name, then lines `├── Name` / `└── Name` whose
    connector stands under the first letter of their parent."""
    parents: dict[str, str | None] = {}
    at_column: dict[int, str] = {}
    for line in text.splitlines():
        column = next((line.find(c) for c in _CONNECTORS if c in line), -1)
        if column >= 0:
            name = line[column + 4 :].split()[0]
            parents[name] = at_column[column]
            at_column = {c: n for c, n in at_column.items() if c <= column}
            at_column[column + 4] = name
        elif re.fullmatch(r"\s*[A-Z][A-Za-z]*(Error|Failure)", line):
            name = line.strip()
            parents.setdefault(name, None)
            at_column = {len(line) - len(line.lstrip()): name}
    return parents


def package_of(module: str) -> str | None:
    """Which of PACKAGES a module of accord belongs to (`accord.market.x` is market's,
    `accord.kit.x` accord's own); None for a module that is not accord's."""
    parts = module.split(".")
    if parts[0] != "accord":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else "accord"


def every_accord_error() -> list[type[AccordError]]:
    """Every subclass of AccordError any module of the packages defines (each module imported,
    then the subclasses walked, so a class defined anywhere, even in a function, is found)."""
    root = importlib.import_module("accord")  # its subpackages are walked through it
    for module in pkgutil.walk_packages(root.__path__, "accord."):
        importlib.import_module(module.name)
    found: list[type[AccordError]] = []
    waiting = list(AccordError.__subclasses__())
    while waiting:
        cls = waiting.pop()
        waiting.extend(cls.__subclasses__())
        if package_of(cls.__module__) is not None and cls not in found:
            found.append(cls)
    return sorted(found, key=lambda cls: (cls.__module__, cls.__name__))


def test_drawn_parents_reads_a_tree() -> None:
    tree = """
    AccordError
    ├── LedgerError      the ledger's
    │   └── ChainError   (continued
    │                    on this line)
    │       └── AnchorError
    └── MarketError
    """
    assert drawn_parents(tree) == {
        "AccordError": None,
        "LedgerError": "AccordError",
        "ChainError": "LedgerError",
        "AnchorError": "ChainError",
        "MarketError": "AccordError",
    }


def test_every_accord_error_is_drawn_under_its_parent_in_its_packages_tree() -> None:
    """Wherever an AccordError subclass is defined, its package's drawing names it under its
    own base class, and its bases lead to a root the root drawing hangs from AccordError."""
    doc = importlib.import_module("accord.ledger.errors").__doc__ or ""
    root_drawing = doc[: doc.index("The ledger's own")]
    roots = {n for n, parent in drawn_parents(root_drawing).items() if parent == "AccordError"}
    assert {"LedgerError", "AuditFailure", "ApiError", "AuthError"} <= roots
    assert set(DRAWINGS) == set(PACKAGES)
    errors = every_accord_error()
    assert len(errors) > 60
    wrong = []
    for cls in errors:
        package = package_of(cls.__module__)
        assert package is not None
        drawn: dict[str, str | None] = {}
        for module in DRAWINGS[package]:
            drawn |= drawn_parents(importlib.import_module(module).__doc__ or "")
        if cls.__name__ in roots:
            drawn[cls.__name__] = "AccordError"
        [base] = [b for b in cls.__bases__ if issubclass(b, AccordError)]
        if cls.__name__ not in drawn:
            wrong.append(f"{cls.__module__}.{cls.__name__} is drawn in no tree of {package}")
        elif drawn[cls.__name__] != base.__name__:
            wrong.append(
                f"{cls.__module__}.{cls.__name__} is drawn under {drawn[cls.__name__]}, "
                f"but derives from {base.__name__}"
            )
        if not any(b.__name__ in roots for b in cls.__mro__ if b is not AccordError):
            wrong.append(f"{cls.__module__}.{cls.__name__} hangs from none of the roots")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("module_name", "root"),
    [
        ("accord.audit.checks", "AuditFailure"),
        ("accord.client", "ApiError"),
        ("accord.identity.http_signatures", "AuthError"),
    ],
)
def test_the_audit_and_api_roots_are_accord_errors(module_name: str, root: str) -> None:
    assert issubclass(getattr(importlib.import_module(module_name), root), AccordError)


def test_accord_exports_the_root_and_the_package_roots() -> None:
    assert "AccordError" in accord.__all__
    assert accord.AccordError is AccordError
    for name in ("LedgerError", "IdentityError", "MarketError", "CoordinatorError"):
        assert name in accord.__all__
        assert issubclass(getattr(accord, name), accord.AccordError)


def test_catching_the_root_catches_a_package_failure() -> None:
    from accord.market.money import parse_amount

    with pytest.raises(accord.AccordError):
        parse_amount("not an amount")
