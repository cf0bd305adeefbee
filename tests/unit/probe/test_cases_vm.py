"""VM cases: NOT_APPLICABLE by construction on targets without a VMM (process, every container
backend, host, wrap), with the reason; on microvm they run (tests/integration/test_battery_microvm.py
boots them); here, the pure parts: the attack scripts, the forged frames and the verdict order."""

from __future__ import annotations

import pytest

from contain.probe import cases_vm
from contain.probe.case import Category, Verdict
from contain.probe.cases_vm import CASES
from contain.probe.context import RunContext
from contain.probe.runner import run_case


class Kind:
    has_contain_hooks = False

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = f"fake-{kind}"

    def run_python(self, *a, **kw):  # pragma: no cover - these cases never run code
        raise AssertionError

    run_argv = run_python


def _ctx(kind: str) -> RunContext:
    target = Kind(kind)
    return RunContext(target, control=target, sandboxed_control=target, run_id="unitoc")


VM_CASES = tuple(c for c in CASES if c.category is Category.VM)


def test_the_cases_are_vm_01_to_06_and_xt_07():
    assert [c.id for c in CASES] == [f"VM-0{n}" for n in range(1, 7)] + ["XT-07"]
    assert [c.category for c in CASES] == [Category.VM] * 6 + [Category.XT]


@pytest.mark.parametrize("kind", ["process", "container", "container:runsc", "host", "wrap"])
def test_xt_07_is_not_applicable_where_no_task_starts_from_a_snapshot(kind):
    result = run_case(CASES[-1], _ctx(kind))
    assert result.verdict is Verdict.NOT_APPLICABLE
    assert "no task starts from a memory snapshot" in result.summary


@pytest.mark.parametrize("kind", ["process", "container", "host", "wrap"])
@pytest.mark.parametrize("case", VM_CASES, ids=lambda c: c.id)
def test_targets_without_a_vmm_are_not_applicable_with_the_reason(case, kind):
    result = run_case(case, _ctx(kind))
    assert result.verdict is Verdict.NOT_APPLICABLE
    assert result.summary.startswith(f"not applicable by construction: the {kind} target runs no VMM")


@pytest.mark.parametrize("spec", ["container:runc", "container:runsc"])
@pytest.mark.parametrize("case", VM_CASES, ids=lambda c: c.id)
def test_every_container_runtime_is_not_applicable_through_its_kind(case, spec):
    result = run_case(case, _ctx(spec))
    assert result.verdict is Verdict.NOT_APPLICABLE
    assert "the container target runs no VMM" in result.summary


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_target_without_contain_hooks_of_another_kind_is_an_error_never_a_pass(case):
    # a fake "microvm" target has no boundary_for: the case cannot boot contain's VMM, so it fails
    result = run_case(case, _ctx("microvm"))
    assert result.verdict is Verdict.ERROR


def test_the_forged_frames_are_what_the_hosts_decoder_reads_as_an_exited_status_0():
    from contain.runtime.microvm.guest_channel import FrameDecoder, MsgType, parse_exited

    frames = FrameDecoder().feed(cases_vm._forged_bytes())
    assert [f.type for f in frames] == [MsgType.EXITED, MsgType.DATA, MsgType.OK]
    assert parse_exited(frames[0].body).status == 0


def test_vm01_writes_the_agent_port_last_after_its_marker_and_names_the_host_canary(tmp_path):
    script = cases_vm._vm01_script(tmp_path, "cn")
    assert script.index(cases_vm._VM01_LAST) < script.index('printf "$P" > $AGENT')
    assert '[ "$dev" != "$AGENT" ]' in script  # every other device first
    assert f"exec:touch {tmp_path / 'exec-cn'}" in script
    for device in ("/dev/ttyS*", "/dev/hvc*", "/dev/console", "/dev/vport*", "/dev/port", "/dev/mem"):
        assert device in script


def test_vm01_asks_for_a_file_qemu_writes_itself_before_the_exec_its_seccomp_filter_kills_it_for(tmp_path):
    # QEMU runs with -sandbox spawn=deny: a monitor's "migrate exec:" is SIGSYS, so the exec
    # alone can never show a reachable monitor; pmemsave (no spawn) must come first, and its
    # size in parentheses, its name quoted (HMP reads "16 /tmp/x" as 16 divided by ...).
    payload = cases_vm._vm01_script(tmp_path, "cn").split("P='", 1)[1].split("'", 1)[0]
    saved, touched = tmp_path / "pmemsave-cn", tmp_path / "exec-cn"
    assert payload.index(f'pmemsave 0 (16) "{saved}"') < payload.index(f"exec:touch {touched}")
    qmp = payload.index('{"execute":"pmemsave","arguments":{"val":0,"size":16,"filename":"' + str(saved))
    assert qmp < payload.rindex("exec:touch") < payload.index('{"execute":"quit"}')


def test_vm05_fills_the_guest_short_of_a_panic_so_its_run_and_cgroup_peak_can_be_read():
    script = cases_vm._VM05_SCRIPT
    assert "MemAvailable" in script
    assert f"size=$(( avail / 1024 - {cases_vm._VM05_HEADROOM_MIB} ))m" in script
    assert "size=100%" not in script


def test_vm04_attacks_the_gateway_dns_broadcast_ipv6_and_loopback_with_the_token():
    script = cases_vm._vm04_script("tok-1", 4001, 4002)
    for needle in ("10.0.2.2", "10.0.2.3", "10.0.2.255", "127.0.0.1", "ff02::1", "/lib/modules/network"):
        assert needle in script
    assert "export TOKEN=$T TCP=4001 UDP=4002" in script and "T=tok-1" in script
    for needle in ('"fec0::2"', '"255.255.255.255"', "SO_BROADCAST", "(addr, 53)"):
        assert needle in cases_vm._VM04_WORKLOAD


def test_vm05_floods_the_console_with_more_than_the_host_keeps():
    from contain.runtime.microvm.vmm import SERIAL_TAIL_BYTES

    assert cases_vm._VM05_FLOOD_BYTES > SERIAL_TAIL_BYTES
    assert f"head -c {cases_vm._VM05_FLOOD_BYTES} /dev/zero" in cases_vm._VM05_SCRIPT


@pytest.mark.parametrize(
    ("breaches", "failures", "verdict"),
    [
        (["seen"], ["control failed"], Verdict.ESCAPED),
        ([], ["control failed"], Verdict.INCONCLUSIVE),
        ([], [], Verdict.CONTAINED),
    ],
)
def test_a_breach_wins_over_a_failed_control_which_wins_over_contained(breaches, failures, verdict):
    result = cases_vm._verdict("VM-01", breaches=breaches, failures=failures, contained="ok", control="c", evidence={})
    assert result.verdict is verdict
