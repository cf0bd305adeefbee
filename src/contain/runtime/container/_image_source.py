"""Finding an image's layers and config in an OCI layout, a ``docker save`` archive or a rootfs tar.

Everything read here is untrusted: ``index.json``, manifests, configs and ``manifest.json`` are
capped in size, type-checked, and every name they contain is resolved only inside the image (a
directory walked with ``O_NOFOLLOW`` descriptors, or the members of the outer tar); a name with
``..`` or a leading ``/`` is refused. Only regular files are read (a FIFO or device planted as a
blob is refused, not opened for reading).

What pins the content (the cache key):

* OCI layout: the digest of the chosen manifest. The manifest names the config and each layer by
  sha256 and size; the config names each uncompressed layer by sha256 (``diff_ids``). Small blobs
  are verified here; layers are verified while they stream (``_image_stream.LayerReader``).
* ``docker save``: the sha256 of the config (Docker's image id), which names every layer's
  uncompressed sha256 in ``rootfs.diff_ids``; each layer is verified against it while it streams.
* plain rootfs tar (optionally gzip): the sha256 of the file, computed first and verified again
  while unpacking.

Does not: talk to a registry, check signatures, or unpack anything (``image.py`` does).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import os
import posixpath
import re
import stat
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from contain.runtime.container._image_apply import DIR_FLAGS
from contain.runtime.container._image_stream import Compression

__all__ = [
    "ImageConfig",
    "ImageFormat",
    "ImageSource",
    "LayerSource",
    "SourceError",
    "host_oci_arch",
    "open_image_files",
    "read_image_source",
]

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
MEDIA_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MEDIA_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
_CONFIG_TYPES = ("application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json")
# Layer media types: OCI image-spec media-types.md and Docker's image manifest v2 schema 2.
LAYER_MEDIA_TYPES: dict[str, Compression] = {
    "application/vnd.oci.image.layer.v1.tar": Compression.NONE,
    "application/vnd.oci.image.layer.v1.tar+gzip": Compression.GZIP,
    "application/vnd.oci.image.layer.nondistributable.v1.tar": Compression.NONE,
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip": Compression.GZIP,
    "application/vnd.docker.image.rootfs.diff.tar": Compression.NONE,
    "application/vnd.docker.image.rootfs.diff.tar.gzip": Compression.GZIP,
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": Compression.GZIP,
}
REF_ANNOTATIONS = ("org.opencontainers.image.ref.name", "io.containerd.image.name")
# platform.machine() -> OCI architecture (image-spec config.md, "architecture" = GOARCH).
HOST_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class SourceError(Exception):
    """The image's metadata is unusable; ``image.py`` turns this into an ``ImageError``."""


class ImageFormat(enum.Enum):
    OCI_LAYOUT = "oci-layout"
    DOCKER_SAVE = "docker-save"
    ROOTFS_TAR = "rootfs-tar"


@dataclass(frozen=True)
class ImageConfig:
    """What the image asks to run. Untrusted strings: the runtime decides what it honours."""

    architecture: str = ""
    os: str = ""
    env: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    working_dir: str = ""
    user: str = ""


@dataclass(frozen=True)
class LayerSource:
    """One layer: how to open it and what its bytes must hash to."""

    label: str
    open: Callable[[], IO[bytes]]
    compression: Compression
    digest: str | None  # sha256 hex of the stored bytes, when the format names it
    size: int | None
    diff_id: str | None  # sha256 hex of the uncompressed tar


@dataclass(frozen=True)
class ImageSource:
    format: ImageFormat
    digest: str  # sha256 hex: the cache key
    layers: tuple[LayerSource, ...]
    config: ImageConfig
    tags: tuple[str, ...]


def host_oci_arch(machine: str) -> str:
    """The OCI architecture for ``platform.machine()``; raises SourceError for other hosts."""
    if machine not in HOST_ARCHES:
        raise SourceError(f"no container image support for host architecture {machine!r} (only amd64, arm64)")
    return HOST_ARCHES[machine]


def _strict_parts(name: str) -> tuple[str, ...]:
    if not isinstance(name, str) or name.startswith("/") or "\x00" in name:
        raise SourceError(f"image names {name!r}: not a relative path")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if not parts or ".." in parts:
        raise SourceError(f"image names {name!r}: not a path inside the image")
    return parts


