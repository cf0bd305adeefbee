"""The seccomp policy as data: ``SECCOMP_RULES``, one row per decision with its reason and the
escape probe that exercises it, and ``SUPPORTED_ARCHES``, the architectures the rows were written for.

Pure data and validation: nothing here loads libseccomp or touches the kernel. ``runtime/seccomp.py``
compiles the rows to BPF, ``runtime/seccomp_render.py`` renders them for docs/seccomp.md, and
``runtime/container/oci_seccomp.py`` renders them for OCI runtimes.

What is enforced
    ``SECCOMP_RULES`` is the whole policy, one row per decision with its reason and the escape probe
    that exercises it. ``compile_filter`` (``runtime/seccomp.py``) turns the rows into classic BPF;
    the launcher passes it to ``bwrap --seccomp FD``, so the sandboxed command starts under it
    (bwrap installs it with ``no_new_privs`` right before ``execve``; nothing in contain touches
    the current process).

    The filter is a *deny-list*: its default action is ALLOW, and the rows refuse the kernel surface
    an untrusted workload has no business with (ptrace, mounts, namespaces, io_uring, bpf, keyrings,
    module loading, exotic socket families, TIOCSTI, personality flags, seccomp user-notification).
    ALLOW rows record deliberate exceptions (AF_UNIX sockets, Landlock); they compile to nothing,
    because ALLOW is the default, and the unit tests check no deny row shadows them.

Architectures (a subtle decision, so here is the essay)
    A seccomp filter sees ``(arch, nr, args)``, and the same process can enter the kernel through
    several ABIs. On x86_64 these are: native (AUDIT_ARCH_X86_64), i386 through ``int 0x80``
    (AUDIT_ARCH_I386, different numbers, and ``socketcall()``/``ipc()`` multiplexers that would
    carry socket(AF_NETLINK) past an argument rule on ``socket``), and x32 (AUDIT_ARCH_X86_64
    again, but ``nr | 0x40000000``). The filter names only the native arch, so:

    - every other arch value hits the *bad-arch action*, which we set to KILL_PROCESS. We chose kill
      over ERRNO because nothing legitimate in an x86_64 sandbox makes i386 syscalls, an errno would
      let a probe keep trying quietly, and a SIGSYS death is visible to the caller as a signal;
    - x32: libseccomp (checked on 2.5.4 by reading the exported BPF, and pinned by a unit test that
      runs the BPF) emits ``if nr >= 0x40000000 and nr != -1: bad-arch`` for an x86_64-only filter,
      so x32 numbers are killed too and no explicit rule is needed;
    - aarch64's compat AArch32 entry (AUDIT_ARCH_ARM) likewise hits the bad-arch action.

    Any arch not in ``SUPPORTED_ARCHES`` raises ``UnsupportedHost`` naming the bypass it would open
    (i386: socketcall; s390x: clone's swapped arguments), as sandbox-runtime refuses i386.

Argument tests compare what the kernel reads
    libseccomp compares 64-bit values and refuses two comparisons on one argument in a rule, so
    "family not in {...}" and "persona neither 0 nor 0xffffffff" become several rows. Where the
    kernel reads only 32 bits (ioctl's request, personality's persona) the rows use MASKED_EQ on the
    low 32 bits, so setting high bits cannot slip a value past. Where a full 64-bit compare is used
    (socket families), a value with high bits set is *refused* (fail closed), never allowed.

What is NOT enforced here (the other half lives elsewhere)
    - Files, network reachability and resources: bwrap namespaces, Landlock, the egress proxy and
      cgroups. AF_INET sockets are allowed; the empty network namespace is what isolates them.
    - Syscalls newer than this table or unknown to the installed libseccomp pass the ALLOW default
      (see docs/seccomp.md for the list we know of).
    - Memory W^X (mmap/mprotect RWX), memfd_create + execveat: recorded policy, not filtered.
    - Anything the syscalls that stay allowed can reach: kernel bugs in read/write/mmap paths.
"""

from __future__ import annotations

import enum
import errno
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contain.errors import UnsupportedHost

