"""Untrusted local container images, unpacked once into a content-addressed read-only cache.

An image is an OCI image layout (a directory or an uncompressed ``oci-archive`` tar), a
``docker save`` archive (tar or its unpacked directory), or a plain rootfs tar (optionally gzip).
It is local input written by someone else, so it is treated as hostile:

* **Integrity.** Every blob is verified against its sha256 and size (manifests and configs before
  use; layers while they stream, over exactly the bytes that are extracted, and against the
  config's ``diff_ids``). The cache key pins the whole tree (see ``_image_source``).
* **Members.** Each tar member is planned by ``_image_plan.plan_member`` (a table of rules with
  reasons) and applied by ``_image_apply`` through ``O_NOFOLLOW`` directory descriptors from the
  image root, one component at a time, so no symlink is ever followed on the host.
* **Refuse the image, list every offender.** An escape attempt (absolute name, ``..``, a path
  through a symlink, a hard link out of the image or to a non-file), a device node or FIFO, or a
  budget overrun refuses the *whole* image: ``ImageError`` names the image and the members, and
  its ``report`` lists every offending member of that layer. Skipping such a member instead would
  cache a rootfs its author did not describe; refusing is the safer default. Benign oddities are
  skipped (the root's own entry, AUFS metadata) and privileges are stripped (set-uid/set-gid,
  file capabilities, xattrs, tar owners); each of those is reported too (``UnpackReport``).
* **Budgets.** Entries, total apparent bytes (a 1 TiB sparse member counts as 1 TiB and is refused
  before writing), path length and depth, and the uncompressed size of each layer.
* **Cache.** Unpacking happens in a temp dir inside the cache root under a per-digest ``flock``;
  the tree is made read-only, flushed, marked complete, then renamed into place. A later call
  finds the marker and returns at once. A failure leaves nothing in the cache.

Does NOT: scan image contents (malware, secrets, vulnerable packages), verify signatures or
provenance, pull from a registry, support zstd layers, preserve owners, xattrs or write bits, or
set up the per-sandbox writable layer (the container backend does). See docs/images.md.
"""

from __future__ import annotations

import math
import os
import platform
import stat
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contain._log import LazyLogger
from contain.errors import ImageError
from contain.runtime.container import _image_apply as apply
from contain.runtime.container import _image_cache as cache
from contain.runtime.container._image_plan import (
    MEMBER_RULES,
    Action,
    Finding,
    ImageTree,
    MemberFacts,
    MemberKind,
    MemberRule,
    Outcome,
    UnpackLimits,
    Usage,
    Verdict,
    plan_member,
)
from contain.runtime.container._image_source import (
    ImageConfig,
    ImageFormat,
    ImageSource,
    LayerSource,
    SourceError,
    host_oci_arch,
    open_image_files,
    read_image_source,
)
from contain.runtime.container._image_stream import LayerReader, StreamError
from contain.visible_text import for_terminal

__all__ = [
    "MEMBER_RULES",
    "Action",
    "Finding",
    "ImageConfig",
    "ImageFormat",
    "ImageTree",
    "MemberFacts",
    "MemberKind",
    "MemberRule",
    "Outcome",
    "ReportEntry",
    "UnpackLimits",
    "UnpackReport",
    "UnpackedImage",
    "Usage",
    "Verdict",
    "member_facts",
    "plan_member",
    "unpack_image",
]

log = LazyLogger(__name__)

_MAX_LISTED_OFFENDERS = 100  # a refused layer is scanned on for more offenders, up to this many
_CLAMP_MTIME = 2**33  # year 2242; past this utime(2) may overflow on some file systems
_XATTR_PREFIXES = ("SCHILY.xattr.", "LIBARCHIVE.xattr.")
_ACL_KEYS = {"SCHILY.acl.access": "system.posix_acl_access", "SCHILY.acl.default": "system.posix_acl_default"}


