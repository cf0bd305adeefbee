"""Write binds before and after the workload: placeholders, and the host-side audit at close.

``prepare_write_binds`` runs before the sandbox exists. It opens each write bind's root with
``O_NOFOLLOW`` (checking it is still the directory ``gather_path_facts`` saw), creates the
placeholders the masks need (so that bwrap never creates anything on the host by path), and
records, for everything it will act on later, a descriptor and the (dev, ino) it had. ``close``
runs after every sandbox process is dead and touches the host only through those descriptors:

  1. each git directory planned as a unit: names the run created that git would honour
     (anything not a ``WRITABLE`` row of ``GIT_DIR_RULES``) are removed;
  2. protected names created below the top (a new ``sub/.git``, ``.envrc``…) are removed, and a
     directory that became a bare repository loses its HEAD (git no longer takes it for one);
  3. placeholders are removed if they are still the entry created, still empty, and no other
     sandbox on the same bind holds them (each sandbox holds a shared ``flock`` on every
     placeholder it uses; the last one out removes it, so a concurrent run never loses a mask).

Enforces: no host path string is trusted after the workload ran; nothing outside a write bind is
touched; every removal is reported as a finding. Does not protect the host *during* the run
against names created below the top level (a ``git`` run by the user inside ``sub/`` while the task
runs sees the task's ``sub/.git``); mounts protect the top-level git directory and those that
existed at start for the whole run.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from contain._log import LazyLogger
from contain.boundary.kinds import FileAccess, GitMetaAccess
from contain.errors import SandboxStartError
from contain.runtime.fdtree import DIR_FLAGS, identity, open_dir_at, remove_tree_at
from contain.runtime.paths import (
    BindFacts,
    Mask,
    PathFacts,
    git_rule_for,
    host_path_of,
    is_under_write_bind,
    scan_protected,
)

__all__ = ["WriteBindGuard", "prepare_write_binds"]

log = LazyLogger(__name__)

_PLACEHOLDER_DIR_MODE = 0o555
_PLACEHOLDER_FILE_MODE = 0o444
_REMOVE_MAX_ENTRIES = 1_000_000  # a created .git the task filled; removal stops (and says so) past this


@dataclass
class _Placeholder:
    label: str  # sandbox path, for findings and logs
    parent_fd: int
    name: str
    fd: int  # held open with a shared flock for the sandbox's lifetime
    ident: tuple[int, int]
    kind: str
    content: bytes


@dataclass
class _GitUnit:
    label: str  # sandbox path of the git directory
    fd: int
    ident: tuple[int, int]
    names_at_start: frozenset[str]


@dataclass
class _Bind:
    facts: BindFacts
    root_fd: int
    units: list[_GitUnit] = field(default_factory=list)


class WriteBindGuard:
    """Descriptors and identities recorded before the workload ran, for the audit at close.

    Created by ``prepare_write_binds``; ``close()`` must be called exactly once, after every
    sandbox process has exited. It releases every descriptor even when a step fails.
    """

    def __init__(self) -> None:
        self._binds: list[_Bind] = []
        self._placeholders: list[_Placeholder] = []
        self._closed = False

    def close(self, *, workload_ran: bool) -> list[str]:
        """Audit the write binds and remove the placeholders; see the module docstring.

        Args:
            workload_ran: False when the sandbox never ran a command (start failed): only the
                placeholders are removed.

        Returns:
            One line per thing undone or left in place, for the run's findings.
        """
        if self._closed:
            return []
        self._closed = True
        findings: list[str] = []
        steps = [(_audit_git_units, b) for b in self._binds] + [(_revert_nested_creations, b) for b in self._binds]
        try:
            for step, bind in steps if workload_ran else []:
                findings += _reported(step, bind)
            findings += _remove_placeholders(self._placeholders)
        finally:
            for placeholder in self._placeholders:
                _close_quietly(placeholder.fd, placeholder.parent_fd)
            for bind in self._binds:
                _close_quietly(bind.root_fd, *(u.fd for u in bind.units))
        return findings


def _reported(step: Callable[[_Bind], list[str]], bind: _Bind) -> list[str]:
    """Run one audit step; an I/O failure becomes a finding (the run's result must still arrive)."""
    try:
        return step(bind)
    except OSError as exc:
        return [f"{bind.facts.rule.path}: the check after the run failed ({exc}); it may hold task-made git metadata"]


def prepare_write_binds(facts: PathFacts) -> tuple[PathFacts, WriteBindGuard]:
    """Open every write bind, create the placeholders its masks need, and record identities.

    Returns:
        The facts with every placeholder now existing (bwrap binds it read-only and creates
        nothing), and the guard that audits at close.

    Raises:
        SandboxStartError: a write bind changed since its facts were gathered, or a placeholder
            could not be created. What was created so far is removed first.
    """
    guard = WriteBindGuard()
    try:
        binds = tuple(
            _prepare_bind(bind, guard) if bind.rule.access is FileAccess.WRITE else bind for bind in facts.binds
        )
        blocks = dict(facts.blocks)
        for path, kind in facts.blocks.items():
            host = host_path_of(path, facts.binds)
            if kind == "missing" and host is not None and is_under_write_bind(path, facts.binds):
                bind = max(
                    (b for b in guard._binds if host.startswith(b.facts.host_realpath.rstrip("/") + "/")),
                    key=lambda b: len(b.facts.host_realpath),
                )
                _create_placeholder(bind, Mask(path, host, "dir", exists=False), guard)
                blocks[path] = "dir"
        return replace(facts, binds=binds, blocks=blocks), guard
    except BaseException:
        guard.close(workload_ran=False)
        raise


def _prepare_bind(bind: BindFacts, guard: WriteBindGuard) -> BindFacts:
    try:
        root_fd = os.open(bind.host_realpath, DIR_FLAGS)
    except OSError as exc:
        raise SandboxStartError(
            f"cannot open write bind {bind.host_realpath}: {exc.strerror}", "check the path"
        ) from exc
    state = _Bind(bind, root_fd)
    guard._binds.append(state)
    if identity(os.fstat(root_fd)) != bind.root_identity:
        raise SandboxStartError(
            f"write bind {bind.host_realpath} was replaced while the sandbox was being prepared",
            "make sure nothing else renames the directory, then run again",
        )
    masks = tuple(
        replace(mask, exists=True) if _create_placeholder(state, mask, guard) else mask for mask in bind.masks
    )
    for mask in masks:
        if mask.exists and not mask.immovable:
            _adopt_if_placeholder(state, mask, guard)
    for relative in bind.git_dirs:
        fd = _open_relative(root_fd, relative)
        label = f"{bind.rule.path.rstrip('/')}/{relative}".rstrip("/")
        unit = _GitUnit(label, fd, identity(os.fstat(fd)), frozenset())
        state.units.append(unit)  # owned by the guard from here: closed even if listing fails
        unit.names_at_start = frozenset(os.listdir(fd))  # after the placeholders: they are the unit's own
    return replace(bind, masks=masks)


def _relative_of(bind: _Bind, host_path: str) -> str:
    return os.path.relpath(host_path, bind.facts.host_realpath)


def _open_relative(root_fd: int, relative: str) -> int:
    """Open a directory ``relative`` to ``root_fd`` one component at a time (O_NOFOLLOW each)."""
    fd = os.dup(root_fd)
    for part in [p for p in relative.split("/") if p and p != "."]:
        try:
            child = open_dir_at(fd, part)
        finally:
            os.close(fd)
        fd = child
    return fd


def _create_placeholder(bind: _Bind, mask: Mask, guard: WriteBindGuard) -> bool:
    """Create the placeholder for a missing mask (or adopt another sandbox's). Returns whether it did."""
    if mask.exists:
        return False
    parent_rel, _, name = _relative_of(bind, mask.host_path).rpartition("/")
    parent_fd = _open_relative(bind.root_fd, parent_rel)
    try:
        fd = _make_or_adopt(parent_fd, name, mask)
    except OSError as exc:
        os.close(parent_fd)
        raise SandboxStartError(
            f"cannot create the placeholder {mask.host_path} for the protected path {mask.sandbox_path}: "
            f"{exc.strerror}",
            "remove whatever is in its place, or check the write bind's permissions",
        ) from exc
    fcntl.flock(fd, fcntl.LOCK_SH)  # held until close: tells other sandboxes it is in use
    guard._placeholders.append(
        _Placeholder(mask.sandbox_path, parent_fd, name, fd, identity(os.fstat(fd)), mask.kind, mask.placeholder)
    )
    return True


def _adopt_if_placeholder(bind: _Bind, mask: Mask, guard: WriteBindGuard) -> None:
    """Share an existing entry that is another sandbox's live placeholder (or one left behind).

    Without this, the first sandbox to close would remove it while this one still masks it, and
    the kernel would detach this sandbox's mount from the removed entry: the name would become
    creatable again in the middle of the run.
    """
    if any(p.label == mask.sandbox_path for p in guard._placeholders):
        return
    parent_rel, _, name = _relative_of(bind, mask.host_path).rpartition("/")
    parent_fd = _open_relative(bind.root_fd, parent_rel)
    fd = _open_entry(parent_fd, name)
    if fd is None or not _is_placeholder(fd, mask.kind, mask.placeholder):
        _close_quietly(parent_fd, *([fd] if fd is not None else []))
        return
    fcntl.flock(fd, fcntl.LOCK_SH)
    guard._placeholders.append(
        _Placeholder(mask.sandbox_path, parent_fd, name, fd, identity(os.fstat(fd)), mask.kind, mask.placeholder)
    )


def _make_or_adopt(parent_fd: int, name: str, mask: Mask) -> int:
    """Create the placeholder; if another sandbox just did, use theirs when it is one."""
    try:
        if mask.kind == "dir":
            os.mkdir(name, _PLACEHOLDER_DIR_MODE, dir_fd=parent_fd)
            fd = open_dir_at(parent_fd, name)
            os.fchmod(fd, _PLACEHOLDER_DIR_MODE)
            return fd
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, _PLACEHOLDER_FILE_MODE, dir_fd=parent_fd)
        try:
            os.write(fd, mask.placeholder)
            os.fchmod(fd, _PLACEHOLDER_FILE_MODE)
        finally:
            os.close(fd)
        reader = _open_entry(parent_fd, name)  # read-only: the descriptor held for the lock and checks
        if reader is None:
            raise OSError(errno.ENOENT, "the placeholder vanished after it was created")
        return reader
    except FileExistsError:
        existing = _open_entry(parent_fd, name)
        if existing is None or not _is_placeholder(existing, mask.kind, mask.placeholder):
            if existing is not None:
                os.close(existing)
            raise
        return existing


