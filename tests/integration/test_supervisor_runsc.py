"""contain's real supervisor as pid 1 under a real ``runsc`` (gVisor), in the bundle contain plans.

The bundle comes from ``plan_oci_bundle`` for a default boundary and ``runtime="runsc"`` (its
``RUNTIME_DIFFERENCES``), as in test_oci_bundle_runc.py (the apply step is this test's; the
container backend has its own). runsc has no
``--preserve-fds``, so the supervisor's control socket is donated as the container's stdin and
named ``--control-fd 0`` (docs/gvisor-notes.md, "Control channel"). The supervisor gets the
``--accept-difference`` arguments ``kernel_differences`` gives for gVisor, and no Landlock (the
sentry has none).

Regression for issue 13 item 3: the supervisor used to reach READY and then fail every RUN with
``SPAWN_FAILED stage=setup errno=22`` (close_range(first, ~0U)) and, past that,
``stage=caps errno=22`` (PR_SET_SECUREBITS).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from contain.boundary import Boundary
from contain.boundary.plain import plain_boundary
from contain.host.facts import detect_host
from contain.runtime.backend import BackendPlan
from contain.runtime.bwrap import ETC_PASSTHROUGH, default_scratch_paths, generated_etc_files
from contain.runtime.container.bundle import BundleInputs, plan_oci_bundle
from contain.runtime.container.host_setup import disk_budget_mounted, write_bundle
from contain.runtime.etc_tree import ensure_etc_tree
from contain.runtime.host_ids import lease_host_ids
from contain.runtime.kernel_differences import reported_differences, supervisor_difference_args
from contain.runtime.paths import gather_path_facts
from contain.runtime.plan import plan_layers
from contain.runtime.supervisor_build import ensure_supervisor_binary
from contain.runtime.supervisor_channel import Exited, Ready, Started, SupervisorChannel

pytestmark = [pytest.mark.needs_root]

RUNSC = shutil.which("runsc") or "/usr/bin/runsc"
RLIMIT_NAMES = ("CPU", "NPROC", "FSIZE", "NOFILE", "CORE", "DATA")
TIMEOUT_S = 60.0
# `ls /proc/self/fd` fails in gVisor 20221219 (EINVAL from ls's statx); Python's listdir works.
WHO_AND_WHAT = (
    "import json, os; caps = [l.split(':') for l in open('/proc/self/status') if l.startswith('Cap')]; "
    "print(json.dumps([os.getuid(), sorted(os.listdir('/proc/self/fd')), {k: v.strip() for k, v in caps}]))"
)


@dataclass
class RunscSandbox:
    proc: subprocess.Popen[bytes]
    channel: SupervisorChannel
    ready: Ready
    plan: BackendPlan
    log: Path


@contextlib.contextmanager
def runsc_sandbox(host_tmp: Path, supervisor_args: tuple[str, ...]) -> Iterator[RunscSandbox]:
    """Plan and write the bundle, ``runsc run`` it with the control socket as stdin; force-delete after."""
    if not os.access(RUNSC, os.X_OK):
        pytest.skip(f"{RUNSC} is not installed (apt-get install runsc)")
    facts = detect_host()
    boundary = plain_boundary(Boundary())
    ids, root_ids = lease_host_ids(lock_dir=host_tmp / "ids"), lease_host_ids(lock_dir=host_tmp / "ids")
    plan = BackendPlan(
        boundary=boundary,
        facts=facts,
        layers=plan_layers(boundary, facts, egress_available=False, backend="process"),
        host_ids=(ids.uid, ids.uid),
        paths=gather_path_facts(boundary, sandbox_host_uid=ids.uid, sandbox_host_gid=ids.uid),
        bind_sources={},
        attachments=(),
        resolv_conf="",
        cgroup=None,
    )
    supervisor = ensure_supervisor_binary()
    etc = generated_etc_files(home=default_scratch_paths(boundary)[0], resolv_conf="")
    bundle_dir, state, log = host_tmp / "bundle", host_tmp / "state", host_tmp / "runsc.log"
    bundle_dir.mkdir(mode=0o755)
    name = f"contain-test-{os.getpid()}-{ids.uid}"
    with disk_budget_mounted(plan.boundary, host_tmp / "disk", plan.host_ids) as disk_root:
        inputs = BundleInputs(
            bundle_dir=str(bundle_dir),
            name=name,
            loader_links={p: os.readlink(p) for p in ("/bin", "/sbin", "/lib", "/lib64") if os.path.islink(p)},
            loader_dirs=(),
            etc_tree=ensure_etc_tree(supervisor.parent, etc, (e.path for e in ETC_PASSTHROUGH)),
            supervisor_host_path=str(supervisor),
            supervisor_args=("--control-fd", "0", *supervisor_args),
            disk_root=disk_root,
            root_host_ids=(root_ids.uid, root_ids.uid),
            host_hard_limits={n: resource.getrlimit(getattr(resource, f"RLIMIT_{n}"))[1] for n in RLIMIT_NAMES},
            runtime="runsc",  # bundle.RUNTIME_DIFFERENCES: no user namespace, /dev mount points, pids
        )
        write_bundle(plan_oci_bundle(plan, inputs), bundle_dir)  # the backend's own apply step
        host, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        runsc = [RUNSC, f"--root={state}", "--network=none", "--oci-seccomp"]
        with peer, open(log, "wb") as log_file:
            proc = subprocess.Popen(
                [*runsc, "run", "--bundle", str(bundle_dir), name], stdin=peer, stdout=log_file, stderr=log_file
            )
        channel = SupervisorChannel(host)
        try:
            try:
                ready = channel.read_ready(TIMEOUT_S)
            except Exception:
                print("runsc and supervisor stderr:", log.read_text()[-3000:])  # shown when the test fails
                raise
            yield RunscSandbox(proc, channel, ready, plan, log)
        finally:
            channel.close()
            try:
                proc.wait(TIMEOUT_S)
            finally:
                subprocess.run([*runsc, "delete", "--force", name], capture_output=True, timeout=TIMEOUT_S, check=False)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(TIMEOUT_S)
                ids.release()
                root_ids.release()


def _run(sb: RunscSandbox, argv: list[str]) -> tuple[Started | object, Exited | None, str, str]:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open("/dev/null", os.O_RDONLY)
    try:
        reply = sb.channel.start(argv, {"PATH": "/usr/bin:/bin"}, "/tmp", (), (null, out_w, err_w))
    finally:
        for fd in (null, out_w, err_w):
            os.close(fd)
    exited = sb.channel.wait_exited(TIMEOUT_S) if isinstance(reply, Started) else None
    with open(out_r, "rb") as out, open(err_r, "rb") as err:
        return reply, exited, out.read().decode(), err.read().decode()


def test_the_supervisor_under_runsc_reaches_ready_and_runs_commands(host_tmp: Path) -> None:
    with runsc_sandbox(host_tmp, supervisor_difference_args(kernel="gvisor")) as sb:
        assert sb.ready == Ready(pid=1, landlock="off", landlock_abi=0, securebits="unsupported")
        assert [row.name for row in reported_differences(sb.ready)] == ["no-securebits"]
        reply, exited, out, err = _run(sb, ["/bin/echo", "hi"])
        assert isinstance(reply, Started), (reply, sb.log.read_text()[-2000:])
        assert exited is not None and (exited.exit_code, out) == (0, "hi\n"), err
        _reply, exited, out, err = _run(sb, ["python3", "-c", WHO_AND_WHAT])
        assert exited is not None and exited.exit_code == 0, err
        uid, fds, caps = json.loads(out)
        # no user namespace under runsc (bundle.RUNTIME_DIFFERENCES): the leased host id, never root
        assert uid == sb.plan.host_ids[0] and uid != 0
        assert fds == ["0", "1", "2", "3"]  # stdio, and 3: listdir's own fd (the lowest free one)
        assert {"CapInh", "CapPrm", "CapEff", "CapBnd"} <= caps.keys()  # gVisor 2022 prints no CapAmb
        assert set(caps.values()) == {"0000000000000000"}


def test_under_runsc_without_the_accepted_difference_the_supervisor_refuses_to_start(host_tmp: Path) -> None:
    """Fail closed: gVisor has no securebits, and only a host that accepts that may run there."""
    from contain.errors import SandboxStartError

    with pytest.raises(SandboxStartError) as refused, runsc_sandbox(host_tmp, ()):
        pass
    assert "PR_GET_SECUREBITS" in str(refused.value)
