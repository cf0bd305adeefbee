"""Run the battery: select cases, run each with a timeout, never let one case sink the run.

``run_battery`` is the orchestrator:
  1. look up each selected id; a catalogue id with no implementation is an ERROR result, never
     skipped (fail closed: a battery that silently runs fewer cases would pass too easily);
  2. a case whose ``not_applicable`` names this target's kind gets NOT_APPLICABLE with the reason
     (a backend spec such as ``container:runc`` is looked up as itself, then as ``container``);
  3. otherwise the case's ``check`` runs in a worker thread with a deadline; an exception becomes
     ERROR with the traceback in the evidence, a missed deadline becomes ERROR too. One
     exception is NOT_APPLICABLE instead: the backend refused a feature the case's boundary needs
     (``BackendRefusal`` whose ``feature`` is a row of ``BY_CONSTRUCTION``, e.g. write binds on
     microvm) *before any sandbox of the target started in this case* (``sandboxes_started``
     did not move). A refusal after a sandbox ran, or of a feature not in the table (a memory
     budget too small is the probe's mistake), stays ERROR: nothing seen is ever hidden;
  4. whatever the case planted is removed (``RunContext.run_deferred``); cleanup errors are
     added to the case's evidence;
  5. progress is reported per case; the Report carries totals, per-category scores, the duration
     and a summary of host facts.

Not enforced here: a case thread that misses its deadline cannot be killed (Python threads are
not killable); it is left as a daemon thread and the run goes on.
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from contain.probe.case import CaseResult, ProbeCase, Verdict
from contain.probe.context import RunContext
from contain.probe.registry import ALL_IDS, select_ids
from contain.probe.report import Report, case_infos
from contain.probe.targets import kind_keys, target_kind

__all__ = ["BY_CONSTRUCTION", "DEFAULT_CASE_TIMEOUT_S", "host_summary", "run_battery", "run_case"]

DEFAULT_CASE_TIMEOUT_S = 120.0

# Backend refusals that make a case not applicable by construction: the case's boundary needs a
# feature that backend cannot carry at all, so the attack cannot run there (BackendRefusal.feature
# -> why). The backend's refusal message itself is quoted in the verdict's summary.
BY_CONSTRUCTION: dict[str, str] = {
    "write_binds": "the case needs a write bind; this backend refuses write binds (no live directory sharing)",
    "attachments": "the case needs an attachment (a host socket or file under /.contain); this backend refuses them",
    "network_allow": "the case needs network.allow (the egress proxy); this backend refuses egress",
}

Progress = Callable[[int, int, CaseResult], None]


def run_case(case: ProbeCase, ctx: RunContext, *, timeout_s: float = DEFAULT_CASE_TIMEOUT_S) -> CaseResult:
    """One case, never raising: NOT_APPLICABLE, its own verdict, or ERROR."""
    kind = target_kind(ctx.target)
    began = time.perf_counter()
    reason = next((case.not_applicable[k] for k in kind_keys(kind) if k in case.not_applicable), None)
    if reason is not None:
        return CaseResult(case.id, Verdict.NOT_APPLICABLE, reason, {"target_kind": kind})
    box: dict[str, Any] = {}
    started_before = _sandboxes_started(ctx.target)

    def work() -> None:
        try:
            box["result"] = case.check(ctx)
        except BaseException as exc:  # the probe crashed: an ERROR verdict with the traceback
            box["error"] = exc
            box["traceback"] = traceback.format_exc()

    worker = threading.Thread(target=work, name=f"probe-{case.id}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        result = CaseResult(case.id, Verdict.ERROR, f"the case did not finish within {timeout_s:g}s", {})
    elif "error" in box and (refused := _refusal(box["error"], ctx.target, started_before)) is not None:
        result = CaseResult(case.id, Verdict.NOT_APPLICABLE, refused, {"target_kind": kind})
    elif "error" in box:
        exc = box["error"]
        result = CaseResult(
            case.id,
            Verdict.ERROR,
            f"the probe itself failed: {type(exc).__name__}: {exc}",
            {"traceback": box["traceback"]},
        )
    else:
        result = box["result"]
        if not isinstance(result, CaseResult) or result.case_id != case.id:
            result = CaseResult(case.id, Verdict.ERROR, f"check returned {result!r}, not a CaseResult for {case.id}")
    cleanup_errors = ctx.run_deferred() if not worker.is_alive() else []
    evidence = dict(result.evidence)
    if cleanup_errors:
        evidence["cleanup_errors"] = cleanup_errors
    return dataclasses.replace(result, evidence=evidence, duration_s=time.perf_counter() - began)


def _sandboxes_started(target: object) -> int | None:
    count = getattr(target, "sandboxes_started", None)
    return count if isinstance(count, int) else None


def _refusal(exc: BaseException, target: object, started_before: int | None) -> str | None:
    """The NOT_APPLICABLE summary when ``exc`` is a by-construction refusal raised before any
    sandbox of ``target`` started in this case; None otherwise (the case stays ERROR)."""
    from contain.errors import BackendRefusal

    if not isinstance(exc, BackendRefusal) or exc.feature not in BY_CONSTRUCTION:
        return None
    if started_before is None or _sandboxes_started(target) != started_before:
        return None
    return f"not applicable by construction: {BY_CONSTRUCTION[exc.feature]} ({exc.cause})"


def run_battery(
    cases: Sequence[ProbeCase],
    ctx: RunContext,
    *,
    patterns: str | None = None,
    catalogue: Sequence[str] = ALL_IDS,
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S,
    progress: Progress | None = None,
    host: dict[str, Any] | None = None,
) -> Report:
    """Run the selected cases against ``ctx.target`` and build the report.

    Args:
        cases: implemented cases (from ``registry.load_cases``).
        patterns: ``--cases`` globs, e.g. ``"FS-*,NE-01"``; all catalogue ids when empty.
        catalogue: every id that must exist; unimplemented selected ids become ERROR.
        progress: called after each case with (index, count, result).
        host: host facts summary for the report (default: ``host_summary()``).

    Raises:
        ValueError: a pattern matches no id.
    """
    by_id = {c.id: c for c in cases}
    universe = list(catalogue) + [i for i in by_id if i not in set(catalogue)]
    selected = select_ids(universe, patterns)
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    began = time.perf_counter()
    results: list[CaseResult] = []
    for index, case_id in enumerate(selected, 1):
        case = by_id.get(case_id)
        if case is None:
            result = CaseResult(case_id, Verdict.ERROR, "not implemented: no probe module defines this case")
        else:
            result = run_case(case, ctx, timeout_s=case_timeout_s)
        results.append(result)
        if progress is not None:
            progress(index, len(selected), result)
    return Report(
        target=ctx.target.name,
        target_kind=target_kind(ctx.target),
        run_id=ctx.run_id,
        started_at=started,
        duration_s=time.perf_counter() - began,
        results=tuple(results),
        cases=case_infos(cases),
        host=host if host is not None else host_summary(),
        backend=_backend_of(ctx.target),
    )


def _backend_of(target: object) -> str | None:
    """The contain backend spec a target runs on (None for --wrap and host targets)."""
    backend = getattr(target, "backend", None)
    return backend if isinstance(backend, str) and getattr(target, "has_contain_hooks", False) else None


def host_summary() -> dict[str, Any]:
    """A few host facts for the report (never fails: a probe error is reported as text)."""
    try:
        from contain.host.facts import bwrap_version, detect_host

        facts = detect_host()
    except Exception as exc:  # the report still renders; the failure is the summary
        return {"error": f"{type(exc).__name__}: {exc}"}
    import platform

    return {
        "kernel": platform.release(),
        "arch": facts.arch,
        "root": facts.is_root,
        "bwrap": bwrap_version(facts.bwrap_path),
        "user_namespaces": facts.user_namespaces,
        "seccomp": facts.seccomp,
        "landlock_abi": facts.landlock_abi,
        "cgroups": ", ".join(f"v{m.version}:{'+'.join(m.controllers)}" for m in facts.cgroups),
    }
