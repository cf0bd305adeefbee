"""Validate a manifest once; later runs of the same input read the result without pydantic.

``contain run`` must start quickly, and importing pydantic and building the manifest models
costs several times what starting a sandbox does. Validation is a pure function of its input, so
its result is cached, keyed by everything it depends on:

- the manifest's absolute path (relative host paths resolve against its folder) and its bytes;
- what the command-line flags add, with their host paths already made absolute;
- the home directory (``~`` in host paths);
- the source of every module that defines or performs validation, so a new version of contain
  never reads an entry an older one wrote.

An entry is the validated boundary's JSON dump (``Boundary.model_dump(mode="json")``), read back
through ``contain.boundary.plain.plain_from_json``. Invalid input is never cached: it fails
validation on every run, with the same error.

What is trusted: the cache directory, like the supervisor binary beside it. An entry is used only
from a real directory owned by this user with no group or other access, and only when the file
is a regular file owned by this user, mode 0600, under 1 MiB, and names its own key inside;
otherwise the input is validated again and the entry replaced. Anything unreadable is a miss,
never an error: the cache can make a run faster, not different.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contain.boundary.extend import BoundaryFlags, flag_additions
from contain.boundary.plain import PlainBoundary, plain_from_json
from contain.trusted_file import read_trusted

__all__ = ["MAX_ENTRIES", "CachedBoundary", "load_run_boundary"]

MAX_ENTRIES = 256
_MAX_ENTRY_BYTES = 1 << 20
# Modules whose code decides what a manifest validates to (and how it is read back).
_VALIDATION_MODULES = ("model", "kinds", "units", "hostnames", "documents", "load", "extend", "plain", "cache")
_source_digest: str | None = None


@dataclass(frozen=True)
class CachedBoundary:
    """A validated boundary, and whether it came from the cache."""

    boundary: PlainBoundary
    from_cache: bool


def load_run_boundary(manifest: str | None, flags: BoundaryFlags, *, cache_dir: Path | None) -> CachedBoundary:
    """The validated boundary for ``contain run``: the manifest (or the default) plus flags.

    Args:
        manifest: the manifest path, or None for the default boundary.
        flags: what the command line adds.
        cache_dir: where entries live (created 0700 when missing); None disables the cache.

    Raises:
        BoundaryInvalid: the manifest or the flags fail validation (never cached).
    """
    key = _key(manifest, flags) if cache_dir is not None else None
    if cache_dir is not None and key is not None:
        cached = _read(cache_dir, key)
        if cached is not None:
            return CachedBoundary(cached, from_cache=True)
    dump = _validate(manifest, flags)
    boundary = plain_from_json(dump)  # exactly what a later hit will do, before anything is stored
    if cache_dir is not None and key is not None:
        _write(cache_dir, key, dump)
    return CachedBoundary(boundary, from_cache=False)


def _validate(manifest: str | None, flags: BoundaryFlags) -> dict[str, Any]:
    from contain.boundary.extend import extend_boundary
    from contain.boundary.load import load_boundary
    from contain.boundary.model import Boundary
    from contain.errors import BoundaryInvalid

    boundary = load_boundary(manifest) if manifest else Boundary()
    if any((flags.reads, flags.writes, flags.env, flags.allow_hosts, flags.resources)):
        try:
            boundary = extend_boundary(boundary, flags)
        except ValueError as exc:
            raise BoundaryInvalid(str(exc), "see `contain run --help`") from exc
    return boundary.model_dump(mode="json")


def _key(manifest: str | None, flags: BoundaryFlags) -> str | None:
    """The cache key, or None when the input cannot be keyed (validation then reports why)."""
    try:
        added = flag_additions(flags)
        if manifest:
            path = Path(manifest).resolve()
            content = path.read_bytes()
            if len(content) > _MAX_ENTRY_BYTES:
                return None
            source: list[Any] = [str(path), hashlib.sha256(content).hexdigest()]
        else:
            source = [None, None]
        material = json.dumps(
            [_validation_source_digest(), *source, added, os.path.expanduser("~")], sort_keys=True, default=str
        )
    except (OSError, ValueError, TypeError):
        return None
    return hashlib.sha256(material.encode()).hexdigest()


def _validation_source_digest() -> str:
    global _source_digest
    if _source_digest is None:
        digest = hashlib.sha256()
        here = Path(__file__).parent
        for name in _VALIDATION_MODULES:
            digest.update(name.encode() + b"\0" + (here / f"{name}.py").read_bytes() + b"\0")
        _source_digest = digest.hexdigest()
    return _source_digest


def _private_dir(cache_dir: Path, *, create: bool) -> bool:
    """True when ``cache_dir`` is a real directory owned by us with no group/other access."""
    if create and not os.path.lexists(cache_dir):
        try:
            cache_dir.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            cache_dir.mkdir(mode=0o700)
        except OSError:
            return False
    try:
        info = os.lstat(cache_dir)
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    )


def _read(cache_dir: Path, key: str) -> PlainBoundary | None:
    if not _private_dir(cache_dir, create=False):
        return None
    data = read_trusted(
        cache_dir / f"{key}.json",
        max_bytes=_MAX_ENTRY_BYTES,
        forbidden_modes=stat.S_IRWXG | stat.S_IRWXO,
        root_may_own=False,
    )
    if data is None:
        return None
    try:
        entry = json.loads(data)
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        return plain_from_json(entry["boundary"])
    except (ValueError, KeyError):
        return None


def _write(cache_dir: Path, key: str, dump: dict[str, Any]) -> None:
    """Store an entry (atomically, 0600); failures only cost the next run its speed."""
    if not _private_dir(cache_dir, create=True):
        return
    import tempfile  # a miss only

    data = json.dumps({"key": key, "boundary": dump}, sort_keys=True).encode()
    try:
        fd, temporary = tempfile.mkstemp(dir=cache_dir, prefix=".entry-")  # created 0600
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.replace(temporary, cache_dir / f"{key}.json")
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return
    _prune(cache_dir)


def _prune(cache_dir: Path) -> None:
    """Keep the newest ``MAX_ENTRIES`` entries (by modification time)."""
    try:
        entries = [e for e in os.scandir(cache_dir) if e.name.endswith(".json") and e.is_file(follow_symlinks=False)]
        if len(entries) <= MAX_ENTRIES:
            return
        entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns)
        for entry in entries[: len(entries) - MAX_ENTRIES]:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    except OSError:
        return
