"""The runner: verdict aggregation, NOT_APPLICABLE per target kind, errors and timeouts, exit code."""

from __future__ import annotations

import threading

import pytest

from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext, Verdict
from contain.probe.context import RunContext
from contain.probe.runner import run_battery, run_case


class FakeTarget:
    name = "fake"
    kind = "fake"
    has_contain_hooks = False

    def run_python(self, code, *, timeout_s=20.0, boundary=None, env=None):  # pragma: no cover - unused
        raise AssertionError("cases in these tests never run code")

    run_argv = run_python


def _ctx() -> RunContext:
    target = FakeTarget()
    return RunContext(target, control=target, sandboxed_control=target, run_id="r1")


def _case(case_id: str, verdict: Verdict | None = None, *, check=None, **na: str) -> ProbeCase:
    def fixed(ctx: ProbeContext) -> CaseResult:
        assert verdict is not None
        return CaseResult(case_id, verdict, verdict.value.lower())

    category = Category(case_id.split("-")[0])
    return ProbeCase(case_id, category, "title", "expected", check or fixed, dict(na))


def _raise(ctx: ProbeContext) -> CaseResult:
    raise RuntimeError("boom")


def test_verdicts_are_aggregated_per_category_and_in_total():
    cases = [
        _case("FS-01", Verdict.CONTAINED),
        _case("FS-02", Verdict.ESCAPED),
        _case("PR-01", Verdict.INCONCLUSIVE),
        _case("PR-02", Verdict.CONTAINED),
    ]
    report = run_battery(cases, _ctx(), catalogue=[c.id for c in cases], host={})
    assert report.totals() == {
        "CONTAINED": 2,
        "ESCAPED": 1,
        "INCONCLUSIVE": 1,
        "ERROR": 0,
        "NOT_APPLICABLE": 0,
    }
    assert report.by_category()["FS"]["score"] == "1/2"
    assert report.by_category()["PR"]["score"] == "1/2"
    assert report.exit_code == 1


def test_exit_code_is_zero_only_when_every_case_is_contained_or_not_applicable():
    cases = [_case("FS-01", Verdict.CONTAINED), _case("FS-02", Verdict.CONTAINED, fake="no such layer here")]
    report = run_battery(cases, _ctx(), catalogue=["FS-01", "FS-02"], host={})
    assert [r.verdict for r in report.results] == [Verdict.CONTAINED, Verdict.NOT_APPLICABLE]
    assert report.results[1].summary == "no such layer here"
    assert report.exit_code == 0


def test_not_applicable_is_looked_up_by_target_kind():
    case = _case("FS-01", Verdict.ESCAPED, wrap="needs contain's own hooks")
    assert run_case(case, _ctx()).verdict is Verdict.ESCAPED  # the fake target's kind is not "wrap"


def test_a_crashing_case_is_an_error_with_its_traceback():
    result = run_case(_case("FS-01", check=_raise), _ctx())
    assert result.verdict is Verdict.ERROR
    assert "RuntimeError: boom" in result.summary
    assert "Traceback" in result.evidence["traceback"]


def test_a_case_past_its_deadline_is_an_error_and_its_cleanup_waits_for_it():
    release = threading.Event()
    cleaned = []

    def stuck(ctx: ProbeContext) -> CaseResult:
        release.wait()  # held until the runner has given up on it: no wall-clock sleep
        return CaseResult("FS-01", Verdict.CONTAINED, "late")

    ctx = _ctx()
    ctx.defer(lambda: cleaned.append("cleaned"))  # a plant the case made before it got stuck
    try:
        result = run_case(_case("FS-01", check=stuck), ctx, timeout_s=0.0)
    finally:
        release.set()
    assert result.verdict is Verdict.ERROR
    assert result.summary == "the case did not finish within 0s"
    assert cleaned == []  # a case still running keeps its plants: cleaning under it would race


def test_a_result_for_the_wrong_case_is_an_error():
    result = run_case(_case("FS-01", check=lambda ctx: CaseResult("FS-02", Verdict.CONTAINED, "x")), _ctx())
    assert result.verdict is Verdict.ERROR


def test_unimplemented_catalogue_ids_are_errors_not_skips():
    report = run_battery([_case("FS-01", Verdict.CONTAINED)], _ctx(), catalogue=["FS-01", "FS-02"], host={})
    assert [(r.case_id, r.verdict) for r in report.results] == [
        ("FS-01", Verdict.CONTAINED),
        ("FS-02", Verdict.ERROR),
    ]
    assert "not implemented" in report.results[1].summary


def test_selection_runs_only_matching_cases_and_reports_progress():
    seen = []
    cases = [_case("FS-01", Verdict.CONTAINED), _case("PR-01", Verdict.CONTAINED)]
    report = run_battery(
        cases,
        _ctx(),
        patterns="PR-*",
        catalogue=["FS-01", "PR-01"],
        progress=lambda i, n, r: seen.append((i, n, r.case_id)),
        host={},
    )
    assert [r.case_id for r in report.results] == ["PR-01"]
    assert seen == [(1, 1, "PR-01")]


