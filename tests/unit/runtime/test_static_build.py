"""The shared static build: content-named, atomic, refused when the cache could have been tampered with."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contain.errors import SandboxStartError, UnsupportedHost
from contain.runtime.static_build import (
    COMPILER_FIX,
    STATIC_LIBC_MISSING,
    MissingLibcMarker,
    StaticBuild,
    StaticProgram,
    compile_failure,
    ensure_static_binary,
    source_digest,
)

PROGRAM = StaticProgram(label="test program", source_name="t.c", binary_prefix="t-", cflags=("-O0", "-static"))
SOURCE = b"int main(void) { return 0; }\n"


def _read_source() -> bytes:
    return SOURCE


def _ensure(cache: Path, *, read_source: Callable[[], bytes] = _read_source) -> StaticBuild:
    target = cache / f"t-{source_digest(PROGRAM.cflags, SOURCE)}"
    return ensure_static_binary(PROGRAM, cache_dir=cache, target=target, read_source=read_source)


@pytest.fixture
def umask_077() -> Iterator[None]:
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def test_a_program_is_built_once_into_a_0755_static_binary_and_then_reused(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _ensure(cache)
    assert first.built_now and first.path.parent == cache
    assert first.path.read_bytes()[:4] == b"\x7fELF"
    assert (os.stat(first.path).st_mode & 0o777) == 0o755
    assert [p.name for p in cache.iterdir()] == [first.path.name]  # no temporary left behind

    def must_not_read() -> bytes:
        raise AssertionError("a cached binary must not be rebuilt")

    assert _ensure(cache, read_source=must_not_read) == StaticBuild(first.path, False)


def test_a_cache_directory_it_creates_is_0755_whatever_the_umask(tmp_path: Path, umask_077: None) -> None:
    cache = tmp_path / "parent" / "cache"
    _ensure(cache)
    assert (os.stat(cache).st_mode & 0o777) == 0o755  # another uid may run bwrap and must reach it


def test_a_symlinked_cache_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    (tmp_path / "cache").symlink_to(real)
    with pytest.raises(SandboxStartError, match="not a directory") as caught:
        _ensure(tmp_path / "cache")
    assert "swap the test program" in caught.value.cause
    assert list(real.iterdir()) == []


def test_a_group_writable_cache_directory_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o775)
    with pytest.raises(SandboxStartError, match="group or world writable") as caught:
        _ensure(cache)
    assert "chmod go-w" in caught.value.fix
    assert list(cache.iterdir()) == []


def test_a_cached_binary_with_another_mode_is_refused_not_rebuilt(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    built = _ensure(cache).path
    built.chmod(0o775)
    before = built.read_bytes()
    with pytest.raises(SandboxStartError, match="has mode 775, not 755") as caught:
        _ensure(cache)
    assert caught.value.cause.startswith(f"test program binary {built} ")
    assert f"delete {built}" in caught.value.fix
    assert built.read_bytes() == before


def test_a_cached_binary_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    built = _ensure(cache).path
    elsewhere = tmp_path / "elsewhere"
    built.rename(elsewhere)
    built.symlink_to(elsewhere)
    with pytest.raises(SandboxStartError, match="not a regular file"):
        _ensure(cache)


def test_no_compiler_is_an_unsupported_host_with_the_fix_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    cache = tmp_path / "cache"
    with pytest.raises(UnsupportedHost, match=r"no C compiler .* to build the test program") as caught:
        _ensure(cache)
    assert caught.value.fix == COMPILER_FIX
    assert list(cache.iterdir()) == []


def test_a_source_that_does_not_compile_is_our_bug_and_leaves_no_temporary(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(SandboxStartError, match=r"building the test program with .* failed") as caught:
        _ensure(cache, read_source=lambda: b"int main(void) { return }\n")
    assert not isinstance(caught.value, UnsupportedHost)
    assert "report this" in caught.value.fix
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("marker", STATIC_LIBC_MISSING, ids=[m.text for m in STATIC_LIBC_MISSING])
def test_each_missing_static_libc_message_is_an_unsupported_host(marker: MissingLibcMarker) -> None:
    error = compile_failure(PROGRAM, "/usr/bin/cc", f"/usr/bin/ld: {marker.text} here\ncollect2: error\n")
    assert isinstance(error, UnsupportedHost)
    assert error.cause.startswith("/usr/bin/cc cannot build a static binary for the test program: ")
    assert error.fix == COMPILER_FIX


def test_any_other_compiler_error_is_a_start_error_carrying_the_tail_of_its_output() -> None:
    stderr = "x" * 2000 + "t.c:1: error: expected expression\n"
    error = compile_failure(PROGRAM, "/usr/bin/cc", stderr)
    assert type(error) is SandboxStartError
    assert error.cause.endswith("t.c:1: error: expected expression")
    assert len(error.cause) < len("building the test program with /usr/bin/cc failed: ") + 801


def test_the_digest_follows_the_source_and_the_flags_and_cannot_be_re_split() -> None:
    base = source_digest(("-O2",), SOURCE)
    assert len(base) == 16 and int(base, 16) >= 0
    assert source_digest(("-O2",), SOURCE + b"\n") != base
    assert source_digest(("-O2", "-g"), SOURCE) != base
    assert source_digest(("-O2", "-g"), b"") != source_digest(("-O2",), b"-g")
    assert source_digest(("-O2",), SOURCE) == base


def test_the_digest_covers_the_headers_by_name_and_content_and_is_unchanged_without_them() -> None:
    base = source_digest(("-O2",), SOURCE)
    assert source_digest(("-O2",), SOURCE, {}) == base
    with_header = source_digest(("-O2",), SOURCE, {"x.h": b"#define X 1\n"})
    assert with_header != base
    assert source_digest(("-O2",), SOURCE, {"x.h": b"#define X 2\n"}) != with_header
    assert source_digest(("-O2",), SOURCE, {"y.h": b"#define X 1\n"}) != with_header
    assert source_digest(("-O2",), SOURCE, {"x.h": b"#define X 1\n"}) == with_header


def test_a_source_that_includes_a_header_builds_with_the_header_written_beside_it(tmp_path: Path) -> None:
    source = b'#include "answer.h"\nint main(void) { return ANSWER - 42; }\n'
    headers = {"answer.h": b"#define ANSWER 42\n"}
    target = tmp_path / "cache" / f"t-{source_digest(PROGRAM.cflags, source, headers)}"
    built = ensure_static_binary(
        PROGRAM, cache_dir=tmp_path / "cache", target=target, read_source=lambda: source, read_headers=lambda: headers
    )
    assert built.built_now and subprocess.run([str(built.path)], check=False).returncode == 0
