"""`contain doctor` on this real host: structure, the layers this host has, speed, the KVM
verdict, the guest-check timeout, and `--build-supervisor`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contain.host.facts import detect_host
from contain.host.kvm import KvmGuestResult, KvmStatus, check_kvm_guest, run_checker

CONTAIN = str(Path(sys.executable).with_name("contain"))
# kvm-guest judges a real boot of the microVM guest kernel (runtime/microvm/accel.py).
KVM_VERDICTS = (
    "the guest kernel boots under KVM:",
    "the guest kernel does not boot under KVM:",
    "not tried:",
)


def _doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CONTAIN, "doctor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


@pytest.fixture(scope="module")
def doctor_json() -> tuple[dict[str, object], int, float]:
    started = time.monotonic()
    done = _doctor("--json")
    elapsed = time.monotonic() - started
    assert done.stdout.count("\n") == 1, done.stdout  # exactly one JSON object
    return json.loads(done.stdout), done.returncode, elapsed


def test_json_report_has_checks_verdicts_and_a_matching_exit_code(doctor_json):
    report, code, _ = doctor_json
    assert set(report) == {"checks", "verdicts", "runtimes", "process_backend", "exit_code"}
    for row in [*report["checks"], *report["verdicts"]]:
        assert set(row) == {"name", "status", "detail", "fix"}
        assert row["status"] in ("ok", "warn", "fail")
        if row["status"] != "ok" and not row["name"].endswith("backend"):
            assert row["fix"], row
    assert [v["name"] for v in report["verdicts"]] == [
        "process backend",
        "landlock",
        "cgroups",
        "microvm backend",
        "container:runc",
        "container:runsc",
    ]
    assert report["exit_code"] == code
    assert code == (0 if report["process_backend"] != "fail" else 1)


def test_this_host_has_bwrap_userns_seccomp_and_landlock(doctor_json):
    facts = detect_host()
    if facts.bwrap_path is None:
        pytest.skip("bubblewrap is not installed")
    if not facts.user_namespaces:
        pytest.skip("user namespaces are disabled on this kernel")
    if facts.landlock_abi == 0:
        pytest.skip("the kernel has no Landlock")
    report, _, _ = doctor_json
    checks = {c["name"]: c for c in report["checks"]}
    for name in ("bwrap", "user-namespaces", "seccomp", "libseccomp", "landlock"):
        assert checks[name]["status"] == "ok", checks[name]
    assert checks["landlock"]["detail"] == f"ABI {facts.landlock_abi}"


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_each_oci_runtime_verdict_matches_what_the_binary_says_on_this_host(doctor_json, runtime):
    report, _, _ = doctor_json
    found = next(r for r in report["runtimes"] if r["name"] == f"container:{runtime}")
    verdict = next(v for v in report["verdicts"] if v["name"] == f"container:{runtime}")
    assert (verdict["status"], verdict["detail"], verdict["fix"]) == (found["status"], found["detail"], found["fix"])
    if found["path"] is None:
        assert found["status"] in ("warn", "fail") and found["fix"], found
        pytest.skip(f"{runtime} is not installed or unusable here: {found['detail']}")
    version = subprocess.run([found["path"], "--version"], capture_output=True, text=True, check=True)
    assert found["version"] == version.stdout.splitlines()[0].strip()
    if runtime == "runsc":
        listed = subprocess.run([found["path"], "help", "platforms"], capture_output=True, text=True, check=True)
        assert found["platforms"] == sorted(set(listed.stdout.split()))  # runsc lists them in Go map order
        assert found["platform"] in found["platforms"] and found["platform"] != "kvm"
    assert found["missing_flags"] == []
    facts = detect_host()
    if facts.is_root and facts.user_namespaces:  # this host: what the container backend needs
        assert found["status"] == "ok", found


def test_kvm_guest_verdict_is_one_of_three_and_ok_only_for_a_real_boot(doctor_json):
    if not os.path.exists("/dev/kvm"):
        pytest.skip("no /dev/kvm on this host")
    report, _, _ = doctor_json
    guest = next(c for c in report["checks"] if c["name"] == "kvm-guest")
    assert guest["detail"].startswith(KVM_VERDICTS), guest
    assert (guest["status"] == "ok") == guest["detail"].startswith(KVM_VERDICTS[0]), guest


def test_doctor_stays_quick(doctor_json):
    _, _, elapsed = doctor_json
    assert elapsed < 8.0  # target ~1 s; the KVM check alone may take its 3 s timeout


def test_text_report_ends_with_the_result_line():
    done = _doctor()
    assert done.stdout.startswith("host\n")
    last = done.stdout.splitlines()[-1]
    assert last == (
        f"result: the process backend {'works' if done.returncode == 0 else 'does NOT work'} "
        f"on this host (exit {done.returncode})"
    )


def test_kvm_check_direct_matches_one_of_three():
    # The real-mode test guests (host/kvm.py), now only quoted beside the real boot's verdict.
    result = check_kvm_guest()
    assert result.verdict.startswith(("runs a guest", "hangs (timed out after", "unavailable:"))


def test_kvm_check_of_a_non_kvm_device_is_unavailable_with_the_errno():
    result = check_kvm_guest(device="/dev/null")
    assert result == KvmGuestResult(KvmStatus.UNAVAILABLE, "ENOTTY (Inappropriate ioctl for device)")


def test_a_checker_that_never_finishes_is_killed_and_reported_as_hanging():
    started = time.monotonic()
    result = run_checker([sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=0.3)
    assert time.monotonic() - started < 3.0
    assert result.status is KvmStatus.HANGS
    assert result.verdict == ("hangs (timed out after 0.3 s): use software emulation (QEMU -accel tcg)")


def test_build_supervisor_builds_once_then_says_already_built(tmp_path):
    env = {**os.environ, "CONTAIN_CACHE_DIR": str(tmp_path / "cache")}
    first = _doctor("--build-supervisor", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.startswith(f"supervisor: built {tmp_path}/cache/contain-supervisor-")
    started = time.monotonic()
    second = _doctor("--build-supervisor", "--json", env=env)
    assert second.returncode == 0
    document = json.loads(second.stdout)
    assert document["action"] == "found"
    assert document["path"].startswith(f"{tmp_path}/cache/contain-supervisor-")
    assert time.monotonic() - started < 3.0
    report = json.loads(_doctor("--json", env=env).stdout)
    supervisor = next(c for c in report["checks"] if c["name"] == "supervisor")
    assert supervisor == {"name": "supervisor", "status": "ok", "detail": document["path"], "fix": ""}
