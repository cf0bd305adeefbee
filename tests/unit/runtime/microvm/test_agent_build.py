"""Building the guest agent: cached by content, refused when the cache could have been tampered with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from contain.errors import SandboxStartError, UnsupportedHost
from contain.runtime.microvm import agent_build
from contain.runtime.microvm.agent_build import ensure_guest_agent_binary, expected_guest_agent_path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("CONTAIN_CACHE_DIR", str(directory))
    agent_build._ensure_in.cache_clear()
    yield directory
    agent_build._ensure_in.cache_clear()


def test_the_agent_is_built_once_into_a_content_named_static_binary(cache: Path) -> None:
    first = ensure_guest_agent_binary()
    assert first.built_now and first.path == expected_guest_agent_path()
    assert first.path.parent == cache and first.path.name.startswith("contain-guest-agent-")
    assert first.path.read_bytes()[:4] == b"\x7fELF"
    assert (os.stat(first.path).st_mode & 0o777) == 0o755
    agent_build._ensure_in.cache_clear()
    again = ensure_guest_agent_binary()
    assert (again.path, again.built_now) == (first.path, False)
    assert [p.name for p in cache.iterdir()] == [first.path.name]  # no temporary left behind


def test_a_group_writable_cache_directory_is_refused(cache: Path) -> None:
    cache.mkdir()
    cache.chmod(0o775)
    with pytest.raises(SandboxStartError, match="group or world writable"):
        ensure_guest_agent_binary()


def test_a_binary_with_another_mode_is_refused_not_rebuilt(cache: Path) -> None:
    built = ensure_guest_agent_binary().path
    built.chmod(0o775)
    agent_build._ensure_in.cache_clear()
    with pytest.raises(SandboxStartError, match="may have been swapped"):
        ensure_guest_agent_binary()


def test_the_binary_name_follows_the_source(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    before = expected_guest_agent_path()
    agent_build._digest.cache_clear()
    monkeypatch.setattr(agent_build, "guest_agent_source", lambda: b"int main(void) { return 0; }\n")
    try:
        assert expected_guest_agent_path() != before
    finally:
        agent_build._digest.cache_clear()


def test_a_cache_directory_the_agent_build_creates_is_0755_whatever_the_umask(cache: Path) -> None:
    previous = os.umask(0o077)
    try:
        ensure_guest_agent_binary()
    finally:
        os.umask(previous)
    assert (os.stat(cache).st_mode & 0o777) == 0o755  # shared with the supervisor, which bwrap must reach


def test_missing_libc_headers_are_an_unsupported_host_naming_the_guest_agent(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake_cc = fake_bin / "cc"
    fake_cc.write_text("#!/bin/sh\necho 'fatal error: stdio.h: No such file or directory' >&2\nexit 1\n")
    fake_cc.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake_bin))
    with pytest.raises(UnsupportedHost) as caught:
        ensure_guest_agent_binary()
    assert "guest agent" in caught.value.cause and "stdio.h" in caught.value.cause