@dataclass(frozen=True)
class ReportEntry:
    """One member that was refused, skipped or changed, and why."""

    layer: int
    member: str  # as written in the tar header: untrusted text
    action: str  # a ``Verdict`` value: refuse, skip, extract (changed), whiteout, opaque
    rule_id: str
    reason: str


@dataclass(frozen=True)
class UnpackReport:
    """Every member an unpack refused or changed, in stream order."""

    image: str
    entries: tuple[ReportEntry, ...] = ()

    def refused(self) -> tuple[ReportEntry, ...]:
        return tuple(e for e in self.entries if e.action == Verdict.REFUSE.value)

    def lines(self) -> list[str]:
        """One terminal-safe line per entry (member names are untrusted)."""
        return [for_terminal(f"layer {e.layer}: {e.member}: {e.action} [{e.rule_id}] {e.reason}") for e in self.entries]


@dataclass(frozen=True)
class UnpackedImage:
    """A cached, read-only rootfs and what the image asked for."""

    digest: str  # "sha256:<hex>": the manifest digest, docker image id, or rootfs tar digest
    format: ImageFormat
    rootfs: Path
    config: ImageConfig
    tags: tuple[str, ...]
    report: UnpackReport
    reused: bool  # True when an existing cache entry was returned without unpacking
    # Directories the image made writable by group or others (e.g. /tmp 1777); the cache removed
    # those write bits, so a runtime that wants them back sets them in the writable layer.
    writable_dirs: tuple[str, ...] = field(default=())


def member_facts(member: tarfile.TarInfo) -> MemberFacts:
    """The facts ``plan_member`` needs from a tar header (nothing trusted)."""
    if member.isreg():  # REGTYPE, AREGTYPE, CONTTYPE and GNU sparse
        kind = MemberKind.FILE
    elif member.isdir():
        kind = MemberKind.DIRECTORY
    elif member.issym():
        kind = MemberKind.SYMLINK
    elif member.islnk():
        kind = MemberKind.HARDLINK
    elif member.ischr():
        kind = MemberKind.CHAR_DEVICE
    elif member.isblk():
        kind = MemberKind.BLOCK_DEVICE
    elif member.isfifo():
        kind = MemberKind.FIFO
    else:
        kind = MemberKind.OTHER
    pax = member.pax_headers
    xattrs = [key.split(".xattr.", 1)[1] for key in pax if key.startswith(_XATTR_PREFIXES)]
    xattrs += [name for key, name in _ACL_KEYS.items() if key in pax]
    return MemberFacts(
        name=member.name,
        kind=kind,
        mode=member.mode,
        size=member.size,
        linkname=member.linkname,
        uid=member.uid,
        gid=member.gid,
        xattrs=tuple(sorted(set(xattrs))),
    )


def _mtime(member: tarfile.TarInfo) -> int:
    """The member's mtime as whole seconds in [0, 2**33]; a pax mtime may be any float, even nan."""
    value = member.mtime
    return min(max(int(value), 0), _CLAMP_MTIME) if math.isfinite(value) else 0


def _apply(
    root_fd: int, action: Action, tar: tarfile.TarFile, member: tarfile.TarInfo, tree: ImageTree, layer: int
) -> None:
    """Carry out one planned action on disk (``_record`` then updates the tree model)."""
    if action.verdict is Verdict.WHITEOUT:
        try:
            with apply.open_directory(root_fd, action.path[:-1], create=False) as parent:
                apply.remove_entry(parent, action.path[-1])
        except FileNotFoundError:
            pass  # nothing to hide: the parent was never created
        return
    if action.verdict is Verdict.OPAQUE:
        for hidden in tree.opaque_removals(action.path, layer=layer):
            with apply.open_directory(root_fd, hidden[:-1], create=False) as parent:
                apply.remove_entry(parent, hidden[-1])
        with apply.open_directory(root_fd, action.path, create=True):
            return
    with apply.open_directory(root_fd, action.path[:-1], create=True) as parent:
        name = action.path[-1]
        if action.kind is MemberKind.DIRECTORY:
            apply.make_directory(parent, name)
        elif action.kind is MemberKind.FILE:
            source = tar.extractfile(member)
            assert source is not None  # a regular member always has a data reader
            apply.write_file(parent, name, source, size=member.size, mode=action.mode, mtime=_mtime(member))
        elif action.kind is MemberKind.SYMLINK:
            apply.make_symlink(parent, name, member.linkname, mtime=_mtime(member))
        elif action.kind is MemberKind.HARDLINK:
            apply.make_hardlink(root_fd, action.link_path, parent, name)
        else:
            raise apply.UnsafeOnDisk(f"no apply step for a {action.kind.value}")  # the plan refuses these


