"""Every package's ``__all__`` names exactly what it exports, and each name resolves.

The packages are found by walking ``src/contain`` with pkgutil, so a new package is checked the
day it is added. A package ``__init__`` only re-exports names (STYLE.md section 1): any other
public attribute (a stray ``TYPE_CHECKING``, ``Any`` or helper constant) is an export nobody
declared, and fails here.
"""

from __future__ import annotations
import __future__

import importlib
import pkgutil
import types

import pytest

import contain


def _walk() -> list[pkgutil.ModuleInfo]:
    return sorted(pkgutil.walk_packages(contain.__path__, "contain."), key=lambda info: info.name)


PACKAGES = ["contain", *(info.name for info in _walk() if info.ispkg)]
MODULES_WITH_ALL = [info.name for info in _walk() if not info.ispkg]


def _public_attributes(module: types.ModuleType) -> set[str]:
    """Attributes a reader of ``module`` sees as its exports.

    Excluded: names starting with ``_``, modules (submodules and ``import x``) and
    ``from __future__`` features (compiler directives, not values).
    """
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and not isinstance(value, __future__._Feature)
    }


def test_the_walk_finds_the_packages_that_were_listed_by_hand_and_the_ones_that_were_missed():
    assert {
        "contain",
        "contain.bench",
        "contain.boundary",
        "contain.broker",
        "contain.egress",
        "contain.gate",
        "contain.host",
        "contain.inventory",
        "contain.mcp",
        "contain.probe",
        "contain.runtime",
    } <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_package_public_names_equal_all_and_each_resolves(name):
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    if exported is None:
        # A package with no Python API (e.g. a directory of C source) must export nothing at all.
        assert _public_attributes(module) == set(), name
        return
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    for member in exported:
        assert getattr(module, member) is not None, f"{name}.{member}"
    # After resolving every name (lazy packages cache nothing, eager ones already hold them),
    # the public attributes are exactly __all__, and nothing else.
    assert _public_attributes(module) <= set(exported), f"{name} exports names missing from __all__"
    lazy = "__getattr__" in vars(module)
    if not lazy:
        assert _public_attributes(module) == set(exported), name


@pytest.mark.parametrize("name", MODULES_WITH_ALL)
def test_module_all_names_resolve(name):
    module = importlib.import_module(name)
    for member in getattr(module, "__all__", ()):
        assert hasattr(module, member), f"{name}.__all__ names {member!r}, which does not exist"


@pytest.mark.parametrize("name", [n for n in PACKAGES if "__getattr__" in vars(importlib.import_module(n))])
def test_lazy_package_refuses_a_name_it_does_not_export(name):
    module = importlib.import_module(name)
    with pytest.raises(AttributeError):
        module.not_a_member  # noqa: B018


def test_top_level_exports_the_public_surface():
    assert set(contain.__all__) == {
        "Boundary",
        "BoundaryInvalid",
        "ContainError",
        "FileTransferError",
        "PoolUnavailable",
        "RunResult",
        "Sandbox",
        "SandboxLost",
        "SandboxPool",
        "SandboxStartError",
        "UnsupportedHost",
        "load_boundary",
    }
    with pytest.raises(AttributeError):
        contain.not_a_member  # noqa: B018
