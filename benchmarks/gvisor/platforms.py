"""Which runsc platforms start a trivial container here, and how long `runsc run` takes.

Runs /usr/bin/true under --platform=ptrace and --platform=kvm (20 s bound each), 3 times each.
Run as root: python3 platforms.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import _bundle as b


def main() -> int:
    print(
        "runsc:",
        subprocess.run(
            [b.RUNSC, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.splitlines()[0],
    )
    print("/dev/kvm present:", os.path.exists("/dev/kvm"))
    for platform in ("ptrace", "kvm"):
        times = []
        for _ in range(3):
            root = tempfile.mkdtemp(prefix="gvisor-root-")
            cid = b.new_id()
            bundle = b.make_bundle(["/usr/bin/true"])
            t0 = time.monotonic()
            try:
                r = subprocess.run(
                    [
                        b.RUNSC,
                        f"--root={root}",
                        "--network=none",
                        f"--platform={platform}",
                        "run",
                        "--bundle",
                        bundle,
                        cid,
                    ],
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=20,
                    check=False,
                )
                times.append(f"rc={r.returncode} {time.monotonic() - t0:.2f}s")
            except subprocess.TimeoutExpired:
                times.append("no exit within 20s")
            finally:
                b.cleanup(root, cid, bundle)
                shutil.rmtree(root, ignore_errors=True)
            if times[-1] == "no exit within 20s":
                break
        b.show(f"--platform={platform} runs /usr/bin/true", all(t.startswith("rc=0") for t in times), "; ".join(times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