def _record(action: Action, member: tarfile.TarInfo, tree: ImageTree, layer: int) -> None:
    """Update the tree model with what ``action`` did (or, once a layer is refused, would do)."""
    if action.verdict is Verdict.WHITEOUT:
        tree.remove(action.path)
    elif action.verdict is Verdict.OPAQUE:
        for hidden in tree.opaque_removals(action.path, layer=layer):
            tree.remove(hidden)
        tree.ensure_directory(action.path, layer=layer)
    else:
        recorded = MemberKind.FILE if action.kind is MemberKind.HARDLINK else action.kind
        tree.add(action.path, recorded, layer=layer, mode=action.mode, mtime=_mtime(member))


def _report(sink: list[ReportEntry], layer: int, name: str, action: Action) -> None:
    for finding in action.findings:
        sink.append(ReportEntry(layer, name, action.verdict.value, finding.rule_id, finding.reason))


def _is_budget_refusal(action: Action) -> bool:
    return any(
        f.rule_id in ("entry-budget", "byte-budget") for f in action.findings if f.outcome is Outcome.REFUSE_IMAGE
    )


def _unpack_layer(
    root_fd: int,
    layer: LayerSource,
    number: int,
    *,
    tree: ImageTree,
    usage: Usage,
    limits: UnpackLimits,
    sink: list[ReportEntry],
    where: list[str],
) -> tuple[Usage, list[str]]:
    """Plan and apply every member of one layer; returns the new usage and the refused members."""
    refused: list[str] = []
    with layer.open() as raw:
        reader = LayerReader(raw, compression=layer.compression, max_plain_bytes=limits.max_layer_stream_bytes)
        try:
            tar = tarfile.open(fileobj=reader, mode="r|")  # type: ignore[call-overload]  # noqa: SIM115 - closed below
        except tarfile.ReadError as exc:
            raise StreamError(f"not a tar stream: {exc}") from exc
        with tar:
            try:
                for member in tar:
                    facts = member_facts(member)
                    action = plan_member(facts, tree=tree, limits=limits, usage=usage, layer=number)
                    _report(sink, number, facts.name, action)
                    if action.verdict is Verdict.REFUSE:
                        refused.append(facts.name)
                        if _is_budget_refusal(action) or len(refused) >= _MAX_LISTED_OFFENDERS:
                            return usage, refused
                        continue
                    added = facts.size if action.verdict is Verdict.EXTRACT and facts.kind is MemberKind.FILE else 0
                    usage = Usage(usage.entries + 1, usage.total_bytes + added)
                    if action.verdict is Verdict.SKIP:
                        continue
                    if not refused:  # once refused, the rest is only planned, to list more offenders
                        where[1:] = [f"member {facts.name!r}"]
                        _apply(root_fd, action, tar, member, tree, number)
                    _record(action, member, tree, number)
                where[1:] = []
            except (tarfile.TarError, StreamError) as exc:
                if refused:
                    return usage, refused  # already refused: the rest of the stream does not matter
                raise StreamError(f"unreadable tar stream: {exc}") from exc
            if refused:
                return usage, refused
            reader.finish(tar_end_offset=tar.offset)
    _verify_layer(layer, reader)
    return usage, refused