def _open_entry(parent_fd: int, name: str) -> int | None:
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent_fd)
    except OSError:
        return None


def _is_placeholder(fd: int, kind: str, content: bytes) -> bool:
    """Whether the entry at ``fd`` still looks exactly like a placeholder contain made."""
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        return False
    if kind == "dir":
        return stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == _PLACEHOLDER_DIR_MODE and not os.listdir(fd)
    if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != _PLACEHOLDER_FILE_MODE:
        return False
    return info.st_size == len(content) and os.pread(fd, len(content) + 1, 0) == content


def _remove_placeholders(placeholders: list[_Placeholder]) -> list[str]:
    findings: list[str] = []
    for placeholder in reversed(placeholders):  # children before parents
        try:
            fcntl.flock(placeholder.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.debug("placeholder %s is still used by another sandbox; left to it", placeholder.label)
            continue
        try:
            current = os.stat(placeholder.name, dir_fd=placeholder.parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if identity(current) != placeholder.ident or not _is_placeholder(
            placeholder.fd, placeholder.kind, placeholder.content
        ):
            findings.append(f"left {placeholder.label} in place: it is no longer the empty placeholder contain made")
            continue
        try:
            if placeholder.kind == "dir":
                os.rmdir(placeholder.name, dir_fd=placeholder.parent_fd)
            else:
                os.unlink(placeholder.name, dir_fd=placeholder.parent_fd)
        except OSError as exc:
            findings.append(f"could not remove the placeholder {placeholder.label}: {exc.strerror}")
    return findings


def _audit_git_units(bind: _Bind) -> list[str]:
    """Remove what the run created in each git directory that git would honour (fail closed)."""
    findings: list[str] = []
    for unit in bind.units:
        if identity(os.fstat(unit.fd)) != unit.ident:  # cannot happen for an open fd; a tripwire
            findings.append(f"{unit.label}: not the directory recorded at start; not audited")
            continue
        for name in sorted(set(os.listdir(unit.fd)) - unit.names_at_start):
            rule = git_rule_for(name)
            if rule is not None and rule.access in (GitMetaAccess.WRITABLE, GitMetaAccess.IMMOVABLE):
                continue
            reason = rule.why if rule is not None else "a name git may honour that no rule allows"
            findings.append(_remove(unit.fd, name, f"{unit.label}/{name}", f"git metadata: {reason}"))
    return findings


def _revert_nested_creations(bind: _Bind) -> list[str]:
    """Protected names and bare repositories that appeared below the top since the start scan."""
    label = bind.facts.rule.path.rstrip("/")
    start = bind.facts.scan
    if start is None or not start.complete:
        note = start.limit_note if start is not None else "no scan"
        return [f"{label}: {note} at start; protected names created below the top were not checked"]
    now = scan_protected(bind.root_fd)
    findings: list[str] = []
    if not now.complete:
        findings.append(f"{label}: the tree grew past the scan limit ({now.limit_note}); new names not all checked")
    known = set(start.names.values()) | set(start.bare.values())
    for relative, ident in sorted(now.names.items()):
        if ident in known:
            continue  # there at start (perhaps moved with its parent): protected by its masks
        findings.append(_remove_relative(bind, relative, ident, f"{label}/{relative}", "a protected name"))
    for relative, ident in sorted(now.bare.items()):
        if ident in known:
            continue
        path = f"{relative}/HEAD" if relative else "HEAD"
        findings.append(
            _remove_relative(bind, path, None, f"{label}/{path}", "it made a directory git takes for a bare repository")
        )
    return findings


def _remove_relative(bind: _Bind, relative: str, ident: tuple[int, int] | None, label: str, why: str) -> str:
    parent_rel, _, name = relative.rpartition("/")
    try:
        parent_fd = _open_relative(bind.root_fd, parent_rel)
    except OSError as exc:
        return f"could not remove {label}: its parent is no longer a plain directory ({exc.strerror})"
    try:
        if ident is not None:
            current = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            if identity(current) != ident:
                return f"could not remove {label}: it changed while being checked"
        return _remove(parent_fd, name, label, why)
    finally:
        os.close(parent_fd)


def _remove(parent_fd: int, name: str, label: str, why: str) -> str:
    try:
        done = remove_tree_at(parent_fd, name, max_entries=_REMOVE_MAX_ENTRIES)
    except FileNotFoundError:
        return f"{label} vanished before it could be removed"
    except OSError as exc:
        return f"could not remove {label}: {exc.strerror or errno.errorcode.get(exc.errno or 0, '')}"
    if not done:
        return f"could not remove all of {label}: more than {_REMOVE_MAX_ENTRIES} entries"
    return f"removed {label}, created by the task ({why})"


def _close_quietly(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError as exc:  # a double close is a bug worth a log line, never a teardown failure
            log.warning("closing descriptor %d failed: %s", fd, exc)
