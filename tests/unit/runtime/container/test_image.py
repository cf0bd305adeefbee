"""Untrusted images: hostile members are refused or confined, blobs are verified, the cache is atomic."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
import threading
import time
from pathlib import Path

import pytest

from contain.errors import ContainError, ImageError
from contain.runtime.container import MEMBER_RULES, MemberFacts, UnpackLimits, plan_member, unpack_image
from contain.runtime.container._image_plan import ImageTree, MemberKind, Outcome, Usage, Verdict

# --------------------------------------------------------------------------------------------
# Building images with tarfile


def file_member(name: str, data: bytes = b"data", *, mode: int = 0o644, uid: int = 0) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.uid, info.gid, info.mtime = len(data), mode, uid, uid, 1_600_000_000
    return info, data


def dir_member(name: str, *, mode: int = 0o755) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 1_600_000_000
    return info, b""


def link_member(name: str, target: str, *, hard: bool = False) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = (tarfile.LNKTYPE if hard else tarfile.SYMTYPE), target
    return info, b""


def special_member(name: str, kind: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor, info.mode = kind, 8, 0, 0o666
    return info, b""


def sparse_member(name: str, apparent: int) -> tuple[tarfile.TarInfo, bytes]:
    """A GNU pax 1.0 sparse member: 512 real bytes at the end of ``apparent`` bytes of holes."""
    info = tarfile.TarInfo("GNUSparseFile.0/" + name)
    payload = f"1\n{apparent - 512}\n512\n".encode().ljust(512, b"\0") + b"x" * 512
    info.size = len(payload)
    info.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(apparent),
    }
    return info, payload


Member = tuple[tarfile.TarInfo, bytes]


def tar_bytes(members: list[Member], *, compress: bool = False) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0) if compress else raw


def rootfs_tar(path: Path, members: list[Member], *, compress: bool = False) -> Path:
    path.write_bytes(tar_bytes(members, compress=compress))
    return path


def _blob(root: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _config(layers: list[bytes], *, arch: str = "amd64") -> bytes:
    diff_ids = [f"sha256:{hashlib.sha256(layer).hexdigest()}" for layer in layers]
    doc = {
        "architecture": arch,
        "os": "linux",
        "config": {"Env": ["PATH=/usr/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/", "User": "1000"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    return json.dumps(doc).encode()


def _manifest(root: Path, layers: list[bytes], *, arch: str = "amd64", compress: bool = True) -> dict[str, object]:
    stored = [gzip.compress(layer, mtime=0) if compress else layer for layer in layers]
    media = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **_blob(root, _config(layers, arch=arch))},
        "layers": [{"mediaType": media, **_blob(root, data)} for data in stored],
    }
    return {"mediaType": "application/vnd.oci.image.manifest.v1+json", **_blob(root, json.dumps(manifest).encode())}


def oci_layout(root: Path, layers: list[list[Member]], *, compress: bool = True) -> Path:
    root.mkdir()
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    desc = _manifest(root, [tar_bytes(m) for m in layers], compress=compress)
    desc["platform"] = {"os": "linux", "architecture": "amd64"}
    desc["annotations"] = {"org.opencontainers.image.ref.name": "latest"}
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    return root


def layer_blob(root: Path, number: int) -> Path:
    index = json.loads((root / "index.json").read_text())
    manifest_hex = index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads((root / "blobs" / "sha256" / manifest_hex).read_bytes())
    return root / "blobs" / "sha256" / manifest["layers"][number]["digest"].split(":")[1]


def docker_save(path: Path, layers: list[list[Member]], *, tags: list[str], listed: list[str] | None = None) -> Path:
    raw = [tar_bytes(m) for m in layers]
    config = _config(raw)
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    files: list[Member] = [file_member(config_name, config)]
    for n, data in enumerate(raw):
        files.append(file_member(f"{n}/layer.tar", data))
    names = listed or [f"{n}/layer.tar" for n in range(len(raw))]
    manifest = [{"Config": config_name, "RepoTags": tags, "Layers": names}]
    files.append(file_member("manifest.json", json.dumps(manifest).encode()))
    path.write_bytes(tar_bytes(files))
    return path


# --------------------------------------------------------------------------------------------
# What must never change


class Witness:
    """The canary directory outside the cache and the host's /etc/shadow and /etc/passwd."""

    HOST_FILES = ("/etc/shadow", "/etc/passwd")

    def __init__(self, tmp_path: Path) -> None:
        self.canary = tmp_path / "canary"
        self.canary.mkdir()
        (self.canary / "keep").write_text("canary")
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, object]:
        seen: dict[str, object] = {
            "canary": sorted(os.listdir(self.canary)),
            "keep": (self.canary / "keep").read_text(),
        }
        for path in self.HOST_FILES:
            if os.path.exists(path):
                info = os.lstat(path)
                seen[path] = (hashlib.sha256(Path(path).read_bytes()).hexdigest(), info.st_mtime_ns, info.st_nlink)
        return seen

    def assert_untouched(self) -> None:
        assert self.snapshot() == self.before


