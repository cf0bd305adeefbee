"""The microVM guest's build cache: artefacts named by the hash of their inputs, built once.

Every guest artefact (the kernel, its modules, the initramfs, the userland image, read-bind
images, the accelerator verdict) lives under ``<contain cache>/microvm`` (``$CONTAIN_CACHE_DIR``
honoured, as for the supervisor: ``supervisor_build.supervisor_cache_dir``). An artefact's name
carries the first 24 hex digits of the sha256 of everything it is built from, so a changed input
never reuses a stale build and an unchanged one is never rebuilt.

What this module enforces:

- the cache directory and its ``microvm`` subdirectory are real directories (not symlinks) owned
  by the current user or root and not group/world writable; anything else is refused
  (``SandboxStartError``), because whoever can replace the guest kernel or initramfs controls
  every microVM sandbox;
- an artefact is built into a temporary name inside the same directory and renamed into place
  (atomic: a concurrent builder sees no file or a complete one), then made read-only (0444 for
  files, 0555 for trees);
- a cached artefact is used only if it is a regular file (or a directory, for trees) owned by the
  current user and not group/world writable; anything else is refused, never silently rebuilt.

What it does not check: the ancestors of the cache directory, or the content of a cached
artefact against its name (the name says what it was built from; re-hashing 20 MB on every start
would cost more than the check is worth against an attacker who already owns the cache).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from contain.errors import SandboxStartError
from contain.runtime.supervisor_build import supervisor_cache_dir

__all__ = ["DIGEST_HEX_DIGITS", "content_digest", "ensure_artefact", "guest_cache_dir", "prepare_private_dir"]

DIGEST_HEX_DIGITS = 24  # 96 bits: a collision needs ~2^48 builds; names stay readable
_SUBDIR = "microvm"


def guest_cache_dir() -> Path:
    """``<contain cache dir>/microvm``: $CONTAIN_CACHE_DIR/microvm, else /var/cache/contain/microvm
    for root, else ~/.cache/contain/microvm. Not created here (``prepare_private_dir`` does)."""
    return supervisor_cache_dir().absolute() / _SUBDIR


def content_digest(parts: Iterable[bytes]) -> str:
    """First ``DIGEST_HEX_DIGITS`` hex digits of the sha256 of ``parts``, each length-prefixed
    (so ``[b"ab", b"c"]`` and ``[b"a", b"bc"]`` differ)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()[:DIGEST_HEX_DIGITS]


def prepare_private_dir(path: Path) -> Path:
    """Create ``path`` (and its parents) mode 0755 if missing, then check it is safe to trust.

    Returns:
        ``path``.

    Raises:
        SandboxStartError: it cannot be created, is not a real directory, is owned by someone
            else, or is group/world writable.
    """
    try:
        if not os.path.lexists(path):
            path.mkdir(mode=0o755, parents=True, exist_ok=True)
            os.chmod(path, 0o755)
        info = os.lstat(path)
    except OSError as exc:
        raise SandboxStartError(
            f"cannot create the microVM cache directory {path}: {exc.strerror}",
            "set CONTAIN_CACHE_DIR to a directory you own",
        ) from exc
    problem = _ownership_problem(info, want_dir=True)
    if problem:
        raise SandboxStartError(
            f"microVM cache directory {path} {problem}: someone else could swap the guest kernel or image",
            f"run `chmod go-w {path}` if it is yours, or set CONTAIN_CACHE_DIR elsewhere",
        )
    return path


def _ownership_problem(info: os.stat_result, *, want_dir: bool) -> str:
    uid = os.geteuid()
    if want_dir and not stat.S_ISDIR(info.st_mode):
        return "is not a directory (a symlink is refused)"
    if not want_dir and not stat.S_ISREG(info.st_mode):
        return "is not a regular file (a symlink is refused)"
    if info.st_uid not in (uid, 0):
        return f"is owned by uid {info.st_uid}, not by you ({uid}) or root"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is group or world writable (mode {stat.S_IMODE(info.st_mode):o})"
    return ""


def ensure_artefact(
    directory: Path, name: str, build: Callable[[Path], None], *, is_tree: bool = False
) -> tuple[Path, bool]:
    """Return ``directory/name``, building it with ``build(tmp_path)`` first if it does not exist.

    ``build`` writes a file (or, with ``is_tree``, fills a directory) at the temporary path it is
    given; it is renamed into place only when ``build`` returns.

    Returns:
        (the artefact's path, whether it was built now).

    Raises:
        SandboxStartError: the cached artefact fails the ownership checks, or the rename failed.
        Whatever ``build`` raises (the temporary is removed first).
    """
    prepare_private_dir(directory)
    target = directory / name
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        pass
    else:
        problem = _ownership_problem(info, want_dir=is_tree)
        if problem:
            raise SandboxStartError(
                f"cached microVM artefact {target} {problem}: it may have been swapped",
                f"delete {target}; contain rebuilds it on the next start",
            )
        return target, False
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=directory))
    try:
        built = tmp / "out"
        if is_tree:
            built.mkdir(mode=0o755)
        build(built)
        _make_read_only(built, is_tree=is_tree)
        try:
            os.rename(built, target)
        except OSError as exc:
            if not os.path.lexists(target):  # a concurrent builder may have won; theirs is identical
                raise SandboxStartError(
                    f"cannot move the built {name} into {directory}: {exc.strerror}",
                    "check the cache directory's free space and permissions",
                ) from exc
    finally:
        _remove_tree(tmp)
    return target, True


def _make_read_only(path: Path, *, is_tree: bool) -> None:
    if not is_tree:
        os.chmod(path, 0o444)
        return
    for root, dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            if not os.path.islink(full):
                os.chmod(full, 0o555 if os.stat(full).st_mode & 0o111 else 0o444)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
    os.chmod(path, 0o755)


def _remove_tree(path: Path) -> None:
    # Our own temporary under a checked directory: nothing untrusted ever wrote here.
    shutil.rmtree(path, ignore_errors=True)
