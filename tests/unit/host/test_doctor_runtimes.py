"""Doctor's per-runtime verdicts from constructed facts and observations (no runtime is run)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contain.boundary import Boundary
from contain.boundary.plain import plain_boundary
from contain.errors import UnsupportedHost
from contain.host.doctor_runtimes import RuntimeVerdict, judge_runtime, required_flags
from contain.host.facts import CgroupMount
from contain.host.observe import ObservedRuntime, parse_flag_names
from contain.runtime.backend_names import CONTAINER_RUNTIMES, RUNSC_PLATFORMS, RuntimeFacts
from contain.runtime.container.oci_runtime import GLOBAL_FLAGS
from contain.runtime.plan import plan_layers
from fake_host import LIBSECCOMP, facts_as_root

V1 = tuple(CgroupMount(1, f"/sys/fs/cgroup/{c}", (c,), "/") for c in ("memory", "pids", "cpu", "cpuacct", "freezer"))
FACTS = facts_as_root(V1, bwrap_path="/usr/bin/bwrap", landlock_abi=7, libseccomp_path=LIBSECCOMP)
RUNC = RuntimeFacts("runc", "/usr/sbin/runc", "runc version 1.1.5+ds1")
RUNSC = RuntimeFacts("runsc", "/usr/bin/runsc", "runsc version 0.0~20221219.0", ("kvm", "ptrace"))


def _all_flags(runtime: str) -> frozenset[str]:
    return frozenset(required_flags(runtime)) | {"debug"}


def _seen(runtime: RuntimeFacts) -> ObservedRuntime:
    return ObservedRuntime(runtime.runtime, runtime, flags=_all_flags(runtime.runtime))


def test_runc_on_a_good_host_works_with_every_layer() -> None:
    assert judge_runtime(FACTS, _seen(RUNC)) == RuntimeVerdict(
        "container:runc",
        "ok",
        "works: runc version 1.1.5+ds1 at /usr/sbin/runc; default sandbox: seccomp, cgroup limits, Landlock",
        "",
        "/usr/sbin/runc",
        "runc version 1.1.5+ds1",
    )


def test_runsc_names_the_platforms_of_the_build_and_the_one_contain_uses() -> None:
    verdict = judge_runtime(FACTS, _seen(RUNSC))
    assert (verdict.status, verdict.platforms, verdict.platform) == ("ok", ("kvm", "ptrace"), "ptrace")
    assert "platform ptrace (the build offers kvm, ptrace)" in verdict.detail
    assert "no Landlock" in verdict.detail  # gVisor has none; plan_layers says so for auto
    newer = judge_runtime(FACTS, _seen(replace(RUNSC, platforms=("kvm", "ptrace", "systrap"))))
    assert newer.platform == "systrap"  # the backend's preference order, RUNSC_PLATFORMS
    assert RUNSC_PLATFORMS[0].name == "systrap"


@pytest.mark.parametrize("runtime", CONTAINER_RUNTIMES)
def test_every_flag_the_backend_passes_is_required_of_the_binary(runtime: str) -> None:
    passed = {row.flag.lstrip("-").split("=")[0] for row in GLOBAL_FLAGS if row.runtime == runtime}
    assert set(required_flags(runtime)) == passed
    for missing in sorted(passed):
        seen = ObservedRuntime(runtime, RUNSC if runtime == "runsc" else RUNC, flags=_all_flags(runtime) - {missing})
        verdict = judge_runtime(FACTS, seen)
        assert (verdict.status, verdict.missing_flags) == ("fail", (missing,)), missing
        assert f"--{missing}" in verdict.detail and "install a newer" in verdict.fix


def test_a_runsc_without_oci_seccomp_fails_rather_than_dropping_the_filter_silently() -> None:
    verdict = judge_runtime(FACTS, ObservedRuntime("runsc", RUNSC, flags=_all_flags("runsc") - {"oci-seccomp"}))
    assert verdict.status == "fail" and "--oci-seccomp" in verdict.detail


def test_flags_that_could_not_be_listed_are_a_warning_not_a_pass() -> None:
    verdict = judge_runtime(FACTS, ObservedRuntime("runc", RUNC, flags=None))
    assert verdict.status == "warn"
    assert "could not be listed" in verdict.detail and "--root" in verdict.fix


def test_a_missing_runtime_is_a_warning_with_the_install_fix() -> None:
    seen = ObservedRuntime("runsc", None, "the OCI runtime 'runsc' is not installed", "apt-get install runsc (gVisor)")
    assert judge_runtime(FACTS, seen) == RuntimeVerdict(
        "container:runsc", "warn", "the OCI runtime 'runsc' is not installed", "apt-get install runsc (gVisor)"
    )


def test_a_runtime_the_probe_refused_is_a_failure_with_the_probes_cause() -> None:
    cause = "this runsc build offers platforms kvm, none of which contain uses"
    verdict = judge_runtime(
        FACTS, ObservedRuntime("runsc", None, cause, "install a runsc with one of: systrap, ptrace")
    )
    assert (verdict.status, verdict.detail, verdict.fix) == (
        "fail",
        cause,
        "install a runsc with one of: systrap, ptrace",
    )


# What plan_layers refuses, the verdict refuses, with plan_layers' own cause and fix.
HOSTS = {
    "not root": replace(FACTS, is_root=False, uid=1000, gid=1000),
    "no user namespaces": replace(FACTS, user_namespaces=False),
    "no seccomp": replace(FACTS, seccomp=False),
    "no cgroups": replace(FACTS, cgroups=()),
    "good": FACTS,
}


@pytest.mark.parametrize("runtime", [RUNC, RUNSC], ids=lambda r: r.runtime)
@pytest.mark.parametrize("host", HOSTS, ids=str)
def test_the_verdict_is_plan_layers_own_decision_for_the_default_boundary(runtime: RuntimeFacts, host: str) -> None:
    facts = HOSTS[host]
    verdict = judge_runtime(facts, _seen(runtime))
    try:
        plan_layers(
            plain_boundary(Boundary()),
            facts,
            egress_available=True,
            backend=f"container:{runtime.runtime}",
            runtime=runtime,
        )
    except UnsupportedHost as exc:
        assert (verdict.status, verdict.detail, verdict.fix) == ("fail", f"cannot run here: {exc.cause}", exc.fix)
    else:
        assert verdict.status == "ok", verdict
    if host != "good":
        assert verdict.status == "fail", host  # each of these hosts is one the backend refuses


def test_the_json_form_lists_platforms_and_missing_flags() -> None:
    document = judge_runtime(FACTS, _seen(RUNSC)).to_dict()
    assert document["name"] == "container:runsc"
    assert document["platforms"] == ["kvm", "ptrace"] and document["missing_flags"] == []


def test_flag_listings_of_both_runtimes_parse_to_names() -> None:
    runc_help = (
        "GLOBAL OPTIONS:\n   --debug             enable debug logging\n"
        "   --root value        root directory\n   --help, -h          show help\n"
    )
    assert parse_flag_names(runc_help) == {"debug", "root", "help", "h"}
    runsc_flags = "  -oci-seccomp\n    \tEnables loading OCI seccomp filters.\n  -platform string\n"
    assert parse_flag_names(runsc_flags) == {"oci-seccomp", "platform"}
