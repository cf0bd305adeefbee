"""Facts about the host paths a boundary names, gathered before planning.

All file-system I/O of planning happens here (lstat, realpath); ``contain.runtime.bwrap`` then
plans from these facts without touching the disk. The checks that refuse a launch live here too,
because they are facts about the host: a missing required path, a protected path that is a symlink
(a decoy left by a previous task, ESCAPE_CATALOG FS-10), a write root the sandbox user cannot write.

Does not create anything on the host.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from contain.boundary.kinds import PROTECTED_PATHS, FileAccess
from contain.boundary.plain import PlainBoundary, PlainFileRule
from contain.errors import SandboxStartError
from contain.runtime.bound_sockets import find_unix_sockets

__all__ = [
    "NESTED_PROTECTED_NAMES",
    "BindFacts",
    "Mask",
    "PathFacts",
    "gather_path_facts",
    "host_path_of",
    "is_under_write_bind",
    "protected_entries",
    "revert_nested_creations",
    "scan_nested_protected",
]


@dataclass(frozen=True)
class Mask:
    """A protected path inside a write bind. ``exists`` ones are re-bound read-only; missing ones
    are covered by an empty read-only placeholder so they cannot be created."""

    sandbox_path: str
    host_path: str
    kind: str  # "dir" or "file"
    exists: bool


@dataclass(frozen=True)
class BindFacts:
    """One read or write bind, resolved."""

    rule: PlainFileRule
    host_realpath: str
    is_dir: bool
    masks: tuple[Mask, ...] = ()
    # write binds: protected names found below the top level at start (relative paths), or None
    # when the tree was too large to scan (then creations below the top are not reverted)
    nested: frozenset[str] | None = None


@dataclass(frozen=True)
class PathFacts:
    """Resolved binds plus the optional ones that were skipped because they are missing."""

    binds: tuple[BindFacts, ...]
    skipped: tuple[str, ...]
    # `block` entries: sandbox path -> "dir" | "file" | "missing" (missing ones need no mask
    # under a read bind; under a write bind they are masked as a directory so none is created)
    blocks: dict[str, str] = field(default_factory=dict)
    # sandbox paths of Unix sockets found in bound trees and not allowed: covered by an empty
    # mode-0000 file so connect() fails (see runtime/bound_sockets.py)
    hidden_sockets: tuple[str, ...] = ()

    def created_placeholders(self) -> list[Mask]:
        """Paths that did not exist but get a mask; bwrap creates their mount points on the host.

        That is missing protected paths, and ``block`` entries for missing paths under a write
        bind (masked as a directory so that nothing can be created there).
        """
        placeholders = [m for b in self.binds for m in b.masks if not m.exists]
        for path, kind in self.blocks.items():
            host = host_path_of(path, self.binds)
            if kind == "missing" and host is not None and is_under_write_bind(path, self.binds):
                placeholders.append(Mask(path, host, "dir", exists=False))
        return placeholders


def protected_entries(rule: PlainFileRule) -> list[tuple[str, str]]:
    """(relative path, kind) pairs protected inside a write bind: the defaults plus ``protect``."""
    entries: list[tuple[str, str]] = [(p.path, p.kind) for p in PROTECTED_PATHS]
    known = {p for p, _ in entries}
    entries += [(p, "file") for p in rule.protect if p not in known]
    return entries


def _masks_for(rule: PlainFileRule, host_root: str) -> tuple[Mask, ...]:
    masks: dict[str, Mask] = {}
    for relative, kind in protected_entries(rule):
        parts = relative.split("/")
        current = host_root
        for index, part in enumerate(parts):
            current = os.path.join(current, part)
            try:
                info = os.lstat(current)
            except FileNotFoundError:
                # Mask the first missing component: masking a deeper path would make bwrap
                # create its parents on the host.
                first_missing = "/".join(parts[: index + 1])
                mask_kind = kind if index == len(parts) - 1 else "dir"
                masks.setdefault(
                    first_missing,
                    Mask(f"{rule.path}/{first_missing}", current, mask_kind, exists=False),
                )
                break
            except OSError as exc:
                raise SandboxStartError(
                    f"cannot inspect protected path {current}: {exc.strerror}",
                    "check the permissions of the write bind",
                ) from exc
            if stat.S_ISLNK(info.st_mode):
                raise SandboxStartError(
                    f"protected path {current} is a symlink (to {os.readlink(current)!r}); "
                    "a symlink here could redirect the protection to a decoy",
                    f"replace {current} with a real {'directory' if kind == 'dir' else 'file'} or remove it",
                )
            if index == len(parts) - 1:
                is_dir = stat.S_ISDIR(info.st_mode)
                masks[relative] = Mask(f"{rule.path}/{relative}", current, "dir" if is_dir else "file", exists=True)
            elif not stat.S_ISDIR(info.st_mode):
                break  # e.g. `.git` is a file (worktree); nothing beneath it can be created
    return tuple(sorted(masks.values(), key=lambda m: m.sandbox_path))


def _check_writable_by(path: str, info: os.stat_result, uid: int) -> None:
    if uid == info.st_uid or info.st_mode & stat.S_IWOTH:
        return
    raise SandboxStartError(
        f"write bind {path} is owned by uid {info.st_uid} and not writable by the sandbox user (host uid {uid})",
        f"run contain as the owner of {path}, or give uid {uid} write access (chown or setfacl)",
    )


def _check_reachable_by(path: str, uid: int, gid: int, *, want_write: bool) -> None:
    """Refuse early, naming the directory, when the sandbox user cannot reach a bind source."""
    current = "/"
    for part in [p for p in path.split("/") if p]:
        info = os.stat(current)
        if not _has_permission(info, uid, gid, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
            raise SandboxStartError(
                f"the sandbox user (host uid {uid}) cannot enter {current} (mode {stat.S_IMODE(info.st_mode):04o}) "
                f"on the way to {path}",
                f"bind a path outside {current}, run contain as the owner, or allow traversal (chmod o+x {current})",
            )
        current = os.path.join(current, part)
    info = os.stat(path)
    if not _has_permission(info, uid, gid, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH):
        raise SandboxStartError(
            f"the sandbox user (host uid {uid}) cannot read {path} (mode {stat.S_IMODE(info.st_mode):04o})",
            f"make it readable (chmod o+r {path}) or run contain as its owner",
        )
    if want_write:
        _check_writable_by(path, info, uid)


def _has_permission(info: os.stat_result, uid: int, gid: int, user_bit: int, group_bit: int, other_bit: int) -> bool:
    if uid == 0:
        return True
    if info.st_uid == uid:
        return bool(info.st_mode & user_bit)
    if info.st_gid == gid:
        return bool(info.st_mode & group_bit)
    return bool(info.st_mode & other_bit)


def gather_path_facts(boundary: PlainBoundary, *, sandbox_host_uid: int, sandbox_host_gid: int) -> PathFacts:
    """Resolve every read and write bind of ``boundary``.

    Args:
        boundary: the validated boundary (host paths already absolute).
        sandbox_host_uid: the host uid the sandbox runs as, for the permission checks.
        sandbox_host_gid: its gid.

    Raises:
        SandboxStartError: a required path is missing, a protected path is a symlink, or a write
            root is not writable by the sandbox user.
    """
    binds: list[BindFacts] = []
    skipped: list[str] = []
    for rule in boundary.files:
        if rule.access not in (FileAccess.READ, FileAccess.WRITE):
            continue
        assert rule.host is not None  # guaranteed by FileRule validation
        try:
            real = os.path.realpath(rule.host, strict=True)
            info = os.stat(real)
        except OSError as exc:
            if not rule.required:
                skipped.append(rule.path)
                continue
            raise SandboxStartError(
                f"host path {rule.host} for {rule.path} does not exist or cannot be read ({exc.strerror})",
                "create it, fix the path, or set `required: false` on that files entry",
            ) from exc
        masks: tuple[Mask, ...] = ()
        if rule.access is FileAccess.WRITE:
            if not stat.S_ISDIR(info.st_mode):
                raise SandboxStartError(
                    f"write bind {rule.host} is not a directory",
                    "bind a directory for write access; bind single files with access: read",
                )
            masks = _masks_for(rule, real)
        _check_reachable_by(real, sandbox_host_uid, sandbox_host_gid, want_write=rule.access is FileAccess.WRITE)
        nested = None
        if rule.access is FileAccess.WRITE:
            nested = scan_nested_protected(real)
            masks = masks + _nested_masks(rule, real, nested or frozenset())
        binds.append(BindFacts(rule, real, stat.S_ISDIR(info.st_mode), masks, nested))
    return PathFacts(tuple(binds), tuple(skipped), _block_kinds(boundary, binds), _hidden_sockets(binds))


def _hidden_sockets(binds: list[BindFacts]) -> tuple[str, ...]:
    """Sandbox paths of the sockets in directory binds that their rule does not allow.

    A socket under a deeper bind's sandbox path is left to that bind's own scan: that bind hides
    what the socket's path shows inside.
    """
    hidden: list[str] = []
    for bind in binds:
        if not bind.is_dir:
            continue
        top = bind.rule.path.rstrip("/")
        for relative in find_unix_sockets(bind.host_realpath):
            if relative in bind.rule.allow_sockets:
                continue
            inside = f"{top}/{relative}"
            if not any(_is_deeper_bind(other.rule.path, top, inside) for other in binds):
                hidden.append(inside)
    return tuple(sorted(hidden))


def _is_deeper_bind(other: str, top: str, inside: str) -> bool:
    other = other.rstrip("/")
    return other != top and other.startswith(top + "/") and (inside == other or inside.startswith(other + "/"))


# Names that are protected at the top of a write bind and, for existing ones, below it too; a new
# one created below the top during a session is removed at close (see scan_nested_protected).
NESTED_PROTECTED_NAMES = frozenset(p.path.split("/")[0] for p in PROTECTED_PATHS)
MAX_SCAN_ENTRIES = 200_000


def scan_nested_protected(root: str, *, limit: int | None = None) -> frozenset[str] | None:
    """Relative paths of entries named like a protected path below the top level of ``root``.

    A nested ``.git`` (``git init sub/``) or ``.envrc`` runs code as the user the next time they
    use that directory, which mount masks fixed at start cannot foresee. Symlinks are listed, never
    followed; protected directories are not descended into.

    Returns:
        The set, or None when the tree has more than ``limit`` entries (not scanned).
    """
    limit = MAX_SCAN_ENTRIES if limit is None else limit
    found: set[str] = set()
    seen = 0
    for directory, dirnames, filenames in os.walk(root):
        relative_dir = os.path.relpath(directory, root)
        for name in dirnames + filenames:
            seen += 1
            if seen > limit:
                return None
            if name in NESTED_PROTECTED_NAMES and relative_dir != ".":
                found.add(os.path.join(relative_dir, name))
        dirnames[:] = sorted(d for d in dirnames if d not in NESTED_PROTECTED_NAMES)
    return frozenset(found)


def _nested_masks(rule: PlainFileRule, host_root: str, nested: frozenset[str]) -> tuple[Mask, ...]:
    """Read-only re-binds for protected entries that already exist below the top level."""
    masks = []
    for relative in sorted(nested):
        host = os.path.join(host_root, relative)
        info = os.lstat(host)
        if stat.S_ISLNK(info.st_mode):
            continue  # a re-bind would follow it; the link itself is inside the writable bind
        if os.path.basename(relative) == ".git" and stat.S_ISDIR(info.st_mode):
            targets = [
                r for r in (f"{relative}/hooks", f"{relative}/config") if os.path.lexists(os.path.join(host_root, r))
            ]
        else:
            targets = [relative]
        for target in targets:
            kind = "dir" if os.path.isdir(os.path.join(host_root, target)) else "file"
            masks.append(Mask(f"{rule.path}/{target}", os.path.join(host_root, target), kind, exists=True))
    return tuple(masks)


def revert_nested_creations(facts: PathFacts) -> list[str]:
    """Remove protected names created below the top of write binds since the scan at start.

    Returns:
        One line per removed path, for the record; paths that could not be removed are named too.
    """
    removed: list[str] = []
    for bind in facts.binds:
        if bind.rule.access is not FileAccess.WRITE:
            continue
        if bind.nested is None:
            removed.append(
                f"{bind.rule.path}: more than {MAX_SCAN_ENTRIES} entries at start; "
                "protected names created below the top were not checked"
            )
            continue
        now = scan_nested_protected(bind.host_realpath)
        if now is None:
            removed.append(
                f"{bind.rule.path}: tree grew past {MAX_SCAN_ENTRIES} entries; new nested protected names not checked"
            )
            continue
        for relative in sorted(now - bind.nested):
            host = os.path.join(bind.host_realpath, relative)
            try:
                if os.path.isdir(host) and not os.path.islink(host):
                    import shutil  # rare: only when a task created a protected name

                    shutil.rmtree(host)
                else:
                    os.unlink(host)
                removed.append(f"removed {bind.rule.path}/{relative}, created by the task (a protected name)")
            except OSError as exc:
                removed.append(f"could not remove {bind.rule.path}/{relative}: {exc.strerror}")
    return removed


def _block_kinds(boundary: PlainBoundary, binds: list[BindFacts]) -> dict[str, str]:
    kinds: dict[str, str] = {}
    for rule in boundary.files:
        if rule.access is not FileAccess.BLOCK:
            continue
        host = host_path_of(rule.path, binds)
        if host is None:
            continue  # its bind was optional and skipped
        try:
            info = os.lstat(host)
        except FileNotFoundError:
            kinds[rule.path] = "missing"
            continue
        if stat.S_ISLNK(info.st_mode):
            raise SandboxStartError(
                f"blocked path {host} is a symlink; masking it would hide the link, not its target",
                f"block the target instead, or remove the symlink {host}",
            )
        kinds[rule.path] = "dir" if stat.S_ISDIR(info.st_mode) else "file"
    return kinds


def is_under_write_bind(path: str, binds: tuple[BindFacts, ...] | list[BindFacts]) -> bool:
    return any(b.rule.access is FileAccess.WRITE and path.startswith(b.rule.path.rstrip("/") + "/") for b in binds)


def host_path_of(sandbox_path: str, binds: list[BindFacts] | tuple[BindFacts, ...]) -> str | None:
    """Map a sandbox path inside a bind back to the host path it shows (deepest bind wins)."""
    best: tuple[str, str] | None = None
    for bind in binds:
        root = bind.rule.path.rstrip("/") + "/"
        if sandbox_path.startswith(root) and (best is None or len(root) > len(best[0])):
            best = (root, bind.host_realpath)
    if best is None:
        return None
    return os.path.join(best[1], sandbox_path[len(best[0]) :])
