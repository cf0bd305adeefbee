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
    # The VMM drops to an unprivileged uid, which clears a parent-death signal set before it
    # (prctl(2)): the launch must arm it again after the drop. The stand-in prints its pid.
    argv = plan_vmm_launch(["/bin/sh", "-c", "echo $$; exec sleep 30"], cgroup_procs=[], run_as=(65534, 65534))
    launcher = subprocess.Popen(
        [
            "python3",
            "-c",
            "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True); "
            "import time; time.sleep(30)",
            *argv,
        ],
        stdout=subprocess.PIPE,
    )
    assert launcher.stdout is not None
    vmm = int(launcher.stdout.readline())  # bounded by the stand-in's own 30 s
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
