"""A package's public names, imported on first use (PEP 562): the package's `__init__` names
where each lives, and importing the package loads none of them, so a pure module inside it
(`accord.ledger.chain.values`, `accord.market.escrow.values`) is imported without the I/O modules
beside it.

    __getattr__, __dir__ = lazy_exports(__name__, {"Name": "package.module", ...}, globals())
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`: a name in `exports` is taken from its
    module on first use and kept in `namespace` (the package's globals); any other name
    raises AttributeError, as a missing attribute does."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
