"""`contain doctor [--json] [--build-supervisor | --build-guest-agent | --build-guest]`: what this host offers
and how to fix each gap.

Exit status: 0 when the process backend works on this host, 1 when it does not. With --json,
stdout is exactly one JSON object. ``--build-supervisor`` only builds (or finds) the sandbox supervisor,
prints what it did and exits 0 on success, 1 on failure; ``scripts/bootstrap.sh`` uses it.
``--build-guest-agent`` does the same for the microVM guest agent (contain.runtime.microvm.agent_build).
``--build-guest`` does the same for the microVM guest (kernel, initramfs, userland image:
``runtime/microvm/guest_build.py``), printing one line per piece (built now, or found cached).

Terminal output: details quote what host tools answered (error text of bwrap, a compiler, the
kernel), so ``render_text`` and the supervisor lines here pass them through
``contain.visible_text.for_terminal`` (one line each). --json stays exact.
"""

from __future__ import annotations

import argparse
import json
import sys

from contain.visible_text import for_terminal


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument(
        "--build-supervisor",
        action="store_true",
        help="build the in-sandbox supervisor if needed, say what was done, and exit",
    )
    parser.add_argument(
        "--build-guest-agent",
        action="store_true",
        help="build the microVM guest agent if needed, say what was done, and exit",
    )
    parser.add_argument(
        "--build-guest",
        action="store_true",
        help="build the microVM guest (kernel, initramfs, userland) if needed, say what was done, and exit",
    )


def execute(args: argparse.Namespace) -> int:
    from contain.host.doctor import build_report, render_json, render_text
    from contain.host.facts import detect_host
    from contain.host.observe import observe_host

    if args.build_supervisor:
        return _build_supervisor(as_json=args.json)
    if args.build_guest_agent:
        return _build_guest_agent(as_json=args.json)
    if args.build_guest:
        return _build_guest()
    facts = detect_host()
    report = build_report(facts, observe_host(facts))
    sys.stdout.write(render_json(report) if args.json else render_text(report))  # render_text renders each field
    return report.exit_code


def _build_supervisor(*, as_json: bool) -> int:
    from contain.host.observe import observe_supervisor

    supervisor = observe_supervisor(build=True)
    if supervisor.path is None:
        action, message = "failed", f"supervisor: not built: {for_terminal(supervisor.error)}"
    elif supervisor.built_now:
        action, message = "built", f"supervisor: built {for_terminal(supervisor.path)} in {supervisor.seconds:.1f} s"
    else:
        action, message = "found", f"supervisor: already built at {for_terminal(supervisor.path)}"
    if as_json:
        document = {
            "action": action,
            "path": supervisor.path,
            "error": supervisor.error,
            "fix": supervisor.fix,
            "seconds": round(supervisor.seconds, 3),
        }
        sys.stdout.write(json.dumps(document) + "\n")
    else:
        print(message)
        if supervisor.path is None and supervisor.fix:
            print(f"  fix: {for_terminal(supervisor.fix)}")
    return 0 if supervisor.path is not None else 1


def _build_guest_agent(*, as_json: bool) -> int:
    from contain.errors import ContainError
    from contain.runtime.microvm.agent_build import ensure_guest_agent_binary

    try:
        build = ensure_guest_agent_binary()
    except ContainError as exc:
        document = {"action": "failed", "path": None, "error": exc.cause, "fix": exc.fix}
        message = f"guest agent: not built: {for_terminal(exc.cause)}\n  fix: {for_terminal(exc.fix)}"
        code = 1
    else:
        action = "built" if build.built_now else "found"
        document = {"action": action, "path": str(build.path), "error": None, "fix": None}
        message = f"guest agent: {action} {for_terminal(str(build.path))}"
        code = 0
    sys.stdout.write(json.dumps(document) + "\n" if as_json else message + "\n")
    return code
def _build_guest() -> int:
    import time

    from contain.errors import ContainError
    from contain.runtime.microvm.guest_build import ensure_guest_image

    began = time.monotonic()
    try:
        image = ensure_guest_image()
    except ContainError as exc:
        print(f"microvm guest: not built: {for_terminal(exc.cause)}")
        if exc.fix:
            print(f"  fix: {for_terminal(exc.fix)}")
        return 1
    print(f"microvm guest: kernel {image.kernel.release} in {for_terminal(str(image.kernel.directory))}")
    agent = "with the guest agent" if image.initramfs.has_agent else "WITHOUT a guest agent (probe and shell only)"
    print(f"microvm guest: initramfs {for_terminal(str(image.initramfs.path))} ({agent})")
    print(f"microvm guest: userland {for_terminal(str(image.userland.path))}")
    print(f"microvm guest: ready in {time.monotonic() - began:.1f} s (cached pieces are reused)")
    return 0
