"""`contain microvm snapshot build|show|clear`: the microVM templates pools restore from.

- ``build [--manifest M]``: make sure the template for the manifest's boundary (default: scratch
  only) exists, by starting one sandbox through the warm start exactly as a pool would (the
  template is booted and saved when missing), running ``/bin/true`` in it and closing it. Prints
  the template key, whether it was built or found, and the restore and first-exec times.
- ``show [--json]``: the cached templates (key, size, guest RAM, vCPUs, accelerator, when built).
- ``clear``: remove every cached template. A pool that is running keeps restoring from the
  snapshot it holds open; the next pool builds a new one.

Terminal output: what is printed is contain's own text (keys, numbers, the accelerator reason
contain wrote) and, for ``show``, the sidecar's values, which contain wrote too; a paths or
manifest value goes through ``for_terminal``. ``--json`` is exact.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from contain.visible_text import for_terminal

__all__ = ["add_arguments", "execute"]


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    sub = parser.add_subparsers(dest="microvm_command", metavar="WHAT", required=True)
    snapshot = sub.add_parser("snapshot", help="build, show or clear the templates microVM pools restore from")
    actions = snapshot.add_subparsers(dest="snapshot_action", metavar="ACTION", required=True)
    build = actions.add_parser("build", help="build (or find) the template for a boundary and restore it once")
    build.add_argument("--manifest", "-m", help="boundary manifest (default: scratch only, no network)")
    build.add_argument("--json", action="store_true", help="print one JSON object")
    show = actions.add_parser("show", help="list the cached templates")
    show.add_argument("--json", action="store_true", help="print a JSON array")
    actions.add_parser("clear", help="remove every cached template")


def execute(args: argparse.Namespace) -> int:
    action = args.snapshot_action
    if action == "build":
        return _build(args)
    from contain.runtime.microvm.snapshot import clear_snapshots, list_snapshots, open_snapshot_dir

    dir_fd = open_snapshot_dir()
    try:
        if action == "clear":
            removed = clear_snapshots(dir_fd)
            print(f"removed {len(removed)} microVM template(s)")
            return 0
        entries = list_snapshots(dir_fd)
    finally:
        os.close(dir_fd)
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    if not entries:
        print("no microVM templates cached")
    for entry in entries:
        print(_show_line(entry))
    return 0


def _show_line(entry: dict[str, Any]) -> str:
    built = entry.get("built_at")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(built))) if built is not None else "?"
    size = int(entry.get("bytes", 0)) / 1024**2
    return for_terminal(
        f"{entry['key']}  {size:.1f} MiB  {entry.get('memory_mib', '?')} MiB RAM  {entry.get('vcpus', '?')} vCPU  "
        f"{entry.get('accel', '?')}  built {when} UTC "
        f"(boot {entry.get('boot_s', '?')} s, save {entry.get('save_s', '?')} s)"
    )


def _build(args: argparse.Namespace) -> int:
    from contain.boundary.load import load_boundary
    from contain.boundary.model import Boundary
    from contain.boundary.plain import plain_boundary
    from contain.runtime.microvm.backend import MicroVMBackend
    from contain.runtime.microvm.warm_start import MicroVMWarmStart
    from contain.runtime.pool import WarmBackend
    from contain.runtime.sandbox import Sandbox

    boundary = plain_boundary(load_boundary(args.manifest) if args.manifest else Boundary())
    backend = MicroVMBackend(accel=boundary.runtime.microvm.accel)
    warm = MicroVMWarmStart(backend)  # what backend.open_warm_start() gives a pool
    try:
        began = time.perf_counter()
        with Sandbox(boundary, backend=WarmBackend(backend, warm)) as sandbox:
            started = time.perf_counter()
            result = sandbox.run(["/bin/true"])
            ran = time.perf_counter()
            layers = sandbox.layers
    finally:
        warm.close()
    report = {
        "warm_start": layers.get("warm start", ""),
        "accelerator": layers.get("accelerator", ""),
        "restore_s": round(warm.last_restore_s, 3),
        "start_s": round(started - began, 3),
        "first_exec_s": round(ran - started, 3),
        "exit_code": result.exit_code,
    }
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(for_terminal(f"{key}: {value}"))
    return 0 if result.exit_code == 0 else 1
