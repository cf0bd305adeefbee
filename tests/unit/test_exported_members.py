"""Every package's __all__ names exactly what it exports, and each name resolves."""

import importlib

import pytest

import contain

PACKAGES = [
    "contain",
    "contain.boundary",
    "contain.runtime",
    "contain.errors",
    "contain.host",
    "contain.egress",
    "contain.inventory",
    "contain.bench",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_resolve(name):
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__) or name != "contain"
    for member in module.__all__:
        assert getattr(module, member) is not None, f"{name}.{member}"


def test_top_level_exports_the_public_surface():
    assert set(contain.__all__) == {
        "Boundary",
        "BoundaryInvalid",
        "ContainError",
        "FileTransferError",
        "RunResult",
        "Sandbox",
        "SandboxLost",
        "SandboxStartError",
        "UnsupportedHost",
        "load_boundary",
    }
    with pytest.raises(AttributeError):
        contain.not_a_member  # noqa: B018
