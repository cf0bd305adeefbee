"""The on-disk seccomp filter: the same bytes compile_filter makes, trusted only when it is safe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from contain.host.facts import detect_host
from contain.runtime import filter_cache, seccomp
from contain.runtime.filter_cache import filter_for

FACTS = detect_host()
pytestmark = pytest.mark.skipif(FACTS.libseccomp_path is None, reason="libseccomp is not installed on this host")


@pytest.fixture(autouse=True)
def _fresh_process_cache():
    filter_cache._load_or_compile.cache_clear()
    yield
    filter_cache._load_or_compile.cache_clear()


def build(cache_dir: Path) -> bytes:
    return filter_for(arch=FACTS.arch, libseccomp_path=FACTS.libseccomp_path, cache_dir=cache_dir)


def stored(cache_dir: Path) -> Path:
    (entry,) = cache_dir.glob("seccomp-*.bpf")
    return entry


def refuse_to_compile(monkeypatch) -> None:
    def fail(**_: object) -> bytes:
        raise AssertionError("compiled although a trusted copy exists")

    monkeypatch.setattr(seccomp, "compile_filter", fail)


def test_the_stored_filter_is_what_compile_filter_makes_and_is_read_back(tmp_path, monkeypatch):
    first = build(tmp_path)
    assert first == seccomp.compile_filter(arch=FACTS.arch, libseccomp_path=FACTS.libseccomp_path)
    assert stored(tmp_path).read_bytes() == first and stored(tmp_path).stat().st_mode & 0o777 == 0o644
    filter_cache._load_or_compile.cache_clear()
    refuse_to_compile(monkeypatch)
    assert build(tmp_path) == first


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: os.chmod(p, 0o666),
        lambda p: p.write_bytes(p.read_bytes()[:-3]),
        lambda p: p.write_bytes(b""),
        lambda p: os.chown(p, 65534, 65534) if os.geteuid() == 0 else pytest.skip("chown needs root"),
    ],
    ids=["writable-by-others", "partial-instruction", "empty", "foreign-owner"],
)
def test_an_untrusted_or_damaged_copy_is_ignored_and_rebuilt(tmp_path, damage):
    good = build(tmp_path)
    damage(stored(tmp_path))
    filter_cache._load_or_compile.cache_clear()
    assert build(tmp_path) == good
    assert stored(tmp_path).read_bytes() == good and stored(tmp_path).stat().st_mode & 0o777 == 0o644


def test_a_symlink_is_not_followed(tmp_path):
    good = build(tmp_path)
    entry = stored(tmp_path)
    planted = tmp_path / "planted"
    planted.write_bytes(b"\x06\x00\x00\x00\x00\x00\xff\x7f")  # one instruction: return ALLOW
    entry.unlink()
    entry.symlink_to(planted)
    filter_cache._load_or_compile.cache_clear()
    assert build(tmp_path) == good and not stored(tmp_path).is_symlink()


def test_a_changed_rule_table_or_library_is_a_new_key(tmp_path, monkeypatch):
    build(tmp_path)
    source = tmp_path / "seccomp.py"
    source.write_bytes(filter_cache._SOURCE.read_bytes() + b"\n# a changed table\n")
    monkeypatch.setattr(filter_cache, "_SOURCE", source)
    build(tmp_path)
    assert len(list(tmp_path.glob("seccomp-*.bpf"))) == 2
    library_copy = tmp_path / "libseccomp.so.2"
    library_copy.write_bytes(Path(FACTS.libseccomp_path).read_bytes())
    filter_for(arch=FACTS.arch, libseccomp_path=str(library_copy), cache_dir=tmp_path)
    assert len(list(tmp_path.glob("seccomp-*.bpf"))) == 3
