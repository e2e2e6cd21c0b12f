"""One root: every expected failure of accord derives from `AccordError`."""

from __future__ import annotations

import importlib
import inspect

import pytest

import accord
from ledger.errors import AccordError

ERROR_MODULES = ("ledger.errors", "identity.errors", "market.errors", "coordinator.errors")


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


@pytest.mark.parametrize("module_name", ERROR_MODULES)
def test_each_errors_module_draws_its_tree_under_accord_error(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert module.__doc__ is not None and "AccordError" in module.__doc__
    for name, cls in inspect.getmembers(module, inspect.isclass):
        if issubclass(cls, AccordError) and cls.__module__ == module_name:
            assert name in module.__doc__, f"{name} is missing from {module_name}'s tree"


@pytest.mark.parametrize(
    ("module_name", "root"),
    [("audit.checks", "AuditFailure"), ("api.client", "ApiError"), ("api.auth", "AuthError")],
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
    from market.money import parse_amount

    with pytest.raises(accord.AccordError):
        parse_amount("not an amount")
