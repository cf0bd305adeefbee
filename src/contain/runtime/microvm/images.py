"""Read binds as read-only block images: a squashfs of the host directory, cached by its content.

A microVM shares no file system with the host (no 9p, no virtiofs here, and live sharing is what
we do not want), so each read bind becomes an image the guest mounts read-only
(``initramfs.py``), attached ``readonly=on`` (``vmm_plan.py``).

``snapshot_tree`` walks the host directory once, through directory descriptors opened with
``O_NOFOLLOW`` (a symlink swapped in mid-walk is never followed: it is recorded as the link it
is), hashing every entry's relative path, type, mode and content (a symlink's target). That digest
names the image: the same content gives the same image and is never rebuilt; any change gives a
new one. On a miss a second walk copies the tree into a staging directory while hashing it again,
and the image is built from that copy (not from the live directory); if the two digests differ
(the directory changed in between) the start fails, so what the guest sees is what was hashed.

What is copied: regular files, directories and symlinks (as links: they resolve inside the
guest, never on the host), and of those only what the bind's owner (the owner of its top
directory) may read by the mode bits (``owner_may_read``: the owner's bits when it owns the
entry, the group bits when the entry's group is the top directory's, else the other bits; a
directory needs read and search). contain reads as root, and the image is owned by the workload,
so without this rule a 0600 file of another user inside the bind would become readable in the
guest, where the process backend's idmapped view keeps it unreadable. Devices, fifos, sockets and
entries the owner may not read are left out and listed in ``TreeSnapshot.skipped``. Every file
is owned by the workload user 1000 in the image (the host's owners mean nothing in the guest;
the image is read-only whatever the modes say). Bounded:
``max_bytes`` of content and ``max_entries`` entries, past either the build fails with
``SandboxStartError`` naming the bind (a partial read bind would be a silent change of input).

What this does not do: keep ownership, xattrs, ACLs or hard links; or notice a change made after
the image was built (the guest reads the image, not the host).
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from contain.errors import SandboxStartError, UnsupportedHost
from contain.runtime.microvm.artefacts import DIGEST_HEX_DIGITS, ensure_artefact, guest_cache_dir
from contain.runtime.microvm.userland import MKSQUASHFS, SQUASHFS_COMPRESSION

__all__ = [
    "READ_IMAGE_MAX_BYTES",
    "READ_IMAGE_MAX_ENTRIES",
    "TreeSnapshot",
    "ensure_read_image",
    "owner_may_read",
    "snapshot_tree",
]

READ_IMAGE_MAX_BYTES = 4 * 1024**3
READ_IMAGE_MAX_ENTRIES = 500_000
WORKLOAD_ID = "1000"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_TOOL_TIMEOUT_S = 600


def owner_may_read(info: os.stat_result, *, owner: tuple[int, int]) -> bool:
    """Whether a user ``owner`` = (uid, gid) may read ``info`` by its mode bits alone (directories:
    read and search). Supplementary groups are not known here, so they never grant access."""
    uid, gid = owner
    mode = info.st_mode
    need = (stat.S_IRUSR | stat.S_IXUSR) if stat.S_ISDIR(mode) else stat.S_IRUSR
    if info.st_uid == uid:
        shift = 0
    elif info.st_gid == gid:
        shift = 3
    else:
        shift = 6
    return (mode << shift) & need == need


@dataclass
class TreeSnapshot:
    """A staged copy of a host directory and the digest of what was copied."""

    digest: str
    entries: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)


def snapshot_tree(
    source: str,
    stage: Path | None,
    *,
    max_bytes: int = READ_IMAGE_MAX_BYTES,
    max_entries: int = READ_IMAGE_MAX_ENTRIES,
) -> TreeSnapshot:
    """Hash ``source`` without following links, copying it into the empty ``stage`` when given.

    Raises:
        SandboxStartError: ``source`` is not a directory, or it exceeds a bound.
    """
    digest = hashlib.sha256(b"read-image-v1\0")
    snap = TreeSnapshot(digest="")
    try:
        root = os.open(source, _DIR_FLAGS)
    except OSError as exc:
        raise SandboxStartError(
            f"read bind {source} cannot be opened as a directory: {exc.strerror}",
            "bind a directory that exists (a symlink as the bind itself is refused here)",
        ) from exc
    top = os.fstat(root)
    owner = (top.st_uid, top.st_gid)
    stack: list[tuple[int, str]] = [(root, "")]
    try:
        while stack:
            dir_fd, relative = stack.pop()
            try:
                names = sorted(os.listdir(dir_fd))
                for name in names:
                    child = f"{relative}/{name}" if relative else name
                    _take(dir_fd, name, child, stage, digest, snap, stack, owner)
                    if snap.entries > max_entries or snap.bytes > max_bytes:
                        raise SandboxStartError(
                            f"read bind {source} is larger than the microvm backend images "
                            f"({max_entries} entries, {max_bytes} bytes)",
                            "bind a smaller directory, or use the process or container backend",
                        )
            finally:
                os.close(dir_fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    snap.digest = digest.hexdigest()[:DIGEST_HEX_DIGITS]
    return snap


def _take(
    dir_fd: int,
    name: str,
    relative: str,
    stage: Path | None,
    digest: hashlib._Hash,
    snap: TreeSnapshot,
    stack: list[tuple[int, str]],
    owner: tuple[int, int],
) -> None:
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    target = stage / relative if stage is not None else None
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISLNK(info.st_mode) and not owner_may_read(info, owner=owner):
        snap.skipped.append(f"{relative}: the bind's owner (uid {owner[0]}) may not read it")
        return
    snap.entries += 1
    if stat.S_ISLNK(info.st_mode):
        link = os.readlink(name, dir_fd=dir_fd)
        digest.update(f"L\0{relative}\0{link}\0".encode())
        if target is not None:
            os.symlink(link, target)
    elif stat.S_ISDIR(info.st_mode):
        digest.update(f"D\0{relative}\0{mode:o}\0".encode())
        if target is not None:
            target.mkdir(mode=0o700)
            os.chmod(target, mode | 0o700)  # we must be able to write into it while staging
        stack.append((os.open(name, _DIR_FLAGS, dir_fd=dir_fd), relative))
    elif stat.S_ISREG(info.st_mode):
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                raise SandboxStartError(f"{relative} changed while the read image was built", "try again")
            digest.update(f"F\0{relative}\0{mode:o}\0".encode())
            out = open(target, "wb") if target is not None else None  # noqa: SIM115 (closed below)
            try:
                while block := os.read(fd, 1 << 20):
                    snap.bytes += len(block)
                    digest.update(block)
                    if out is not None:
                        out.write(block)
            finally:
                if out is not None:
                    out.close()
            digest.update(b"\0")
            if target is not None:
                os.chmod(target, mode)
        finally:
            os.close(fd)
    else:
        snap.entries -= 1
        snap.skipped.append(f"{relative}: not a regular file, directory or symlink")


def ensure_read_image(source: str) -> Path:
    """The cached read-only image of host directory ``source`` (see the module docstring).

    Raises:
        SandboxStartError: the source cannot be read or is too large, or the build failed.
        UnsupportedHost: mksquashfs is missing.
    """
    digest = snapshot_tree(source, None).digest

    def build(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="contain-read-image-") as tmp:
            stage = Path(tmp) / "root"
            stage.mkdir()
            if snapshot_tree(source, stage).digest != digest:
                raise SandboxStartError(f"read bind {source} changed while its image was built", "try again")
            os.chmod(stage, 0o755)
            _mksquashfs_as_workload(source, stage, out)

    path, _ = ensure_artefact(guest_cache_dir(), f"read-{digest}.squashfs", build)
    return path


def _mksquashfs_as_workload(source: str, stage: Path, out: Path) -> None:
    argv = [
        MKSQUASHFS, str(stage), str(out), "-noappend", "-quiet", "-no-progress", "-comp",
        SQUASHFS_COMPRESSION, "-force-uid", WORKLOAD_ID, "-force-gid", WORKLOAD_ID, "-no-xattrs",
        "-mkfs-time", "0", "-all-time", "0", "-processors", "2",
    ]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=False)
    except FileNotFoundError as exc:
        raise UnsupportedHost("mksquashfs is not installed", "apt-get install squashfs-tools") from exc
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxStartError(f"mksquashfs failed to run: {exc}", "check squashfs-tools") from exc
    if done.returncode != 0:
        raise SandboxStartError(f"mksquashfs failed for {source}: {done.stderr.strip()[-400:]}", "check the cache")
