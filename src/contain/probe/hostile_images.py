"""Crafted container images for OC-05: each member an unpacker must refuse or confine.

Pure builders: every function returns bytes or writes only under the directory it is given. The
images are the catalogue's OC-05 list, one ``HostileMember`` row each (what it attacks, why it is
dangerous, what contain's unpacker must do), aimed at a *witness* directory that a judge watches
(a member that escapes lands there) and, for the hard link, at the host's ``/etc/shadow``.

Two kinds of image are built from the same rows: a plain rootfs tarball and an OCI image layout
(index, manifest, config and gzip layers, digests correct), so both of the unpacker's readers
are attacked. ``naive_members`` gives the rows' *control* members: the same attack aimed only at
the witness directory and at harmless targets (a character device 1:3, the null device; a hard
link to a witness file instead of ``/etc/shadow``), which a naive extractor (``tarfile`` with no
filter) may run on the host to show that the judge sees each breach.

Not here: judging (``cases_oci.py``) or unpacking (``runtime/container/image.py``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "HOSTILE_MEMBERS",
    "SETID_MEMBER",
    "SPARSE_APPARENT_BYTES",
    "HostileMember",
    "Member",
    "naive_members",
    "oci_layout",
    "rootfs_tar",
    "tar_bytes",
]

Member = tuple[tarfile.TarInfo, bytes]
SPARSE_APPARENT_BYTES = 1 << 40  # the catalogue's 1 TiB sparse member
_MTIME = 1_600_000_000


def _file(name: str, data: bytes = b"data", *, mode: int = 0o644) -> Member:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, _MTIME
    return info, data


def _link(name: str, target: str, *, hard: bool = False) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mtime = (tarfile.LNKTYPE if hard else tarfile.SYMTYPE), target, _MTIME
    return info, b""


def _device(name: str, kind: bytes, major: int, minor: int) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor, info.mode, info.mtime = kind, major, minor, 0o666, _MTIME
    return info, b""


def _sparse(name: str, apparent: int) -> Member:
    """A GNU pax 1.0 sparse member: 512 real bytes at the end of ``apparent`` bytes of holes."""
    info = tarfile.TarInfo("GNUSparseFile.0/" + name)
    payload = f"1\n{apparent - 512}\n512\n".encode().ljust(512, b"\0") + b"x" * 512
    info.size, info.mtime = len(payload), _MTIME
    info.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(apparent),
    }
    return info, payload


def _up(witness: Path) -> str:
    return "../" * 16 + str(witness).lstrip("/")


@dataclass(frozen=True)
class HostileMember:
    """One OC-05 attack: the members of the hostile image and of its naive control.

    ``members(witness)`` is what the image carries; ``control(witness)`` the same attack aimed
    only at the witness or a harmless target (None: no naive run, e.g. a member only a fresh
    name could show). ``offender`` is the member name the unpacker must name when it refuses.
    """

    name: str
    why: str
    members: Callable[[Path], list[Member]]
    offender: Callable[[Path], str]
    control: Callable[[Path], list[Member]]
    must: str  # "refuse" or "confine"


HOSTILE_MEMBERS: tuple[HostileMember, ...] = (
    HostileMember(
        "absolute name",
        "a member named /x is written at /x by an extractor that joins names to the target",
        lambda w: [_file(str(w / "absolute"), b"pwned")],
        lambda w: str(w / "absolute"),
        lambda w: [_file(str(w / "absolute"), b"pwned")],
        "refuse",
    ),
    HostileMember(
        "../ name",
        "a member climbing with ../ lands outside the image root",
        lambda w: [_file(_up(w) + "/dotdot", b"pwned")],
        lambda w: _up(w) + "/dotdot",
        lambda w: [_file(_up(w) + "/dotdot", b"pwned")],
        "refuse",
    ),
    HostileMember(
        "file through a symlink member",
        "a symlink to a host directory, then a file written through it (the classic two-member escape)",
        lambda w: [_link("escape", str(w)), _file("escape/through", b"pwned")],
        lambda w: "escape/through",
        lambda w: [_link("escape", str(w)), _file("escape/through", b"pwned")],
        "refuse",
    ),
    HostileMember(
        "hard link to /etc/shadow",
        "a hard link to a host file puts the host's inode (and its later writes) into the rootfs",
        lambda w: [_link("shadow", "/etc/shadow", hard=True)],
        lambda w: "shadow",
        lambda w: [_link("shadow", str(w / "keep"), hard=True)],  # a witness file, never the real shadow
        "refuse",
    ),
    HostileMember(
        "device node",
        "a block or character device in a rootfs gives raw access to a host device",
        lambda w: [_device("dev/sda", tarfile.BLKTYPE, 8, 0)],
        lambda w: "dev/sda",
        lambda w: [_device("dev/null-copy", tarfile.CHRTYPE, 1, 3)],  # the null device: harmless
        "refuse",
    ),
    HostileMember(
        "1 TiB sparse member",
        "a sparse member costs nothing in the tar but 1 TiB of apparent size on disk",
        lambda w: [_sparse("huge", SPARSE_APPARENT_BYTES)],
        lambda w: "huge",
        lambda w: [_sparse("huge", SPARSE_APPARENT_BYTES)],  # apparent size only: a few blocks on disk
        "refuse",
    ),
)

# Confined rather than refused: the file is kept, its set-id bits are not.
SETID_MEMBER = HostileMember(
    "setuid binary",
    "a set-uid root file in the rootfs raises privilege inside the container if the bit survives",
    lambda w: [_file("usr/bin/su-copy", b"#!/bin/sh\nexit 0\n", mode=0o6755)],
    lambda w: "usr/bin/su-copy",
    lambda w: [_file("usr/bin/su-copy", b"#!/bin/sh\nexit 0\n", mode=0o6755)],
    "confine",
)


def naive_members(witness: Path) -> list[Member]:
    """Every row's control members, in row order (for one naive extraction)."""
    return [m for row in (*HOSTILE_MEMBERS, SETID_MEMBER) for m in row.control(witness)]


def tar_bytes(members: list[Member], *, compress: bool = False) -> bytes:
    """A pax tar of ``members`` (gzip when asked, with a fixed mtime)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0) if compress else raw


def rootfs_tar(path: Path, members: list[Member]) -> Path:
    """Write a plain rootfs tarball (with one ordinary file first) at ``path``."""
    path.write_bytes(tar_bytes([_file("etc/os-release", b"ID=probe\n"), *members]))
    return path


def _blob(root: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def oci_layout(root: Path, layers: list[list[Member]], *, arch: str) -> Path:
    """Write an OCI image layout at ``root`` (new directory) whose layers carry ``layers``."""
    root.mkdir()
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    plain = [tar_bytes([_file("etc/os-release", b"ID=probe\n"), *members]) for members in layers]
    config = {
        "architecture": arch,
        "os": "linux",
        "config": {"Env": ["PATH=/usr/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/", "User": "1000"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(p).hexdigest()}" for p in plain]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **_blob(root, json.dumps(config).encode())},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **_blob(root, gzip.compress(p, mtime=0))}
            for p in plain
        ],
    }
    desc = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        **_blob(root, json.dumps(manifest).encode()),
        "platform": {"os": "linux", "architecture": arch},
        "annotations": {"org.opencontainers.image.ref.name": "latest"},
    }
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    return root
