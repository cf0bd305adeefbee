"""The error tree: every class is in the module docstring's tree and in ``__all__``, renders its
cause and fix, and is a ContainError the CLI can render with an exit code."""

from __future__ import annotations

import inspect

import pytest

from contain import errors
from contain.errors import BoundaryInvalid, ContainError, ImageError, SandboxStartError

CLASSES = [obj for _, obj in inspect.getmembers(errors, inspect.isclass) if obj.__module__ == errors.__name__]


def test_every_error_class_is_exported_and_drawn_in_the_docstring_tree():
    assert sorted(cls.__name__ for cls in CLASSES) == sorted(errors.__all__)
    tree = errors.__doc__ or ""
    for cls in CLASSES:
        assert f" {cls.__name__} " in tree, f"{cls.__name__} is missing from the tree in errors.py's docstring"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_error_is_a_contain_error_with_a_docstring_saying_when_it_is_raised(cls):
    assert issubclass(cls, ContainError)
    assert cls.__doc__ and "raise" in cls.__doc__.lower()
    assert isinstance(cls.exit_code, int) and cls.exit_code != 0


def test_an_error_keeps_cause_fix_and_rule_id_and_renders_both():
    exc = SandboxStartError("writable path /work/out does not exist", "create it", rule_id="fs-write")
    assert (exc.cause, exc.fix, exc.rule_id) == ("writable path /work/out does not exist", "create it", "fs-write")
    assert str(exc) == "writable path /work/out does not exist (fix: create it)"
    assert str(SandboxStartError("no fix known")) == "no fix known"


def test_boundary_invalid_problems_are_per_instance():
    first = BoundaryInvalid("bad")
    first.problems.append("m.yaml: network.allow[0]: line 3")
    assert BoundaryInvalid("also bad").problems == []
    assert BoundaryInvalid("x", problems=["a"]).problems == ["a"]


def test_image_error_carries_its_report():
    report = object()
    assert ImageError("hostile member", "use another image", report=report).report is report
    assert ImageError("no layers").report is None