def test_a_pattern_matching_nothing_is_refused():
    with pytest.raises(ValueError):
        run_battery([_case("FS-01", Verdict.CONTAINED)], _ctx(), patterns="ZZ-*", catalogue=["FS-01"], host={})


def test_cleanup_runs_after_each_case_and_its_errors_are_evidence():
    calls = []

    def planting(ctx: ProbeContext) -> CaseResult:
        assert isinstance(ctx, RunContext)
        ctx.defer(lambda: calls.append("cleaned"))
        ctx.defer(lambda: (_ for _ in ()).throw(OSError("busy")))
        return CaseResult("FS-01", Verdict.CONTAINED, "ok")

    result = run_case(_case("FS-01", check=planting), _ctx())
    assert calls == ["cleaned"]
    assert result.evidence["cleanup_errors"] == ["OSError: busy"]


class SpecTarget(FakeTarget):
    has_contain_hooks = True

    def __init__(self, spec: str) -> None:
        self.kind = self.backend = spec
        self.name = f"contain:{spec}"


def _spec_ctx(spec: str) -> RunContext:
    target = SpecTarget(spec)
    return RunContext(target, control=target, sandboxed_control=target, run_id="r2")


def test_a_backend_spec_finds_the_reason_given_for_its_kind():
    case = _case("VM-01", Verdict.ESCAPED, container="no VMM in a container")
    for spec in ("container:runc", "container:runsc"):
        result = run_case(case, _spec_ctx(spec))
        assert (result.verdict, result.summary) == (Verdict.NOT_APPLICABLE, "no VMM in a container")
        assert result.evidence == {"target_kind": spec}


def test_a_reason_for_one_runtime_wins_over_the_kind_and_spares_the_other_runtime():
    case = _case("OC-01", Verdict.CONTAINED, **{"container:runsc": "runsc only", "container": "any container"})
    assert run_case(case, _spec_ctx("container:runsc")).summary == "runsc only"
    assert run_case(case, _spec_ctx("container:runc")).summary == "any container"
    assert run_case(case, _spec_ctx("process")).verdict is Verdict.CONTAINED


def test_the_report_carries_the_backend_spec_and_none_for_a_wrapped_sandbox():
    cases = [_case("FS-01", Verdict.CONTAINED)]
    assert run_battery(cases, _spec_ctx("container:runsc"), catalogue=["FS-01"], host={}).backend == "container:runsc"
    assert run_battery(cases, _ctx(), catalogue=["FS-01"], host={}).backend is None


class CountingTarget(FakeTarget):
    """A target that counts the sandboxes it started, as ContainTarget does."""

    sandboxes_started = 0


def _refusing(feature: str, *, start_first: bool = False, exc_type=None):
    from contain.errors import BackendRefusal, UnsupportedHost

    def check(ctx: ProbeContext) -> CaseResult:
        if start_first:
            ctx.target.sandboxes_started += 1  # a sandbox ran (its attack may have seen something)
        if exc_type is UnsupportedHost:
            raise UnsupportedHost("no")
        raise BackendRefusal("the microvm backend cannot carry write binds (/probe/ws): ...", "fix", feature=feature)

    return check


def _counting_ctx() -> RunContext:
    target = CountingTarget()
    return RunContext(target, control=target, sandboxed_control=target, run_id="r1")


@pytest.mark.parametrize("feature", ["write_binds", "attachments", "network_allow"])
def test_a_refusal_of_a_feature_the_case_needs_before_any_sandbox_started_is_not_applicable(feature):
    result = run_case(_case("FS-05", check=_refusing(feature)), _counting_ctx())
    assert result.verdict is Verdict.NOT_APPLICABLE
    assert result.summary.startswith("not applicable by construction: the case needs")
    assert "cannot carry write binds" in result.summary  # the backend's own words are quoted


def test_a_refusal_after_a_sandbox_of_the_case_ran_stays_an_error():
    result = run_case(_case("FS-05", check=_refusing("write_binds", start_first=True)), _counting_ctx())
    assert result.verdict is Verdict.ERROR


def test_a_refused_memory_budget_is_the_probes_mistake_and_stays_an_error():
    result = run_case(_case("FS-05", check=_refusing("memory_budget")), _counting_ctx())
    assert result.verdict is Verdict.ERROR


def test_a_plain_unsupported_host_and_a_target_that_counts_nothing_stay_errors():
    from contain.errors import UnsupportedHost

    assert run_case(_case("FS-05", check=_refusing("x", exc_type=UnsupportedHost)), _counting_ctx()).verdict is (
        Verdict.ERROR
    )
    assert run_case(_case("FS-05", check=_refusing("write_binds")), _ctx()).verdict is Verdict.ERROR
