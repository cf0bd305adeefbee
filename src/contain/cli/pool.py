"""`contain pool [options] < tasks.jsonl`: many short tasks, each in its own sandbox from a warm pool.

Why a verb: a harness that runs model-written code task after task from a shell (an eval loop, a
grader) pays a sandbox start per task with `contain run`. Here the sandboxes are started ahead by
a ``SandboxPool`` (``--size``), and ``--jobs`` tasks run at once. Every task still gets a fresh
sandbox that is closed after it: nothing one task wrote is seen by the next.

Input: one task per line on stdin, a JSON array (the argv) or an object
``{"argv": [...], "id": <any JSON>, "stdin": "<text>", "timeout": <seconds>}``; blank lines are
skipped. Output: one JSON object per task on stdout, in completion order: ``task`` (its line
number), ``id`` (when given), and either the ``RunResult`` fields as ``contain run --json`` prints
them (with ``teardown`` and ``export``), or ``error`` (``cause``, ``fix``) for a line that was
refused or a sandbox that was lost.

Exit status: 0 when every task ran (its own exit status is in its line); 1 when a line was refused
or a task's sandbox was lost; 125 when the pool cannot start sandboxes at all (the cause and fix on
stderr and in that task's line; the batch stops, and tasks not yet run get no line); 130 on
Ctrl-C (every sandbox killed and closed, nothing left).

Refused: manifests that name ``records`` (a broker capability is minted per sandbox for one
task; a pool's sandboxes are started before their task is known).

Terminal output: stdout is JSON only (exact, as ``--json`` elsewhere). contain's own stderr
lines here are fixed text; a ``ContainError`` that stops the batch is printed by ``contain.cli.main``
through ``contain.visible_text.for_terminal``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

from contain.errors import BoundaryInvalid, ContainError, PoolUnavailable

__all__ = ["Task", "add_arguments", "execute", "parse_task_line"]

MAX_LINE_BYTES = 1 << 20  # a task line longer than 1 MiB is refused (stdin text included)


@dataclass(frozen=True)
class Task:
    """One line of input, parsed."""

    number: int
    argv: tuple[str, ...]
    task_id: Any = None
    stdin: bytes | None = None
    timeout_s: float | None = None


def parse_task_line(line: str, number: int) -> Task:
    """Parse one input line (a JSON argv array or a task object) into a ``Task``.

    Raises:
        BoundaryInvalid: the line is not valid JSON, names unknown keys, or has no command.
    """
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BoundaryInvalid(
            f"task line {number} is not JSON: {exc.msg} at column {exc.colno}",
            'write one JSON array (["cmd", "arg"]) or object ({"argv": [...]}) per line',
        ) from exc
    if isinstance(value, list):
        value = {"argv": value}
    if not isinstance(value, dict):
        raise BoundaryInvalid(f"task line {number} is neither a JSON array nor an object", "write an argv array")
    unknown = sorted(set(value) - {"argv", "id", "stdin", "timeout"})
    if unknown:
        raise BoundaryInvalid(
            f"task line {number} has unknown key(s): {', '.join(unknown)}", "use only argv, id, stdin and timeout"
        )
    argv = value.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
        raise BoundaryInvalid(f"task line {number}: argv must be a non-empty list of non-empty strings", "fix argv")
    stdin = value.get("stdin")
    if stdin is not None and not isinstance(stdin, str):
        raise BoundaryInvalid(f"task line {number}: stdin must be a string", "pass the input as text")
    timeout = value.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
        raise BoundaryInvalid(f"task line {number}: timeout must be a positive number of seconds", "fix timeout")
    return Task(
        number=number,
        argv=tuple(argv),
        task_id=value.get("id"),
        stdin=stdin.encode() if stdin is not None else None,
        timeout_s=float(timeout) if timeout is not None else None,
    )


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--manifest", "-m", help="boundary manifest (default: scratch only, no network)")
    parser.add_argument("--backend", help="sandbox backend (default: the manifest's runtime.backend, else process)")
    parser.add_argument("--size", type=int, default=2, help="sandboxes kept started ahead (default 2)")
    parser.add_argument("--jobs", type=int, default=1, help="tasks run at once (default 1)")
    parser.add_argument("--timeout", type=float, help="wall-clock seconds per task (default: the manifest's)")
    parser.add_argument("--memory", help="memory limit per sandbox, e.g. 256MiB")
    parser.add_argument("--cpu", help="CPU-time budget per sandbox, e.g. 10s")
    parser.add_argument("--pids", type=int, help="maximum processes and threads per sandbox")
    parser.add_argument("--read", action="append", default=[], metavar="HOST[:PATH]", help="bind a host path read-only")
    parser.add_argument("--env", action="append", default=[], metavar="K=V", help="set a variable inside")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST[:PORT]", help="allow a destination")


def _task_lines(stream: IO[bytes]) -> Iterable[tuple[int, str | BoundaryInvalid]]:
    """Numbered non-blank lines, read at most ``MAX_LINE_BYTES`` at a time; a longer line or one
    that is not UTF-8 comes out as the error that refuses it (the rest of it is skipped)."""
    number = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):  # skip the rest of the line, bounded per read
                raw = stream.readline(MAX_LINE_BYTES)
            yield number, BoundaryInvalid(f"task line {number} is longer than {MAX_LINE_BYTES} bytes", "shorten it")
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            yield number, BoundaryInvalid(f"task line {number} is not UTF-8", "write JSON text in UTF-8")
            continue
        if line.strip():
            yield number, line


class _Output:
    """One JSON line per task on stdout, whole lines only, from any worker thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failed = False

    def write(self, document: dict[str, Any], *, failed: bool = False) -> None:
        text = json.dumps(document) + "\n"
        with self._lock:
            self.failed = self.failed or failed
            sys.stdout.write(text)
            sys.stdout.flush()