class _DirFiles:
    """Files of an image directory, each opened component by component without following links."""

    def __init__(self, path: str) -> None:
        self.root_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self.root_fd)

    def exists(self, name: str) -> bool:
        try:
            self.open(name).close()
        except SourceError:
            return False
        return True

    def open(self, name: str) -> IO[bytes]:
        parts = _strict_parts(name)
        fd = os.dup(self.root_fd)
        try:
            for part in parts[:-1]:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
            # O_NONBLOCK: opening a FIFO planted as a blob must not hang; checked below.
            leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
        except OSError as exc:
            raise SourceError(f"cannot open {name!r} in the image: {exc.strerror} (symlinks are not followed)") from exc
        finally:
            os.close(fd)
        if not stat.S_ISREG(os.fstat(leaf).st_mode):
            os.close(leaf)
            raise SourceError(f"{name!r} in the image is not a regular file")
        os.set_blocking(leaf, True)
        return os.fdopen(leaf, "rb")


class _TarFiles:
    """Members of an uncompressed image archive (``docker save``, ``oci-archive``), read in place."""

    def __init__(self, path: str) -> None:
        self.tar = tarfile.open(path, "r:")  # noqa: SIM115 - closed by close()
        self.members: dict[tuple[str, ...], tarfile.TarInfo] = {}
        for member in self.tar.getmembers():
            if not (member.isreg() or member.issym()):
                continue
            parts = tuple(p for p in member.name.split("/") if p not in ("", "."))
            if parts in self.members:
                raise SourceError(f"the image archive holds {member.name!r} twice; which one is meant is ambiguous")
            self.members[parts] = member

    def close(self) -> None:
        self.tar.close()

    def exists(self, name: str) -> bool:
        return _strict_parts(name) in self.members

    def open(self, name: str) -> IO[bytes]:
        parts = _strict_parts(name)
        for _ in range(8):  # docker save links identical layers to each other's layer.tar
            member = self.members.get(parts)
            if member is None:
                raise SourceError(f"{name!r} is not in the image archive")
            if member.isreg():
                handle = self.tar.extractfile(member)
                assert handle is not None
                return handle
            parts = _strict_parts(posixpath.normpath(posixpath.join(*parts[:-1], member.linkname)))
        raise SourceError(f"{name!r} in the image archive is a chain of symlinks")


ImageFiles = _DirFiles | _TarFiles


def open_image_files(path: str) -> ImageFiles | None:
    """The image's files for an OCI layout or ``docker save`` (directory or uncompressed tar), or
    None for a plain rootfs tar."""
    if os.path.isdir(path):
        files: ImageFiles = _DirFiles(path)
    else:
        with open(path, "rb") as handle:
            head = handle.read(512)
        if len(head) < 512 or head.startswith(b"\x1f\x8b") or not tarfile.is_tarfile(path):
            return None
        files = _TarFiles(path)
    if files.exists("oci-layout") or files.exists("manifest.json"):
        return files
    files.close()
    if os.path.isdir(path):
        raise SourceError("the directory is neither an OCI layout (oci-layout, index.json) nor a docker save")
    return None


def _read_limited(handle: IO[bytes], limit: int, what: str) -> bytes:
    with handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise SourceError(f"{what} is larger than {limit} bytes")
    return data


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as exc:
        raise SourceError(f"{what} is not valid JSON: {exc}") from exc


def _field(obj: Any, key: str, kind: type, what: str) -> Any:
    if not isinstance(obj, dict) or not isinstance(obj.get(key), kind):
        raise SourceError(f"{what} lacks a valid {key!r}")
    return obj[key]


def _descriptor(desc: Any, what: str) -> tuple[str, int]:
    digest = _field(desc, "digest", str, what)
    size = _field(desc, "size", int, what)
    match = _DIGEST.fullmatch(digest)
    if match is None or size < 0:
        raise SourceError(f"{what} has digest {digest!r}: only sha256:<64 hex> is accepted")
    return match.group(1), size


def _read_blob(files: ImageFiles, desc: Any, what: str, limit: int) -> tuple[str, bytes]:
    hexdigest, size = _descriptor(desc, what)
    if size > limit:
        raise SourceError(f"{what} claims {size} bytes, over the {limit}-byte limit for metadata")
    data = _read_limited(files.open(f"blobs/sha256/{hexdigest}"), limit, what)
    if len(data) != size or hashlib.sha256(data).hexdigest() != hexdigest:
        raise SourceError(f"{what} blob sha256:{hexdigest} does not match its descriptor (digest or size)")
    return hexdigest, data


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SourceError(f"{what} is not a list of strings")
    return tuple(value)


