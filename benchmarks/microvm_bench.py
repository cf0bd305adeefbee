"""Measure the microvm backend: cold start to first exec, guest up, VMM RSS idle, /bin/true in a running VM.

Usage (as root, from the repo): .venv/bin/python benchmarks/microvm_bench.py RUNS
"""
import os, statistics, sys, time
from contain.runtime.sandbox import Sandbox
cold, up, rss, true_ms = [], [], [], []
for i in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    sb = Sandbox(backend="microvm"); sb.start()
    r = sb.run(["/bin/true"]); t1 = time.perf_counter()
    cold.append(t1 - t0)
    up.append(float(sb.layers["guest"].rsplit("up in ", 1)[1].split()[0]))
    pid = sb.supervisor_pid
    rss.append(int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1]) // 1024)
    for _ in range(10):
        a = time.perf_counter(); sb.run(["/bin/true"]); true_ms.append((time.perf_counter() - a) * 1000)
    sb.close()
print("load", os.getloadavg())
print("cold start to first exec (s): median %.2f min %.2f" % (statistics.median(cold), min(cold)), [round(x, 2) for x in cold])
print("guest up, QEMU spawn to agent READY (s): median %.2f min %.2f" % (statistics.median(up), min(up)), up)
print("VMM RSS idle after boot (MiB): median %d" % statistics.median(rss), rss)
print("/bin/true in a running VM (ms): median %.0f min %.0f" % (statistics.median(true_ms), min(true_ms)))
