"""Facts about the host paths a boundary names, gathered before planning.

All file-system I/O of planning happens here (lstat, realpath); ``contain.runtime.bwrap`` then
plans from these facts without touching the disk. The checks that refuse a launch live here too,
because they are facts about the host: a missing required path, a protected path that is a symlink
(a decoy left by a previous task, ESCAPE_CATALOG FS-10), a write root the sandbox user cannot write.

A repository's git directory inside a write bind is planned as one unit (``GIT_DIR_RULES``): the
directory itself and ``objects`` are immovable (bound onto themselves, so they cannot be renamed,
removed, or replaced by a copy, a gitfile or a symlink), and every name that runs or redirects
code is read-only, or a placeholder when missing. That holds for the top-level ``.git``, for
repositories found below the top at start, and for a write bind that is itself a bare repository.
A ``.git`` that is not a repository (e.g. an empty directory left behind) is masked read-only whole.

Does not create anything on the host (``write_binds.prepare_write_binds`` creates the placeholders),
and does not look at the tree after the workload ran (``write_binds`` does, through descriptors).
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from contain.boundary.kinds import GIT_DIR_RULES, PROTECTED_PATHS, FileAccess, GitDirRule, GitMetaAccess
from contain.boundary.plain import PlainBoundary, PlainFileRule
from contain.errors import SandboxStartError
from contain.runtime.bound_sockets import find_unix_sockets
from contain.runtime.fdtree import DIR_FLAGS, WalkLimits, WalkOutcome, identity, walk

__all__ = [
    "NESTED_PROTECTED_NAMES",
    "BindFacts",
    "Mask",
    "PathFacts",
    "ProtectedScan",
    "bind_source",
    "gather_path_facts",
    "git_rule_for",
    "host_path_of",
    "is_git_dir",
    "is_under_write_bind",
    "protected_entries",
    "scan_protected",
    "with_bind_sources",
]


@dataclass(frozen=True)
class Mask:
    """A protected path inside a write bind. ``exists`` ones are re-bound read-only; missing ones
    are covered by an empty read-only placeholder so they cannot be created."""

    sandbox_path: str
    host_path: str
    kind: str  # "dir" or "file"
    exists: bool
    # bound onto itself writable (a git directory, its objects): it stays where it is, which is
    # what keeps the read-only masks inside it in force (a mount point cannot be renamed)
    immovable: bool = False
    placeholder: bytes = b""  # content of a missing file's placeholder


@dataclass(frozen=True)
class BindFacts:
    """One read or write bind, resolved."""

    rule: PlainFileRule
    host_realpath: str
    is_dir: bool
    masks: tuple[Mask, ...] = ()
    # write binds: protected names and repositories found at start, with their identities
    scan: ProtectedScan | None = None
    root_identity: tuple[int, int] | None = None
    git_dirs: tuple[str, ...] = ()  # relative paths of the git directories planned as units ("" = the root)


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


def _lstat_protected(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SandboxStartError(
            f"cannot inspect protected path {path}: {exc.strerror}", "check the permissions of the write bind"
        ) from exc


def _refuse_symlink(path: str, kind: str) -> SandboxStartError:
    return SandboxStartError(
        f"protected path {path} is a symlink (to {os.readlink(path)!r}); "
        "a symlink here could redirect the protection to a decoy",
        f"replace {path} with a real {'directory' if kind == 'dir' else 'file'} or remove it",
    )


def is_git_dir(path: str) -> bool:
    """Whether git would take ``path`` for a git directory: a regular HEAD, and objects or commondir.

    Mirrors git's ``is_git_directory`` closely enough to plan with: an entry that lacks these is
    not a repository to git, which then keeps looking in the parent directories.
    """
    head = _lstat_protected(os.path.join(path, "HEAD"))
    if head is None or not stat.S_ISREG(head.st_mode):
        return False
    objects = _lstat_protected(os.path.join(path, "objects"))
    commondir = _lstat_protected(os.path.join(path, "commondir"))
    return (objects is not None and stat.S_ISDIR(objects.st_mode)) or commondir is not None


def git_rule_for(name: str) -> GitDirRule | None:
    """The first ``GIT_DIR_RULES`` row whose name (a glob, one component) matches ``name``."""
    for rule in GIT_DIR_RULES:
        if "/" not in rule.name and rule.name != "." and fnmatch.fnmatchcase(name, rule.name):
            return rule
    return None


def _git_unit_masks(rule: PlainFileRule, host_root: str, git_dir: str) -> list[Mask]:
    """Masks for one git directory (relative ``git_dir``; "" for a bare repository at the root)."""
    masks: list[Mask] = []
    for row in GIT_DIR_RULES:
        if row.access not in (GitMetaAccess.IMMOVABLE, GitMetaAccess.READ_ONLY) or "*" in row.name:
            continue
        relative = git_dir if row.name == "." else os.path.join(git_dir, row.name)
        if relative == "":
            continue  # the bind root: already a mount point, so already immovable
        host = os.path.join(host_root, relative)
        sandbox = f"{rule.path.rstrip('/')}/{relative}"
        info = _lstat_protected(host)
        expect_dir = row.placeholder is None
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise _refuse_symlink(host, "dir" if expect_dir else "file")
        if row.access is GitMetaAccess.IMMOVABLE:
            if info is not None and stat.S_ISDIR(info.st_mode):
                masks.append(Mask(sandbox, host, "dir", exists=True, immovable=True))
            continue
        content = row.placeholder or b""
        if info is None:
            if not os.path.isdir(os.path.dirname(host)):
                continue  # e.g. objects/info without objects: its parent, when created, is not git's
            kind = "dir" if expect_dir else "file"
            masks.append(Mask(sandbox, host, kind, exists=False, placeholder=content))
        else:
            kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
            masks.append(Mask(sandbox, host, kind, exists=True, placeholder=content))
    return masks + _existing_unlisted_masks(rule, host_root, git_dir)


def _existing_unlisted_masks(rule: PlainFileRule, host_root: str, git_dir: str) -> list[Mask]:
    """Read-only masks for names already in the git directory that no writable row allows.

    A name no row knows (a ``core.hooksPath`` of ``.git/my-hooks``, a future git feature) is
    read-only rather than writable (fail closed); so is an interrupted rebase or cherry-pick
    the user left, whose todo list the run must not rewrite.
    """
    masks = []
    host_dir = os.path.join(host_root, git_dir)
    for name in sorted(os.listdir(host_dir)):
        row = git_rule_for(name)
        if row is not None and row.access is not GitMetaAccess.REMOVED_AT_CLOSE:
            continue  # writable or immovable, or read-only and already masked by its row
        host = os.path.join(host_dir, name)
        info = os.lstat(host)
        if stat.S_ISLNK(info.st_mode):
            raise _refuse_symlink(host, "file")
        sandbox = f"{rule.path.rstrip('/')}/{os.path.join(git_dir, name)}"
        masks.append(Mask(sandbox, host, "dir" if stat.S_ISDIR(info.st_mode) else "file", exists=True))
    return masks


def _dotgit_masks(rule: PlainFileRule, host_root: str, relative: str) -> tuple[list[Mask], str | None]:
    """Masks for a ``.git`` entry at ``relative``, and the git directory planned as a unit (or None).

    Missing: an empty read-only placeholder. A file (a gitfile naming a git directory elsewhere)
    or a directory git would not take for a repository: read-only whole. A repository: the unit.
    """
    host = os.path.join(host_root, relative)
    sandbox = f"{rule.path.rstrip('/')}/{relative}"
    info = _lstat_protected(host)
    if info is None:
        return [Mask(sandbox, host, "dir", exists=False)], None
    if stat.S_ISLNK(info.st_mode):
        raise _refuse_symlink(host, "dir")
    if stat.S_ISDIR(info.st_mode) and is_git_dir(host):
        return _git_unit_masks(rule, host_root, relative), relative
    return [Mask(sandbox, host, "dir" if stat.S_ISDIR(info.st_mode) else "file", exists=True)], None


def _masks_for(rule: PlainFileRule, host_root: str) -> tuple[tuple[Mask, ...], tuple[str, ...]]:
    masks: dict[str, Mask] = {}
    git_dirs: list[str] = []
    if is_git_dir(host_root):  # the bind is itself a bare repository: its config is at the top
        for mask in _git_unit_masks(rule, host_root, ""):
            masks[mask.sandbox_path] = mask
        git_dirs.append("")
    for relative, kind in protected_entries(rule):
        if relative == ".git":
            unit, git_dir = _dotgit_masks(rule, host_root, ".git")
            masks.update({m.sandbox_path: m for m in unit})
            git_dirs += [git_dir] if git_dir is not None else []
            continue
        parts = relative.split("/")
        current = host_root
        for index, part in enumerate(parts):
            current = os.path.join(current, part)
            info = _lstat_protected(current)
            if info is None:
                # Mask the first missing component: masking a deeper path would create its parents.
                first_missing = "/".join(parts[: index + 1])
                mask_kind = kind if index == len(parts) - 1 else "dir"
                sandbox = f"{rule.path}/{first_missing}"
                masks.setdefault(sandbox, Mask(sandbox, current, mask_kind, exists=False))
                break
            if stat.S_ISLNK(info.st_mode):
                raise _refuse_symlink(current, kind)
            if index == len(parts) - 1:
                is_dir = stat.S_ISDIR(info.st_mode)
                sandbox = f"{rule.path}/{relative}"
                masks[sandbox] = Mask(sandbox, current, "dir" if is_dir else "file", exists=True)
            elif not stat.S_ISDIR(info.st_mode):
                break  # a file where a directory would be: nothing beneath it can be created
    return tuple(masks.values()), tuple(git_dirs)


def _mask_order(mask: Mask) -> tuple[int, str]:
    """Parents before children: a immovable ``.git`` bind must come before the read-only masks in it."""
    return (mask.sandbox_path.count("/"), mask.sandbox_path)


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


def _check_owner_can(path: str, uid: int, gid: int, *, want_write: bool) -> None:
    """As ``_check_reachable_by`` for an idmapped bind: the sandbox is the bind root's owner."""
    info = os.stat(path)
    wanted = stat.S_IRUSR | (stat.S_IXUSR if stat.S_ISDIR(info.st_mode) else 0) | (stat.S_IWUSR if want_write else 0)
    if info.st_mode & wanted != wanted:
        raise SandboxStartError(
            f"the owner of {path} (uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o}) cannot "
            f"{'write' if want_write else 'read'} it, so neither can the sandbox, which acts as that owner",
            f"give the owner {'write' if want_write else 'read'} access (chmod u+{'w' if want_write else 'r'} {path})",
        )