def parse_config(data: bytes, what: str) -> tuple[ImageConfig, tuple[str, ...]]:
    """The config's run settings and its diff_ids (sha256 hex of each uncompressed layer)."""
    doc = _json(data, what)
    run = doc.get("config") if isinstance(doc, dict) else None
    run = run if isinstance(run, dict) else {}
    text = {k: run.get(k) or "" for k in ("WorkingDir", "User")}
    if not all(isinstance(v, str) for v in text.values()) or not isinstance(doc.get("architecture", ""), str):
        raise SourceError(f"{what} has a non-string field")
    config = ImageConfig(
        architecture=doc.get("architecture", ""),
        os=doc.get("os", "") if isinstance(doc.get("os", ""), str) else "",
        env=_strings(run.get("Env"), f"{what} Env"),
        entrypoint=_strings(run.get("Entrypoint"), f"{what} Entrypoint"),
        cmd=_strings(run.get("Cmd"), f"{what} Cmd"),
        working_dir=text["WorkingDir"],
        user=text["User"],
    )
    rootfs = _field(doc, "rootfs", dict, what)
    diff_ids = []
    for diff_id in _strings(rootfs.get("diff_ids"), f"{what} rootfs.diff_ids"):
        match = _DIGEST.fullmatch(diff_id)
        if match is None:
            raise SourceError(f"{what} has diff_id {diff_id!r}: only sha256:<64 hex> is accepted")
        diff_ids.append(match.group(1))
    return config, tuple(diff_ids)


def _check_platform(config: ImageConfig, arch: str, what: str) -> None:
    if (config.os, config.architecture) != ("linux", arch):
        raise SourceError(f"{what} is for {config.os}/{config.architecture}, this host runs linux/{arch}")


def _platform_matches(desc: dict[str, Any], arch: str) -> bool:
    platform = desc.get("platform")
    if platform is None:
        return True  # unknown here; the config's os/architecture is checked later
    if not isinstance(platform, dict):
        return False
    variant = platform.get("variant", "")
    return platform.get("os") == "linux" and platform.get("architecture") == arch and variant in ("", "v8")


def _names(desc: dict[str, Any]) -> list[str]:
    notes = desc.get("annotations")
    notes = notes if isinstance(notes, dict) else {}
    return [notes[k] for k in REF_ANNOTATIONS if isinstance(notes.get(k), str)]


def _choose_manifest(
    files: ImageFiles, index: Any, *, arch: str, reference: str | None, limit: int, depth: int = 0
) -> tuple[str, bytes]:
    manifests = _field(index, "manifests", list, "index")
    picked = [
        d
        for d in manifests
        if isinstance(d, dict)
        and _platform_matches(d, arch)
        and d.get("mediaType", MEDIA_OCI_MANIFEST)
        in (MEDIA_OCI_MANIFEST, MEDIA_DOCKER_MANIFEST, MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST)
        and (reference is None or depth > 0 or reference in _names(d))
    ]
    if len(picked) != 1:
        found = ", ".join(sorted({n for d in manifests if isinstance(d, dict) for n in _names(d)})) or "none"
        problem = "no manifest" if not picked else f"{len(picked)} manifests"
        raise SourceError(
            f"{problem} for linux/{arch}" + (f" named {reference!r}" if reference else "") + f" (names: {found})"
        )
    desc = picked[0]
    hexdigest, data = _read_blob(files, desc, "manifest", limit)
    if desc.get("mediaType") in (MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST):
        if depth >= 2:
            raise SourceError("image indexes nest more than two levels")
        inner = _json(data, "nested index")
        return _choose_manifest(files, inner, arch=arch, reference=reference, limit=limit, depth=depth + 1)
    return hexdigest, data


