"""The raw-runtime baseline's argv and bundle change (no runtime is run here)."""

from __future__ import annotations

from contain.bench.raw_oci import _with_command, raw_argv
from contain.runtime.container.bundle import BundlePlan, RootfsEntry


def test_raw_runc_is_a_foreground_run_with_its_own_state_root() -> None:
    argv = raw_argv("runc", path="/usr/sbin/runc", state="/s", platform="ptrace", bundle="/b", name="n-1")
    assert argv == ["/usr/sbin/runc", "--root=/s", "run", "--bundle", "/b", "n-1"]


def test_raw_runsc_gets_the_flags_contain_gives_runsc() -> None:
    argv = raw_argv("runsc", path="/usr/bin/runsc", state="/s", platform="systrap", bundle="/b", name="n-2")
    assert argv == [
        "/usr/bin/runsc",
        "--root=/s",
        "--platform=systrap",
        "--network=host",
        "--oci-seccomp",
        "--host-uds=none",
        "run",
        "--bundle",
        "/b",
        "n-2",
    ]


def _bundle() -> BundlePlan:
    config = {
        "process": {"args": ["/.contain/supervisor", "--control-fd", "3"], "cwd": "/"},
        "mounts": [
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": []},
            {"destination": "/tmp", "type": "bind", "source": "/", "options": []},
        ],
    }
    return BundlePlan(config, (RootfsEntry("/dev", "dir"), RootfsEntry("/tmp", "dir")), ())


def test_only_the_process_changes_for_runc() -> None:
    bundle = _bundle()
    changed = _with_command(bundle, ["/bin/true"], runtime="runc")
    assert changed.config["process"] == {"args": ["/bin/true"], "cwd": "/"}
    assert changed.config["mounts"] == bundle.config["mounts"]
    assert changed.rootfs == bundle.rootfs
    assert bundle.config["process"]["args"][0] == "/.contain/supervisor"  # the plan itself is not mutated


def test_runsc_also_gets_host_mount_points_under_dev() -> None:
    changed = _with_command(_bundle(), ["/bin/true"], runtime="runsc")
    assert changed.rootfs[-1:] == (RootfsEntry("/dev/pts", "dir"),)
