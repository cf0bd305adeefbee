"""The guest kernel: .modinfo parsing, dependency order, package choice."""

from __future__ import annotations

import struct

import pytest

from contain.errors import UnsupportedHost
from contain.runtime.microvm.kernel import GUEST_MODULES, find_kernel_package, read_modinfo, resolve_module_order


def _elf_with_modinfo(items: list[bytes]) -> bytes:
    """A minimal ELF64 LSB with a .shstrtab and a .modinfo section (what read_modinfo reads)."""
    shstr = b"\0.shstrtab\0.modinfo\0"
    modinfo = b"".join(i + b"\0" for i in items)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    data_at = 64
    shstr_at, modinfo_at = data_at, data_at + len(shstr)
    shoff = modinfo_at + len(modinfo)
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 1)
    sections = bytes(64)  # the null section
    sections += struct.pack("<IIQQQQ", 1, 3, 0, 0, shstr_at, len(shstr)).ljust(64, b"\0")
    sections += struct.pack("<IIQQQQ", 11, 1, 0, 0, modinfo_at, len(modinfo)).ljust(64, b"\0")
    return bytes(header) + shstr + modinfo + sections


def test_modinfo_gives_the_name_and_dependencies_a_module_declares():
    elf = _elf_with_modinfo([b"alias=virtio:d00000002v*", b"depends=virtio,virtio_ring", b"name=virtio_blk"])
    info = read_modinfo(elf)
    assert (info["name"], info["depends"]) == ("virtio_blk", "virtio,virtio_ring")


def test_modinfo_refuses_what_is_not_an_elf64_module():
    with pytest.raises(ValueError, match="not an ELF64"):
        read_modinfo(b"#!/bin/sh\n")


def test_dependencies_load_first_and_each_module_once():
    depends = {
        "virtio": (),
        "virtio_ring": (),
        "virtio_mmio": ("virtio", "virtio_ring"),
        "virtio_blk": ("virtio", "virtio_ring"),
        "net_failover": ("failover",),
        "failover": (),
        "virtio_net": ("virtio_ring", "virtio", "net_failover"),
    }
    order = resolve_module_order(("virtio_mmio", "virtio_blk", "virtio_net"), depends)
    assert order == ("virtio", "virtio_ring", "virtio_mmio", "virtio_blk", "failover", "net_failover", "virtio_net")


def test_a_missing_module_or_dependency_is_refused_with_its_name():
    with pytest.raises(UnsupportedHost, match="no module virtio_ring \\(needed by virtio_blk\\)"):
        resolve_module_order(("virtio_blk",), {"virtio_blk": ("virtio_ring",)})
    with pytest.raises(UnsupportedHost, match="cycle"):
        resolve_module_order(("a",), {"a": ("b",), "b": ("a",)})


def test_every_guest_module_row_gives_a_reason():
    assert all(row.why for row in GUEST_MODULES)
    assert len({row.name for row in GUEST_MODULES}) == len(GUEST_MODULES)


def test_the_newest_cloud_kernel_package_is_chosen(tmp_path):
    for name in (
        "linux-image-6.1.0-9-cloud-amd64_6.1.27-1_amd64.deb",
        "linux-image-6.1.0-53-cloud-amd64_6.1.187-1_amd64.deb",
        "linux-image-6.1.0-53-amd64_6.1.187-1_amd64.deb",  # not the cloud flavour
        "linux-image-cloud-amd64_6.1.187-1_amd64.deb",  # the meta package
    ):
        (tmp_path / name).write_bytes(b"")
    found = find_kernel_package(str(tmp_path))
    assert found is not None and found.name == "linux-image-6.1.0-53-cloud-amd64_6.1.187-1_amd64.deb"
    assert find_kernel_package(str(tmp_path / "none")) is None