__all__ = [
    "BAD_ARCH_ACTION",
    "SECCOMP_RULES",
    "SUPPORTED_ARCHES",
    "Action",
    "ArgCondition",
    "ArgOp",
    "SeccompArch",
    "SyscallRule",
    "seccomp_arch",
]

_U64_MAX = (1 << 64) - 1
_LOW32 = 0xFFFF_FFFF


class Action(enum.Enum):
    """What the filter does when a row matches."""

    ERRNO = "errno"  # the syscall fails with SyscallRule.errno_value and does nothing
    KILL_PROCESS = "kill_process"  # the whole process dies with SIGSYS
    ALLOW = "allow"  # a deliberate exception, recorded as a row; same as the filter's default


class ArgOp(enum.IntEnum):
    """Argument comparisons, valued as libseccomp's ``enum scmp_compare`` (seccomp.h)."""

    NE = 1
    LT = 2
    LE = 3
    EQ = 4
    GE = 5
    GT = 6
    MASKED_EQ = 7  # (arg & mask) == value


_OP_TEXT = {
    ArgOp.NE: "!=",
    ArgOp.LT: "<",
    ArgOp.LE: "<=",
    ArgOp.EQ: "==",
    ArgOp.GE: ">=",
    ArgOp.GT: ">",
}


@dataclass(frozen=True, kw_only=True)
class ArgCondition:
    """One test on one syscall argument, with libseccomp's 64-bit unsigned semantics."""

    index: int  # 0..5, the syscall argument
    op: ArgOp
    value: int
    mask: int = _U64_MAX  # used by MASKED_EQ only

    def __post_init__(self) -> None:
        if not 0 <= self.index <= 5:
            raise ValueError(f"argument index {self.index} is not 0..5")
        if not (0 <= self.value <= _U64_MAX and 0 <= self.mask <= _U64_MAX):
            raise ValueError("argument values and masks are unsigned 64-bit")
        if self.op is ArgOp.MASKED_EQ and self.value & ~self.mask:
            raise ValueError(f"value {self.value:#x} has bits outside mask {self.mask:#x}")
        if self.op is not ArgOp.MASKED_EQ and self.mask != _U64_MAX:
            raise ValueError("a mask is only meaningful with MASKED_EQ")

    def matches(self, arg: int) -> bool:
        """Whether a 64-bit argument value satisfies this test (as the compiled BPF does)."""
        arg &= _U64_MAX
        if self.op is ArgOp.MASKED_EQ:
            return arg & self.mask == self.value
        return {
            ArgOp.NE: arg != self.value,
            ArgOp.LT: arg < self.value,
            ArgOp.LE: arg <= self.value,
            ArgOp.EQ: arg == self.value,
            ArgOp.GE: arg >= self.value,
            ArgOp.GT: arg > self.value,
        }[self.op]

    def datums(self) -> tuple[int, int]:
        """The two values libseccomp (and the OCI ``value``/``valueTwo`` pair) take for this test:
        (mask, value) for MASKED_EQ, (value, 0) for the other comparisons."""
        if self.op is ArgOp.MASKED_EQ:
            return self.mask, self.value
        return self.value, 0

    def __str__(self) -> str:
        if self.op is ArgOp.MASKED_EQ:
            return f"arg{self.index} & {self.mask:#x} == {self.value:#x}"
        return f"arg{self.index} {_OP_TEXT[self.op]} {self.value:#x}"


@dataclass(frozen=True, kw_only=True)
class SyscallRule:
    """One row of the policy: a syscall, when it applies, what happens, why, and its probe."""

    syscall: str
    action: Action
    errno_value: int | None = None  # required for ERRNO, e.g. errno.EPERM
    when: tuple[ArgCondition, ...] = ()  # all must hold (AND); empty means always
    why: str
    probe: str  # escape-catalogue case that exercises the row, e.g. "SY-03"

    def __post_init__(self) -> None:
        if (self.action is Action.ERRNO) != (self.errno_value is not None):
            raise ValueError(f"{self.syscall}: an errno value goes with ERRNO and only with it")
        if self.errno_value is not None and not 0 < self.errno_value < 4096:
            raise ValueError(f"{self.syscall}: errno {self.errno_value} is not 1..4095")
        if not self.why or "\n" in self.why:
            raise ValueError(f"{self.syscall}: why must be one non-empty line")
        if len({c.index for c in self.when}) != len(self.when):
            raise ValueError(f"{self.syscall}: libseccomp allows one test per argument per rule")

    @property
    def is_deny(self) -> bool:
        return self.action is not Action.ALLOW

    def matches(self, args: Sequence[int]) -> bool:
        """Whether syscall arguments ``args`` (six values) satisfy every condition of the row."""
        return all(c.matches(args[c.index]) for c in self.when)

    def describe_action(self) -> str:
        if self.action is Action.ERRNO:
            assert self.errno_value is not None
            return f"ERRNO({errno.errorcode.get(self.errno_value, self.errno_value)})"
        return self.action.name


