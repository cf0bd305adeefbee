"""The sandbox's /etc as one cached, read-only directory on the host.

Every sandbox gets a generated /etc (passwd, group, hosts, resolv.conf, ... naming nothing of the
host's) plus a short table of non-secret host files (``ETC_PASSTHROUGH``: the loader cache, CA
certificates, ...). Binding those one by one costs bubblewrap two mount calls each, about 2 ms per
sandbox here; instead the tree is assembled once in the cache directory and bound with one mount.

The cache key covers the generated content and, for each passthrough path, its type, size, mode,
inode and modification time (a directory's mtime moves when an entry is added, removed or
replaced), so a host change (``ldconfig``, ``update-ca-certificates``) produces a new tree on the
next start. Only files the
host already lets everyone read are copied; symlinks are copied as symlinks. Trees are built in a
temporary directory and renamed into place, so a reader never sees half a tree.

Does not: notice a file inside a passthrough directory edited in place (rather than replaced),
or a change in a nested subdirectory; the old copy stays in use until something else changes.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from contain.errors import SandboxStartError

__all__ = ["ensure_etc_tree"]

_KEEP_TREES = 8  # older trees are pruned beyond this many


def _fingerprint(paths: Iterable[str]) -> list[str]:
    """One stat per passthrough path: a directory's mtime moves when an entry is added, removed or
    replaced (write-and-rename), which is how ldconfig and update-ca-certificates change them."""
    parts = []
    for path in paths:
        try:
            info = os.lstat(path)
        except OSError:
            continue
        parts.append(f"{path}:{info.st_mode}:{info.st_size}:{info.st_ino}:{info.st_mtime_ns}")
    return parts


def _tree_key(generated: Mapping[str, str], passthrough: Iterable[str]) -> str:
    digest = hashlib.sha256(b"contain-etc-tree-v1\x00")
    for path, text in sorted(generated.items()):
        digest.update(f"{path}\x00{text}\x00".encode())
    for line in _fingerprint(sorted(passthrough)):
        digest.update(line.encode() + b"\x00")
    return digest.hexdigest()[:20]


def _copy_public(source: str, target: str) -> None:
    """Copy one passthrough entry: symlinks as symlinks, world-readable files and directories only."""
    info = os.lstat(source)
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISDIR(info.st_mode):
        os.mkdir(target, 0o755)
        for name in sorted(os.listdir(source)):
            _copy_public(os.path.join(source, name), os.path.join(target, name))
        os.chmod(target, 0o755)
    elif stat.S_ISREG(info.st_mode) and info.st_mode & stat.S_IROTH:
        import shutil  # build path only: a cached tree is reused without it

        shutil.copyfile(source, target, follow_symlinks=False)
        os.chmod(target, 0o644)
    # anything else (not world-readable, devices, sockets) is left out on purpose


def _build(tree: Path, generated: Mapping[str, str], passthrough: Iterable[str]) -> None:
    import shutil  # build path only
    import tempfile

    staging = Path(tempfile.mkdtemp(prefix=".etc-building-", dir=tree.parent))
    try:
        os.chmod(staging, 0o755)
        for host_path in sorted(passthrough):
            relative = os.path.relpath(host_path, "/etc")
            target = staging / relative
            target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            _copy_public(host_path, str(target))
        for sandbox_path, text in generated.items():
            target = staging / os.path.relpath(sandbox_path, "/etc")
            target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            target.write_text(text)
            os.chmod(target, 0o644)
        try:
            os.rename(staging, tree)
        except OSError:
            if not tree.is_dir():  # someone else built the same key first: theirs is identical
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _prune(cache_dir: Path, keep: Path) -> None:
    import shutil  # after a build only

    trees = sorted(cache_dir.glob("etc-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in trees[_KEEP_TREES:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def ensure_etc_tree(cache_dir: Path, generated: Mapping[str, str], passthrough: Iterable[str]) -> str:
    """Return a directory holding the sandbox's /etc, building it once per distinct content.

    Args:
        cache_dir: the checked cache directory (the supervisor's; not group or world writable).
        generated: sandbox path under /etc -> content, e.g. {"/etc/passwd": "..."}.
        passthrough: host paths under /etc to copy (files, directories, symlinks).

    Raises:
        SandboxStartError: the tree cannot be built.
    """
    paths = [p for p in passthrough if os.path.lexists(p)]
    tree = cache_dir / f"etc-{_tree_key(generated, paths)}"
    if tree.is_dir() and not tree.is_symlink():
        return str(tree)
    try:
        _build(tree, generated, paths)
        _prune(cache_dir, tree)
    except OSError as exc:
        raise SandboxStartError(
            f"cannot build the sandbox /etc in {cache_dir}: {exc.strerror or exc}",
            "check the cache directory (CONTAIN_CACHE_DIR) is writable",
        ) from exc
    return str(tree)
