"""VM cases: NOT_APPLICABLE by construction on targets without a VMM (process, every container
backend, host, wrap), with the reason; on any other target kind an ERROR (never a pass) until its
backend brings probes. (The OC cases are tested in test_cases_oci.py.)"""

from __future__ import annotations

import pytest

from contain.probe.case import Category, Verdict
from contain.probe.cases_backend_only import CASES
from contain.probe.context import RunContext
from contain.probe.runner import run_case


class Kind:
    has_contain_hooks = False

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = f"fake-{kind}"

    def run_python(self, *a, **kw):  # pragma: no cover - these cases never run code
        raise AssertionError

    run_argv = run_python


def _ctx(kind: str) -> RunContext:
    target = Kind(kind)
    return RunContext(target, control=target, sandboxed_control=target, run_id="unitoc")


def test_the_cases_are_vm_01_to_06():
    assert [c.id for c in CASES] == [f"VM-0{n}" for n in range(1, 7)]
    assert {c.category for c in CASES} == {Category.VM}


@pytest.mark.parametrize("kind", ["process", "container", "host", "wrap"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_targets_without_a_vmm_are_not_applicable_with_the_reason(case, kind):
    result = run_case(case, _ctx(kind))
    assert result.verdict is Verdict.NOT_APPLICABLE
    assert result.summary.startswith(f"not applicable by construction: the {kind} target runs no VMM")


@pytest.mark.parametrize("spec", ["container:runc", "container:runsc"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_container_runtime_is_not_applicable_through_its_kind(case, spec):
    result = run_case(case, _ctx(spec))
    assert result.verdict is Verdict.NOT_APPLICABLE
    assert "the container target runs no VMM" in result.summary


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_any_other_target_kind_is_an_error_never_a_pass(case):
    result = run_case(case, _ctx("microvm"))
    assert result.verdict is Verdict.ERROR
    assert f"{case.id} has no probe for target 'fake-microvm' yet" in result.summary