# --- building rows --------------------------------------------------------------------------


def _deny(
    syscall: str,
    why: str,
    probe: str,
    *,
    errno_value: int = errno.EPERM,
    when: tuple[ArgCondition, ...] = (),
) -> SyscallRule:
    return SyscallRule(
        syscall=syscall,
        action=Action.ERRNO,
        errno_value=errno_value,
        when=when,
        why=why,
        probe=probe,
    )


def _allow(syscall: str, why: str, probe: str, *, when: tuple[ArgCondition, ...] = ()) -> SyscallRule:
    return SyscallRule(syscall=syscall, action=Action.ALLOW, when=when, why=why, probe=probe)


def _deny_all(names: Iterable[str], why: str, probe: str) -> tuple[SyscallRule, ...]:
    return tuple(_deny(name, why, probe) for name in names)


# <linux/sched.h>. CLONE_NEWTIME (0x80) is absent: clone() reads that byte as the exit signal,
# so only unshare() and clone3() can ask for a time namespace, and both are refused outright.
_CLONE_NEW_FLAGS = {
    "CLONE_NEWNS": 0x0002_0000,
    "CLONE_NEWCGROUP": 0x0200_0000,
    "CLONE_NEWUTS": 0x0400_0000,
    "CLONE_NEWIPC": 0x0800_0000,
    "CLONE_NEWUSER": 0x1000_0000,
    "CLONE_NEWPID": 0x2000_0000,
    "CLONE_NEWNET": 0x4000_0000,
}
_CLONE_NEW_ANY = functools.reduce(int.__or__, _CLONE_NEW_FLAGS.values())

# <linux/socket.h>: the families a sandboxed program may open.
_AF_UNIX, _AF_INET, _AF_INET6 = 1, 2, 10
_ALLOWED_SOCKET_FAMILIES = {_AF_UNIX: "AF_UNIX", _AF_INET: "AF_INET", _AF_INET6: "AF_INET6"}

# <uapi/linux/personality.h> PER_LINUX, and the value that only reads the persona.
_PER_LINUX = 0x0000_0000
_PERSONALITY_QUERY = 0xFFFF_FFFF

# <uapi/asm-generic/ioctls.h>, the same on x86_64 and aarch64.
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C

# <uapi/linux/seccomp.h>
_SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3


# <uapi/linux/stat.h> and <uapi/asm-generic/fcntl.h>; O_CREAT and __O_TMPFILE are the same on
# x86_64 and aarch64.
_SET_ID_BITS = {"S_ISUID": 0o4000, "S_ISGID": 0o2000}
_CREATING_FLAGS = {"O_CREAT": 0o100, "O_TMPFILE": 0o2000_0000}
# syscall -> index of its mode argument (calls that set a mode without an open flag)
_MODE_ARGUMENT = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "creat": 1, "mknod": 1, "mknodat": 2}
# syscall -> (index of its flags argument, index of its mode argument)
_OPEN_ARGUMENTS = {"open": (1, 2), "openat": (2, 3)}


