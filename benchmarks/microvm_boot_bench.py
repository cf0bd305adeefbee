"""MicroVM cold boot, stage by stage: kernel command-line variants A/B'd against the planned one.

Run as root on a host with QEMU (the guest is built by scripts/bootstrap.sh):

    .venv/bin/python benchmarks/microvm_boot_bench.py --rounds 6 --variant 'iof:+init_on_free=1'

Each round boots one VM per variant, in turn (so host load falls on every variant alike), with
the sandbox's own ``plan_vm`` argv for the default boundary, the accelerator the backend would
choose, and no agent socket: the guest runs /init to its ``READY_MARKER`` (every module loaded,
every mount made, the workload root read-only) and is then killed. Per boot it reports:

- ``ready_s``: QEMU spawn to the marker on the console, wall clock;
- ``cpu_s``: the CPU time QEMU had used by then (user + system). Under TCG this is the work the
  boot costs; on a host shared with others it moves far less than ``ready_s`` does.

What it leaves out: the agent's start and HELLO, and the first command (microvm_snapshot_bench.py
measures the whole cold start to the first exec).

A variant is ``label:+word`` (add a kernel word), ``label:-word`` (drop every word starting with
it), several joined by ``,``. Benchmarks report, they do not assert (tests/README.md); the load
average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import replace

from contain.boundary.model import Boundary
from contain.boundary.plain import plain_boundary
from contain.runtime.microvm.backend import MicroVMBackend, plan_vm
from contain.runtime.microvm.guest_build import ensure_guest_image
from contain.runtime.microvm.initramfs import READY_MARKER
from contain.runtime.microvm.vmm import VmProcess, detect_vmm_facts

BOOT_TIMEOUT_S = 90.0


def _qemu_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` or, when it is a launcher that waits for QEMU, of its QEMU child."""
    pids = [pid]
    while pids:
        current = pids.pop()
        try:
            with open(f"/proc/{current}/comm") as f:
                name = f.read().strip()
            if name.startswith("qemu"):
                with open(f"/proc/{current}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            with open(f"/proc/{current}/task/{current}/children") as f:
                pids += [int(child) for child in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return float("nan")


def _variant_words(base: tuple[str, ...], spec: str) -> tuple[str, ...]:
    words = list(base)
    for change in filter(None, spec.split(",")):
        if change.startswith("+"):
            words.append(change[1:])
        elif change.startswith("-"):
            words = [w for w in words if not w.startswith(change[1:])]
        else:
            raise SystemExit(f"a variant change starts with + or -, not {change!r}")
    return tuple(words)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variant", action="append", default=[], help="label:+word,-word (repeatable)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    variants = [("planned", "")] + [(v.partition(":")[0], v.partition(":")[2]) for v in args.variant]
    boundary = plain_boundary(Boundary())
    image = ensure_guest_image()
    facts = detect_vmm_facts()
    choice = MicroVMBackend(accel=boundary.runtime.microvm.accel)._choose_accel(image, facts)
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in variants}
    for _ in range(args.rounds):
        for label, spec in variants:
            plan, _ = plan_vm(boundary, image=image, choice=choice, facts=facts, read_binds=(), agent_fd=None)
            vm = VmProcess(replace(plan, cmdline=_variant_words(plan.cmdline, spec)))
            began = time.monotonic()
            vm.start()
            try:
                if vm.serial.wait_for(READY_MARKER, timeout_s=BOOT_TIMEOUT_S):
                    samples[label].append((time.monotonic() - began, _qemu_cpu_s(vm.pid)))
            finally:
                vm.close()
    report: dict[str, object] = {
        label: {
            "ready_s": round(statistics.median(s[0] for s in got), 3),
            "cpu_s": round(statistics.median(s[1] for s in got), 3),
            "n": len(got),
        }
        for label, got in samples.items()
        if got
    }
    report["accelerator"] = choice.reason
    report["load_average"] = os.getloadavg()
    if args.verbose:
        report["samples"] = samples
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
