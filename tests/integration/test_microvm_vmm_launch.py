"""The VMM launch wrapper for real: QEMU's stand-in dies with the process that started it.

Runs ``plan_vmm_launch``'s argv (setpriv, unshare --net, the cgroup join script) around a
``sleep`` in a new session, kills its launcher with SIGKILL, and waits (bounded) for it to go.
Needs root (unshare --net) and util-linux's setpriv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from contain.runtime.microvm.vmm import SETPRIV, plan_vmm_launch

pytestmark = [pytest.mark.needs_root]


def test_the_vmm_is_killed_when_the_thread_that_started_it_dies(tmp_path):
    # LF-08 on microvm: QEMU, in a session of its own, outlived a SIGKILLed launcher
    if shutil.which(SETPRIV) is None:
        pytest.skip(f"{SETPRIV} is absent (util-linux)")
    pidfile = tmp_path / "pid"
    argv = plan_vmm_launch(["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 30"], cgroup_procs=[])
    launcher = subprocess.Popen(
        [
            "python3",
            "-c",
            "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True); "
            "import time; time.sleep(30)",
            *argv,
        ]
    )
    for _ in range(200):  # bounded: up to 10 s for the child to write its pid
        if pidfile.exists() and pidfile.read_text().strip():
            break
        time.sleep(0.05)
    vmm = int(pidfile.read_text())
    launcher.kill()
    launcher.wait()
    for _ in range(100):
        try:
            os.kill(vmm, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(vmm, 9)
        raise AssertionError("the VMM outlived the process that started it")
