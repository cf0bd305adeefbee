"""The on-disk seccomp filter: the same bytes compile_filter makes, trusted only when it is safe."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from contain.host.facts import detect_host
from contain.runtime import filter_cache, seccomp, seccomp_rules
from contain.runtime.filter_cache import filter_for

FACTS = detect_host()
pytestmark = pytest.mark.skipif(FACTS.libseccomp_path is None, reason="libseccomp is not installed on this host")


@pytest.fixture(autouse=True)
def _fresh_process_cache():
    filter_cache._load_or_compile.cache_clear()
    filter_cache._key.cache_clear()
    yield
    filter_cache._load_or_compile.cache_clear()
    filter_cache._key.cache_clear()


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


@pytest.mark.parametrize("index", range(len(filter_cache.KEY_SOURCES)), ids=lambda i: filter_cache.KEY_SOURCES[i].name)
def test_a_change_to_any_key_source_or_the_library_is_a_new_key(tmp_path, monkeypatch, index):
    """Regression: the key hashed seccomp.py only, so an edited SECCOMP_RULES (seccomp_rules.py)
    kept serving the filter compiled from the old table."""
    build(tmp_path)
    sources = list(filter_cache.KEY_SOURCES)
    changed = tmp_path / sources[index].name
    changed.write_bytes(sources[index].read_bytes() + b"\n# a changed table\n")
    sources[index] = changed
    monkeypatch.setattr(filter_cache, "KEY_SOURCES", tuple(sources))
    filter_cache._key.cache_clear()
    build(tmp_path)
    assert len(list(tmp_path.glob("seccomp-*.bpf"))) == 2
    library_copy = tmp_path / "libseccomp.so.2"
    library_copy.write_bytes(Path(FACTS.libseccomp_path).read_bytes())
    filter_for(arch=FACTS.arch, libseccomp_path=str(library_copy), cache_dir=tmp_path)
    assert len(list(tmp_path.glob("seccomp-*.bpf"))) == 3


def test_an_edited_rule_table_is_a_new_key_and_a_fresh_compile(tmp_path, monkeypatch):
    """Regression: the key hashed seccomp.py only, after SECCOMP_RULES had moved to seccomp_rules.py."""
    build(tmp_path)
    rules = Path(seccomp_rules.__file__)
    read_bytes = Path.read_bytes

    def edited(path: Path) -> bytes:  # the table file as it would read after an edit
        data = read_bytes(path)
        return data + b"\n# a new deny row\n" if path == rules else data

    monkeypatch.setattr(Path, "read_bytes", edited)
    filter_cache._key.cache_clear()
    build(tmp_path)
    assert len(list(tmp_path.glob("seccomp-*.bpf"))) == 2


def test_every_contain_module_the_compiler_imports_is_a_key_source():
    tree = ast.parse(Path(seccomp.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module is not None}
    runtime = {name.rpartition(".")[2] + ".py" for name in imported if name.startswith("contain.runtime.")}
    assert "seccomp_rules.py" in runtime  # positive control: the table's module is found this way
    assert runtime | {"seccomp.py"} <= {p.name for p in filter_cache.KEY_SOURCES}