@pytest.fixture
def witness(tmp_path: Path) -> Witness:
    return Witness(tmp_path)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def cache_entries(cache: Path) -> list[str]:
    return sorted(n for n in os.listdir(cache) if not n.startswith(".lock-")) if cache.exists() else []


def refuse(image: Path, cache: Path, **kwargs: object) -> ImageError:
    with pytest.raises(ImageError) as caught:
        unpack_image(image, cache_root=cache, host_machine="x86_64", **kwargs)  # type: ignore[arg-type]
    assert cache_entries(cache) == [], "a refused image leaves nothing in the cache"
    assert str(image) in caught.value.cause
    return caught.value


def refused_members(error: ImageError) -> dict[str, str]:
    report = error.report
    assert report is not None
    return {e.member: e.rule_id for e in report.refused()}


# --------------------------------------------------------------------------------------------
# Hostile members: one per kind


def _up(canary: Path) -> str:
    return "../" * 12 + str(canary).lstrip("/")


HOSTILE = {
    "absolute name": lambda c: ([file_member(str(c / "pwned"))], str(c / "pwned"), "absolute-name"),
    "dot-dot prefix": lambda c: ([file_member(_up(c) + "/pwned")], _up(c) + "/pwned", "dotdot-component"),
    "dot-dot in the middle": lambda c: (
        [dir_member("a"), file_member("a/../../" + _up(c) + "/pwned")],
        "a/../../" + _up(c) + "/pwned",
        "dotdot-component",
    ),
    "file through a symlink member": lambda c: (
        [link_member("link", str(c)), file_member("link/pwned")],
        "link/pwned",
        "through-symlink",
    ),
    "etc/passwd through a symlink to /": lambda c: (
        [link_member("dir", "/"), file_member("dir/etc/passwd", b"root::0:0::/:/bin/sh\n")],
        "dir/etc/passwd",
        "through-symlink",
    ),
    "directory through a relative symlink": lambda c: (
        [link_member("up", "../../../../../../../../.."), dir_member("up/x")],
        "up/x",
        "through-symlink",
    ),
    "hard link to /etc/shadow": lambda c: (
        [link_member("shadow", "/etc/shadow", hard=True)],
        "shadow",
        "hardlink-outside-root",
    ),
    "hard link climbing to etc/shadow": lambda c: (
        [link_member("shadow", "../" * 12 + "etc/shadow", hard=True)],
        "shadow",
        "hardlink-outside-root",
    ),
    "hard link to a symlink": lambda c: (
        [link_member("s", "/etc/shadow"), link_member("h", "s", hard=True)],
        "h",
        "hardlink-not-regular-file",
    ),
    "hard link to a path never extracted": lambda c: (
        [link_member("h", "etc/shadow", hard=True)],
        "h",
        "hardlink-not-regular-file",
    ),
    "hard link to a symlink into the canary": lambda c: (
        [link_member("s", str(c / "keep")), link_member("h", "s", hard=True), file_member("h", b"pwned")],
        "h",
        "hardlink-not-regular-file",
    ),
    "whiteout through a symlink": lambda c: (
        [link_member("l", str(c)), file_member("l/.wh.keep")],
        "l/.wh.keep",
        "through-symlink",
    ),
    "opaque marker through a symlink": lambda c: (
        [link_member("l", str(c)), file_member("l/.wh..wh..opq")],
        "l/.wh..wh..opq",
        "through-symlink",
    ),
    "character device": lambda c: ([special_member("dev/sda", tarfile.CHRTYPE)], "dev/sda", "device-node"),
    "block device": lambda c: ([special_member("dev/sdb", tarfile.BLKTYPE)], "dev/sdb", "device-node"),
    "fifo": lambda c: ([special_member("etc/passwd", tarfile.FIFOTYPE)], "etc/passwd", "fifo"),
    "deep path": lambda c: ([file_member("d/" * 300 + "f")], "d/" * 300 + "f", "path-too-deep"),
    "long component": lambda c: ([file_member("x" * 300)], "x" * 300, "path-too-long"),
    "whiteout of the parent": lambda c: ([file_member("a/.wh...")], "a/.wh...", "whiteout-names-nothing"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_member_refuses_the_image_names_the_member_and_writes_nothing_outside(
    kind: str, tmp_path: Path, witness: Witness, cache: Path
) -> None:
    members, offender, rule_id = HOSTILE[kind](witness.canary)
    image = rootfs_tar(tmp_path / "hostile.tar", [file_member("ok", b"fine"), *members])
    error = refuse(image, cache)
    assert refused_members(error) == {offender: rule_id}
    assert repr(offender) in error.cause
    witness.assert_untouched()


NAIVELY_SAFE_TO_RUN = [  # only those aimed at the canary; the /etc ones are never run naively
    "absolute name",
    "dot-dot prefix",
    "file through a symlink member",
    "hard link to a symlink into the canary",
    "whiteout through a symlink",
]


@pytest.mark.parametrize("kind", NAIVELY_SAFE_TO_RUN)
def test_a_naive_extractall_of_the_same_image_writes_into_the_canary(
    kind: str, tmp_path: Path, witness: Witness
) -> None:
    """Positive control: the hostile images above really escape an extractor without our checks."""
    members, _, _ = HOSTILE[kind](witness.canary)
    target = tmp_path / "a" / "b" / "c" / "naive"
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(tar_bytes(members))) as tar:
        tar.extractall(target, filter="fully_trusted")
    assert witness.snapshot() != witness.before, "the naive extractor wrote outside its target"


def test_every_offending_member_of_a_layer_is_listed(tmp_path: Path, witness: Witness, cache: Path) -> None:
    members = [
        file_member("/abs"),
        file_member("ok"),
        link_member("l", "/"),
        file_member("l/x"),
        special_member("null", tarfile.CHRTYPE),
    ]
    error = refuse(rootfs_tar(tmp_path / "many.tar", members), cache)
    assert refused_members(error) == {"/abs": "absolute-name", "l/x": "through-symlink", "null": "device-node"}
    assert all(name in error.cause for name in ("'/abs'", "'l/x'", "'null'"))
    witness.assert_untouched()


def test_a_setuid_binary_is_extracted_without_its_setuid_bit_and_reported(tmp_path: Path, cache: Path) -> None:
    members = [file_member("bin/su", b"\x7fELF", mode=0o4755), file_member("bin/wall", mode=0o2755)]
    image = unpack_image(rootfs_tar(tmp_path / "suid.tar", members), cache_root=cache, host_machine="x86_64")
    for name in ("su", "wall"):
        assert stat.S_IMODE((image.rootfs / "bin" / name).stat().st_mode) == 0o555
    assert {(e.member, e.rule_id, e.action) for e in image.report.entries} == {
        ("bin/su", "set-id-bits", "extract"),
        ("bin/wall", "set-id-bits", "extract"),
    }


def test_tar_owners_are_ignored_and_reported(tmp_path: Path, cache: Path) -> None:
    image = unpack_image(
        rootfs_tar(tmp_path / "own.tar", [file_member("home/app/x", uid=1000)]), cache_root=cache, host_machine="x86_64"
    )
    assert (image.rootfs / "home/app/x").stat().st_uid == os.geteuid()
    assert [e.rule_id for e in image.report.entries] == ["owner-ignored"]


def test_a_file_capability_xattr_is_dropped_and_reported(tmp_path: Path, cache: Path) -> None:
    info, data = file_member("bin/ping")
    info.pax_headers = {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}
    image = unpack_image(rootfs_tar(tmp_path / "cap.tar", [(info, data)]), cache_root=cache, host_machine="x86_64")
    assert os.listxattr(image.rootfs / "bin/ping") == []
    assert [e.rule_id for e in image.report.entries] == ["file-capability"]


def test_a_one_tebibyte_sparse_member_is_refused_quickly_without_writing(
    tmp_path: Path, witness: Witness, cache: Path
) -> None:
    image = rootfs_tar(tmp_path / "sparse.tar", [sparse_member("big", 1 << 40)])
    started = time.monotonic()
    error = refuse(image, cache)
    assert time.monotonic() - started < 5
    assert refused_members(error) == {"big": "byte-budget"}
    witness.assert_untouched()


def test_a_normal_member_past_the_byte_budget_is_refused(tmp_path: Path, witness: Witness, cache: Path) -> None:
    image = rootfs_tar(tmp_path / "big.tar", [file_member("a", b"x" * 600), file_member("b", b"x" * 600)])
    error = refuse(image, cache, limits=UnpackLimits(max_total_bytes=1000))
    assert refused_members(error) == {"b": "byte-budget"}
    witness.assert_untouched()


def test_too_many_entries_refuse_the_image(tmp_path: Path, witness: Witness, cache: Path) -> None:
    image = rootfs_tar(tmp_path / "many.tar", [file_member(f"f{n}") for n in range(11)])
    error = refuse(image, cache, limits=UnpackLimits(max_entries=10))
    assert refused_members(error) == {"f10": "entry-budget"}


def test_a_gzip_bomb_stops_at_the_layer_stream_cap(tmp_path: Path, cache: Path) -> None:
    padded = tar_bytes([file_member("f")]) + b"\0" * (64 << 20)  # zeros after the archive end
    image = tmp_path / "bomb.tar.gz"
    image.write_bytes(gzip.compress(padded, mtime=0))
    assert image.stat().st_size < 200_000
    limits = UnpackLimits(max_total_bytes=1 << 20, max_entries=10)
    assert "layer expands past" in refuse(image, cache, limits=limits).cause


def test_a_member_past_the_budget_inside_a_gzip_layer_is_refused_before_inflating_it(
    tmp_path: Path, cache: Path
) -> None:
    image = rootfs_tar(tmp_path / "big.tar.gz", [file_member("zeros", b"\0" * (8 << 20))], compress=True)
    error = refuse(image, cache, limits=UnpackLimits(max_total_bytes=1 << 20, max_entries=10))
    assert refused_members(error) == {"zeros": "byte-budget"}


def test_data_after_a_corrupt_header_is_not_silently_dropped(tmp_path: Path, cache: Path) -> None:
    raw = bytearray(tar_bytes([file_member("a"), file_member("b")]))
    raw[1024 + 148 : 1024 + 156] = b"0000000\0"  # break the second member's header checksum
    image = tmp_path / "cut.tar"
    image.write_bytes(bytes(raw))
    assert "not padding" in refuse(image, cache).cause


# --------------------------------------------------------------------------------------------
# Layers, whiteouts, formats


def test_whiteouts_and_opaque_directories_hide_lower_layers_only(tmp_path: Path, cache: Path) -> None:
    lower = [
        file_member("a/x"),
        file_member("a/y"),
        file_member("b/z"),
        file_member("c/k"),
        file_member("c/sub/old"),
        file_member("e"),
    ]
    upper = [
        file_member("a/.wh.x"),
        file_member(".wh.b"),
        file_member("c/sub/new"),
        file_member("c/.wh..wh..opq"),
        file_member("d/f"),
        file_member("d/.wh.f"),
        dir_member("e"),
        file_member("e/inside"),
    ]
    layout = oci_layout(tmp_path / "oci", [lower, upper])
    image = unpack_image(layout, cache_root=cache, host_machine="x86_64")
    tree = sorted(str(p.relative_to(image.rootfs)) for p in image.rootfs.rglob("*"))
    assert tree == ["a", "a/y", "c", "c/sub", "c/sub/new", "d", "d/f", "e", "e/inside"]
    assert [(e.member, e.rule_id) for e in image.report.entries] == [("d/.wh.f", "whiteout-same-layer")]


def test_a_later_layer_replaces_a_symlink_with_a_directory_without_following_it(
    tmp_path: Path, witness: Witness, cache: Path
) -> None:
    lower = [link_member("etc", str(witness.canary))]
    upper = [dir_member("etc"), file_member("etc/passwd", b"x")]
    image = unpack_image(oci_layout(tmp_path / "oci", [lower, upper]), cache_root=cache, host_machine="x86_64")
    assert (image.rootfs / "etc").is_dir() and not (image.rootfs / "etc").is_symlink()
    assert (image.rootfs / "etc/passwd").read_bytes() == b"x"
    witness.assert_untouched()


def test_an_oci_layout_yields_its_config_tags_and_a_read_only_tree(tmp_path: Path, cache: Path) -> None:
    layers = [[dir_member("tmp", mode=0o1777), file_member("bin/sh", mode=0o755), link_member("sh", "bin/sh")]]
    image = unpack_image(oci_layout(tmp_path / "oci", layers), cache_root=cache, host_machine="x86_64")
    manifest_digest = json.loads((tmp_path / "oci/index.json").read_text())["manifests"][0]["digest"]
    assert image.digest == manifest_digest
    assert image.rootfs == cache / ("sha256-" + manifest_digest.split(":")[1]) / "rootfs"
    assert (image.config.cmd, image.config.user, image.tags) == (("/bin/sh",), "1000", ("latest",))
    assert stat.S_IMODE((image.rootfs / "tmp").stat().st_mode) == 0o1555
    assert stat.S_IMODE((image.rootfs / "bin").stat().st_mode) == 0o555
    assert stat.S_IMODE(image.rootfs.stat().st_mode) == 0o555
    assert stat.S_IMODE((image.rootfs / "bin/sh").stat().st_mode) == 0o555
    assert (image.rootfs / "bin/sh").stat().st_mtime == 1_600_000_000
    assert os.readlink(image.rootfs / "sh") == "bin/sh"
    assert image.writable_dirs == ("/tmp",)


def test_uncompressed_oci_layers_and_an_oci_archive_tar_are_accepted(tmp_path: Path, cache: Path) -> None:
    layout = oci_layout(tmp_path / "oci", [[file_member("f", b"plain")]], compress=False)
    archive = tmp_path / "oci.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(layout, arcname=".")
    from_dir = unpack_image(layout, cache_root=cache, host_machine="x86_64")
    from_tar = unpack_image(archive, cache_root=tmp_path / "cache2", host_machine="x86_64")
    assert from_dir.digest == from_tar.digest
    assert (from_tar.rootfs / "f").read_bytes() == b"plain"


@pytest.mark.parametrize("what", ["content", "size"])
def test_an_oci_layer_that_differs_from_its_digest_is_refused(tmp_path: Path, cache: Path, what: str) -> None:
    layout = oci_layout(tmp_path / "oci", [[file_member("a")], [file_member("b", b"original")]])
    blob = layer_blob(layout, 1)
    good = blob.read_bytes()
    evil = gzip.compress(tar_bytes([file_member("b", b"EVILEVIL")]), mtime=0)
    blob.write_bytes(evil if what == "content" else good + b"\0" * 512)
    error = refuse(layout, cache)
    assert "layer 1" in error.cause and ("sha256" in error.cause or "size" in error.cause)


def test_an_oci_manifest_blob_that_differs_from_its_digest_is_refused(tmp_path: Path, cache: Path) -> None:
    layout = oci_layout(tmp_path / "oci", [[file_member("a")]])
    index = json.loads((layout / "index.json").read_text())
    manifest = layout / "blobs/sha256" / index["manifests"][0]["digest"].split(":")[1]
    manifest.write_bytes(manifest.read_bytes().replace(b'"schemaVersion": 2', b'"schemaVersion":  2'))
    assert "does not match its descriptor" in refuse(layout, cache).cause


def test_a_blob_planted_as_a_symlink_or_fifo_is_refused_without_reading_it(tmp_path: Path, cache: Path) -> None:
    layout = oci_layout(tmp_path / "oci", [[file_member("a")]])
    blob = layer_blob(layout, 0)
    blob.unlink()
    os.mkfifo(blob)
    assert "not a regular file" in refuse(layout, cache).cause
    blob.unlink()
    blob.symlink_to("/etc/shadow")
    assert "symlinks are not followed" in refuse(layout, cache).cause


def test_a_zstd_layer_is_refused_with_a_clear_error(tmp_path: Path, cache: Path) -> None:
    layout = oci_layout(tmp_path / "oci", [[file_member("a")]])
    index = json.loads((layout / "index.json").read_text())
    manifest_path = layout / "blobs/sha256" / index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads(manifest_path.read_bytes())
    manifest["layers"][0]["mediaType"] = "application/vnd.oci.image.layer.v1.tar+zstd"
    index["manifests"][0].update(_blob(layout, json.dumps(manifest).encode()))
    (layout / "index.json").write_text(json.dumps(index))
    assert "only tar and tar+gzip layers are supported" in refuse(layout, cache).cause


def test_the_manifest_for_the_host_architecture_is_chosen(tmp_path: Path, cache: Path) -> None:
    root = tmp_path / "multi"
    root.mkdir()
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    descs = []
    for arch in ("arm64", "amd64"):
        desc = _manifest(root, [tar_bytes([file_member("arch", arch.encode())])], arch=arch)
        desc["platform"] = {"os": "linux", "architecture": arch}
        descs.append(desc)
    attestation = dict(descs[0], platform={"os": "unknown", "architecture": "unknown"})
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [*descs, attestation]}))
    for machine, arch in (("x86_64", b"amd64"), ("aarch64", b"arm64")):
        image = unpack_image(root, cache_root=cache, host_machine=machine)
        assert (image.rootfs / "arch").read_bytes() == arch
    with pytest.raises(ImageError, match="host architecture 'riscv64'"):
        unpack_image(root, cache_root=cache, host_machine="riscv64")