def _set_id_rows() -> tuple[SyscallRule, ...]:
    """Refuse every way to give a file a set-user-ID or set-group-ID bit.

    Through an idmapped write bind a file the sandbox creates is owned on the host by the bind's
    owner, often root: a set-uid bit there would leave a set-uid-root program on the host. The
    bind's nosuid flag covers only execution through that mount, not the host's own path to it.
    """
    why = "a set-id bit on a file in a write bind runs as its host owner for any host user"
    rows: list[SyscallRule] = []
    for bit_name, bit in _SET_ID_BITS.items():
        for syscall, mode_index in _MODE_ARGUMENT.items():
            mode = ArgCondition(index=mode_index, op=ArgOp.MASKED_EQ, value=bit, mask=bit)
            rows.append(_deny(syscall, f"{bit_name}: {why}", "FS-53", when=(mode,)))
        for syscall, (flags_index, mode_index) in _OPEN_ARGUMENTS.items():
            mode = ArgCondition(index=mode_index, op=ArgOp.MASKED_EQ, value=bit, mask=bit)
            for flag in _CREATING_FLAGS.values():
                creating = ArgCondition(index=flags_index, op=ArgOp.MASKED_EQ, value=flag, mask=flag)
                rows.append(_deny(syscall, f"{bit_name} on a new file: {why}", "FS-53", when=(creating, mode)))
    rows.append(
        _deny(
            "openat2",
            "its mode sits in a struct BPF cannot read (set-id bits); ENOSYS makes callers use openat",
            "FS-53",
            errno_value=errno.ENOSYS,
        )
    )
    return tuple(rows)


def _clone_namespace_rows() -> tuple[SyscallRule, ...]:
    # libseccomp's MASKED_EQ can test one flag per rule ("any of" is not one comparison).
    return tuple(
        _deny(
            "clone",
            f"clone({name}) makes a namespace in which the workload is root",
            "SY-01",
            when=(ArgCondition(index=0, op=ArgOp.MASKED_EQ, value=flag, mask=flag),),
        )
        for name, flag in _CLONE_NEW_FLAGS.items()
    )


def _socket_family_rows(syscall: str, allowed: dict[int, str]) -> tuple[SyscallRule, ...]:
    """Refuse every family but ``allowed``: one EQ row per gap value, one GT row above the top.

    Full 64-bit compares: a family with high bits set is above the top and refused.
    """
    names = "/".join(allowed.values())
    why = f"families other than {names} reach kernel code the netns does not isolate"
    top = max(allowed)
    gaps = [v for v in range(top) if v not in allowed]
    when_rows = [ArgCondition(index=0, op=ArgOp.EQ, value=v) for v in gaps]
    when_rows.append(ArgCondition(index=0, op=ArgOp.GT, value=top))  # NETLINK, PACKET, VSOCK...
    return tuple(_deny(syscall, why, "SY-07", errno_value=errno.EAFNOSUPPORT, when=(cond,)) for cond in when_rows)


def _personality_rows() -> tuple[SyscallRule, ...]:
    """Refuse every persona but PER_LINUX (0) and the query (0xffffffff), low 32 bits only.

    A 32-bit word is neither all zeros nor all ones exactly when, going round the word, some bit k
    is 1 and bit k+1 (mod 32) is 0; one MASKED_EQ row per k covers all of them and neither allowed
    value. (Two NE tests on one argument would say it directly; libseccomp refuses that.)
    """
    rows = []
    for k in range(32):
        mask = (1 << k) | (1 << ((k + 1) % 32))
        rows.append(
            _deny(
                "personality",
                "personality flags (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...) weaken the "
                "workload's own hardening; only PER_LINUX and the query pass",
                "SY-11",
                when=(ArgCondition(index=0, op=ArgOp.MASKED_EQ, value=1 << k, mask=mask),),
            )
        )
    return tuple(rows)


