"""SY cases: the kernel surface, judged by the kernel's own answer and host state.

For kernel-surface cases the errno a syscall returns inside the target *is* the observable, so
it is judged strictly: every probe lists the only outcomes that count as refused (``refused``,
e.g. EPERM, or death by SIGSYS for the i386 entry); success, or any other errno (EBADF, EFAULT,
EINVAL...: the call reached the real kernel code), is ESCAPED. Each probe runs in a forked child,
so a probe that kills its process (SIGSYS) or changes namespaces leaves the rest untouched.

Where a host-side judge exists it backs the errno: SY-05 compares ``/proc/key-users`` before
and after (a key added anywhere shows up in some uid's count); SY-07 looks for the random
blackhole route the attack tries to add in the host's routing tables (and deletes it if found).

Why one file past 600 lines: one mechanism, the SY rows of the catalogue; each case keeps its
attack, its refused outcomes per workload kernel (Linux, gVisor, a microVM guest) and its judge
together, so a reader sees a whole case in one place.

Positive controls run the same probes on the bare host (``ctx.control``) in ``control`` mode,
where each must *not* be refused the same way; a probe whose control is refused identically could
not detect a missing filter, so the case is INCONCLUSIVE. Controls are harmless by choice of
probe: namespace and seccomp changes happen in a forked child that exits; io_uring gets bad
arguments (EFAULT/EBADF, not EPERM); ``init_module``/``finit_module`` get no module image (never
load anything); ``add_key`` uses a key type that does not exist (ENODEV, no key is created);
netlink only dumps routes (never adds one); the setuid helper only prints its ids.

A small static helper, compiled with gcc at set-up into a directory readable by uid 65534 and
bound read-only at ``/inputs/probe-bin``, covers what Python cannot reach: the i386 ``int 0x80``
entry (``socketcall(SOCKET, AF_NETLINK)``, which would slip past argument rules on ``socket``)
and a setuid-root program that prints its real and effective uid. Without gcc the helper probes
are reported missing (INCONCLUSIVE), never skipped as passed.

SY-11 (W^X, memfd exec) is recorded policy, not filtered: mmap/mprotect RWX and
memfd_create+execveat are recorded as evidence; the case judges the personality flags the filter
does refuse (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE). SY-12 checks contain's own launcher (fail
closed on an unsupported arch, a missing libseccomp, a malformed filter) and the workload's
capability sets; its launcher half does not apply to --wrap targets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contain.probe.canaries import attack_source, decide, read_report, run_evidence
from contain.probe.case import AttackRun, CaseResult, Category, ProbeCase, ProbeContext, Verdict
from contain.probe.targets import kind_keys, target_kind

__all__ = [
    "BACKEND_REFUSALS",
    "CASES",
    "KERNEL_PROBES",
    "BackendRefusal",
    "KernelProbe",
    "judge_kernel",
    "probe_helpers",
    "refused_outcomes",
]

HELPER_SANDBOX_DIR = "/inputs/probe-bin"

# Each probe is a function in the attack source, run in a forked child; P["mode"] is "attack"
# or "control" (control picks the harmless variant where the two differ).
KERNEL_SOURCE = r"""
import signal, struct, subprocess
MODE = P["mode"]
NEWUSER, NEWNET = 0x10000000, 0x40000000
def cbuf(b):
    return ctypes.create_string_buffer(b, len(b))

def unshare_user(): return sysc(272, NEWUSER)
def unshare_user_net(): return sysc(272, NEWUSER | NEWNET)
def unshare_cmd():
    r = subprocess.run(["unshare", "-Ur", "true"], capture_output=True, timeout=5)
    if r.returncode:
        raise OSError(errno.EPERM if b"not permitted" in r.stderr else errno.EIO, r.stderr[-200:].decode())
    return 0
def clone3_newuser():
    args = cbuf(struct.pack("<QQQQQQQQQQQ", NEWUSER, 0, 0, 0, signal.SIGCHLD, 0, 0, 0, 0, 0, 0))
    pid = sysc(435, args, 88)
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid
def io_uring_setup(): return sysc(425, 1, 0)
def io_uring_enter(): return sysc(426, 99, 0, 0, 0, 0, 0)
def io_uring_register(): return sysc(427, 99, 0, 0, 0)
def userfaultfd(): return sysc(323, os.O_CLOEXEC)
def dev_userfaultfd(): return os.open("/dev/userfaultfd", os.O_RDWR | os.O_CLOEXEC)
def add_key():
    ktype = b"user" if MODE == "attack" else b"contain_probe_no_such_type"
    kid = sysc(248, cbuf(ktype + b"\0"), cbuf(P["key"].encode() + b"\0"), cbuf(b"v"), 1, -4)
    sysc(250, 15, kid, 60)  # KEYCTL_SET_TIMEOUT: even a breach leaves nothing for long
    return kid
