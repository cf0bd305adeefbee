"""MicroVM start-up: restore from a template vs cold boot, /bin/true in a running VM, VMM memory.

Run as root on a host with QEMU (the guest is built by scripts/bootstrap.sh):

    .venv/bin/python benchmarks/microvm_snapshot_bench.py --restores 7 --colds 3 --trues 20

What each figure is (medians; every sample is printed with --verbose):

- restore_to_first_exec_s: ``Sandbox.start()`` through the warm start (host ids, cgroup, QEMU
  started with ``-incoming``, RESEED, IDENTITY, HELLO, the warm-up) plus ``run(["/bin/true"])``, i.e. what a
  task waits for when it starts a restored VM itself; the template exists already (built before
  the first sample, not counted);
- restore_s: the warm start's own part (QEMU spawn to the agent's READY);
- warm_up_s: its warm-up ``/bin/true`` (warm_start.py step 6), inside restore_to_first_exec_s;
- cold_to_first_exec_s: the same for a cold boot (``backend="microvm"``);
- true_in_running_vm_s: ``run(["/bin/true"])`` in a VM that already ran one command;
- vmm_rss_kib / vmm_pss_kib: QEMU's /proc/<pid>/smaps_rollup one second after its first command,
  restored and cold.

Benchmarks report, they do not assert (tests/README.md). The figures depend on the host's load:
the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from contain.boundary.model import Boundary
from contain.boundary.plain import plain_boundary
from contain.runtime.microvm.backend import MicroVMBackend
from contain.runtime.microvm.warm_start import MicroVMWarmStart
from contain.runtime.pool import WarmBackend
from contain.runtime.sandbox import Sandbox


def _memory_kib(pid: int) -> tuple[int, int]:
    rss = pss = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    return rss, pss


def _one(make: object, samples: dict[str, list[float]], prefix: str, *, warm: MicroVMWarmStart | None) -> None:
    began = time.perf_counter()
    sandbox = make()  # type: ignore[operator]
    sandbox.start()
    try:
        result = sandbox.run(["/bin/true"])
        assert result.exit_code == 0, result
        samples[f"{prefix}_to_first_exec_s"].append(time.perf_counter() - began)
        if warm is not None:
            samples["restore_s"].append(warm.last_restore_s)
            samples["warm_up_s"].append(warm.last_warm_up_s)
        time.sleep(1.0)  # idle, then measure the VMM
        rss, pss = _memory_kib(sandbox.supervisor_pid)
        samples[f"{prefix}_vmm_rss_kib"].append(rss)
        samples[f"{prefix}_vmm_pss_kib"].append(pss)
    finally:
        sandbox.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--restores", type=int, default=7)
    parser.add_argument("--colds", type=int, default=3)
    parser.add_argument("--trues", type=int, default=20)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    boundary = plain_boundary(Boundary())
    samples: dict[str, list[float]] = {
        k: []
        for k in (
            "restore_to_first_exec_s",
            "restore_s",
            "warm_up_s",
            "cold_to_first_exec_s",
            "true_in_running_vm_s",
            "restore_vmm_rss_kib",
            "restore_vmm_pss_kib",
            "cold_vmm_rss_kib",
            "cold_vmm_pss_kib",
        )
    }
    backend = MicroVMBackend(accel=boundary.runtime.microvm.accel)
    warm = MicroVMWarmStart(backend)
    try:
        template = Sandbox(boundary, backend=WarmBackend(backend, warm))  # builds the template if missing
        template.start()
        layers = template.layers
        try:
            template.run(["/bin/true"])
            for _ in range(args.trues):
                began = time.perf_counter()
                template.run(["/bin/true"])
                samples["true_in_running_vm_s"].append(time.perf_counter() - began)
        finally:
            template.close()
        for _ in range(args.restores):
            _one(lambda: Sandbox(boundary, backend=WarmBackend(backend, warm)), samples, "restore", warm=warm)
    finally:
        warm.close()
    for _ in range(args.colds):
        _one(lambda: Sandbox(boundary, backend="microvm"), samples, "cold", warm=None)
    medians = {k: round(statistics.median(v), 4) for k, v in samples.items() if v}
    medians["cold_over_restore"] = round(medians["cold_to_first_exec_s"] / medians["restore_to_first_exec_s"], 1)
    report = {
        "medians": medians,
        "counts": {k: len(v) for k, v in samples.items()},
        "accelerator": layers.get("accelerator", ""),
        "guest": layers.get("guest", ""),
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    if args.verbose:
        report["samples"] = samples
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
