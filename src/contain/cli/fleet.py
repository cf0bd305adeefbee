"""`contain fleet run JOBS.jsonl --address local|auto|HOST:PORT` and `contain fleet resources`.

``run`` streams one report per job as jobs finish: a live progress line on stderr (redrawn on a
terminal, a line per tenth of the batch elsewhere), then the summary table (done, failed,
cancelled, retried, per-backend p50/p90/p99) and one line per failed or retried job on stdout.
``--json`` prints one JSON object per job instead, then ``{"summary": ...}``. Ctrl-C cancels the
batch: every sandbox on every node is killed, the rest of the jobs are reported cancelled, and
the exit status is 130. Otherwise: 0 when every job is done with status 0, 1 when one is not, 125
when the batch could not start (no cluster, no Ray).

``--outputs DIR`` writes each job's outputs to ``DIR/<job id>/<sandbox path>``: DIR must not
exist yet (it is created 0700), each file is created new (O_EXCL) through directory descriptors
opened with O_NOFOLLOW, so nothing a job produced can redirect a write.

Terminal output: job ids and causes come from the jobs file and from workloads; they are printed
through ``contain.visible_text.for_terminal`` (``summary.render_failures``); ``--json`` stays exact.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contain.fleet.batch import Batch
    from contain.fleet.progress import Progress

__all__ = ["add_arguments", "execute", "write_outputs"]


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    sub = parser.add_subparsers(dest="fleet_command", metavar="SUBCOMMAND", required=True)
    run = sub.add_parser("run", help="run a JSONL batch of jobs across a Ray cluster")
    run.add_argument("jobs", help="JSONL file, one job per line (see docs/fleet.md)")
    run.add_argument("--address", default="auto", help="local (start a cluster for this run), auto, or HOST:PORT")
    run.add_argument("--nodes", type=int, default=1, help="with --address local: how many nodes (default 1)")
    run.add_argument("--slots", type=int, default=None, help="with --address local: sandboxes at once per node")
    run.add_argument("--broker-config", metavar="FILE", help="broker.yaml for manifests with records (every node)")
    run.add_argument("--batch-id", default=None, help="resume a batch: the same broker keys as its first run")
    run.add_argument("--outputs", metavar="DIR", help="write each job's outputs under DIR/<job id>/ (DIR is created)")
    run.add_argument("--json", action="store_true", help="one JSON object per job, then the summary")
    resources = sub.add_parser("resources", help="print this node's contain_backend_* resources for `ray start`")
    resources.add_argument("--slots", type=int, default=None, help="sandboxes at once per backend (default: CPUs)")


def execute(args: argparse.Namespace) -> int:
    if args.fleet_command == "resources":
        from contain.fleet.placement import gather_node_facts, plan_node_resources

        print(json.dumps(plan_node_resources(gather_node_facts(), slots=args.slots), sort_keys=True))
        return 0
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    from contain.errors import BoundaryInvalid, FileTransferError
    from contain.fleet.batch import run_batch
    from contain.fleet.identity import is_valid_batch_id
    from contain.fleet.jobs import prepare_jobs, read_job_lines
    from contain.fleet.local_cluster import LocalCluster
    from contain.fleet.progress import Progress
    from contain.fleet.ray_nodes import RayDispatcher, connect

    if args.batch_id is not None and not is_valid_batch_id(args.batch_id):
        raise BoundaryInvalid(f"--batch-id {args.batch_id!r} is not valid", "use 8-64 of letters, digits, _ . -")
    outputs_dir = Path(args.outputs) if args.outputs else None
    if outputs_dir is not None:
        try:
            os.mkdir(outputs_dir, 0o700)  # never into a directory this run did not make
        except OSError as exc:
            raise FileTransferError(
                f"cannot create --outputs {outputs_dir}: {exc.strerror}", "name a directory that does not exist yet"
            ) from exc
    items = list(prepare_jobs(read_job_lines(args.jobs), base_dir=Path(args.jobs).resolve().parent))
    cluster = None
    if args.address == "local":
        from contain.fleet.placement import gather_node_facts, plan_node_resources

        print(f"fleet: starting a local Ray cluster of {args.nodes} node(s) ...", file=sys.stderr)
        cluster = LocalCluster(nodes=args.nodes, resources=plan_node_resources(gather_node_facts(), slots=args.slots))
        cluster.start()
    try:
        connect(cluster.address if cluster is not None else args.address)
        batch = run_batch(items, dispatcher=RayDispatcher(broker_config=args.broker_config), batch_id=args.batch_id)
        print(f"fleet: batch {batch.batch_id}, {batch.total} jobs", file=sys.stderr)
        status = _stream(batch, Progress(batch.total, sys.stderr), as_json=args.json, outputs_dir=outputs_dir)
    finally:
        if cluster is not None:
            survivors = cluster.stop()
            if survivors:
                print(f"fleet: ray processes survived the stop: {survivors}", file=sys.stderr)
    return status


def _stream(batch: Batch, progress: Progress, *, as_json: bool, outputs_dir: Path | None) -> int:
    from contain.fleet.messages import JobReport
    from contain.fleet.summary import render_failures, render_summary, summarize
    from contain.visible_text import for_terminal

    began = time.monotonic()
    reports: list[JobReport] = []
    interrupted = False
    unwritten = 0
    while True:
        try:
            report = next(batch)
        except StopIteration:
            break
        except KeyboardInterrupt:
            if interrupted:
                raise
            interrupted = True
            print("\nfleet: cancelling: killing every sandbox on every node ...", file=sys.stderr)
            batch.cancel()
            continue
        reports.append(report)
        progress.update(report)
        if outputs_dir is not None and report.outputs and report.job_id is not None:
            try:
                write_outputs(outputs_dir, report.job_id, report.outputs)
            except (OSError, ValueError) as exc:  # one job's outputs; the batch goes on
                unwritten += 1
                print(f"fleet: outputs of {for_terminal(report.job_id)} not written: {exc}", file=sys.stderr)
        if as_json:
            print(json.dumps(report.to_dict(), sort_keys=True), flush=True)
    progress.close()
    for node_id, problem in sorted(batch.node_problems.items()):
        print(f"fleet: node {for_terminal(node_id)}: {for_terminal(problem)}", file=sys.stderr)
    summary = summarize(reports, elapsed_s=time.monotonic() - began)
    if as_json:
        print(json.dumps({"summary": summary.to_dict(), "batch_id": batch.batch_id}, sort_keys=True))
    else:
        sys.stdout.write(render_summary(summary))
        sys.stdout.write(render_failures(reports))
    if interrupted:
        return 130
    clean = all(r.status == "done" and r.result is not None and r.result.status == 0 for r in reports)
    return 0 if clean and not unwritten else 1


def write_outputs(root: Path, job_id: str, outputs: dict[str, bytes]) -> None:
    """Write ``outputs`` under ``root/<job_id>/`` through O_NOFOLLOW directory descriptors.

    ``job_id`` has no ``/`` (``jobs.Job`` validates it) and each path is absolute and normalised
    (no ``..``), so each file lands under ``root``; every component is opened or created with
    O_NOFOLLOW and files with O_EXCL.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    root_fd = os.open(root, flags)
    try:
        for path, data in outputs.items():
            parts = [job_id, *[p for p in path.split("/") if p]]
            fd = os.dup(root_fd)
            try:
                for part in parts[:-1]:
                    if part in (".", ".."):
                        raise ValueError(f"output path {path!r} is not normalised")
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o700, dir_fd=fd)
                    child = os.open(part, flags, dir_fd=fd)
                    os.close(fd)
                    fd = child
                out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                              dir_fd=fd)
                with os.fdopen(out, "wb") as handle:
                    handle.write(data)
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