def keyctl_get_session(): return sysc(250, 0, -3, 0)
def request_key(): return sysc(249, cbuf(b"user\0"), cbuf(P["key"].encode() + b"\0"), 0, 0)
def perf_event_open():
    attr = cbuf(struct.pack("<IIQ", 1, 128, 0) + b"\0" * 112)  # PERF_TYPE_SOFTWARE, CPU_CLOCK
    return sysc(298, attr, 0, -1, -1, 0)
def bpf_prog_load():
    insns = cbuf(b"\xb7\0\0\0\0\0\0\0" + b"\x95\0\0\0\0\0\0\0")  # r0 = 0; exit
    lic = cbuf(b"GPL\0")
    attr = cbuf(struct.pack("<IIQQIIQ", 1, 2, ctypes.addressof(insns), ctypes.addressof(lic), 0, 0, 0) + b"\0" * 88)
    return sysc(321, 5, attr, 128)
def init_module(): return sysc(175, 0, 0, cbuf(b"\0"))
def finit_module():
    fd = os.open("/dev/null", os.O_RDONLY)
    return sysc(313, fd, cbuf(b"\0"), 0)
def af_packet(): return socket.socket(17, socket.SOCK_RAW, socket.htons(3)).fileno()
def raw_icmp(): return socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).fileno()
def netlink_route():
    s = socket.socket(16, socket.SOCK_RAW, 0)
    if MODE == "attack":  # RTM_NEWROUTE: blackhole P["prefix"]/32 in the main table
        a, b, c, d = (int(x) for x in P["prefix"].split("."))
        rta = struct.pack("<HH", 8, 1) + bytes([a, b, c, d])  # RTA_DST
        body = struct.pack("<BBBBBBBBI", 2, 32, 0, 0, 254, 0, 0, 6, 0) + rta  # RTN_BLACKHOLE=6
        msg = struct.pack("<IHHII", 16 + len(body), 24, 0x1 | 0x4 | 0x400 | 0x200, 1, 0) + body
    else:  # RTM_GETROUTE dump: read-only
        body = struct.pack("<BBBBBBBBI", 2, 0, 0, 0, 0, 0, 0, 0, 0)
        msg = struct.pack("<IHHII", 16 + len(body), 26, 0x1 | 0x300, 1, 0) + body
    s.sendto(msg, (0, 0))
    reply = s.recv(65536)
    if struct.unpack("<H", reply[4:6])[0] == 2:  # NLMSG_ERROR
        err = struct.unpack("<i", reply[16:20])[0]
        if err:
            raise OSError(-err, os.strerror(-err))
    return "acked"
def helper_socketcall():
    r = subprocess.run([P["bin"] + "/i386-socketcall"], capture_output=True, timeout=5)
    if r.returncode < 0:
        raise OSError(0, "killed by signal %d" % -r.returncode) if -r.returncode != signal.SIGSYS else SIGSYS_DEATH
    fields = (r.stdout.strip() or b"-38 0").split()
    value = int(fields[0])
    if value < 0:
        raise OSError(-value, os.strerror(-value))
    if fields[1:2] != [b"1"]:  # a number came back, but no socket was made (gVisor ran another syscall)
        raise OSError(errno.ENOTSOCK, "int 0x80 returned %d, which is not a socket" % value)
    return value
class _SigsysDeath(Exception):
    pass
SIGSYS_DEATH = _SigsysDeath("SIGSYS")
def seccomp_listener():
    if MODE == "control":
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS in this child only
    prog = cbuf(struct.pack("<HBBI", 0x06, 0, 0, 0x7FFF0000))  # ret ALLOW
    fprog = cbuf(struct.pack("<HxxxxxxQ", 1, ctypes.addressof(prog)))
    return sysc(317, 1, 8, fprog)