def test_a_docker_save_archive_is_unpacked_with_its_tags(tmp_path: Path, cache: Path) -> None:
    archive = docker_save(tmp_path / "saved.tar", [[file_member("a", b"1")], [file_member("b", b"2")]], tags=["app:1"])
    image = unpack_image(archive, cache_root=cache, host_machine="x86_64")
    assert image.format.value == "docker-save"
    assert image.tags == ("app:1",)
    assert (image.rootfs / "a").read_bytes() == b"1" and (image.rootfs / "b").read_bytes() == b"2"


def test_a_docker_save_layer_that_differs_from_its_diff_id_is_refused(tmp_path: Path, cache: Path) -> None:
    archive = docker_save(tmp_path / "saved.tar", [[file_member("a", b"good")]], tags=["app:1"])
    archive.write_bytes(archive.read_bytes().replace(b"good", b"evil"))
    assert "diff_id" in refuse(archive, cache).cause


def test_a_docker_save_layer_path_cannot_leave_the_archive(tmp_path: Path, cache: Path) -> None:
    for listed in ("../../etc/shadow", "/etc/shadow"):
        archive = docker_save(tmp_path / "saved.tar", [[file_member("a")]], tags=["app:1"], listed=[listed])
        assert (
            "not a path inside the image" in refuse(archive, cache).cause
            or "not a relative path" in refuse(archive, cache).cause
        )