def _verify_layer(layer: LayerSource, reader: LayerReader) -> None:
    checks = (
        ("size", layer.size, reader.raw_bytes),
        ("sha256", layer.digest, reader.raw_hash.hexdigest()),
        ("uncompressed sha256 (diff_id)", layer.diff_id, reader.plain_hash.hexdigest()),
    )
    for what, expected, actual in checks:
        if expected is not None and expected != actual:
            raise StreamError(f"{what} is {actual}, the image says {expected}")


def _fail(image: str, cause: str, fix: str, report: UnpackReport | None = None) -> ImageError:
    return ImageError(f"image {image}: {cause}", fix, report=report)


@contextmanager
def _translated(image: str, sink: list[ReportEntry], where: list[str]) -> Iterator[None]:
    """Map the seams' exceptions to ImageError, naming the image and the layer being read."""
    try:
        yield
    except ImageError:
        raise
    except SourceError as exc:
        raise _fail(image, str(exc), "use an image whose metadata and blobs are intact") from exc
    except (StreamError, apply.UnsafeOnDisk) as exc:
        report = UnpackReport(image, tuple(sink))
        raise _fail(image, f"{' '.join(where)}: {exc}", "rebuild or re-export the image", report) from exc
    except cache.CacheError as exc:
        raise _fail(image, str(exc), "use a cache directory owned by you with mode 0700") from exc
    except OSError as exc:
        raise _fail(image, f"{' '.join(where)}: {exc}", "check the image file and free space in the cache") from exc
    except (ValueError, EOFError, tarfile.TarError, zlib.error) as exc:  # malformed input past the checks
        report = UnpackReport(image, tuple(sink))
        raise _fail(image, f"{' '.join(where)}: malformed image data: {exc}", "rebuild the image", report) from exc


def _unpack_into(
    root_fd: int, source: ImageSource, image: str, limits: UnpackLimits, sink: list[ReportEntry], where: list[str]
) -> tuple[str, ...]:
    """Steps 4-5: every layer in order, then read-only modes. Returns the world-writable dirs."""
    if len(source.layers) > limits.max_layers:
        raise _fail(image, f"{len(source.layers)} layers, over {limits.max_layers}", "flatten the image")
    tree, usage = ImageTree(), Usage()
    for number, layer in enumerate(source.layers):
        where[:] = [layer.label]
        usage, refused = _unpack_layer(
            root_fd, layer, number, tree=tree, usage=usage, limits=limits, sink=sink, where=where
        )
        if refused:
            report = UnpackReport(image, tuple(sink))
            names = ", ".join(repr(n) for n in refused)
            first = next(e for e in report.refused())
            raise _fail(
                image,
                f"{layer.label} refused: member(s) {names}: {first.reason}",
                "remove these members from the image; nothing was cached",
                report,
            )
    where[:] = ["finalizing"]
    apply.finalize_tree(root_fd, tree)
    return tuple("/" + "/".join(p) for p, mode, _ in tree.directories() if p and mode & (stat.S_IWGRP | stat.S_IWOTH))


def _from_metadata(metadata: dict[str, Any], rootfs: Path, *, reused: bool) -> UnpackedImage:
    report = metadata["report"]
    return UnpackedImage(
        digest=metadata["digest"],
        format=ImageFormat(metadata["format"]),
        rootfs=rootfs,
        config=ImageConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in metadata["config"].items()}),  # type: ignore[arg-type]
        tags=tuple(metadata["tags"]),
        report=UnpackReport(report["image"], tuple(ReportEntry(**e) for e in report["entries"])),
        reused=reused,
        writable_dirs=tuple(metadata["writable_dirs"]),
    )