def unshare_after_allow_all():
    libc.prctl(38, 1, 0, 0, 0)
    prog = cbuf(struct.pack("<HBBI", 0x06, 0, 0, 0x7FFF0000))
    fprog = cbuf(struct.pack("<HxxxxxxQ", 1, ctypes.addressof(prog)))
    sysc(317, 1, 0, fprog)
    return sysc(272, NEWUSER)
def no_new_privs():
    for line in open("/proc/self/status"):
        if line.startswith("NoNewPrivs:"):
            if line.split()[1] == "1":
                raise OSError(errno.EPERM, "NoNewPrivs is 1")
            return 0
    # no such line (gVisor's status has none): ask the kernel, PR_GET_NO_NEW_PRIVS
    value = libc.prctl(39, 0, 0, 0, 0)
    if value < 0:
        raise OSError(errno.ENOSYS, "no NoNewPrivs line and PR_GET_NO_NEW_PRIVS failed")
    if value == 1:
        raise OSError(errno.EPERM, "PR_GET_NO_NEW_PRIVS is 1 (no NoNewPrivs line)")
    return 0
def setuid_helper():
    if MODE == "control":
        os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
    r = subprocess.run([P["bin"] + "/suid-ids"], capture_output=True, timeout=5)
    ruid, euid = (int(x) for x in r.stdout.split()[:2])
    if ruid == euid:
        raise OSError(errno.EPERM, "euid stayed %d" % euid)
    return "euid %d over ruid %d" % (euid, ruid)