def bind_source(sources: Mapping[str, str], host_path: str) -> str:
    """Where a backend binds ``host_path`` from: its staged idmapped view when one was staged
    (``sources`` maps real paths to staged ones), else the path itself."""
    if not sources:
        return host_path
    return sources.get(os.path.realpath(host_path), host_path)


def with_bind_sources(paths: PathFacts, sources: Mapping[str, str]) -> PathFacts:
    """The same facts with each bind's host path (and the masks below it) moved to ``sources``.

    Host-side work (placeholders, clean-up, export) goes through the real paths; bubblewrap binds
    the staged idmapped views that ``sources`` names (real path -> staged path).
    """

    def moved(path: str, real: str, staged: str) -> str:
        return staged + path[len(real) :] if path == real or path.startswith(real.rstrip("/") + "/") else path

    binds = []
    for bind in paths.binds:
        staged = sources.get(bind.host_realpath)
        if staged is None:
            binds.append(bind)
            continue
        masks = tuple(replace(m, host_path=moved(m.host_path, bind.host_realpath, staged)) for m in bind.masks)
        binds.append(replace(bind, host_realpath=staged, masks=masks))
    return replace(paths, binds=tuple(binds))


def _has_permission(info: os.stat_result, uid: int, gid: int, user_bit: int, group_bit: int, other_bit: int) -> bool:
    if uid == 0:
        return True
    if info.st_uid == uid:
        return bool(info.st_mode & user_bit)
    if info.st_gid == gid:
        return bool(info.st_mode & group_bit)
    return bool(info.st_mode & other_bit)