def _head(task_number: int, task_id: Any) -> dict[str, Any]:
    return {"task": task_number} | ({"id": task_id} if task_id is not None else {})


def _error(exc: ContainError) -> dict[str, Any]:
    return {"error": {"cause": exc.cause, "fix": exc.fix}}


def execute(args: argparse.Namespace) -> int:
    from contain.boundary.cache import load_run_boundary
    from contain.boundary.extend import BoundaryFlags
    from contain.runtime.pool import SandboxPool
    from contain.runtime.supervisor_build import supervisor_cache_dir

    if args.size < 1 or args.jobs < 1:
        print("contain pool: --size and --jobs must be 1 or more", file=sys.stderr)
        return 2
    resources = {
        key: value
        for key, value in (("memory_bytes", args.memory), ("cpu_s", args.cpu), ("pids_max", args.pids))
        if value is not None
    }
    if args.timeout is not None:
        resources["wall_s"] = args.timeout
    flags = BoundaryFlags(args.read, [], args.env, args.allow_host, resources)
    cache = None if os.environ.get("CONTAIN_NO_BOUNDARY_CACHE") else supervisor_cache_dir().absolute() / "boundaries"
    boundary = load_run_boundary(args.manifest, flags, cache_dir=cache).boundary
    if boundary.records:
        raise BoundaryInvalid(
            "the manifest names records: their broker capability is minted per task, and a pool starts "
            "its sandboxes before their task is known",
            "run such tasks with `contain run --broker-config ...`, one per task",
        )
    output = _Output()
    fatal: list[PoolUnavailable] = []
    with SandboxPool(boundary, backend=args.backend, size=args.size) as pool:

        def run_task(task: Task) -> None:
            if fatal:
                return
            try:
                with pool.acquire(timeout_s=max(60.0, boundary.resources.wall_s)) as sandbox:
                    result = sandbox.run(list(task.argv), stdin=task.stdin, timeout=task.timeout_s)
                    teardown = sandbox.close()
            except ContainError as exc:  # SandboxLost, a refused transfer: this task alone
                output.write(_head(task.number, task.task_id) | _error(exc), failed=True)
                if isinstance(exc, PoolUnavailable):  # no sandbox for any task: stop the batch
                    fatal.append(exc)
                return
            document = _head(task.number, task.task_id) | result.to_dict()
            document["timings"]["teardown_s"] = teardown
            document["teardown"] = sandbox.teardown_findings
            document["export"] = {path: report.to_dict() for path, report in sandbox.export_reports.items()}
            output.write(document)

        in_flight = threading.BoundedSemaphore(args.jobs * 2)  # stdin is read only as fast as tasks run
        with ThreadPoolExecutor(max_workers=args.jobs, thread_name_prefix="contain-pool-task") as workers:

            def done(_: Future[None]) -> None:
                in_flight.release()

            try:
                for number, line in _task_lines(sys.stdin.buffer):
                    if fatal:
                        break
                    try:
                        if isinstance(line, BoundaryInvalid):
                            raise line
                        task = parse_task_line(line, number)
                    except BoundaryInvalid as exc:
                        output.write(_head(number, None) | _error(exc), failed=True)
                        continue
                    in_flight.acquire()
                    workers.submit(run_task, task).add_done_callback(done)
            except KeyboardInterrupt:
                workers.shutdown(wait=False, cancel_futures=True)
                pool.close()  # kills every running task's sandbox; the workers then return
                print("contain pool: interrupted; every sandbox was killed and closed", file=sys.stderr)
                return 130
    if fatal:
        raise fatal[0]
    return 1 if output.failed else 0