def personality_exec(): return sysc(135, 0x0400000)
def personality_norandom(): return sysc(135, 0x0040000)
def caps():
    held = {}
    for line in open("/proc/self/status"):
        if line.startswith(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")):
            k, v = line.split()
            if int(v, 16):
                held[k] = v
    if not held:
        raise OSError(errno.EPERM, "no capabilities in any set")
    return held
def wx_record():
    import mmap
    out = {}
    try:
        m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        m.close(); out["mmap_rwx"] = "allowed"
    except OSError as e:
        out["mmap_rwx"] = errno.errorcode.get(e.errno, str(e.errno))
    try:
        fd = os.memfd_create("probe"); os.close(fd); out["memfd_create"] = "allowed"
    except OSError as e:
        out["memfd_create"] = errno.errorcode.get(e.errno, str(e.errno))
    return out

def run_probe(name):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = {"ok": True, "value": _short(globals()[name]())}
        except _SigsysDeath:
            out = {"ok": False, "signal": "SIGSYS"}
        except OSError as e:
            out = {"ok": False, "errno": errno.errorcode.get(e.errno or 0, str(e.errno)), "msg": str(e)[:200]}
        except Exception as e:
            out = {"ok": False, "error": (type(e).__name__ + ": " + str(e))[:200]}
        os.write(w, json.dumps(out).encode()); os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    _, status = os.waitpid(pid, 0)
    if data:
        return json.loads(data)
    if os.WIFSIGNALED(status):
        return {"ok": False, "signal": signal.Signals(os.WTERMSIG(status)).name}
    return {"ok": False, "error": "no result, status %d" % status}

for name in P["probes"]:
    _R[name] = run_probe(name)
done()
"""


@dataclass(frozen=True)
class KernelProbe:
    """One syscall probe: the outcomes that count as refused inside the target."""

    name: str  # the function in KERNEL_SOURCE
    refused: tuple[str, ...]  # errno names (or "SIGSYS") that mean the layer stopped it
    what: str
    needs_helper: bool = False


def _p(name: str, refused: str, what: str, *, helper: bool = False) -> KernelProbe:
    return KernelProbe(name, tuple(refused.split()), what, helper)


@dataclass(frozen=True)
class BackendRefusal:
    """An outcome that also counts as refused on one backend (looked up with ``kind_keys``), and
    why it stops the attack as surely as the probe's own refusals do."""

    kind: str
    probe: str
    refused: tuple[str, ...]
    why: str


BACKEND_REFUSALS: tuple[BackendRefusal, ...] = (
    BackendRefusal(
        "container:runsc",
        "raw_icmp",
        ("EAFNOSUPPORT",),
        "gVisor's network stack in host mode has no raw sockets: socket() makes nothing to send with",
    ),
    BackendRefusal(
        "container:runsc",
        "helper_socketcall",
        ("ENOTSOCK",),
        "gVisor runs int 0x80 as the 64-bit syscall of the same number (102 is getuid there); the "
        "helper checks that no socket descriptor came back, so no netlink socket exists",
    ),
)


def refused_outcomes(probe: KernelProbe, kind: str) -> tuple[str, ...]:
    """The probe's refusals plus the ``BACKEND_REFUSALS`` rows for ``kind``."""
    keys = kind_keys(kind)
    extra = tuple(o for row in BACKEND_REFUSALS if row.probe == probe.name and row.kind in keys for o in row.refused)
    return probe.refused + extra


KERNEL_PROBES: dict[str, tuple[KernelProbe, ...]] = {
    "SY-01": (
        _p("unshare_user", "EPERM", "unshare(CLONE_NEWUSER)"),
        _p("unshare_user_net", "EPERM", "unshare(CLONE_NEWUSER|CLONE_NEWNET)"),
        # ENOENT: the image has no unshare(1) (a microVM's userland); the two syscalls above are the test
        _p("unshare_cmd", "EPERM ENOENT", "unshare -Ur true"),
    ),
    "SY-02": (_p("clone3_newuser", "ENOSYS EPERM", "clone3 with CLONE_NEWUSER"),),
    "SY-03": (
        _p("io_uring_setup", "EPERM", "io_uring_setup(1, NULL)"),
        _p("io_uring_enter", "EPERM", "io_uring_enter(99, ...): EPERM, not EBADF"),
        _p("io_uring_register", "EPERM", "io_uring_register(99, ...): EPERM, not EBADF"),
    ),
    "SY-04": (
        _p("userfaultfd", "EPERM", "userfaultfd(O_CLOEXEC)"),
        _p("dev_userfaultfd", "ENOENT EACCES EPERM", "open /dev/userfaultfd"),
    ),
    "SY-05": (
        _p("add_key", "EPERM", "add_key user key to @u"),
        _p("keyctl_get_session", "EPERM", "keyctl(GET_KEYRING_ID, @s)"),
        _p("request_key", "EPERM", "request_key(user, <canary>)"),
    ),
    "SY-06": (
        _p("perf_event_open", "EPERM EACCES", "perf_event_open(software clock)"),
        _p("bpf_prog_load", "EPERM EACCES", "bpf(BPF_PROG_LOAD, socket filter)"),
        _p("init_module", "EPERM", "init_module(no image)"),
        _p("finit_module", "EPERM", "finit_module(/dev/null)"),
    ),
    "SY-07": (
        _p("af_packet", "EPERM EAFNOSUPPORT EACCES", "socket(AF_PACKET, SOCK_RAW)"),
        _p("raw_icmp", "EPERM EACCES", "socket(AF_INET, SOCK_RAW, ICMP)"),
        _p("netlink_route", "EPERM EAFNOSUPPORT EACCES", "netlink RTM_NEWROUTE (blackhole /32)"),
        _p("helper_socketcall", "SIGSYS", "i386 int 0x80 socketcall(SOCKET, AF_NETLINK)", helper=True),
    ),
    "SY-09": (
        _p("seccomp_listener", "EPERM", "seccomp(SET_MODE_FILTER, NEW_LISTENER, allow-all)"),
        _p("unshare_after_allow_all", "EPERM", "allow-all filter stacked, then unshare(CLONE_NEWUSER)"),
    ),
    "SY-10": (
        _p("no_new_privs", "EPERM", "NoNewPrivs must be 1"),
        _p("setuid_helper", "EPERM", "setuid-root helper gains no euid", helper=True),
    ),
    "SY-11": (
        _p("personality_exec", "EPERM", "personality(READ_IMPLIES_EXEC)"),
        _p("personality_norandom", "EPERM", "personality(ADDR_NO_RANDOMIZE)"),
    ),
}

# Recorded, not judged: contain's policy does not filter these (see runtime/seccomp_rules.py).
_RECORDED: dict[str, tuple[str, ...]] = {"SY-11": ("wx_record",)}

# --- the static helpers -----------------------------------------------------------------------

_HELPERS: dict[str, str] = {
    # i386 entry from a 64-bit process: socketcall(SYS_SOCKET, {AF_NETLINK, SOCK_RAW, 0}). The
    # argument block must sit below 4 GiB, hence a static non-PIE binary and a global array.
    "i386-socketcall": r"""
#include <stdio.h>
#include <sys/stat.h>
static unsigned int args[3] = {16, 3, 0};
int main(void) {
    long r;
    struct stat st;
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(102L), "b"(1L), "c"(args) : "memory");
    /* the return value and whether it is a socket descriptor: a kernel that runs int 0x80 as
       another syscall returns a number that is not one */
    printf("%ld %d\n", r, r >= 0 && fstat((int)r, &st) == 0 && S_ISSOCK(st.st_mode));
    return 0;
}
""",
    "suid-ids": r"""
#include <stdio.h>
#include <unistd.h>
int main(void) { printf("%d %d\n", (int)getuid(), (int)geteuid()); return 0; }
""",
}


@contextlib.contextmanager
def probe_helpers() -> Iterator[Path | None]:
    """Compile the helpers into a fresh directory readable by everyone; ``suid-ids`` is made
    setuid-root when running as root. Yields None when gcc or static libc is missing. The
    directory (and the setuid binary with it) is removed on exit."""
    gcc = shutil.which("gcc")
    if gcc is None:
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="contain-probe-bin-"))
    try:
        root.chmod(0o755)
        for name, source in _HELPERS.items():
            src = root / f"{name}.c"
            src.write_text(source)
            built = subprocess.run(
                [gcc, "-static", "-no-pie", "-O1", "-o", str(root / name), str(src)],
                capture_output=True,
                timeout=60,
                check=False,
            )
            if built.returncode != 0:
                yield None
                return
            (root / name).chmod(0o755)
        if os.geteuid() == 0:
            (root / "suid-ids").chmod(0o4755)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- judging ----------------------------------------------------------------------------------