def _read_oci(files: ImageFiles, *, arch: str, reference: str | None, limit: int) -> ImageSource:
    layout = _json(_read_limited(files.open("oci-layout"), limit, "oci-layout"), "oci-layout")
    if not str(_field(layout, "imageLayoutVersion", str, "oci-layout")).startswith("1."):
        raise SourceError(f"unsupported OCI layout version {layout['imageLayoutVersion']!r}")
    index = _json(_read_limited(files.open("index.json"), limit, "index.json"), "index.json")
    manifest_digest, data = _choose_manifest(files, index, arch=arch, reference=reference, limit=limit)
    manifest = _json(data, "manifest")
    config_desc = _field(manifest, "config", dict, "manifest")
    if config_desc.get("mediaType", _CONFIG_TYPES[0]) not in _CONFIG_TYPES:
        raise SourceError(f"manifest config has media type {config_desc.get('mediaType')!r}, not an image config")
    _, config_data = _read_blob(files, config_desc, "config", limit)
    config, diff_ids = parse_config(config_data, "config")
    _check_platform(config, arch, "the image")
    descs = _field(manifest, "layers", list, "manifest")
    if len(descs) != len(diff_ids):
        raise SourceError(f"manifest lists {len(descs)} layers but the config names {len(diff_ids)} diff_ids")
    layers = []
    for number, (desc, diff_id) in enumerate(zip(descs, diff_ids, strict=True)):
        media = desc.get("mediaType") if isinstance(desc, dict) else None
        if media not in LAYER_MEDIA_TYPES:
            raise SourceError(f"layer {number} has media type {media!r}: only tar and tar+gzip layers are supported")
        hexdigest, size = _descriptor(desc, f"layer {number}")
        path = f"blobs/sha256/{hexdigest}"
        layers.append(
            LayerSource(
                f"layer {number} (sha256:{hexdigest[:12]})",
                functools.partial(files.open, path),
                LAYER_MEDIA_TYPES[media],
                hexdigest,
                size,
                diff_id,
            )
        )
    tags = tuple(n for d in _field(index, "manifests", list, "index") if isinstance(d, dict) for n in _names(d))
    return ImageSource(ImageFormat.OCI_LAYOUT, manifest_digest, tuple(layers), config, tags)


def _read_docker_save(files: ImageFiles, *, arch: str, reference: str | None, limit: int) -> ImageSource:
    entries = _json(_read_limited(files.open("manifest.json"), limit, "manifest.json"), "manifest.json")
    if not isinstance(entries, list):
        raise SourceError("manifest.json is not a list")
    picked = [
        e
        for e in entries
        if isinstance(e, dict) and (reference is None or reference in _strings(e.get("RepoTags"), "RepoTags"))
    ]
    if len(picked) != 1:
        raise SourceError(f"manifest.json has {len(picked)} images" + (f" tagged {reference!r}" if reference else ""))
    entry = picked[0]
    config_data = _read_limited(files.open(_field(entry, "Config", str, "manifest.json")), limit, "config")
    config, diff_ids = parse_config(config_data, "config")
    _check_platform(config, arch, "the image")
    paths = _strings(entry.get("Layers"), "manifest.json Layers")
    if len(paths) != len(diff_ids):
        raise SourceError(f"manifest.json lists {len(paths)} layers but the config names {len(diff_ids)} diff_ids")
    layers = tuple(
        LayerSource(
            f"layer {n} ({path})",
            functools.partial(files.open, path),
            Compression.DETECT,
            None,
            None,
            diff_id,
        )
        for n, (path, diff_id) in enumerate(zip(paths, diff_ids, strict=True))
    )
    tags = _strings(entry.get("RepoTags"), "RepoTags")
    return ImageSource(ImageFormat.DOCKER_SAVE, hashlib.sha256(config_data).hexdigest(), layers, config, tags)


def _read_rootfs(path: str) -> ImageSource:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
    hexdigest = digest.hexdigest()
    layer = LayerSource(
        f"rootfs tar (sha256:{hexdigest[:12]})",
        lambda: open(path, "rb"),  # noqa: SIM115 - closed by the unpacker
        Compression.DETECT,
        hexdigest,
        size,
        None,
    )
    return ImageSource(ImageFormat.ROOTFS_TAR, hexdigest, (layer,), ImageConfig(), ())


def read_image_source(
    path: str, files: ImageFiles | None, *, arch: str, reference: str | None, limit: int
) -> ImageSource:
    """What the image at ``path`` consists of; ``files`` from ``open_image_files``.

    Raises:
        SourceError: the metadata is missing, too large, malformed, or does not match its digests.
    """
    if files is None:
        return _read_rootfs(path)
    if files.exists("oci-layout"):
        return _read_oci(files, arch=arch, reference=reference, limit=limit)
    return _read_docker_save(files, arch=arch, reference=reference, limit=limit)
