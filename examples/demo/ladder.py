"""`make demo`, part 3: the same task under the same manifest on every backend this host can run.

The backends are tried in the order of the ladder (process, container:runc, container:runsc,
microvm). `contain doctor`'s verdict for each decides: a backend runs only when its verdict is
`ok`; any other is skipped with doctor's own detail and fix, never with a reason of ours. Each
run prints one line from its RunResult: the backend spec it ran on, the exit status, the task's
answer, the wall time from `Sandbox(...)` to the result, and each isolation layer shortened to its
first words (the full lines are in `RunResult.layers`; `contain run --json` prints them).

Idempotent: nothing is written on the host (the manifest has no export). A microvm cold boot
takes seconds under TCG; the whole part takes well under a minute here.

What it does not show: that the backends are equally strong. They are not; docs/backends.md has
the table of what each layer enforces on each backend.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "ladder.yaml"
# The task: total the invoices it may read; it prints one line. python3 is in every backend's /usr.
TASK = [
    "python3",
    "-c",
    "import csv; rows = list(csv.DictReader(open('/inputs/data/invoices.csv'))); "
    "print(f'{len(rows)} invoices, {sum(float(r[\"amount_eur\"]) for r in rows):.2f} EUR')",
]
# backend spec -> the name of doctor's verdict for it (host/doctor.py VERDICTS and its runtime rows)
LADDER: tuple[tuple[str, str], ...] = (
    ("process", "process backend"),
    ("container:runc", "container:runc"),
    ("container:runsc", "container:runsc"),
    ("microvm", "microvm backend"),
)


@dataclass(frozen=True)
class Step:
    """One backend of the ladder: run it, or skip it with doctor's reason."""

    spec: str
    skip_reason: str | None  # None: run it


def plan_ladder(verdicts: Mapping[str, tuple[str, str, str]]) -> list[Step]:
    """Which backends to run, from doctor's verdicts (name -> (status, detail, fix)). Pure.

    A backend runs only when its verdict is ``ok``; a missing verdict is a skip too (fail closed).
    """
    steps = []
    for spec, verdict in LADDER:
        status, detail, fix = verdicts.get(verdict, ("missing", "doctor gave no verdict for it", ""))
        if status == "ok":
            steps.append(Step(spec, None))
        else:
            steps.append(Step(spec, f"doctor: {verdict}: {status}: {detail}" + (f" (fix: {fix})" if fix else "")))
    return steps


def short_layers(layers: Mapping[str, str], *, width: int = 24) -> str:
    """Each layer line cut to its first clause (before " (", ";" or ":") and ``width`` characters. Pure."""
    parts = []
    for name, line in layers.items():
        head = line
        for stop in (" (", ";", ":"):
            head = head.split(stop, 1)[0]
        head = head.strip()
        parts.append(f"{name}={head if len(head) <= width else head[: width - 1] + '~'}")
    return " ".join(parts)


def doctor_verdicts() -> dict[str, tuple[str, str, str]]:
    """Doctor's verdicts on this host, as `contain doctor` computes them."""
    from contain.host.doctor import build_report
    from contain.host.facts import detect_host
    from contain.host.observe import observe_host

    facts = detect_host()
    report = build_report(facts, observe_host(facts))
    return {v.name: (str(v.status.value), v.detail, v.fix) for v in report.verdicts}


def run_step(spec: str) -> str:
    """Run the task on ``spec``; the RunResult's summary line."""
    from contain.boundary import load_boundary
    from contain.runtime import Sandbox

    began = time.perf_counter()
    with Sandbox(load_boundary(MANIFEST), backend=spec) as sandbox:
        result = sandbox.run(TASK)
    seconds = time.perf_counter() - began
    answer = result.stdout.data.decode(errors="replace").strip() or result.stderr.data.decode(errors="replace")[-200:]
    return (
        f"{result.backend:<16} exit {result.status:<3} {seconds:6.2f} s  {answer!r}\n"
        f"{'':<16} layers: {short_layers(result.layers)}"
    )


def main() -> int:
    from contain.errors import ContainError
    from contain.visible_text import for_terminal

    failures = 0
    for step in plan_ladder(doctor_verdicts()):
        if step.skip_reason is not None:
            print(for_terminal(f"{step.spec:<16} skipped: {step.skip_reason}"))
            continue
        try:
            print(for_terminal(run_step(step.spec), keep_newlines=True), flush=True)
        except ContainError as exc:  # doctor said ok, yet it did not start: say so, and fail the demo
            failures += 1
            print(for_terminal(f"{step.spec:<16} FAILED: {exc.cause} (fix: {exc.fix})"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