def _outcome(result: Any) -> str:
    if not isinstance(result, dict):
        return "no result"
    if result.get("ok"):
        return "succeeded"
    return str(result.get("errno") or result.get("signal") or result.get("error") or "unknown")


def judge_kernel(
    case_id: str,
    probes: Sequence[KernelProbe],
    *,
    attack: dict[str, Any] | None,
    control: dict[str, Any] | None,
    host_breaches: Sequence[str] = (),
    evidence: dict[str, Any] | None = None,
    kind: str = "",
) -> CaseResult:
    """Strict errno judging: anything but a listed refusal inside is a breach (``kind`` adds the
    ``BACKEND_REFUSALS`` of that target kind); a control refused the same way (or not run) is a
    control failure."""
    breaches = list(host_breaches)
    failures: list[str] = []
    missing: list[str] = []
    if attack is None:
        missing.append("the attack never reported")
    for probe in probes:
        if attack is None:
            break
        got = _outcome(attack.get(probe.name))
        refused = refused_outcomes(probe, kind)
        if got == "no result" or got.startswith(("error", "FileNotFoundError", "ValueError")):
            missing.append(f"{probe.what}: no kernel answer ({got})")
        elif got not in refused:
            breaches.append(f"{probe.what}: {got} (refused means {'/'.join(refused)})")
        ctl = _outcome((control or {}).get(probe.name))
        if ctl in probe.refused or ctl == "no result":
            failures.append(f"{probe.what}: host control also {ctl}")
    answers = {p.name: _outcome((attack or {}).get(p.name)) for p in probes}
    controls = {p.name: _outcome((control or {}).get(p.name)) for p in probes}
    return decide(
        case_id,
        breaches=breaches,
        control_failures=failures,
        missing=missing,
        contained="refused: " + ", ".join(f"{p.what} -> {answers[p.name]}" for p in probes),
        control="host answered: " + ", ".join(f"{k} -> {v}" for k, v in controls.items()),
        evidence={"attack": attack, "control": control, **(evidence or {})},
    )


def _key_users() -> dict[str, str]:
    try:
        lines = Path("/proc/key-users").read_text().splitlines()
    except OSError:
        return {}
    # Only the uids an attack can act as: the probe's own (a weak wrapper runs as it) and nobody
    # (contain's sandbox uid when run as root). Other users' keys are not this case's business.
    watched = {"0", "65534", str(os.geteuid())}
    counts = {line.split(":")[0].strip(): line.split(":", 1)[1].split()[1] for line in lines if ":" in line}
    return {uid: n for uid, n in counts.items() if uid in watched}


