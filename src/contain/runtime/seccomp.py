"""Compiling the seccomp policy: ``plan_filter`` resolves each row of ``SECCOMP_RULES``
(``runtime/seccomp_rules.py``) on one architecture, ``compile_filter`` turns the plan into classic
BPF through libseccomp (ctypes, loaded on first use), ``describe_filter_pfc`` into libseccomp's
pseudo filter code for debugging.

Nothing here touches the current process: the launcher passes the BPF to ``bwrap --seccomp FD``,
and bwrap installs it with ``no_new_privs`` right before ``execve``. What the rows enforce, what
they do not, and why other architectures are killed is written in ``runtime/seccomp_rules.py``.

What is NOT done here: choosing rows (the table does), or filtering anything libseccomp does not
know (a syscall unknown to it is an error, never a silent skip).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass

from contain._log import LazyLogger
from contain.errors import UnsupportedHost
from contain.runtime.seccomp_rules import BAD_ARCH_ACTION, SECCOMP_RULES, Action, SeccompArch, SyscallRule, seccomp_arch

__all__ = [
    "FilterPlan",
    "compile_filter",
    "describe_filter_pfc",
    "plan_filter",
]

log = LazyLogger(__name__)

_LIBSECCOMP_FIX = "install or upgrade the Debian package libseccomp2 (>= 2.5): apt-get install libseccomp2"


# --- libseccomp through ctypes ----------------------------------------------------------------

_SCMP_ACT_KILL_PROCESS = 0x8000_0000
_SCMP_ACT_ALLOW = 0x7FFF_0000
_SCMP_ACT_ERRNO = 0x0005_0000
_SCMP_FLTATR_ACT_BADARCH = 2
_SCMP_FLTATR_CTL_OPTIMIZE = 8  # 2 = binary tree: O(log n) compares for the allowed majority
_NR_SCMP_ERROR = -1


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


class _ScmpVersion(ctypes.Structure):
    _fields_ = (("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint))


_PROTOTYPES: dict[str, tuple[object, list[object]]] = {
    "seccomp_version": (ctypes.POINTER(_ScmpVersion), []),
    "seccomp_init": (ctypes.c_void_p, [ctypes.c_uint32]),
    "seccomp_release": (None, [ctypes.c_void_p]),
    "seccomp_arch_add": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint32]),
    "seccomp_arch_remove": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint32]),
    "seccomp_arch_native": (ctypes.c_uint32, []),
    "seccomp_attr_set": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]),
    "seccomp_syscall_resolve_name_arch": (ctypes.c_int, [ctypes.c_uint32, ctypes.c_char_p]),
    "seccomp_syscall_resolve_name": (ctypes.c_int, [ctypes.c_char_p]),
    "seccomp_rule_add_exact_array": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ScmpArgCmp)],
    ),
    "seccomp_export_bpf": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "seccomp_export_pfc": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
}


def _find_by_ldconfig() -> str | None:
    return ctypes.util.find_library("seccomp")


@functools.cache
def _libseccomp(path: str | None) -> ctypes.CDLL:
    """Load libseccomp once per path and declare the prototypes we call (lazy: first use)."""
    # By soname first (a dlopen search, no subprocess); ctypes.util runs ldconfig, so last.
    candidates = [lambda: path] if path else [lambda: "libseccomp.so.2", _find_by_ldconfig]
    failure = "not found"
    for find in candidates:
        candidate = find()
        if not candidate:
            continue
        try:
            lib = ctypes.CDLL(candidate, use_errno=True)
        except OSError as exc:
            failure = str(exc)
            continue
        try:
            for name, (restype, argtypes) in _PROTOTYPES.items():
                func = getattr(lib, name)
                func.restype = restype
                func.argtypes = argtypes
        except AttributeError as exc:
            raise UnsupportedHost(f"libseccomp at {candidate} lacks {exc.name or exc}", _LIBSECCOMP_FIX) from exc
        return lib
    raise UnsupportedHost(f"cannot load libseccomp ({path or 'libseccomp.so.2'}): {failure}", _LIBSECCOMP_FIX)


def _version(lib: ctypes.CDLL) -> str:
    v = lib.seccomp_version().contents
    return f"{v.major}.{v.minor}.{v.micro}"


def _check(rc: int, call: str) -> None:
    """libseccomp returns -errno on failure; translate it where it enters."""
    if rc < 0:
        code = -rc
        raise UnsupportedHost(
            f"libseccomp {call} failed: {errno.errorcode.get(code, code)} ({os.strerror(code)})",
            _LIBSECCOMP_FIX,
        )


# --- plan, then compile ------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterPlan:
    """The rows that become BPF on one arch, with their syscall numbers; pure data."""

    arch: SeccompArch
    denies: tuple[tuple[SyscallRule, int], ...]  # rows compiled, with the arch's syscall number
    allows: tuple[SyscallRule, ...]  # deliberate exceptions; ALLOW is the default, nothing to add
    absent_on_arch: tuple[SyscallRule, ...]  # the arch has no such syscall: nothing to refuse


def _refuse_conflicts(rules: Sequence[SyscallRule]) -> None:
    """Raise on rows libseccomp would merge silently (it keeps the first and drops the other).

    Two rows conflict when they name the same syscall, differ in outcome, and either have the
    same conditions or one of them has none. Partial overlaps are left to the unit tests, which
    run every row's witness arguments through the compiled BPF.
    """
    by_syscall: dict[str, list[SyscallRule]] = {}
    for rule in rules:
        for other in by_syscall.setdefault(rule.syscall, []):
            same_outcome = (other.action, other.errno_value) == (rule.action, rule.errno_value)
            overlap = other.when == rule.when or not other.when or not rule.when
            if overlap and not same_outcome:
                raise ValueError(
                    f"rows for {rule.syscall} conflict: {other.describe_action()} "
                    f"({other.why}) and {rule.describe_action()} ({rule.why})"
                )
        by_syscall[rule.syscall].append(rule)


def plan_filter(
    rules: Sequence[SyscallRule] = SECCOMP_RULES,
    *,
    arch: str,
    libseccomp_path: str | None = None,
) -> FilterPlan:
    """Resolve each row's syscall on ``arch`` and sort the rows into what compiles and what not.

    A syscall the arch lacks (libseccomp knows it, as a negative pseudo number) cannot be called
    there, so its row is recorded in ``absent_on_arch`` and logged. A syscall libseccomp does not
    know at all is an error: the row must not silently vanish.

    Raises:
        UnsupportedHost: unsupported arch, libseccomp missing, or a syscall unknown to it.
        ValueError: two rows for one syscall conflict (see ``_refuse_conflicts``).
    """
    target = seccomp_arch(arch)
    _refuse_conflicts(rules)
    lib = _libseccomp(libseccomp_path)
    denies: list[tuple[SyscallRule, int]] = []
    allows: list[SyscallRule] = []
    absent: list[SyscallRule] = []
    numbers: dict[str, int] = {}
    for rule in rules:
        if rule.syscall not in numbers:
            numbers[rule.syscall] = lib.seccomp_syscall_resolve_name_arch(
                target.audit_arch, rule.syscall.encode("ascii")
            )
        nr = numbers[rule.syscall]
        if nr == _NR_SCMP_ERROR:
            raise UnsupportedHost(
                f"libseccomp {_version(lib)} does not know syscall {rule.syscall!r} (rule: {rule.why})",
                _LIBSECCOMP_FIX,
            )
        if nr < 0:
            absent.append(rule)
        elif rule.action is Action.ALLOW:
            allows.append(rule)
        else:
            denies.append((rule, nr))
    if absent:
        log.debug("seccomp: %s has no %s; rows skipped", arch, sorted({r.syscall for r in absent}))
    return FilterPlan(target, tuple(denies), tuple(allows), tuple(absent))


def _action_token(action: Action, errno_value: int | None = None) -> int:
    if action is Action.ERRNO:
        assert errno_value is not None
        return _SCMP_ACT_ERRNO | errno_value
    if action is Action.KILL_PROCESS:
        return _SCMP_ACT_KILL_PROCESS
    raise ValueError("ALLOW is the filter's default and compiles to nothing")


def _export(plan: FilterPlan, libseccomp_path: str | None, *, export: str) -> bytes:
    """Build a libseccomp context from ``plan`` and export it (``bpf`` or ``pfc``) via a memfd."""
    lib = _libseccomp(libseccomp_path)
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise UnsupportedHost("libseccomp seccomp_init failed", _LIBSECCOMP_FIX)
    try:
        native = lib.seccomp_arch_native()
        if native != plan.arch.audit_arch:
            _check(lib.seccomp_arch_add(ctx, plan.arch.audit_arch), "seccomp_arch_add")
            _check(lib.seccomp_arch_remove(ctx, native), "seccomp_arch_remove")
        _check(
            lib.seccomp_attr_set(ctx, _SCMP_FLTATR_ACT_BADARCH, _action_token(BAD_ARCH_ACTION)),
            "seccomp_attr_set(ACT_BADARCH)",
        )
        _check(
            lib.seccomp_attr_set(ctx, _SCMP_FLTATR_CTL_OPTIMIZE, 2),
            "seccomp_attr_set(CTL_OPTIMIZE)",
        )
        for rule, nr in plan.denies:
            if native != plan.arch.audit_arch:
                # Rules take the *native* number (or a pseudo number); libseccomp translates it
                # for each arch in the filter. Passing the target's own number would be wrong.
                nr = lib.seccomp_syscall_resolve_name(rule.syscall.encode("ascii"))
            conds = (_ScmpArgCmp * max(len(rule.when), 1))(
                *(_ScmpArgCmp(c.index, int(c.op), *c.datums()) for c in rule.when)
            )
            rc = lib.seccomp_rule_add_exact_array(
                ctx, _action_token(rule.action, rule.errno_value), nr, len(rule.when), conds
            )
            _check(rc, f"seccomp_rule_add_exact_array({rule.syscall})")
        fd = os.memfd_create(f"contain-seccomp-{export}", os.MFD_CLOEXEC)
        try:
            _check(getattr(lib, f"seccomp_export_{export}")(ctx, fd), f"seccomp_export_{export}")
            size = os.lseek(fd, 0, os.SEEK_CUR)
            return os.pread(fd, size, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


@functools.lru_cache(maxsize=16)
def _compile_cached(rules: tuple[SyscallRule, ...], arch: str, libseccomp_path: str | None) -> bytes:
    plan = plan_filter(rules, arch=arch, libseccomp_path=libseccomp_path)
    bpf = _export(plan, libseccomp_path, export="bpf")
    if not bpf or len(bpf) % 8:
        raise UnsupportedHost(
            f"libseccomp seccomp_export_bpf produced {len(bpf)} bytes, not whole instructions",
            _LIBSECCOMP_FIX,
        )
    return bpf


def compile_filter(
    rules: Sequence[SyscallRule] = SECCOMP_RULES,
    *,
    arch: str,
    libseccomp_path: str | None = None,
) -> bytes:
    """Compile ``rules`` into raw BPF (``struct sock_filter[]``) for ``bwrap --seccomp FD``.

    Results are cached per (rules, arch, library), so repeated sandboxes do not recompile.

    Args:
        rules: the table; the default is the project's policy.
        arch: the target architecture, e.g. ``HostFacts.arch``.
        libseccomp_path: ``HostFacts.libseccomp_path``; None loads ``libseccomp.so.2`` by soname.

    Returns:
        The filter program, a non-empty multiple of 8 bytes; other arches are killed.

    Raises:
        UnsupportedHost: unsupported arch, libseccomp missing or too old, or a seccomp_* call
            failed.
        ValueError: two rows for one syscall conflict.
    """
    return _compile_cached(tuple(rules), arch, libseccomp_path)


def describe_filter_pfc(
    rules: Sequence[SyscallRule] = SECCOMP_RULES,
    *,
    arch: str,
    libseccomp_path: str | None = None,
) -> str:
    """The filter as libseccomp's pseudo filter code (``seccomp_export_pfc``), for debugging.

    Raises:
        UnsupportedHost: as ``compile_filter``.
    """
    plan = plan_filter(tuple(rules), arch=arch, libseccomp_path=libseccomp_path)
    return _export(plan, libseccomp_path, export="pfc").decode("utf-8", errors="replace")