SECCOMP_RULES: tuple[SyscallRule, ...] = (
    # Other processes' memory and descriptors.
    *_deny_all(("ptrace",), "reads and writes other processes, defeats every other layer", "PR-03"),
    *_deny_all(
        ("process_vm_readv", "process_vm_writev"),
        "reads or writes another process's memory without ptrace",
        "PR-03",
    ),
    *_deny_all(
        ("pidfd_getfd", "process_madvise", "kcmp"),
        "ptrace-mode access to other processes' descriptors, memory or kernel objects",
        "PR-03",
    ),
    # Mounts: the filesystem view is bwrap's to build, never the workload's.
    *_deny_all(
        (
            "mount",
            "umount2",
            "pivot_root",
            "chroot",
            "move_mount",
            "open_tree",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "mount_setattr",
        ),
        "changes the mount table bwrap built; could uncover or replace hidden paths",
        "FS-17",
    ),
    # Namespaces: a new user namespace gives root-in-namespace and a large kernel surface.
    *_deny_all(("unshare", "setns"), "new or foreign namespaces give in-namespace root", "SY-01"),
    *_clone_namespace_rows(),
    _allow(
        "clone",
        "threads and fork without CLONE_NEW* flags are ordinary work",
        "SY-01",
        when=(ArgCondition(index=0, op=ArgOp.MASKED_EQ, value=0, mask=_CLONE_NEW_ANY),),
    ),
    _deny(
        "clone3",
        "flags sit in a struct BPF cannot read; ENOSYS makes glibc fall back to clone()",
        "SY-02",
        errno_value=errno.ENOSYS,
    ),
    # Kernel attack surface with a long CVE record and no use in a sandboxed task.
    *_deny_all(
        ("io_uring_setup", "io_uring_enter", "io_uring_register"),
        "io_uring does I/O (even socket creation) without the syscalls this filter checks",
        "SY-03",
    ),
    *_deny_all(("userfaultfd",), "stalls kernel page faults, a classic race-exploit aid", "SY-04"),
    *_deny_all(
        ("keyctl", "add_key", "request_key"),
        "kernel keyrings are not namespaced; keys can leak across sandboxes",
        "SY-05",
    ),
    *_deny_all(
        ("bpf", "perf_event_open"),
        "loads code into or observes the kernel; large exploit surface",
        "SY-06",
    ),
    *_deny_all(
        ("kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module"),
        "replaces the kernel or loads and unloads kernel modules",
        "SY-06",
    ),
    *_deny_all(("uselib",), "obsolete a.out loader, old exploit surface", "SY-06"),
    *_deny_all(("iopl", "ioperm"), "raw hardware port I/O", "SY-06"),
    # Set-id files: through an idmapped write bind they would be owned by the bind's host owner.
    *_set_id_rows(),
    # Files outside the mount namespace.
    *_deny_all(
        ("open_by_handle_at", "name_to_handle_at"),
        "file handles open files by inode, bypassing the mount view (the 'shocker' escape)",
        "FS-02",
    ),
    # Terminals: pushing input into the controlling terminal runs commands outside the sandbox.
    *(
        _deny(
            "ioctl",
            f"{name} injects input into a terminal; low 32 bits compared, as the kernel reads",
            "FD-04",
            when=(ArgCondition(index=1, op=ArgOp.MASKED_EQ, value=request, mask=_LOW32),),
        )
        for name, request in (("TIOCSTI", _TIOCSTI), ("TIOCLINUX", _TIOCLINUX))
    ),
    *_deny_all(("vhangup",), "hangs up the controlling terminal", "FD-04"),
    # Sockets.
    *_socket_family_rows("socket", _ALLOWED_SOCKET_FAMILIES),
    *(
        _allow(
            "socket",
            why,
            "SY-07",
            when=(ArgCondition(index=0, op=ArgOp.EQ, value=family),),
        )
        for family, why in (
            (_AF_UNIX, "AF_UNIX: the egress proxy is a Unix socket bound into the sandbox"),
            (_AF_INET, "AF_INET: loopback only; the empty netns, not seccomp, isolates IP"),
            (_AF_INET6, "AF_INET6: loopback only; the empty netns, not seccomp, isolates IP"),
        )
    ),
    *_socket_family_rows("socketpair", {_AF_UNIX: "AF_UNIX"}),
    _allow(
        "socketpair",
        "AF_UNIX pairs: test runners, build tools and subprocess pipes need them",
        "IP-07",
        when=(ArgCondition(index=0, op=ArgOp.EQ, value=_AF_UNIX),),
    ),
    # Process hardening that the workload must not switch off.
    *_personality_rows(),
    *(
        _allow(
            "personality",
            why,
            "SY-11",
            when=(ArgCondition(index=0, op=ArgOp.EQ, value=value),),
        )
        for value, why in (
            (_PER_LINUX, "PER_LINUX is the default persona; setting it changes nothing"),
            (_PERSONALITY_QUERY, "0xffffffff only reads the persona (libc, runtimes do)"),
        )
    ),
    _deny(
        "seccomp",
        "a user-notification listener lets the workload supervise syscalls itself",
        "SY-09",
        when=(
            ArgCondition(
                index=1,
                op=ArgOp.MASKED_EQ,
                value=_SECCOMP_FILTER_FLAG_NEW_LISTENER,
                mask=_SECCOMP_FILTER_FLAG_NEW_LISTENER,
            ),
        ),
    ),
    _allow(
        "seccomp",
        "nested filters without a listener can only restrict further (browsers, runtimes)",
        "SY-09",
        when=(ArgCondition(index=1, op=ArgOp.MASKED_EQ, value=0, mask=_SECCOMP_FILTER_FLAG_NEW_LISTENER),),
    ),
    *(
        _allow(name, "Landlock only restricts; the in-sandbox supervisor applies it", "FS-13")
        for name in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")
    ),
    *(
        _allow(name, "memory protection keys restrict only the caller's own memory", "SY-11")
        for name in ("pkey_alloc", "pkey_free", "pkey_mprotect")
    ),
    # Host administration: capability-gated in the initial namespace; refuse before the check.
    *_deny_all(("acct",), "switches process accounting to a file", "SY-10"),
    *_deny_all(("swapon", "swapoff"), "changes host swap devices", "SY-10"),
    *_deny_all(("reboot",), "reboots or halts the host, or loads kexec", "SY-10"),
    *_deny_all(
        ("settimeofday", "clock_settime", "adjtimex", "clock_adjtime"),
        "the clock is shared by the whole host",
        "SY-10",
    ),
    *_deny_all(("syslog",), "reads or clears the kernel log (addresses, other tenants)", "PR-05"),
    *_deny_all(("quotactl", "quotactl_fd"), "changes filesystem quotas", "SY-10"),
    *_deny_all(("lookup_dcookie",), "resolves kernel dentry cookies to host paths", "SY-10"),
    *_deny_all(("nfsservctl",), "removed NFS server control, old exploit surface", "SY-10"),
    *_deny_all(("fanotify_init",), "filesystem-wide event monitoring beyond the sandbox", "SY-10"),
)