def unpack_image(
    image: str | os.PathLike[str],
    *,
    cache_root: str | os.PathLike[str],
    limits: UnpackLimits | None = None,
    reference: str | None = None,
    host_machine: str | None = None,
) -> UnpackedImage:
    """Unpack a local image into the cache (or find it there) and return its read-only rootfs.

    Steps, in order: 1. read and verify the image's metadata (index, manifest, config), which
    fixes the digest; 2. open the cache root and take the digest's lock; 3. return a complete
    entry if one exists; 4. apply every layer into a fresh work dir inside the cache root,
    verifying each layer's bytes as they stream; 5. make the tree read-only; 6. write
    ``image.json``, flush, write the ``complete`` marker last, rename into place. Any failure in
    4-6 removes the work dir, so nothing partial is ever visible.

    Args:
        image: an OCI layout directory or tar, a ``docker save`` tar or directory, or a rootfs tar.
        cache_root: the cache directory (created 0700; must be yours and not writable by others).
        limits: budgets; defaults fit large real images.
        reference: which image, when the layout or archive holds several (an OCI
            ``org.opencontainers.image.ref.name`` annotation or a docker ``RepoTags`` entry).
        host_machine: ``platform.machine()`` unless given; chooses linux/amd64 or linux/arm64.

    Returns:
        The cached image; ``reused`` says whether it was already there.

    Raises:
        ImageError: the image was refused (its ``report`` lists every offending member) or could
            not be read, or the cache root is unusable.
    """
    limits = limits or UnpackLimits()
    label = str(image)
    sink: list[ReportEntry] = []
    where = ["reading metadata"]
    with _translated(label, sink, where):
        arch = host_oci_arch(host_machine or platform.machine())
        if not os.path.exists(label):
            raise _fail(label, "does not exist", "pass the path of a local image file or directory")
        files = open_image_files(label)
        try:
            source = read_image_source(label, files, arch=arch, reference=reference, limit=limits.max_json_bytes)
            return _cached_or_unpacked(source, label, Path(cache_root), limits, sink, where)
        finally:
            if files is not None:
                files.close()


def _cached_or_unpacked(
    source: ImageSource, label: str, cache_root: Path, limits: UnpackLimits, sink: list[ReportEntry], where: list[str]
) -> UnpackedImage:
    name = cache.entry_name(source.digest)
    rootfs = cache_root.absolute() / name / "rootfs"
    root_fd = cache.open_cache_root(str(cache_root))
    try:
        with cache.entry_lock(root_fd, name):
            found = cache.read_entry(root_fd, name)
            if found is not None and found.get("format") == source.format.value:
                try:
                    hit = _from_metadata(found, rootfs, reused=True)
                except (KeyError, TypeError, ValueError):
                    log.warning("image cache entry %s has unreadable metadata; unpacking again", name)
                else:
                    log.debug("image %s: cache hit %s", label, name)
                    return hit
            work = cache.new_work_dir(root_fd, name)
            try:
                metadata = _build_entry(root_fd, work, source, label, limits, sink, where)
                cache.publish(root_fd, work, name)
            except BaseException:
                apply.remove_entry(root_fd, work)
                raise
            return _from_metadata(metadata, rootfs, reused=False)
    finally:
        os.close(root_fd)


def _build_entry(
    root_fd: int,
    work: str,
    source: ImageSource,
    label: str,
    limits: UnpackLimits,
    sink: list[ReportEntry],
    where: list[str],
) -> dict[str, Any]:
    with apply.open_directory(root_fd, (work,), create=False) as work_fd:
        os.mkdir("rootfs", 0o700, dir_fd=work_fd)
        with apply.open_directory(work_fd, ("rootfs",), create=False) as rootfs_fd:
            writable = _unpack_into(rootfs_fd, source, label, limits, sink, where)
        metadata = {
            "digest": f"sha256:{source.digest}",
            "format": source.format.value,
            "config": asdict(source.config),
            "tags": list(source.tags),
            "report": {"image": label, "entries": [asdict(e) for e in sink]},
            "writable_dirs": list(writable),
        }
        cache.write_json(work_fd, cache.METADATA, metadata)
        cache.sync_filesystem(work_fd)
        cache.write_json(work_fd, cache.MARKER, {"version": cache.MARKER_VERSION, "digest": metadata["digest"]})
        os.fchmod(work_fd, 0o555)
    return metadata