def _host_has_route(prefix: str) -> bool:
    out = subprocess.run(
        ["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True, timeout=10, check=False
    ).stdout
    return any(line.split()[1:2] == [prefix] or line.startswith(f"blackhole {prefix} ") for line in out.splitlines())


def _free_prefix() -> str:
    return f"10.{secrets.randbelow(254) + 1}.{secrets.randbelow(256)}.{secrets.randbelow(254) + 1}"


def _kernel_case(case_id: str) -> ProbeCase:
    probes = KERNEL_PROBES[case_id]

    def check(ctx: ProbeContext) -> CaseResult:
        began = time.perf_counter()
        with contextlib.ExitStack() as stack:
            helper_dir = stack.enter_context(probe_helpers()) if any(p.needs_helper for p in probes) else None
            key = f"contain-probe-{ctx.canary('key')}"
            prefix = _free_prefix()
            params: dict[str, Any] = {"key": key, "prefix": prefix}
            boundary: dict[str, Any] | None = None
            usable = [p for p in probes if not p.needs_helper or helper_dir is not None]
            if helper_dir is not None:
                boundary = {"files": [{"host": str(helper_dir), "path": HELPER_SANDBOX_DIR, "access": "read"}]}
            names = [p.name for p in usable] + list(_RECORDED.get(case_id, ()))
            sandbox_bin = HELPER_SANDBOX_DIR if ctx.target.has_contain_hooks else str(helper_dir)
            keys_before = _key_users()
            attack_run = ctx.target.run_python(
                attack_source(KERNEL_SOURCE, mode="attack", probes=names, bin=sandbox_bin, **params),
                timeout_s=30,
                boundary=boundary,
            )
            keys_after = _key_users()
            host_breaches = []
            if case_id == "SY-05" and keys_after != keys_before:
                host_breaches.append(f"/proc/key-users changed during the attack: {keys_before} -> {keys_after}")
            if case_id == "SY-07" and _host_has_route(prefix):
                host_breaches.append(f"the host routing table gained the attack's blackhole route {prefix}")
                subprocess.run(["ip", "route", "del", "blackhole", prefix], capture_output=True, check=False)
            control_run = ctx.control.run_python(
                attack_source(KERNEL_SOURCE, mode="control", probes=names, bin=str(helper_dir), **params),
                timeout_s=30,
            )
            result = judge_kernel(
                case_id,
                usable,
                attack=read_report(attack_run),
                control=read_report(control_run),
                host_breaches=host_breaches,
                evidence={"attack_run": _brief(attack_run), "control_run": _brief(control_run)},
                kind=target_kind(ctx.target),
            )
            if len(usable) < len(probes) and result.verdict is Verdict.CONTAINED:
                skipped = ", ".join(p.what for p in probes if p not in usable)
                result = dataclasses.replace(
                    result,
                    verdict=Verdict.INCONCLUSIVE,
                    summary=f"helper probes not run (no gcc/static libc): {skipped}",
                )
        return dataclasses.replace(result, duration_s=time.perf_counter() - began)

    return ProbeCase(case_id, Category.SY, _TITLES[case_id][0], _TITLES[case_id][1], check)


def _brief(run: AttackRun) -> dict[str, Any]:
    return run_evidence(run, limit=400)


# --- SY-12: contain's own launcher fails closed -------------------------------------------------

_CAPS_PROBE = KernelProbe("caps", ("EPERM",), "workload holds no capability in any set")


def _sy12(ctx: ProbeContext) -> CaseResult:
    began = time.perf_counter()
    checks: dict[str, str] = {}
    breaches: list[str] = []
    failures: list[str] = []
    from contain.errors import ContainError
    from contain.host.facts import detect_host
    from contain.runtime.seccomp import compile_filter
    from contain.runtime.seccomp_rules import seccomp_arch

    for label, attempt in (
        ("unsupported arch i386", lambda: seccomp_arch("i386")),
        ("missing libseccomp", lambda: compile_filter(arch="x86_64", libseccomp_path="/nonexistent/libseccomp.so.2")),
    ):
        try:
            attempt()
            breaches.append(f"{label}: the filter was built anyway")
            checks[label] = "accepted"
        except ContainError as exc:
            checks[label] = f"refused: {exc.cause[:120]}"
    facts = detect_host()
    bwrap = facts.bwrap_path or shutil.which("bwrap")
    if bwrap is None:
        failures.append("bwrap not found: the malformed-filter check cannot run")
    else:
        good = compile_filter(arch=facts.arch, libseccomp_path=facts.libseccomp_path)
        garbage = secrets.token_bytes(len(good) // 8 * 8 or 64)
        ran_bad = _bwrap_runs_workload(bwrap, garbage)
        ran_good = _bwrap_runs_workload(bwrap, good)
        checks["malformed filter"] = "workload ran" if ran_bad else "refused"
        checks["valid filter (control)"] = "workload ran" if ran_good else "refused"
        if ran_bad:
            breaches.append("bwrap ran the workload with a malformed seccomp filter")
        if not ran_good:
            failures.append("the same launch with a valid filter did not run the workload")
    attack_run = ctx.target.run_python(attack_source(KERNEL_SOURCE, mode="attack", probes=["caps"]), timeout_s=20)
    control_run = ctx.control.run_python(attack_source(KERNEL_SOURCE, mode="control", probes=["caps"]), timeout_s=20)
    caps = judge_kernel("SY-12", [_CAPS_PROBE], attack=read_report(attack_run), control=read_report(control_run))
    if caps.verdict is Verdict.ESCAPED:
        breaches.append(caps.summary)
    elif caps.verdict is Verdict.INCONCLUSIVE:
        failures.append(caps.summary)
    result = decide(
        "SY-12",
        breaches=breaches,
        control_failures=failures,
        missing=[],
        contained=(
            "launcher refused an unsupported arch, a missing libseccomp and a malformed filter; workload has no caps"
        ),
        control="a valid filter runs the workload; the host control holds capabilities",
        evidence={"launcher": checks, "caps": caps.evidence},
    )
    return dataclasses.replace(result, duration_s=time.perf_counter() - began)


def _bwrap_runs_workload(bwrap: str, bpf: bytes) -> bool:
    """Whether ``bwrap --seccomp FD`` with ``bpf`` runs a workload that creates a marker."""
    with tempfile.TemporaryDirectory(prefix="contain-probe-sy12-") as tmp:
        marker = Path(tmp) / "ran"
        read_end, write_end = os.pipe()
        os.write(write_end, bpf)
        os.close(write_end)
        try:
            subprocess.run(
                [
                    bwrap,
                    "--unshare-all",
                    "--die-with-parent",
                    "--ro-bind",
                    "/",
                    "/",
                    "--bind",
                    tmp,
                    tmp,
                    "--dev",
                    "/dev",
                    "--proc",
                    "/proc",
                    "--seccomp",
                    str(read_end),
                    "--",
                    "/bin/sh",
                    "-c",
                    f"echo ran > {marker}",
                ],
                pass_fds=(read_end,),
                capture_output=True,
                timeout=20,
                check=False,
            )
        finally:
            os.close(read_end)
        return marker.exists()


_TITLES: dict[str, tuple[str, str]] = {
    "SY-01": ("unshare -Ur, unshare(CLONE_NEWUSER|CLONE_NEWNET)", "EPERM"),
    "SY-02": ("clone3 with CLONE_NEWUSER", "ENOSYS or EPERM"),
    "SY-03": ("io_uring_setup / enter / register", "EPERM (errno 1, not EBADF)"),
    "SY-04": ("userfaultfd(0), open /dev/userfaultfd", "EPERM/ENOENT"),
    "SY-05": ("add_key to @u, keyctl, request_key", "EPERM; no key appears on the host"),
    "SY-06": ("perf_event_open, bpf(PROG_LOAD), init_module/finit_module", "EPERM/EACCES"),
    "SY-07": ("AF_PACKET, raw ICMP, netlink route add, i386 socketcall", "EPERM; host routes unchanged"),
    "SY-09": ("seccomp NEW_LISTENER with allow-all, then a blocked action", "EPERM; blocked action still blocked"),
    "SY-10": ("setuid-root helper, NoNewPrivs", "uid/euid unchanged; NoNewPrivs 1"),
    "SY-11": ("personality flags; mmap/mprotect RWX, memfd exec recorded", "personality EPERM; W^X per policy"),
}

_LAUNCHER = "checks contain's own launcher (seccomp build and bwrap hand-off), not a wrapped sandbox's"

CASES: tuple[ProbeCase, ...] = (
    *(_kernel_case(case_id) for case_id in KERNEL_PROBES),
    ProbeCase(
        "SY-12",
        Category.SY,
        "launcher with unsupported arch / missing or malformed BPF; retained caps",
        "refuses to run the workload (fail closed)",
        _sy12,
        not_applicable={"wrap": _LAUNCHER, "host": _LAUNCHER},
    ),
)