# --- architectures --------------------------------------------------------------------------


@dataclass(frozen=True)
class SeccompArch:
    """An architecture the table is written for, and what its bad-arch action catches."""

    name: str  # as platform.machine() spells it
    audit_arch: int  # AUDIT_ARCH_* from <linux/audit.h>, libseccomp's SCMP_ARCH_* token
    other_abis: str  # entry points that are not this arch and so hit KILL_PROCESS


SUPPORTED_ARCHES: tuple[SeccompArch, ...] = (
    SeccompArch(
        "x86_64",
        0xC000_003E,
        "i386 via int 0x80 (AUDIT_ARCH_I386) and x32 (nr | 0x40000000) are killed",
    ),
    SeccompArch("aarch64", 0xC000_00B7, "AArch32 compat tasks (AUDIT_ARCH_ARM) are killed"),
)

_BYPASS_ON_ARCH = {
    "i386": "socketcall() and ipc() multiplex socket and SysV calls past the argument rules",
    "i686": "socketcall() and ipc() multiplex socket and SysV calls past the argument rules",
    "armv7l": "socketcall() and ARM private syscalls are not covered by this table",
    "s390x": "clone() swaps its first two arguments, so the CLONE_NEW* rules test the wrong one",
}
BAD_ARCH_ACTION = Action.KILL_PROCESS  # see the module docstring: kill, not errno


def seccomp_arch(arch: str) -> SeccompArch:
    """The ``SUPPORTED_ARCHES`` row for ``arch``.

    Raises:
        UnsupportedHost: ``arch`` is not a supported architecture; the cause names the bypass.
    """
    for row in SUPPORTED_ARCHES:
        if row.name == arch:
            return row
    bypass = _BYPASS_ON_ARCH.get(arch, "syscall numbers, multiplexers and argument order were never checked for it")
    raise UnsupportedHost(
        f"seccomp filter not available for architecture {arch!r}: {bypass}",
        "run on " + " or ".join(a.name for a in SUPPORTED_ARCHES),
    )