def gather_path_facts(
    boundary: PlainBoundary, *, sandbox_host_uid: int, sandbox_host_gid: int, idmapped: bool = False
) -> PathFacts:
    """Resolve every read and write bind of ``boundary``.

    Args:
        boundary: the validated boundary (host paths already absolute).
        sandbox_host_uid: the host uid the sandbox runs as, for the permission checks.
        sandbox_host_gid: its gid.
        idmapped: the binds are staged as idmapped mounts (``runtime.idmap``): the sandbox acts as
            each bind root's owner, reaches it through the staged path whatever the directories
            above it allow, so the check is the owner's permission bits on the bind root alone.

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
        check = _check_owner_can if idmapped else _check_reachable_by
        if rule.access is not FileAccess.WRITE:
            check(real, sandbox_host_uid, sandbox_host_gid, want_write=False)
            binds.append(BindFacts(rule, real, stat.S_ISDIR(info.st_mode)))
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise SandboxStartError(
                f"write bind {rule.host} is not a directory",
                "bind a directory for write access; bind single files with access: read",
            )
        masks, git_dirs = _masks_for(rule, real)
        check(real, sandbox_host_uid, sandbox_host_gid, want_write=True)
        scan = _scan_at_start(real)
        nested_masks, nested_git = _nested_masks(rule, real, scan)
        all_masks = tuple(sorted({m.sandbox_path: m for m in masks + nested_masks}.values(), key=_mask_order))
        binds.append(BindFacts(rule, real, True, all_masks, scan, identity(info), git_dirs + nested_git))
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
# one created below the top during a session is removed at close (see scan_protected).
NESTED_PROTECTED_NAMES = frozenset(p.path.split("/")[0] for p in PROTECTED_PATHS)
# Bounds of the scans at start and at close. Entries: time and memory of one scan; depth: one
# open descriptor (two with the listing) per level, well under the usual 1024-descriptor limit.
MAX_SCAN_ENTRIES = 200_000
MAX_SCAN_DEPTH = 256


@dataclass(frozen=True)
class ProtectedScan:
    """Protected names below the top of a write bind, and directories git takes for a bare repository.

    ``names`` maps relative paths to identities; ``bare`` maps the relative path of each directory
    holding a git HEAD (a bare repository, or one in the making) to its identity ("" is the root).
    ``complete`` is False when a limit stopped the scan; ``limit_note`` then says which.
    """

    names: dict[str, tuple[int, int]]
    bare: dict[str, tuple[int, int]]
    complete: bool
    limit_note: str = ""


def scan_protected(root_fd: int, *, max_entries: int | None = None, max_depth: int | None = None) -> ProtectedScan:
    """Find protected names below the top of the tree at ``root_fd``, and bare-repository HEADs.

    A nested ``.git`` (``git init sub/``) or ``.envrc`` runs code as the user the next time they
    use that directory, and so does a directory holding HEAD, objects and config (git takes it
    for a bare repository). Symlinks are listed, never followed; protected directories are not
    descended into. Works through descriptors only, so it is safe after a workload ran.

    Args:
        root_fd: the write bind's root, opened with ``O_NOFOLLOW``.
        max_entries: stop after this many entries (default ``MAX_SCAN_ENTRIES``).
        max_depth: do not enter directories deeper than this (default ``MAX_SCAN_DEPTH``).
    """
    limits = WalkLimits(
        MAX_SCAN_ENTRIES if max_entries is None else max_entries, MAX_SCAN_DEPTH if max_depth is None else max_depth
    )
    outcome = WalkOutcome()
    names: dict[str, tuple[int, int]] = {}
    bare: dict[str, tuple[int, int]] = {}
    for entry in walk(root_fd, limits, outcome, descend=lambda e: e.name not in NESTED_PROTECTED_NAMES):
        if entry.name in NESTED_PROTECTED_NAMES and entry.depth > 1:
            names[entry.relative] = identity(entry.info)
        if entry.name == "HEAD" and stat.S_ISREG(entry.info.st_mode) and _has_git_store(entry.parent_fd):
            parent = entry.relative.rpartition("/")[0]
            bare[parent] = identity(os.fstat(entry.parent_fd))
    note = ""
    if outcome.stopped_at_limit:
        note = f"more than {limits.max_entries} entries"
    elif outcome.too_deep:
        note = f"directories deeper than {limits.max_depth} levels (first: {outcome.too_deep[0]})"
    return ProtectedScan(names, bare, outcome.complete, note)


def _has_git_store(dir_fd: int) -> bool:
    """Whether the directory at ``dir_fd`` has what git needs beside HEAD: objects/ or commondir."""
    for name in ("objects", "commondir"):
        try:
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            return True
        except FileNotFoundError:
            continue
    return False


def _scan_at_start(root: str) -> ProtectedScan:
    try:
        fd = os.open(root, DIR_FLAGS)
    except OSError as exc:
        raise SandboxStartError(f"cannot open write bind {root}: {exc.strerror}", "check the path") from exc
    try:
        return scan_protected(fd)
    finally:
        os.close(fd)


def _nested_masks(rule: PlainFileRule, host_root: str, scan: ProtectedScan) -> tuple[tuple[Mask, ...], tuple[str, ...]]:
    """Masks for protected entries that exist below the top level at start: repositories are
    planned as units, other names are re-bound read-only. Symlinks are skipped: a re-bind would
    follow them, and the link itself lies inside the writable bind."""
    masks: list[Mask] = []
    git_dirs: list[str] = []
    for relative in sorted(scan.names):
        host = os.path.join(host_root, relative)
        info = os.lstat(host)
        if stat.S_ISLNK(info.st_mode):
            continue
        if os.path.basename(relative) == ".git":
            unit, git_dir = _dotgit_masks(rule, host_root, relative)
            masks += unit
            git_dirs += [git_dir] if git_dir is not None else []
            continue
        kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
        masks.append(Mask(f"{rule.path}/{relative}", host, kind, exists=True))
    for relative in sorted(scan.bare):
        if relative and is_git_dir(os.path.join(host_root, relative)):
            masks += _git_unit_masks(rule, host_root, relative)
            git_dirs.append(relative)
    return tuple(masks), tuple(git_dirs)


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
