"""The guest kernel: Debian's cloud kernel, unpacked into the cache, never installed on the host.

``ensure_guest_kernel()`` finds a ``linux-image-<version>-cloud-amd64`` package (in
/var/cache/apt/archives, or fetched with ``apt-get download`` into the cache), unpacks it with
``dpkg-deb -x`` into a temporary directory, and keeps only ``vmlinuz`` and the modules the guest
needs (``GUEST_MODULES`` plus what they depend on) in ``kernel-<sha of the .deb>/``. The .deb's
sha256 names the result, so a new kernel package gives a new directory and the old one is never
reused for it.

Module dependencies: the .deb ships no ``modules.dep`` (``depmod`` writes it at install time,
which we never do), so they are read from each module's own ``.modinfo`` ELF section
(``depends=``), the same field depmod reads. ``resolve_module_order`` turns that map into a load
order (dependencies first) as a pure function; a missing dependency is an error, never skipped.

The guest boots ``vmlinuz`` (the bzImage) as Debian ships it, not an extracted ELF ``vmlinux``:
the kernel has ``CONFIG_PVH``, so QEMU could enter it directly and skip the decompressor (LZ4,
14 MB to 53 MB; measured ~0.2 s of emulated CPU under TCG), but the decompressor is what picks
the KASLR text offset, and the flag it leaves is what turns on the memory-region randomisation
later (``kaslr_enabled()``): a PVH boot runs every guest at the same addresses. Refused for that.

What this does not do: verify the package's signature (apt verified it when it downloaded it into
the archive; a .deb placed there by someone else is trusted as apt's cache is), or build a kernel
of our own.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from contain.errors import SandboxStartError, UnsupportedHost
from contain.runtime.microvm.artefacts import DIGEST_HEX_DIGITS, ensure_artefact, guest_cache_dir

__all__ = [
    "GUEST_MODULES",
    "GuestKernel",
    "ModuleRow",
    "ensure_guest_kernel",
    "find_kernel_package",
    "read_modinfo",
    "resolve_module_order",
]

APT_ARCHIVES = "/var/cache/apt/archives"
KERNEL_PACKAGE_GLOB = "linux-image-[0-9]*-cloud-amd64_*_amd64.deb"
KERNEL_META_PACKAGE = "linux-image-cloud-amd64"
_TOOL_TIMEOUT_S = 300


@dataclass(frozen=True)
class ModuleRow:
    """One module the guest loads from its initramfs, and why."""

    name: str
    why: str
    only_with_network: bool = False


# Loaded by /init in this order after their dependencies (resolve_module_order adds those).
GUEST_MODULES: tuple[ModuleRow, ...] = (
    ModuleRow("virtio_mmio", "microvm puts every virtio device on virtio-mmio (no PCI bus)"),
    ModuleRow("virtio_blk", "the userland image and read-bind images are virtio block devices"),
    ModuleRow("virtio_console", "the agent's control channel is a virtio-serial port"),
    ModuleRow("virtio_rng", "entropy from the host's /dev/urandom at boot (and after a restore)"),
    ModuleRow("squashfs", "the userland and read-bind images are squashfs, read-only by format"),
    ModuleRow("overlay", "the guest root: the read-only userland under a fresh tmpfs per VM"),
    ModuleRow("virtio_net", "the NIC to contain's egress proxy, only when the boundary allows hosts", True),
)


@dataclass(frozen=True)
class GuestKernel:
    """A kernel unpacked into the cache: ``vmlinuz``, ``modules/<name>.ko``, and the load order."""

    directory: Path
    release: str  # e.g. 6.1.0-53-cloud-amd64
    digest: str  # of the .deb it came from
    module_order: tuple[str, ...]  # every module to load, dependencies first
    network_modules: tuple[str, ...]  # the subset (with its own dependencies) loaded only with a NIC

    @property
    def vmlinuz(self) -> Path:
        return self.directory / "vmlinuz"

    def module_path(self, name: str) -> Path:
        return self.directory / "modules" / f"{name}.ko"


def read_modinfo(elf: bytes) -> dict[str, str]:
    """The ``key=value`` pairs of a kernel module's ``.modinfo`` section (ELF64 little-endian).

    Raises:
        ValueError: not an ELF64 LSB file, or no ``.modinfo`` section.
    """
    if elf[:6] != b"\x7fELF\x02\x01":
        raise ValueError("not an ELF64 little-endian file")
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    # Elf64_Shdr: name u32, type u32, flags u64, addr u64, offset u64, size u64, ...
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    for name_off, _type, _flags, _addr, offset, size in headers:
        start = names_at + name_off
        if elf[start : elf.index(b"\0", start)] == b".modinfo":
            info: dict[str, str] = {}
            for item in elf[offset : offset + size].split(b"\0"):
                key, sep, value = item.decode("utf-8", "replace").partition("=")
                if sep:
                    info.setdefault(key, value)  # keys like alias repeat; we read name/depends only
            return info
    raise ValueError("no .modinfo section")


def resolve_module_order(wanted: tuple[str, ...], depends: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """Every module in ``wanted`` and its dependencies, each after what it depends on.

    Args:
        wanted: module names, in the order they should load when nothing else constrains them.
        depends: module name -> the names it depends on (from ``.modinfo``), for every module known.

    Raises:
        UnsupportedHost: a wanted module or a dependency is not in the kernel package, or the
            dependencies form a cycle.
    """
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str, needed_by: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise UnsupportedHost(f"kernel module dependencies form a cycle through {name}", "use another kernel")
        if name not in depends:
            raise UnsupportedHost(
                f"the guest kernel has no module {name} (needed by {needed_by})",
                f"use a kernel package that builds {name} as a module or into the kernel",
            )
        visiting.add(name)
        for dependency in depends[name]:
            visit(dependency, name)
        visiting.discard(name)
        order.append(name)

    for name in wanted:
        visit(name, "the guest")
    return tuple(order)


def find_kernel_package(archives: str = APT_ARCHIVES) -> Path | None:
    """The newest ``linux-image-*-cloud-amd64`` .deb in ``archives`` (by version in the name)."""
    found = glob.glob(os.path.join(archives, KERNEL_PACKAGE_GLOB))
    if not found:
        return None

    def version_key(path: str) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", os.path.basename(path)))

    return Path(max(found, key=version_key))


def _download_kernel_package(into: Path) -> Path:
    """``apt-get download`` the versioned package the cloud meta package depends on, into ``into``."""
    try:
        depends = subprocess.run(
            ["apt-cache", "depends", KERNEL_META_PACKAGE],
            capture_output=True,
            text=True,
            timeout=_TOOL_TIMEOUT_S,
            check=True,
        ).stdout
        match = re.search(r"Depends:\s*(linux-image-[0-9][^\s]*-cloud-amd64)", depends)
        if not match:
            raise UnsupportedHost(
                f"apt does not know which kernel {KERNEL_META_PACKAGE} depends on",
                "run `apt-get update`, or place a linux-image-*-cloud-amd64 .deb in /var/cache/apt/archives",
            )
        subprocess.run(
            ["apt-get", "download", "-q", match.group(1)],
            cwd=into,
            capture_output=True,
            text=True,
            timeout=_TOOL_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise UnsupportedHost(
            f"cannot download the guest kernel package with apt-get: {exc}",
            "place a linux-image-*-cloud-amd64 .deb in /var/cache/apt/archives (apt-get download works too)",
        ) from exc
    found = find_kernel_package(str(into))
    if found is None:
        raise UnsupportedHost("apt-get download left no kernel package", "download it by hand into the cache")
    return found


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_guest_kernel(*, archives: str = APT_ARCHIVES) -> GuestKernel:
    """The unpacked guest kernel, unpacking (and if needed downloading) it once.

    Raises:
        UnsupportedHost: no kernel package can be found or downloaded, or it lacks a module.
        SandboxStartError: unpacking failed, or the cache fails its checks.
    """
    cache = guest_cache_dir()
    package = find_kernel_package(archives) or find_kernel_package(str(cache / "downloads"))
    if package is None:
        downloads = cache / "downloads"
        downloads.mkdir(mode=0o755, parents=True, exist_ok=True)
        package = _download_kernel_package(downloads)
    digest = _file_sha256(package)[:DIGEST_HEX_DIGITS]
    wanted = tuple(row.name for row in GUEST_MODULES)
    directory, _ = ensure_artefact(
        cache, f"kernel-{digest}", lambda out: _unpack_kernel(package, out, wanted), is_tree=True
    )
    return _load_kernel(directory, digest)


def _unpack_kernel(package: Path, out: Path, wanted: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory(prefix="contain-kernel-") as tmp:
        try:
            subprocess.run(
                ["dpkg-deb", "-x", str(package), tmp], capture_output=True, timeout=_TOOL_TIMEOUT_S, check=True
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxStartError(f"dpkg-deb -x {package} failed: {exc}", "check the package file") from exc
        vmlinuz = glob.glob(os.path.join(tmp, "boot", "vmlinuz-*"))
        releases = glob.glob(os.path.join(tmp, "lib", "modules", "*"))
        if len(vmlinuz) != 1 or len(releases) != 1:
            raise SandboxStartError(f"{package} does not hold exactly one kernel", "use a linux-image-* package")
        known: dict[str, Path] = {}
        depends: dict[str, tuple[str, ...]] = {}
        for ko in glob.glob(os.path.join(releases[0], "kernel", "**", "*.ko"), recursive=True):
            info = read_modinfo(Path(ko).read_bytes())
            name = info.get("name", Path(ko).stem)
            known[name] = Path(ko)
            depends[name] = tuple(d for d in info.get("depends", "").split(",") if d)
        order = resolve_module_order(wanted, depends)
        (out / "modules").mkdir()
        for name in order:
            shutil.copyfile(known[name], out / "modules" / f"{name}.ko")
        shutil.copyfile(vmlinuz[0], out / "vmlinuz")
        network = resolve_module_order(tuple(r.name for r in GUEST_MODULES if r.only_with_network), depends)
        base = resolve_module_order(tuple(r.name for r in GUEST_MODULES if not r.only_with_network), depends)
        (out / "release").write_text(os.path.basename(releases[0]) + "\n")
        (out / "module-order").write_text("\n".join(order) + "\n")
        (out / "network-modules").write_text("\n".join(n for n in network if n not in base) + "\n")


def _load_kernel(directory: Path, digest: str) -> GuestKernel:
    def lines(name: str) -> tuple[str, ...]:
        return tuple(line for line in (directory / name).read_text().splitlines() if line)

    return GuestKernel(
        directory=directory,
        release=lines("release")[0],
        digest=digest,
        module_order=lines("module-order"),
        network_modules=lines("network-modules"),
    )
