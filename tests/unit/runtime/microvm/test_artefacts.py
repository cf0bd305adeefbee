"""The guest cache: content names, atomic builds, and refusing what could have been swapped."""

from __future__ import annotations

import os

import pytest

from contain.errors import SandboxStartError
from contain.runtime.microvm.artefacts import content_digest, ensure_artefact, guest_cache_dir


def test_the_digest_separates_its_parts():
    assert content_digest([b"ab", b"c"]) != content_digest([b"a", b"bc"])
    assert len(content_digest([b""])) == 24


def test_the_cache_follows_contain_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("CONTAIN_CACHE_DIR", str(tmp_path))
    assert guest_cache_dir() == tmp_path / "microvm"


def test_an_artefact_is_built_once_read_only_and_then_found(tmp_path):
    calls = []

    def build(out):
        calls.append(out)
        out.write_bytes(b"kernel")

    cache = tmp_path / "cache"
    path, built = ensure_artefact(cache, "thing-1", build)
    again, built_again = ensure_artefact(cache, "thing-1", build)
    assert (path, built, again, built_again, len(calls)) == (cache / "thing-1", True, path, False, 1)
    assert path.read_bytes() == b"kernel"
    assert os.stat(path).st_mode & 0o777 == 0o444
    assert sorted(os.listdir(cache)) == ["thing-1"]  # no temporary left


def test_a_failed_build_leaves_nothing(tmp_path):
    def build(out):
        out.write_bytes(b"half")
        raise RuntimeError("mksquashfs died")

    with pytest.raises(RuntimeError):
        ensure_artefact(tmp_path, "thing-2", build)
    assert os.listdir(tmp_path) == []


def test_a_swapped_artefact_or_a_writable_cache_is_refused(tmp_path):
    os.symlink("/etc/hostname", tmp_path / "thing-3")
    with pytest.raises(SandboxStartError, match="not a regular file"):
        ensure_artefact(tmp_path, "thing-3", lambda out: out.write_bytes(b""))
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(SandboxStartError, match="group or world writable"):
        ensure_artefact(open_dir, "thing-4", lambda out: out.write_bytes(b""))
