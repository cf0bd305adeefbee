"""Pure judges of the PR/FD cases fire on planted readings and stay quiet on a clean one."""

from __future__ import annotations

from contain.probe.cases_proc import (
    ALLOWED_ENV_KEYS,
    EXPECTED_POSTURE,
    _fd_findings,
    _kernel_leaks,
    _posture_mismatches,
)

HOST_NS = {n: f"{n}:[1]" for n in ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")}
ZERO = "0000000000000000"


def _posture(**overrides: object) -> dict[str, object]:
    thread = {"CapInh": ZERO, "CapPrm": ZERO, "CapEff": ZERO, "CapBnd": ZERO, "CapAmb": ZERO}
    thread |= {"NoNewPrivs": "1", "Seccomp": "2"}
    report: dict[str, object] = {
        "threads": {"ok": True, "value": {"2": thread}},
        "ns": {"ok": True, "value": {n: f"{n}:[2]" for n in HOST_NS}},
        "RLIMIT_CORE": {"ok": True, "value": "0 0"},
        "umask": {"ok": True, "value": "022"},
        "env": {"ok": True, "value": sorted(ALLOWED_ENV_KEYS)},
    }
    report.update(overrides)
    return report


def test_expected_posture_rows_have_reasons():
    assert all(row.why for row in EXPECTED_POSTURE)
    assert {row.field for row in EXPECTED_POSTURE} >= {"CapEff", "NoNewPrivs", "Seccomp", "namespaces", "env"}


def test_a_clean_posture_has_no_mismatch():
    assert _posture_mismatches(_posture(), host_ns=HOST_NS, allowed_env=ALLOWED_ENV_KEYS) == []


def test_every_planted_posture_breach_is_reported():
    thread = {"CapInh": ZERO, "CapPrm": ZERO, "CapEff": "00000000a80425fb", "CapBnd": ZERO, "CapAmb": ZERO}
    thread |= {"NoNewPrivs": "0", "Seccomp": "2"}
    report = _posture(
        threads={"ok": True, "value": {"2": thread}},
        ns={"ok": True, "value": dict(HOST_NS, user="user:[9]")},
        RLIMIT_CORE={"ok": True, "value": "0 -1"},
        umask={"ok": True, "value": "000"},
        env={"ok": True, "value": [*ALLOWED_ENV_KEYS, "AWS_SECRET_ACCESS_KEY"]},
    )
    found = _posture_mismatches(report, host_ns=HOST_NS, allowed_env=ALLOWED_ENV_KEYS)
    joined = "\n".join(found)
    for needle in ("CapEff", "NoNewPrivs", "RLIMIT_CORE", "umask", "mnt", "AWS_SECRET_ACCESS_KEY"):
        assert needle in joined
    assert "user" not in joined.split("namespaces shared with the host: ")[1].split(" (")[0]


def test_missing_thread_status_is_a_mismatch_not_a_pass():
    assert _posture_mismatches({}, host_ns=HOST_NS, allowed_env=ALLOWED_ENV_KEYS) == ["no thread status was reported"]


def test_inherited_fds_beyond_stdio_are_flagged():
    fds = {
        "0": {"kind": "char", "link": "/dev/null"},
        "1": {"kind": "pipe", "link": "pipe:[1]"},
        "2": {"kind": "socket", "link": "socket:[2]"},
        "7": {"kind": "dir", "link": "/"},
    }
    assert _fd_findings({"fds": {"ok": True, "value": fds}}) == [
        "fd 2 is a socket (socket:[2])",
        "fd 7 is inherited: dir /",
    ]


def test_kernel_leaks_need_nonzero_addresses_or_data():
    clean = {
        "kallsyms": {"ok": True, "value": {"lines": 10, "nonzero": 0}},
        "dmesg": {"ok": False, "errno": "EPERM"},
        "debugfs": {"ok": False, "errno": "ENOENT"},
    }
    assert _kernel_leaks(clean) == []
    leaky = {
        "kallsyms": {"ok": True, "value": {"lines": 10, "nonzero": 10}},
        "dmesg": {"ok": True, "value": {"bytes": 100}},
        "debugfs": {"ok": True, "value": ["tracing"]},
    }
    assert len(_kernel_leaks(leaky)) == 3


def test_the_ptrace_control_survives_a_process_that_exits_while_it_lists_proc():
    """PR-03's host control read /proc/<pid>/cmdline of every listed pid; one that exited in
    between crashed the control on a busy host, and the case went INCONCLUSIVE."""
    import subprocess
    import sys

    from contain.probe.case import AttackRun
    from contain.probe.cases_proc import _PTRACE
    from contain.probe.context import attack, attack_report

    vanished = (
        "import os\n_listdir = os.listdir\n"
        "os.listdir = lambda path='.': _listdir(path) + (['999999999'] if path == '/proc' else [])\n"
    )
    code = vanished + attack(_PTRACE, marker="no-such-marker-anywhere", only_marked=True)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30, check=False)
    report = attack_report(AttackRun(done.returncode, None, done.stdout, done.stderr, False, 0.0))
    assert report is not None, done.stderr.decode()
    assert report["targets"] == {"ok": True, "value": []}