def test_a_gzip_rootfs_tarball_is_unpacked_and_keyed_by_its_sha256(tmp_path: Path, cache: Path) -> None:
    path = rootfs_tar(
        tmp_path / "root.tar.gz", [dir_member("./"), file_member("./etc/os-release", b"ID=x")], compress=True
    )
    image = unpack_image(path, cache_root=cache, host_machine="x86_64")
    assert image.digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert (image.rootfs / "etc/os-release").read_bytes() == b"ID=x"
    assert [e.rule_id for e in image.report.entries] == ["image-root-entry"]


# --------------------------------------------------------------------------------------------
# The cache


def test_a_second_unpack_reuses_the_entry_without_unpacking_again(tmp_path: Path, cache: Path) -> None:
    path = rootfs_tar(tmp_path / "r.tar", [file_member("bin/x", mode=0o4755)])
    first = unpack_image(path, cache_root=cache, host_machine="x86_64")
    marker = first.rootfs.parent / "complete"
    before = (marker.stat().st_ino, marker.stat().st_mtime_ns, (first.rootfs / "bin/x").stat().st_ino)
    second = unpack_image(path, cache_root=cache, host_machine="x86_64")
    assert (first.reused, second.reused) == (False, True)
    assert (marker.stat().st_ino, marker.stat().st_mtime_ns, (second.rootfs / "bin/x").stat().st_ino) == before
    assert second.report == first.report and second.rootfs == first.rootfs


