"""The raw-runtime baseline's argv and bundle change (no runtime is run here)."""

from __future__ import annotations

from contain.bench.raw_oci import _with_command, raw_argv
from contain.runtime.backend_names import RuntimeFacts
from contain.runtime.container.bundle import BundlePlan, RootfsEntry
from contain.runtime.container.oci_runtime import GLOBAL_FLAGS


def test_raw_runc_is_a_foreground_run_with_the_backends_flags() -> None:
    runc = RuntimeFacts("runc", "/usr/sbin/runc", "runc version 1.1.5")
    argv = raw_argv(runc, state="/s", log="/l", bundle="/b", name="n-1")
    assert argv == ["/usr/sbin/runc", "--root=/s", "--log=/l", "run", "--bundle", "/b", "n-1"]


def test_raw_runsc_gets_the_flags_and_the_platform_contain_gives_runsc() -> None:
    runsc = RuntimeFacts("runsc", "/usr/bin/runsc", "runsc version 0.0~20221219.0", ("kvm", "ptrace"))
    argv = raw_argv(runsc, state="/s", log="/l", bundle="/b", name="n-2")
    expected_flags = [
        row.flag.format(state="/s", platform="ptrace", log="/l") for row in GLOBAL_FLAGS if row.runtime == "runsc"
    ]
    assert argv == ["/usr/bin/runsc", *expected_flags, "run", "--bundle", "/b", "n-2"]
    assert "--platform=ptrace" in argv and "--oci-seccomp" in argv  # the choice, and the silent-ignore guard


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


def test_only_the_process_changes() -> None:
    bundle = _bundle()
    changed = _with_command(bundle, ["/bin/true"])
    assert changed.config["process"] == {"args": ["/bin/true"], "cwd": "/"}
    assert changed.config["mounts"] == bundle.config["mounts"]
    assert (changed.rootfs, changed.files) == (bundle.rootfs, bundle.files)
    assert bundle.config["process"]["args"][0] == "/.contain/supervisor"  # the plan itself is not mutated


def test_without_root_the_baseline_is_refused_with_the_fix_before_touching_the_host(monkeypatch) -> None:
    import pytest

    from contain.bench import raw_oci
    from contain.errors import UnsupportedHost

    def no_probe(runtime: str) -> None:
        raise AssertionError("nothing may be probed or made without root")

    monkeypatch.setattr(raw_oci.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(raw_oci, "probe_runtime", no_probe)
    with pytest.raises(UnsupportedHost, match="needs root"), raw_oci.raw_oci_bundle("runc", ["/bin/true"]):
        pass
