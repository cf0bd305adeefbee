"""find_unix_sockets: every socket in a bound tree is found, without following links or recursing."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from contain.errors import SandboxStartError
from contain.runtime.bound_sockets import find_unix_sockets


def _listen(path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    return server


def test_sockets_at_any_depth_are_found_and_nothing_else(tmp_path):
    (tmp_path / ".gnupg").mkdir()
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (tmp_path / "plain.txt").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    servers = [_listen(tmp_path / ".gnupg" / "S.gpg-agent"), _listen(deep / "lsp.sock")]
    try:
        assert find_unix_sockets(str(tmp_path)) == (".gnupg/S.gpg-agent", "a/b/c/lsp.sock")
    finally:
        for server in servers:
            server.close()


def test_symlinked_directories_are_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    server = _listen(outside / "host.sock")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(outside)
    try:
        assert find_unix_sockets(str(tree)) == ()  # the link's target is not part of the bind
    finally:
        server.close()


def test_a_tree_deeper_than_the_recursion_limit_is_walked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    current = tmp_path
    for _ in range(300):
        current = current / "d"
        current.mkdir()
    os.chdir(current)  # AF_UNIX paths are short: bind by a relative name
    server = _listen("deep.sock")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(150)  # a recursive walk of 300 levels would fail here
    try:
        found = find_unix_sockets(str(tmp_path))
    finally:
        sys.setrecursionlimit(limit)
        server.close()
    assert found == ("/".join(["d"] * 300) + "/deep.sock",)


def test_a_tree_larger_than_the_bound_is_refused_not_half_checked(tmp_path):
    for index in range(20):
        (tmp_path / f"f{index}").write_text("")
    with pytest.raises(SandboxStartError, match="more than 10 entries"):
        find_unix_sockets(str(tmp_path), max_entries=10)


def test_a_subdirectory_removed_while_the_walk_runs_is_skipped_but_a_vanished_root_is_refused(tmp_path, monkeypatch):
    import contain.runtime.bound_sockets as bound_sockets

    (tmp_path / "gone").mkdir()
    real_scandir = os.scandir

    def scandir_racing_a_removal(path):  # another sandbox removes its placeholder mid-walk
        if str(path).endswith("/gone"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_scandir(path)

    monkeypatch.setattr(bound_sockets.os, "scandir", scandir_racing_a_removal)
    assert find_unix_sockets(str(tmp_path)) == ()
    with pytest.raises(SandboxStartError, match="disappeared before it could be checked"):
        find_unix_sockets(str(tmp_path / "gone"))