def test_a_failure_in_a_later_layer_leaves_no_cache_entry(tmp_path: Path, cache: Path) -> None:
    layout = oci_layout(tmp_path / "oci", [[file_member("big", b"x" * 100_000)], [file_member("c")]])
    layer_blob(layout, 1).write_bytes(b"corrupt")
    refuse(layout, cache)
    assert cache_entries(cache) == []


def test_an_entry_without_its_marker_is_rebuilt(tmp_path: Path, cache: Path) -> None:
    path = rootfs_tar(tmp_path / "r.tar", [file_member("f", b"v1")])
    first = unpack_image(path, cache_root=cache, host_machine="x86_64")
    marker = first.rootfs.parent / "complete"
    os.chmod(first.rootfs.parent, 0o755)
    marker.unlink()
    again = unpack_image(path, cache_root=cache, host_machine="x86_64")
    assert again.reused is False and (again.rootfs / "f").read_bytes() == b"v1"
    assert cache_entries(cache) == [first.rootfs.parent.name]


def test_concurrent_unpacks_of_one_image_unpack_once(tmp_path: Path, cache: Path) -> None:
    path = rootfs_tar(tmp_path / "r.tar", [file_member(f"d/f{n}", b"x" * 1000) for n in range(300)])
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(unpack_image(path, cache_root=cache, host_machine="x86_64")))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.reused for r in results) == [False, True, True]
    assert len(list((results[0].rootfs / "d").iterdir())) == 300
    assert cache_entries(cache) == [results[0].rootfs.parent.name]


