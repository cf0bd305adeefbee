"""OC and VM cases: NOT_APPLICABLE by construction on targets without an OCI runtime or a VMM,
with the reason; on any other target kind an ERROR (never a pass) until its backend brings probes."""

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


def test_the_cases_are_oc_01_to_06_and_vm_01_to_06():
    assert [c.id for c in CASES] == [f"OC-0{n}" for n in range(1, 7)] + [f"VM-0{n}" for n in range(1, 7)]
    assert {c.category for c in CASES} == {Category.OC, Category.VM}


@pytest.mark.parametrize("kind", ["process", "host", "wrap"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_targets_without_a_runtime_or_vmm_are_not_applicable_with_the_reason(case, kind):
    result = run_case(case, _ctx(kind))
    assert result.verdict is Verdict.NOT_APPLICABLE
    missing = "no OCI runtime" if case.category is Category.OC else "no VMM"
    assert result.summary.startswith(f"not applicable by construction: the {kind} target runs {missing}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_any_other_target_kind_is_an_error_never_a_pass(case):
    result = run_case(case, _ctx("container"))
    assert result.verdict is Verdict.ERROR
    assert f"{case.id} has no probe for target 'fake-container' yet" in result.summary