def test_a_cache_root_writable_by_others_is_refused(tmp_path: Path, cache: Path) -> None:
    cache.mkdir(mode=0o777)
    os.chmod(cache, 0o777)
    with pytest.raises(ImageError, match="writable by others"):
        unpack_image(rootfs_tar(tmp_path / "r.tar", [file_member("f")]), cache_root=cache, host_machine="x86_64")


def test_image_error_is_a_contain_error_with_the_start_exit_code() -> None:
    assert issubclass(ImageError, ContainError) and ImageError("x").exit_code == 125


# --------------------------------------------------------------------------------------------
# The plan as a truth table: every rule row has an example member that triggers it


def _tree() -> ImageTree:
    tree = ImageTree()
    tree.add(("link",), MemberKind.SYMLINK, layer=0)
    tree.add(("file",), MemberKind.FILE, layer=0)
    tree.add(("same",), MemberKind.FILE, layer=1)
    return tree


F = MemberKind.FILE
EXAMPLES: dict[str, MemberFacts] = {
    "absolute-name": MemberFacts("/etc/x", F),
    "dotdot-component": MemberFacts("a/../x", F),
    "nul-in-name": MemberFacts("a\x00b", F),
    "path-too-long": MemberFacts("x" * 256, F),
    "path-too-deep": MemberFacts("d/" * 257 + "f", F),
    "through-symlink": MemberFacts("link/x", F),
    "non-directory-parent": MemberFacts("file/x", F),
    "hardlink-outside-root": MemberFacts("h", MemberKind.HARDLINK, linkname="/etc/shadow"),
    "hardlink-not-regular-file": MemberFacts("h", MemberKind.HARDLINK, linkname="link"),
    "device-node": MemberFacts("dev/x", MemberKind.BLOCK_DEVICE),
    "fifo": MemberFacts("p", MemberKind.FIFO),
    "unknown-type": MemberFacts("p", MemberKind.OTHER),
    "symlink-target": MemberFacts("s", MemberKind.SYMLINK, linkname="x" * 4097),
    "entry-budget": MemberFacts("f", F),
    "byte-budget": MemberFacts("f", F, size=10**12),
    "whiteout-names-nothing": MemberFacts(".wh..", F),
    "image-root-entry": MemberFacts("./", MemberKind.DIRECTORY),
    "aufs-metadata": MemberFacts(".wh..wh.plnk", F),
    "whiteout-same-layer": MemberFacts(".wh.same", F),
    "hardlink-to-itself": MemberFacts("file", MemberKind.HARDLINK, linkname="file"),
    "set-id-bits": MemberFacts("su", F, mode=0o4755),
    "sticky-file": MemberFacts("t", F, mode=0o1644),
    "file-capability": MemberFacts("ping", F, xattrs=("security.capability",)),
    "xattrs-dropped": MemberFacts("x", F, xattrs=("user.note",)),
    "owner-ignored": MemberFacts("x", F, uid=1000, gid=1000),
}
VERDICT = {
    Outcome.REFUSE_IMAGE: Verdict.REFUSE,
    Outcome.SKIP_MEMBER: Verdict.SKIP,
    Outcome.CHANGE_MEMBER: Verdict.EXTRACT,
}


def test_every_rule_row_has_an_example_and_a_reason() -> None:
    assert sorted(EXAMPLES) == sorted(rule.rule_id for rule in MEMBER_RULES)
    assert all(rule.reason for rule in MEMBER_RULES)


@pytest.mark.parametrize("rule", MEMBER_RULES, ids=lambda r: r.rule_id)
def test_each_rule_decides_its_example_member(rule) -> None:  # type: ignore[no-untyped-def]
    usage = Usage(entries=10, total_bytes=0) if rule.rule_id == "entry-budget" else Usage()
    action = plan_member(
        EXAMPLES[rule.rule_id], tree=_tree(), limits=UnpackLimits(max_entries=10), usage=usage, layer=1
    )
    assert [f.rule_id for f in action.findings] == [rule.rule_id]
    assert action.verdict is VERDICT[rule.outcome]


def test_a_plain_member_is_extracted_with_no_findings() -> None:
    action = plan_member(
        MemberFacts("./usr//bin/env", F, mode=0o755), tree=_tree(), limits=UnpackLimits(), usage=Usage(), layer=0
    )
    assert (action.verdict, action.path, action.mode, action.findings) == (
        Verdict.EXTRACT,
        ("usr", "bin", "env"),
        0o755,
        (),
    )


def test_a_whiteout_and_an_opaque_marker_are_planned_on_their_targets() -> None:
    plan = {
        name: plan_member(MemberFacts(name, F), tree=_tree(), limits=UnpackLimits(), usage=Usage(), layer=1)
        for name in ("a/.wh.b", "a/.wh..wh..opq", ".wh.link")
    }
    assert [(a.verdict, a.path) for a in plan.values()] == [
        (Verdict.WHITEOUT, ("a", "b")),
        (Verdict.OPAQUE, ("a",)),
        (Verdict.WHITEOUT, ("link",)),
    ]


def test_a_sparse_member_within_the_budget_is_written_at_its_apparent_size(tmp_path: Path, cache: Path) -> None:
    image = unpack_image(
        rootfs_tar(tmp_path / "s.tar", [sparse_member("holes", 1 << 20)]), cache_root=cache, host_machine="x86_64"
    )
    data = (image.rootfs / "holes").read_bytes()
    assert len(data) == 1 << 20 and data[-512:] == b"x" * 512 and data[:-512].count(0) == (1 << 20) - 512


def test_a_nan_mtime_is_unpacked_as_the_epoch(tmp_path: Path, cache: Path) -> None:
    info, data = file_member("f")
    info.pax_headers = {"mtime": "nan"}
    image = unpack_image(rootfs_tar(tmp_path / "t.tar", [(info, data)]), cache_root=cache, host_machine="x86_64")
    assert (image.rootfs / "f").stat().st_mtime == 0


def test_an_entry_with_unreadable_metadata_is_unpacked_again(tmp_path: Path, cache: Path) -> None:
    path = rootfs_tar(tmp_path / "r.tar", [file_member("f", b"v1")])
    first = unpack_image(path, cache_root=cache, host_machine="x86_64")
    metadata = first.rootfs.parent / "image.json"
    os.chmod(first.rootfs.parent, 0o755)
    metadata.unlink()
    metadata.write_text("{not json")
    again = unpack_image(path, cache_root=cache, host_machine="x86_64")
    assert again.reused is False and (again.rootfs / "f").read_bytes() == b"v1"


def test_later_members_replace_earlier_ones_of_another_kind_without_following_links(
    tmp_path: Path, witness: Witness, cache: Path
) -> None:
    lower = [
        file_member("d/x"),
        file_member("f", b"file"),
        link_member("s", str(witness.canary / "keep")),
        link_member("abs", "/etc/shadow"),
        file_member("g", b"first"),
        file_member("g", b"second"),
    ]
    upper = [file_member("d", b"now a file"), dir_member("f"), file_member("s", b"replaced")]
    image = unpack_image(oci_layout(tmp_path / "oci", [lower, upper]), cache_root=cache, host_machine="x86_64")
    root = image.rootfs
    assert (root / "d").read_bytes() == b"now a file"
    assert (root / "f").is_dir()
    assert not (root / "s").is_symlink() and (root / "s").read_bytes() == b"replaced"
    assert os.readlink(root / "abs") == "/etc/shadow"
    assert (root / "g").read_bytes() == b"second"
    witness.assert_untouched()


def test_the_package_exports_resolve() -> None:
    import contain.runtime.container as package

    assert all(getattr(package, name) is not None for name in package.__all__)


def test_a_truncated_gzip_layer_is_refused(tmp_path: Path, cache: Path) -> None:
    data = gzip.compress(tar_bytes([file_member("f", os.urandom(100_000))]), mtime=0)
    image = tmp_path / "cut.tar.gz"
    image.write_bytes(data[: len(data) // 2])
    refuse(image, cache)


def test_a_layer_of_concatenated_gzip_members_is_read_whole(tmp_path: Path, cache: Path) -> None:
    raw = tar_bytes([file_member("a", b"1"), file_member("b", b"2")])
    image = tmp_path / "multi.tar.gz"
    image.write_bytes(gzip.compress(raw[:1024], mtime=0) + gzip.compress(raw[1024:], mtime=0))
    unpacked = unpack_image(image, cache_root=cache, host_machine="x86_64")
    assert (unpacked.rootfs / "b").read_bytes() == b"2"


def test_report_lines_show_control_characters_in_member_names_visibly(tmp_path: Path, cache: Path) -> None:
    hostile = "bin/\x1b[2Jsu\u202e"
    image = unpack_image(
        rootfs_tar(tmp_path / "r.tar", [file_member(hostile, mode=0o4755)]), cache_root=cache, host_machine="x86_64"
    )
    assert image.report.entries[0].member == hostile  # the value stays exact
    (line,) = image.report.lines()
    assert "\x1b" not in line and "\u202e" not in line and "set-id-bits" in line


def test_a_failure_while_applying_names_the_member(tmp_path: Path, cache: Path) -> None:
    members = [file_member("a/b"), link_member("a", "a/b", hard=True)]  # replacing a/ deletes the link's target
    error = refuse(rootfs_tar(tmp_path / "r.tar", members), cache)
    assert "member 'a'" in error.cause
